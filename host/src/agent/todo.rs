//! The agent's own `todo` tool: a task list per session that the model writes and reads
//! to plan and track multi-step work. Its calls never reach the door: the turn answers
//! them itself (hermes intercepts its agent-level tools the same way), from the session
//! store, so the list lives with the conversation, survives compaction and restarts, and
//! each child turn (a session of its own) has its own.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use toolhost_calls::tool::{Requirements, Risk, ToolSpec};

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "todo";
/// The most items a list holds.
const MAX_ITEMS: usize = 100;
/// The longest an item's text may be, in characters.
const MAX_CONTENT: usize = 1_000;

/// One item of the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    /// Its id, unique in the list (the model's choice: "1", "tests", ...).
    pub id: String,
    /// What is to be done.
    pub content: String,
    /// How far it got.
    pub status: TodoStatus,
}

/// How far an item got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
    /// Dropped.
    Cancelled,
}

/// A call's arguments: items to write (none: read the list), and whether they update the
/// list by id (`merge`) or replace it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TodoArgs {
    #[serde(default)]
    todos: Option<Vec<TodoPatch>>,
    #[serde(default)]
    merge: bool,
}

/// An item as a call writes it: with `merge`, only the id and what changes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TodoPatch {
    id: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    status: Option<TodoStatus>,
}

/// Why a call's arguments were refused; the text goes to the model, saying what to send.
#[derive(Debug, thiserror::Error)]
pub enum TodoError {
    /// Not the tool's arguments.
    #[error(
        "invalid arguments: {0}; send {{\"todos\": [{{\"id\", \"content\", \"status\"}}], \
         \"merge\": false}} (status: pending, in_progress, completed or cancelled), or {{}} to \
         read the list"
    )]
    Malformed(#[from] serde_json::Error),
    /// An item without an id, or an id twice.
    #[error("invalid arguments: item ids must be non-empty and unique; '{0}' is not")]
    BadId(String),
    /// A new item (or one written without `merge`) without its text or status.
    #[error(
        "invalid arguments: item '{0}' needs its content and status (only with merge: true \
         may an item already in the list give just what changes)"
    )]
    Incomplete(String),
    /// An item's text is empty or too long.
    #[error(
        "invalid arguments: item '{id}' has {chars} characters of content; give 1 to {MAX_CONTENT}"
    )]
    Content {
        /// The item.
        id: String,
        /// Its length.
        chars: usize,
    },
    /// Too many items.
    #[error(
        "invalid arguments: the list may hold {MAX_ITEMS} items, not {0}; finish or cancel some"
    )]
    TooMany(usize),
}

/// The tool as the model is offered it.
pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description: "Your task list for this conversation. {} reads it; `todos` writes \
                      it (replacing it, or with merge: true updating items by id and adding \
                      new ones). Keep one item in_progress."
            .to_owned(),
        schema: json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "content": {"type": "string"},
                            "status": {"enum": ["pending", "in_progress", "completed", "cancelled"]}
                        },
                        "required": ["id"]
                    }
                },
                "merge": {"type": "boolean"}
            }
        }),
        risk: Risk::Read,
        interactive: false,
        requirements: Requirements::default(),
        output_schema: None,
    }
}

/// What a call does to `list`: the list after it, or why the call was refused (the list
/// is then unchanged).
pub(crate) fn apply(list: &[TodoItem], arguments: &Value) -> Result<Vec<TodoItem>, TodoError> {
    let args: TodoArgs = serde_json::from_value(arguments.clone())?;
    let Some(patches) = args.todos else {
        return Ok(list.to_vec());
    };
    let mut seen = std::collections::HashSet::new();
    for patch in &patches {
        if patch.id.trim().is_empty() || !seen.insert(patch.id.as_str()) {
            return Err(TodoError::BadId(patch.id.clone()));
        }
    }
    let mut next = if args.merge {
        list.to_vec()
    } else {
        Vec::new()
    };
    for patch in patches {
        match next.iter_mut().find(|item| item.id == patch.id) {
            Some(item) => {
                if let Some(content) = patch.content {
                    item.content = content;
                }
                if let Some(status) = patch.status {
                    item.status = status;
                }
            }
            None => match (patch.content, patch.status) {
                (Some(content), Some(status)) => next.push(TodoItem {
                    id: patch.id,
                    content,
                    status,
                }),
                _ => return Err(TodoError::Incomplete(patch.id)),
            },
        }
    }
    for item in &next {
        let chars = item.content.chars().count();
        if item.content.trim().is_empty() || chars > MAX_CONTENT {
            return Err(TodoError::Content {
                id: item.id.clone(),
                chars,
            });
        }
    }
    if next.len() > MAX_ITEMS {
        return Err(TodoError::TooMany(next.len()));
    }
    Ok(next)
}

/// The answer the model reads: the list and how many items are in each state.
pub(crate) fn answer(list: &[TodoItem]) -> String {
    let count = |status| list.iter().filter(|i| i.status == status).count();
    json!({
        "todos": list,
        "summary": {
            "total": list.len(),
            "pending": count(TodoStatus::Pending),
            "in_progress": count(TodoStatus::InProgress),
            "completed": count(TodoStatus::Completed),
            "cancelled": count(TodoStatus::Cancelled),
        }
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, content: &str, status: TodoStatus) -> TodoItem {
        TodoItem {
            id: id.to_owned(),
            content: content.to_owned(),
            status,
        }
    }

    #[test]
    fn writes_replace_merges_update_and_reads_change_nothing() {
        let list = apply(
            &[],
            &json!({"todos": [
                {"id": "1", "content": "read", "status": "in_progress"},
                {"id": "2", "content": "write", "status": "pending"}
            ]}),
        )
        .unwrap_or_default();
        assert_eq!(list.len(), 2);
        let merged = apply(
            &list,
            &json!({"todos": [{"id": "1", "status": "completed"}, {"id": "3", "content": "ship", "status": "pending"}], "merge": true}),
        )
        .unwrap_or_default();
        assert_eq!(
            merged,
            vec![
                item("1", "read", TodoStatus::Completed),
                item("2", "write", TodoStatus::Pending),
                item("3", "ship", TodoStatus::Pending)
            ]
        );
        assert_eq!(apply(&merged, &json!({})).unwrap_or_default(), merged);
        let replaced = apply(
            &merged,
            &json!({"todos": [{"id": "x", "content": "only", "status": "pending"}]}),
        )
        .unwrap_or_default();
        assert_eq!(replaced, vec![item("x", "only", TodoStatus::Pending)]);
        assert!(answer(&merged).contains("\"completed\":1"));
    }

    #[test]
    fn bad_calls_are_refused_saying_what_to_send() {
        let list = vec![item("1", "read", TodoStatus::Pending)];
        for (args, says) in [
            (
                json!({"todos": [{"id": "1", "status": "done"}], "merge": true}),
                "in_progress",
            ),
            (
                json!({"todos": [{"id": "2", "status": "pending"}], "merge": true}),
                "needs its content",
            ),
            (
                json!({"todos": [{"id": "1", "status": "pending"}]}),
                "needs its content",
            ),
            (
                json!({"todos": [{"id": "", "content": "x", "status": "pending"}]}),
                "non-empty",
            ),
            (
                json!({"todos": [{"id": "a", "content": "x", "status": "pending"}, {"id": "a", "content": "y", "status": "pending"}]}),
                "unique",
            ),
            (
                json!({"todos": [{"id": "a", "content": " ", "status": "pending"}]}),
                "content",
            ),
            (json!({"items": []}), "invalid arguments"),
        ] {
            let e = apply(&list, &args).map(|_| ()).err().map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains(says)),
                "{args}: {e:?}"
            );
        }
        let many: Vec<Value> = (0..=MAX_ITEMS)
            .map(|i| json!({"id": i.to_string(), "content": "x", "status": "pending"}))
            .collect();
        assert!(matches!(
            apply(&[], &json!({"todos": many})),
            Err(TodoError::TooMany(_))
        ));
    }
}
