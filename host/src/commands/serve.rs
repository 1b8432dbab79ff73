//! The commands around a long-running host: `toolhost serve` runs one; `reload`, `status`
//! and `call --control` talk to it over its control socket.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::{
    CatalogConfig, ClientStdio, ControlClient, ControlError, DispatchConfig, Host, HttpAuth,
    HttpLimits, HttpOptions, LoadedConfig, McpOptions, McpServer, ServeConfig, ServeError,
    TlsFiles, TokenAuthenticator, TokenStore, WatchConfig,
};

use crate::output::outln;
use crate::{print_table, summary};

/// What `toolhost serve` was asked for.
pub(crate) struct ServeArgs {
    pub(crate) dirs: Vec<PathBuf>,
    pub(crate) watch: bool,
    pub(crate) control: PathBuf,
    /// Whether `--control` was given (else a busy default socket may be replaced by a
    /// per-process one for MCP over stdio).
    pub(crate) control_explicit: bool,
    pub(crate) max_generations: u64,
    pub(crate) timeout: Option<f64>,
    pub(crate) mcp: Option<McpMode>,
    pub(crate) profile: Option<String>,
}

/// `serve --mcp`.
#[derive(Debug, Clone)]
pub(crate) enum McpMode {
    Stdio,
    Http(HttpArgs),
}

/// `serve --mcp http` and its door options.
#[derive(Debug, Clone)]
pub(crate) struct HttpArgs {
    pub(crate) listen: std::net::SocketAddr,
    pub(crate) no_auth: bool,
    pub(crate) insecure_http: bool,
    pub(crate) tls: Option<(PathBuf, PathBuf)>,
}

impl HttpArgs {
    /// The door's options: auth, TLS and the config's limits, the connection limit sized
    /// to leave descriptors for everything else under `nofile`.
    fn options(&self, config: &LoadedConfig, nofile: Option<u64>) -> Result<HttpOptions, String> {
        let m = &config.config.mcp;
        let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs(10));
        let max_connections = match nofile {
            Some(n) => toolhost::connections_within(m.max_connections, n),
            None => m.max_connections,
        };
        if max_connections < m.max_connections {
            tracing::warn!(
                "[mcp] max_connections lowered from {} to {max_connections}: the open-file \
                 limit leaves room for no more (raise it with `ulimit -n`)",
                m.max_connections
            );
        }
        let auth = if self.no_auth {
            HttpAuth::NoAuth
        } else {
            let file = config.tokens_file().ok_or(crate::token_cli::NO_STATE_DIR)?;
            HttpAuth::Tokens(Arc::new(TokenAuthenticator::new(TokenStore::new(file))))
        };
        Ok(HttpOptions {
            addr: self.listen,
            auth,
            tls: self.tls.clone().map(|(cert, key)| TlsFiles { cert, key }),
            insecure_http: self.insecure_http,
            allowed_origins: m.allowed_origins.clone(),
            limits: HttpLimits {
                max_connections,
                header_read_timeout: secs(m.header_read_timeout_secs),
                idle_timeout: secs(m.idle_timeout_secs),
                max_sessions: m.max_sessions,
                session_idle: secs(m.session_idle_secs),
                max_body_bytes: m.max_body_bytes,
            },
        })
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: could not start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

/// Registers SIGINT and SIGTERM handlers now (so a signal during start-up is not lost)
/// and returns a future that resolves on either.
#[cfg(unix)]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, std::io::Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("shutdown requested");
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, std::io::Error> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

pub(crate) fn serve(host_config: &LoadedConfig, args: ServeArgs) -> ExitCode {
    let limits = host_config.dispatch();
    let timeout = match args.timeout.map(Duration::try_from_secs_f64) {
        None => limits.timeout,
        Some(Ok(t)) if !t.is_zero() => t,
        Some(_) => {
            eprintln!("error: --timeout must be a positive number of seconds");
            return ExitCode::from(2);
        }
    };
    let profiles = match host_config.profiles() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // As servers do: a desktop's soft limit of 1,024 descriptors is no limit for a host.
    let nofile = match toolhost::raise_open_file_limit() {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!("could not read or raise the open-file limit: {e}");
            None
        }
    };
    let http = match &args.mcp {
        Some(McpMode::Http(http)) => {
            let options = match http.options(host_config, nofile) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if let Err(e) = toolhost::check_http_options(&options) {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            Some(options)
        }
        _ => None,
    };
    if args.mcp.is_none() && args.profile.is_some() {
        eprintln!(
            "error: --profile goes with --mcp (the control socket names its profile per call)"
        );
        return ExitCode::from(2);
    }
    let loading = match host_config.load_policy() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut config = ServeConfig {
        catalog: CatalogConfig {
            dirs: args.dirs,
            max_generations: args.max_generations,
            risk_overrides: host_config.risk_overrides(),
            loading,
            ..CatalogConfig::default()
        },
        watch: args.watch.then(WatchConfig::default),
        control_path: args.control,
        dispatch: DispatchConfig { timeout, ..limits },
        shutdown_grace: Duration::from_secs(5),
        profiles,
        remember_approvals: host_config.config.approval.remember_for_session,
        default_profile: host_config.config.default_profile.clone(),
        config_file: host_config.file.clone(),
        availability_ttl: Duration::from_secs_f64(host_config.config.availability.cache_secs),
    };
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mcp_options = McpOptions {
        profile: args.profile,
        without_elicitation: host_config.config.mcp.without_elicitation,
        allowed_hosts: host_config.config.mcp.allowed_hosts.clone(),
    };
    let outcome = runtime.block_on(async {
        let signals = shutdown_signal()
            .map_err(|e| format!("could not install the SIGINT/SIGTERM handlers: {e}"))?;
        let Some(mode) = args.mcp else {
            return toolhost::serve(config, signals)
                .await
                .map_err(|e| e.to_string());
        };
        // Before any plugin loads: only the protocol may reach the client's stdout.
        let stdio = match &mode {
            McpMode::Stdio => Some(
                ClientStdio::take()
                    .map_err(|e| format!("could not set up stdin/stdout for MCP: {e}"))?,
            ),
            McpMode::Http(_) => None,
        };
        let is_stdio = matches!(mode, McpMode::Stdio);
        let running = match Host::start(config.clone()).await {
            // Clients start one stdio server per window: a second one gets its own socket.
            Err(ServeError::Control(ControlError::InUse { .. }))
                if is_stdio && !args.control_explicit =>
            {
                let own = config
                    .control_path
                    .with_file_name(format!("control-{}.sock", std::process::id()));
                tracing::warn!(
                    "another toolhost holds {}; this one's control socket is {}",
                    config.control_path.display(),
                    own.display()
                );
                config.control_path = own;
                Host::start(config).await
            }
            other => other,
        }
        .map_err(|e| e.to_string())?;
        let server =
            McpServer::new(Arc::clone(running.host()), mcp_options).map_err(|e| e.to_string())?;
        let stop = CancellationToken::new();
        match mode {
            McpMode::Stdio => {
                let stdio = stdio.ok_or("stdin/stdout were not set up for MCP")?;
                let session = server.serve_stdio(stdio, stop.clone());
                let until = async move {
                    tokio::select! {
                        () = signals => {}
                        result = session => {
                            if let Err(e) = result {
                                tracing::error!("{e}");
                            }
                            tracing::info!("the MCP client closed stdin; shutting down");
                        }
                    }
                };
                running.run(until).await;
                stop.cancel();
            }
            McpMode::Http(_) => {
                let options = http.ok_or("the HTTP options were not set up")?;
                let scheme = if options.tls.is_some() {
                    "https"
                } else {
                    "http"
                };
                let (bound, serving) = toolhost::bind_http(&server, options, stop.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                tracing::info!("serving MCP over streamable HTTP at {scheme}://{bound}/mcp");
                let serving = tokio::spawn(serving);
                running.run(signals).await;
                stop.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(2), serving).await;
            }
        }
        Ok(())
    });
    // A rescan still running on a blocking thread must not hold the exit up for long.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Sends one request to the host on `socket` and waits at most `limit` for the answer.
fn request(socket: &Path, method: &str, params: Value, limit: Duration) -> Result<Value, ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: could not start the async runtime: {e}");
            ExitCode::FAILURE
        })?;
    runtime
        .block_on(async {
            let mut client = ControlClient::connect(socket).await?;
            client.request_within(method, params, limit).await
        })
        .map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        })
}

/// How long `reload` and `status` wait for the host.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

pub(crate) fn call(
    socket: &Path,
    tool: &str,
    arguments: Value,
    timeout: Duration,
    profile: Option<&str>,
) -> std::io::Result<ExitCode> {
    let mut params =
        json!({"tool": tool, "arguments": arguments, "timeout_secs": timeout.as_secs_f64()});
    if let Some(name) = profile {
        params["profile"] = json!(name);
    }
    // The host's own cancel grace comes on top of the call's timeout.
    let limit = timeout + Duration::from_secs(10);
    let result = match request(socket, "call", params, limit) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let output = result
        .get("output")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if result
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(true)
    {
        eprintln!("error: {output}");
        Ok(ExitCode::FAILURE)
    } else {
        outln!("{output}")?;
        Ok(ExitCode::SUCCESS)
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn reload(socket: &Path, as_json: bool) -> std::io::Result<ExitCode> {
    let report = match request(socket, "reload", json!({}), ANSWER_WITHIN) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    // A reload that hit errors exits 1, so scripts notice a plugin that did not load.
    let code = if strings(&report["errors"]).is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    if as_json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        )?;
        return Ok(code);
    }
    let mut said = false;
    for (key, label) in [
        ("plugins_added", "plugin added"),
        ("plugins_updated", "plugin updated"),
        ("plugins_removed", "plugin removed"),
        ("pending", "still being written"),
    ] {
        for file in strings(&report[key]) {
            outln!("{label}: {file}")?;
            said = true;
        }
    }
    for (key, label) in [
        ("added", "tools added"),
        ("changed", "tools changed"),
        ("removed", "tools removed"),
    ] {
        let names = strings(&report["tools"][key]);
        if !names.is_empty() {
            outln!("{label}: {}", names.join(", "))?;
            said = true;
        }
    }
    for e in strings(&report["errors"]) {
        outln!("error: {e}")?;
        said = true;
    }
    if !said {
        outln!("no changes")?;
    }
    Ok(code)
}

pub(crate) fn status(socket: &Path, as_json: bool) -> std::io::Result<ExitCode> {
    let status = match request(socket, "status", json!({}), ANSWER_WITHIN) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    if as_json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&status).unwrap_or_default()
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    outln!(
        "toolhost pid {} up {:.0} s, control socket {}, {}",
        status["pid"],
        status["uptime_secs"].as_f64().unwrap_or_default(),
        text(&status["control_socket"]),
        if status["watching"] == true {
            "watching plugin directories"
        } else {
            "not watching (reload by hand)"
        }
    )?;
    outln!(
        "reloads {}, library generations mapped {} (about {} KiB kept)",
        status["reloads"],
        status["generations_mapped"],
        status["retained_bytes_estimate"]
            .as_u64()
            .unwrap_or_default()
            / 1024
    )?;
    if let Some(w) = status["warning"].as_str() {
        outln!("warning: {w}")?;
    }
    outln!()?;
    let plugins: Vec<[String; 6]> = status["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            [
                text(&p["name"]),
                text(&p["version"]),
                text(&p["generation"]),
                text(&p["file"]),
                strings(&p["tools"]).join(", "),
                p["last_error"]
                    .as_str()
                    .map(|e| summary(e, 60))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    print_table(
        &["PLUGIN", "VERSION", "GEN", "FILE", "TOOLS", "LAST ERROR"],
        &plugins,
    )?;
    for e in status["load_errors"].as_array().into_iter().flatten() {
        outln!("not loaded: {}", text(&e["error"]))?;
    }
    for e in strings(&status["registry_errors"]) {
        outln!("not registered: {e}")?;
    }
    for f in strings(&status["pending"]) {
        outln!("still being written: {f}")?;
    }
    for u in status["unavailable"].as_array().into_iter().flatten() {
        outln!("unavailable: {}", text(&u["reason"]))?;
    }
    for p in status["profiles"].as_array().into_iter().flatten() {
        let missing = strings(&p["missing_tools"]);
        let note = if missing.is_empty() {
            String::new()
        } else {
            format!(
                "; missing (calls get ToolNotFound until they come back): {}",
                missing.join(", ")
            )
        };
        outln!("profile {}: {} tools{note}", text(&p["name"]), p["tools"])?;
    }
    let tools: Vec<[String; 6]> = status["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            [
                text(&t["name"]),
                text(&t["calls"]),
                text(&t["errors"]),
                format!("{:.2}", t["mean_ms"].as_f64().unwrap_or_default()),
                format!("{:.2}", t["p99_ms"].as_f64().unwrap_or_default()),
                t["last_error"]
                    .as_str()
                    .map(|e| summary(e, 60))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    if !tools.is_empty() {
        outln!()?;
        print_table(
            &["TOOL", "CALLS", "ERRORS", "MEAN MS", "P99 MS", "LAST ERROR"],
            &tools,
        )?;
    }
    let clients: Vec<[String; 5]> = status["mcp_clients"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let version = text(&c["client_version"]);
            [
                text(&c["transport"]),
                c["token"].as_str().unwrap_or("-").to_owned(),
                text(&c["protocol_version"]),
                if version.is_empty() {
                    text(&c["client_name"])
                } else {
                    format!("{} {version}", text(&c["client_name"]))
                },
                format!("{:.0}", c["connected_secs"].as_f64().unwrap_or_default()),
            ]
        })
        .collect();
    if !clients.is_empty() {
        outln!()?;
        print_table(
            &["MCP CLIENT", "TOKEN", "PROTOCOL", "NAME", "CONNECTED S"],
            &clients,
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
