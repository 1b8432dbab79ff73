//! Prometheus metrics (`toolhost serve --metrics`): per tool, calls, errors by kind and a
//! latency histogram, counted by [`CallMetrics`], an observer on the call door (so every
//! frontend's calls count, once); and, read at scrape time from what status shows
//! ([`ScrapeFacts`]), reloads, plugin generations and the memory they keep, MCP sessions
//! by protocol version, control-socket clients and plugin workers. The only module that
//! knows `prometheus-client`; rendered as OpenMetrics text, or as Prometheus' classic
//! text format (0.0.4) when the scrape's `Accept` header does not ask for OpenMetrics
//! ([`MetricsFormat::negotiate`]).
//!
//! What a scrape reveals: tool and plugin names, call and error counts, latencies, MCP
//! protocol versions in use. Never arguments, results, tokens, profiles or callers.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use toolhost_calls::context::CallContext;
use toolhost_calls::dispatcher::CallObserver;
use toolhost_calls::result::{CallErrorKind, ToolResult};

/// The content type of [`CallMetrics::render`]'s text in [`MetricsFormat::OpenMetrics`].
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the classic text format ([`MetricsFormat::Classic`]).
pub const CLASSIC_METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The two text formats a scrape can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    /// OpenMetrics 1.0 (what Prometheus asks for first).
    OpenMetrics,
    /// Prometheus' classic text format 0.0.4 (what a scrape gets that does not ask for
    /// OpenMetrics: older scrapers, `curl`).
    Classic,
}

impl MetricsFormat {
    /// The format an `Accept` header asks for: OpenMetrics when it lists
    /// `application/openmetrics-text` with a quality above 0 and at least that of
    /// `text/plain`; otherwise (no header, `*/*`, `text/plain`) the classic format.
    pub fn negotiate(accept: Option<&str>) -> MetricsFormat {
        let Some(accept) = accept else {
            return MetricsFormat::Classic;
        };
        let (mut open, mut classic) = (0.0_f64, 0.0_f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .and_then(|(_, v)| v.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => open = open.max(q),
                "text/plain" => classic = classic.max(q),
                _ => {}
            }
        }
        if open > 0.0 && open >= classic {
            MetricsFormat::OpenMetrics
        } else {
            MetricsFormat::Classic
        }
    }

    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            MetricsFormat::OpenMetrics => METRICS_CONTENT_TYPE,
            MetricsFormat::Classic => CLASSIC_METRICS_CONTENT_TYPE,
        }
    }
}

/// OpenMetrics text (as `prometheus-client` writes it) in the classic format: a counter
/// family is named by its samples' `_total` name in `# HELP` and `# TYPE`, `# UNIT` and
/// `# EOF` go (the classic format has neither), and everything else is the same text.
fn to_classic(open_metrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = open_metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            (counters.contains(name) && !name.ends_with("_total"))
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Latency buckets, in seconds: from a fast in-process call to a long command.
const LATENCY_BUCKETS: [f64; 12] = [
    0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0,
];

type Labels = Vec<(&'static str, String)>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Per-tool call counters and latencies, fed by the door.
pub struct CallMetrics {
    calls: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    pending: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Default for CallMetrics {
    fn default() -> Self {
        CallMetrics {
            calls: Family::default(),
            errors: Family::default(),
            pending: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

/// What the host knows at scrape time (from its status).
#[derive(Debug, Clone, Default)]
pub struct ScrapeFacts {
    /// Rescans that changed something, since start.
    pub reloads: u64,
    /// Plugins loaded now.
    pub plugins: u64,
    /// Library generations mapped (never unloaded).
    pub generations_mapped: u64,
    /// Estimated bytes those generations keep.
    pub retained_bytes: u64,
    /// Protocol version of each connected MCP session.
    pub mcp_sessions: Vec<String>,
    /// Control-socket connections open now.
    pub control_clients: u64,
    /// Per plugin in worker processes: (plugin, workers running, restarts, quarantined).
    pub workers: Vec<(String, u64, u64, bool)>,
    /// Per MCP server (`[[mcp_servers]]`): (server, connected, restarts, quarantined).
    pub mcp_servers: Vec<(String, bool, u64, bool)>,
}

impl CallMetrics {
    /// Empty metrics.
    pub fn new() -> Self {
        CallMetrics::default()
    }

    /// The metrics in `format`: the call counters and `facts`.
    pub fn render_as(&self, facts: &ScrapeFacts, format: MetricsFormat) -> String {
        let text = self.render(facts);
        match format {
            MetricsFormat::OpenMetrics => text,
            MetricsFormat::Classic => to_classic(&text),
        }
    }

    /// The metrics as OpenMetrics text: the call counters and `facts`.
    pub fn render(&self, facts: &ScrapeFacts) -> String {
        let mut registry = Registry::with_prefix("toolhost");
        registry.register(
            "tool_calls",
            "Calls of each tool, errors included",
            self.calls.clone(),
        );
        registry.register(
            "tool_errors",
            "Calls of each tool that ended in an error, by kind",
            self.errors.clone(),
        );
        registry.register(
            "tool_calls_pending",
            "Calls of each tool that waited for a person's answer and were not run (an MCP \
             client's input-required leg, answered by calling again); not in tool_calls",
            self.pending.clone(),
        );
        registry.register_with_unit(
            "tool_call_duration",
            "How long calls of each tool took, policy and validation included",
            Unit::Seconds,
            self.latency.clone(),
        );
        let counter = |n: u64| {
            let c: Counter = Counter::default();
            c.inc_by(n);
            c
        };
        let gauge = |n: u64| {
            let g: Gauge = Gauge::default();
            g.set(i64::try_from(n).unwrap_or(i64::MAX));
            g
        };
        registry.register(
            "reloads",
            "Rescans of the plugin folders that changed something",
            counter(facts.reloads),
        );
        registry.register("plugins_loaded", "Plugins loaded now", gauge(facts.plugins));
        registry.register(
            "plugin_generations_mapped",
            "Plugin library generations mapped (libraries are never unloaded)",
            gauge(facts.generations_mapped),
        );
        registry.register_with_unit(
            "plugin_retained",
            "Estimated memory the mapped generations keep",
            Unit::Bytes,
            gauge(facts.retained_bytes),
        );
        let sessions: Family<Labels, Gauge> = Family::default();
        for version in &facts.mcp_sessions {
            sessions
                .get_or_create(&vec![("protocol_version", version.clone())])
                .inc();
        }
        registry.register(
            "mcp_sessions",
            "MCP sessions connected now, by protocol version",
            sessions,
        );
        registry.register(
            "control_clients",
            "Control-socket connections open now",
            gauge(facts.control_clients),
        );
        let running: Family<Labels, Gauge> = Family::default();
        let restarts: Family<Labels, Counter> = Family::default();
        let quarantined: Family<Labels, Gauge> = Family::default();
        for (plugin, up, restarted, held) in &facts.workers {
            let labels = vec![("plugin", plugin.clone())];
            running
                .get_or_create(&labels)
                .set(i64::try_from(*up).unwrap_or(i64::MAX));
            restarts.get_or_create(&labels).inc_by(*restarted);
            quarantined.get_or_create(&labels).set(i64::from(*held));
        }
        registry.register(
            "workers_running",
            "Worker processes running now, per plugin",
            running,
        );
        registry.register(
            "worker_restarts",
            "Workers started after the first, per plugin",
            restarts,
        );
        registry.register(
            "worker_quarantined",
            "1 while a plugin is quarantined after repeated crashes",
            quarantined,
        );
        let up: Family<Labels, Gauge> = Family::default();
        let restarts: Family<Labels, Counter> = Family::default();
        let quarantined: Family<Labels, Gauge> = Family::default();
        for (server, connected, restarted, held) in &facts.mcp_servers {
            let labels = vec![("server", server.clone())];
            up.get_or_create(&labels).set(i64::from(*connected));
            restarts.get_or_create(&labels).inc_by(*restarted);
            quarantined.get_or_create(&labels).set(i64::from(*held));
        }
        registry.register(
            "mcp_server_up",
            "1 while toolhost is connected to an MCP server it serves tools from",
            up,
        );
        registry.register(
            "mcp_server_restarts",
            "Connections to an MCP server made after the first",
            restarts,
        );
        registry.register(
            "mcp_server_quarantined",
            "1 while an MCP server is quarantined after repeated failures",
            quarantined,
        );
        let mut text = String::new();
        // Writing into a String cannot fail; an encoding error would be a bug, shown as
        // a comment rather than a panic.
        if let Err(e) = encode(&mut text, &registry) {
            text.push_str(&format!("# error: could not encode the metrics: {e}\n"));
        }
        text
    }
}

impl CallObserver for CallMetrics {
    fn record(&self, _ctx: &CallContext, result: &ToolResult) {
        // Names that are not tools would grow the families without bound.
        if result.error == Some(CallErrorKind::ToolNotFound) {
            return;
        }
        let tool: Labels = vec![("tool", result.name.clone())];
        if matches!(
            result.decision,
            toolhost_calls::decision::Decision::Pending { .. }
        ) {
            self.pending.get_or_create(&tool).inc();
            return;
        }
        self.calls.get_or_create(&tool).inc();
        self.latency
            .get_or_create(&tool)
            .observe(result.elapsed.as_secs_f64());
        if result.is_error {
            let kind = result.error.map_or_else(
                || "error".to_owned(),
                |k| match serde_json::to_value(k) {
                    Ok(serde_json::Value::String(name)) => name,
                    _ => format!("{k:?}"),
                },
            );
            self.errors
                .get_or_create(&vec![("tool", result.name.clone()), ("kind", kind)])
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_facts() {
        let m = CallMetrics::new();
        let failed = ToolResult::refused(
            "1".to_owned(),
            "echo".to_owned(),
            "no".to_owned(),
            CallErrorKind::InvalidArgs,
        );
        m.record(&CallContext::default(), &failed);
        let text = m.render(&ScrapeFacts {
            reloads: 3,
            mcp_sessions: vec!["2025-11-25".to_owned(); 2],
            workers: vec![("basic".to_owned(), 1, 2, false)],
            mcp_servers: vec![("files".to_owned(), true, 1, false)],
            ..ScrapeFacts::default()
        });
        assert!(
            text.contains("toolhost_mcp_server_up{server=\"files\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("toolhost_tool_calls_total{tool=\"echo\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("toolhost_tool_call_duration_seconds_count{tool=\"echo\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("toolhost_tool_errors_total{tool=\"echo\",kind=\"invalid_args\"} 1"),
            "{text}"
        );
        assert!(text.contains("toolhost_reloads_total 3"), "{text}");
        assert!(
            text.contains("toolhost_mcp_sessions{protocol_version=\"2025-11-25\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("toolhost_worker_restarts_total{plugin=\"basic\"} 2"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn the_accept_header_picks_the_format() {
        // What Prometheus 2.x and 3.x send, then scrapers that ask for the classic text.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(
            MetricsFormat::negotiate(Some(prometheus)),
            MetricsFormat::OpenMetrics
        );
        for classic in [
            None,
            Some("*/*"),
            Some("text/plain"),
            Some("text/plain;version=0.0.4"),
            Some("application/openmetrics-text;q=0.2, text/plain;q=0.9"),
            Some("application/openmetrics-text;q=0"),
        ] {
            assert_eq!(
                MetricsFormat::negotiate(classic),
                MetricsFormat::Classic,
                "{classic:?}"
            );
        }
    }

    #[test]
    fn the_classic_text_names_counters_by_their_samples_and_has_no_eof() {
        let m = CallMetrics::new();
        let ok = ToolResult::refused(
            "1".to_owned(),
            "echo".to_owned(),
            "no".to_owned(),
            CallErrorKind::InvalidArgs,
        );
        m.record(&CallContext::default(), &ok);
        let text = m.render_as(&ScrapeFacts::default(), MetricsFormat::Classic);
        assert!(
            text.contains("# TYPE toolhost_tool_calls_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP toolhost_tool_calls_total Calls"),
            "{text}"
        );
        assert!(
            text.contains("toolhost_tool_calls_total{tool=\"echo\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE toolhost_tool_call_duration_seconds histogram\n"),
            "{text}"
        );
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
    }
}
