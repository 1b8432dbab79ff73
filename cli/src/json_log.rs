//! `TOOLHOST_LOG_FORMAT=json`: one JSON object per log line, `{"timestamp", "level",
//! "target", "fields": {"message", ...}}`, whose field values are JSON values: numbers
//! and booleans as such, and a field logged with `?` (a list of tools, a map) as the array
//! or object its text is, not a string holding it. When it is on, the commands' own
//! warnings and errors go out as such lines too ([`enabled`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime as _;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

static ON: AtomicBool = AtomicBool::new(false);

/// Whether the log is JSON lines (then a command's warnings and errors are log events).
pub(crate) fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Marks the log as JSON lines.
pub(crate) fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// The event formatter.
pub(crate) struct JsonLines;

/// Collects an event's fields as JSON values.
struct Fields(Map<String, Value>);

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        self.0.insert(field.name().to_owned(), value);
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::from(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        // A list or map (`?tools`) whose debug text is JSON goes as that JSON; the
        // message and everything else as text.
        let structured = (field.name() != "message"
            && (text.starts_with('[') || text.starts_with('{')))
        .then(|| serde_json::from_str::<Value>(&text).ok())
        .flatten();
        self.put(field, structured.unwrap_or(Value::String(text)));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        let mut timestamp = String::new();
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let line = serde_json::json!({
            "timestamp": timestamp,
            "level": meta.level().as_str(),
            "target": meta.target(),
            "fields": fields.0,
        });
        writeln!(writer, "{line}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Collects what the formatter writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lists_and_numbers_are_json_values() {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let added = vec!["echo".to_owned(), "greet".to_owned()];
            tracing::warn!(added = ?added, plugins = 2_u64, ok = true, "tools changed");
        });
        let written = buffer.0.lock().map(|b| b.clone()).unwrap_or_default();
        let line: Value = serde_json::from_slice(&written).expect("one JSON line");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["fields"]["message"], "tools changed");
        assert_eq!(
            line["fields"]["added"],
            serde_json::json!(["echo", "greet"])
        );
        assert_eq!(line["fields"]["plugins"], 2);
        assert_eq!(line["fields"]["ok"], true);
        assert!(line["timestamp"].as_str().is_some_and(|t| t.contains('T')));
    }
}
