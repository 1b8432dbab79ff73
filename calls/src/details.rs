//! The host's own details on a tool result (the `toolhost/...` kinds): the only module
//! that knows their keys and shapes. The door and compaction write them, the agent, MCP,
//! the audit log and the session summary read them, all through the typed payloads here
//! ([`FullOutput`], [`StructuredOmitted`], [`ContentOmitted`], [`ToolFailed`]), so a
//! renamed key or field is a compile error, not a reader that quietly finds nothing.
//!
//! [`Details`] is the one map type of results and stored session messages alike; a
//! plugin's own kinds sit beside the host's, which start with `toolhost/`.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use toolhost_plugin_api::Details;

use crate::result::CallErrorKind;

/// A detail read back under a host key whose value has another shape (written by an older
/// or newer host, or edited by hand).
#[derive(Debug, thiserror::Error)]
#[error("the `{key}` detail has an unexpected shape ({source}); it is ignored")]
pub struct DetailError {
    /// The detail's key.
    pub key: &'static str,
    /// What did not fit.
    pub source: serde_json::Error,
}

/// One of the host's own detail kinds: its key and the shape of its value.
pub trait HostDetail: Serialize + DeserializeOwned {
    /// The key it is kept under (starts with `toolhost/`).
    const KEY: &'static str;

    /// Records `self` in `details` (replacing one there was).
    fn insert_into(&self, details: &mut Details) {
        // The payloads are plain structs of strings and numbers: turning them into a
        // value cannot fail.
        if let Ok(value) = serde_json::to_value(self) {
            details.insert(Self::KEY.to_owned(), value);
        }
    }

    /// The detail `details` hold, if any; `Err` when one is there with another shape.
    fn from_details(details: &Details) -> Result<Option<Self>, DetailError> {
        details.get(Self::KEY).map_or(Ok(None), |value| {
            Self::deserialize(value)
                .map(Some)
                .map_err(|source| DetailError {
                    key: Self::KEY,
                    source,
                })
        })
    }

    /// Like [`HostDetail::from_details`], logging (and dropping) a detail of another
    /// shape: for readers that can go on without it.
    fn read(details: &Details) -> Option<Self> {
        Self::from_details(details).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "a result detail could not be read");
            None
        })
    }

    /// Whether `details` hold this kind at all (whatever its shape).
    fn is_in(details: &Details) -> bool {
        details.contains_key(Self::KEY)
    }
}

/// The text the model got was cut to the output budget; the full output is kept under
/// `id` (the seed documents' `FullOutput`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FullOutput {
    /// The kept output's id (`read_output`, `toolhost output`, `toolhost-output://`).
    pub id: String,
    /// Its characters (Unicode scalar values).
    #[serde(default)]
    pub chars: u64,
    /// Its lines.
    #[serde(default)]
    pub lines: u64,
    /// Its bytes of UTF-8.
    #[serde(default)]
    pub bytes: u64,
}

impl HostDetail for FullOutput {
    const KEY: &'static str = toolhost_plugin_api::FULL_OUTPUT;
}

/// The structured result was over the character budget: kept with the output, left out
/// of the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StructuredOmitted {
    /// The length of its JSON text.
    pub chars: u64,
}

impl HostDetail for StructuredOmitted {
    const KEY: &'static str = "toolhost/structured_omitted";
}

/// The content blocks were over the character budget: kept with the output, left out of
/// the result (the model's text, cut, stands in for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ContentOmitted {
    /// Their text and data, in characters.
    pub chars: u64,
}

impl HostDetail for ContentOmitted {
    const KEY: &'static str = "toolhost/content_omitted";
}

/// A stored tool message whose result was an error, with its kind (`None`: a tool's own
/// error). The session summary counts these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ToolFailed {
    /// What kind of error.
    pub kind: Option<CallErrorKind>,
}

impl HostDetail for ToolFailed {
    const KEY: &'static str = "toolhost/error";
}

/// `details` as one JSON object (for clients: MCP's `_meta["toolhost/details"]`, the
/// control socket).
pub fn to_object(details: Details) -> Value {
    Value::Object(details.into_iter().collect())
}

/// The details a stored JSON value holds (an object); anything else holds none.
pub fn from_value(value: Value) -> Details {
    match value {
        Value::Object(map) => map.into_iter().collect(),
        _ => Details::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_round_trips_under_its_key_and_a_foreign_shape_is_an_error_naming_it() {
        let mut details = Details::new();
        let full = FullOutput {
            id: "o1".to_owned(),
            chars: 3,
            lines: 1,
            bytes: 3,
        };
        full.insert_into(&mut details);
        StructuredOmitted { chars: 9 }.insert_into(&mut details);
        ContentOmitted { chars: 8 }.insert_into(&mut details);
        ToolFailed {
            kind: Some(CallErrorKind::TimedOut),
        }
        .insert_into(&mut details);
        assert_eq!(
            details["toolhost/full_output"],
            serde_json::json!({"id": "o1", "chars": 3, "lines": 1, "bytes": 3})
        );
        assert_eq!(
            details["toolhost/structured_omitted"],
            serde_json::json!({"chars": 9})
        );
        assert_eq!(
            details["toolhost/content_omitted"],
            serde_json::json!({"chars": 8})
        );
        assert_eq!(
            details["toolhost/error"],
            serde_json::json!({"kind": "timed_out"})
        );
        assert_eq!(
            FullOutput::from_details(&details).ok().flatten(),
            Some(full)
        );
        assert_eq!(
            ToolFailed::read(&details).and_then(|f| f.kind),
            Some(CallErrorKind::TimedOut)
        );
        assert!(StructuredOmitted::is_in(&details));

        // A session stored before the sizes were recorded still names its output.
        let old = from_value(serde_json::json!({"toolhost/full_output": {"id": "o2"}}));
        assert_eq!(FullOutput::read(&old).map(|f| f.id), Some("o2".to_owned()));

        let bad = from_value(serde_json::json!({"toolhost/full_output": "o3"}));
        let e = FullOutput::from_details(&bad).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("`toolhost/full_output`")),
            "{e:?}"
        );
        assert_eq!(FullOutput::read(&bad), None);
        assert_eq!(
            FullOutput::from_details(&Details::new()).ok().flatten(),
            None
        );
    }

    #[test]
    fn a_null_error_kind_reads_as_a_tools_own_error() {
        let details = from_value(serde_json::json!({"toolhost/error": {"kind": null}}));
        assert_eq!(
            ToolFailed::from_details(&details).ok().flatten(),
            Some(ToolFailed { kind: None })
        );
    }
}
