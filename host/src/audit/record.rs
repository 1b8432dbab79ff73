//! One line of the audit log, as written and as read back: [`AuditRecord`]. Its field
//! order is the line's: `seq` (its number in the log) first, `prev` (the sha256 of the line
//! before) last.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use toolhost_calls::decision::Decision;
use toolhost_calls::tool::Risk;

/// `prev` of the very first line of a log.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One call, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The line's number in the log: 1 for its first line, one more for each line after
    /// (across rotations). 0 when read from a line written before lines were numbered.
    #[serde(default)]
    pub seq: u64,
    /// When the call ended (RFC 3339, UTC).
    pub time: String,
    /// The profile it ran as.
    pub profile: String,
    /// The way in: `cli`, `control`, `mcp`, `agent`, `child_turn`, `library`.
    pub frontend: String,
    /// Who called.
    pub caller: AuditCaller,
    /// The W3C `traceparent` the client sent with the call, if any.
    pub traceparent: Option<String>,
    /// The tool asked for.
    pub tool: String,
    /// The plugin that provides it (`None`: no such tool).
    pub plugin: Option<AuditPlugin>,
    /// Its risk after the operator's overrides (`None`: no such tool).
    pub risk: Option<Risk>,
    /// How admission decided.
    pub decision: Decision,
    /// `ok`, or the error's kind (`not_approved`, `timed_out`, ...).
    pub outcome: String,
    /// How long the call took, milliseconds (admission and approval included).
    pub duration_ms: f64,
    /// Bytes of the output text the caller got.
    pub output_bytes: u64,
    /// The kept output's id, when the output budget cut the result.
    pub output_id: Option<String>,
    /// sha256 of the arguments as canonical JSON (object keys sorted, no spaces).
    pub arguments_sha256: String,
    /// The arguments themselves, only with `[audit] include_arguments = true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Set by a writer that found the log's end disagreeing with its head (`FILE.head`)
    /// when it came to write this line: what the head said and what the log held. The line
    /// then chains to the head's last line, not to the log's (see `writer.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<HeadMismatch>,
    /// sha256 (hex) of the previous line's bytes (without its newline); all zeros for the
    /// first line of a log.
    pub prev: String,
}

/// A line of the log named by its number and the sha256 of its bytes (without the
/// newline): what the head records of the last line, and what a checkpoint says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainPoint {
    /// The line's `seq` (0: a line without one, or an empty log).
    pub seq: u64,
    /// sha256 (hex) of the line ([`GENESIS`] for an empty log).
    pub sha256: String,
}

/// What a writer found when the log's end and its head disagreed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadMismatch {
    /// The last line the head recorded (`None`: there was no head file, or none the writer
    /// could read).
    pub head: Option<ChainPoint>,
    /// The line the log ended with (`seq` 0 for a line without one or no record at all).
    pub found: ChainPoint,
}

/// Who called, as far as the frontend knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditCaller {
    /// The calling process's uid (CLI, control socket, MCP stdio).
    pub uid: Option<u32>,
    /// The bearer token's name (MCP over HTTP).
    pub token: Option<String>,
    /// The MCP client's name and version.
    pub client: Option<AuditClient>,
    /// The session the call belongs to (an MCP session, an agent session, `control`).
    pub session: String,
    /// The model that asked (`none` for a person's call).
    pub model: String,
}

/// An MCP client as it named itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditClient {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// The plugin a called tool comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditPlugin {
    /// Its name (`native` for tools built into the host).
    pub name: String,
    /// Its version.
    pub version: String,
    /// sha256 of the plugin file as loaded (for an MCP server's tool: of the server's
    /// name, version and the tool's definition).
    pub sha256: String,
    /// The MCP server that lists the tool (`name` is then `mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<String>,
}

/// The canonical JSON text of `value`: object keys sorted, no whitespace (what
/// `arguments_sha256` hashes).
pub fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                out.push('{');
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(v) = map.get(k) {
                        write(v, out);
                    }
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// sha256 of `bytes`, in lower-case hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    toolhost_calls::policy::hex(&sha2::Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"d": [1, {"z": 0, "y": 1}], "c": "x"}}"#)
                .expect("json");
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":"x","d":[1,{"y":1,"z":0}]},"b":1}"#
        );
    }
}
