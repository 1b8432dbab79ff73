//! The `memory` tool: the agent's own notes (add, list, search, remove), kept in the
//! profile's state folder (`memory.json`), so one profile never sees another's. Risk
//! `read`: it changes nothing but the agent's own notes.
//!
//! The notes are private: `memory.json` and its lock file are created 0600 (the notes by
//! an exclusive, unpredictably named temporary file renamed into place), and existing
//! ones that group or others can read are narrowed, with a line in the host's log.

use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::json;
use toolhost_plugin_api::{LogLevel, Risk, ToolContext, ToolError, TypedTool, export_plugin};

/// What to do.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Action {
    /// Save a new note (`text`).
    Add,
    /// List every note.
    List,
    /// Find notes containing every word of `query`.
    Search,
    /// Delete the note with `id`.
    Remove,
}

/// Arguments of `memory`.
#[derive(Deserialize, schemars::JsonSchema)]
struct MemoryArgs {
    /// add, list, search or remove.
    action: Action,
    /// For add: the note, one self-contained fact or preference.
    #[serde(default)]
    text: Option<String>,
    /// For search: words the note must contain.
    #[serde(default)]
    query: Option<String>,
    /// For remove: the note's id (as list or search show it).
    #[serde(default)]
    id: Option<u64>,
}

#[derive(Serialize, Deserialize, Clone)]
struct Note {
    id: u64,
    text: String,
    created: String,
}

#[derive(Serialize, Deserialize, Default)]
struct Notes {
    next_id: u64,
    notes: Vec<Note>,
}

/// One read-modify-write at a time in this process (the file lock below covers other
/// processes and other loaded generations of this plugin).
static LOCK: Mutex<()> = Mutex::new(());

/// Narrows `path` to 0600 if group or others have any access to it; says so (for the
/// host's log) when it did. A missing file is fine.
#[cfg(unix)]
fn tighten(path: &Path, said: &mut Vec<String>) -> Result<(), ToolError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => meta.permissions().mode() & 0o7777,
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(ToolError::failed(format!(
                "could not inspect {}: {e}",
                path.display()
            )));
        }
    };
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
            ToolError::failed(format!(
                "{} can be read by other users (mode {mode:04o}) and could not be narrowed to \
                 0600: {e}; fix its mode or owner",
                path.display()
            ))
        })?;
        said.push(format!(
            "narrowed the mode of {} from {mode:04o} to 0600: it holds the agent's private \
             notes",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn tighten(_path: &Path, _said: &mut Vec<String>) -> Result<(), ToolError> {
    Ok(())
}

/// Holds an exclusive lock on `memory.lock` next to the notes while it lives.
fn lock_file(path: &Path, said: &mut Vec<String>) -> Result<std::fs::File, ToolError> {
    let lock_path = path.with_extension("lock");
    tighten(&lock_path, said)?;
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options
        .open(&lock_path)
        .map_err(|e| ToolError::failed(format!("could not open {}: {e}", lock_path.display())))?;
    file.lock()
        .map_err(|e| ToolError::failed(format!("could not lock {}: {e}", lock_path.display())))?;
    Ok(file)
}

fn load(path: &Path) -> Result<Notes, ToolError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            ToolError::failed(format!(
                "the notes file {} is damaged ({e}); move it aside to start afresh",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Notes::default()),
        Err(e) => Err(ToolError::failed(format!(
            "could not read the notes file {}: {e}",
            path.display()
        ))),
    }
}

/// Writes the notes by rename (synced first), so a crash never leaves half a file. The
/// temporary file is created exclusively, mode 0600, with an unpredictable name.
fn save(path: &Path, notes: &Notes) -> Result<(), ToolError> {
    use std::io::Write as _;
    let text = serde_json::to_string_pretty(notes)
        .map_err(|e| ToolError::failed(format!("could not encode the notes: {e}")))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".memory.")
        .suffix(".tmp")
        .tempfile_in(dir)
        .and_then(|mut tmp| {
            tmp.write_all(text.as_bytes())?;
            tmp.as_file().sync_all()?;
            tmp.persist(path).map(drop).map_err(|e| e.error)
        })
        .map_err(|e| {
            ToolError::failed(format!(
                "could not write the notes file {}: {e}",
                path.display()
            ))
        })
}

fn matches(text: &str, query: &str) -> bool {
    let text = text.to_lowercase();
    query
        .split_whitespace()
        .all(|word| text.contains(&word.to_lowercase()))
}

fn run(path: &Path, args: MemoryArgs, said: &mut Vec<String>) -> Result<String, ToolError> {
    let _guard = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _file_lock = lock_file(path, said)?;
    tighten(path, said)?;
    let mut notes = load(path)?;
    match args.action {
        Action::Add => {
            let text = args
                .text
                .filter(|t| !t.trim().is_empty())
                .ok_or_else(|| ToolError::invalid_args("add needs `text`: the note to save"))?;
            notes.next_id += 1;
            let note = Note {
                id: notes.next_id,
                text: text.trim().to_owned(),
                created: jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string(),
            };
            notes.notes.push(note.clone());
            save(path, &notes)?;
            Ok(json!({"added": note}).to_string())
        }
        Action::List => Ok(json!({"notes": notes.notes}).to_string()),
        Action::Search => {
            let query = args
                .query
                .filter(|q| !q.trim().is_empty())
                .ok_or_else(|| ToolError::invalid_args("search needs `query`: words to find"))?;
            let found: Vec<&Note> = notes
                .notes
                .iter()
                .filter(|n| matches(&n.text, &query))
                .collect();
            Ok(json!({"notes": found}).to_string())
        }
        Action::Remove => {
            let id = args
                .id
                .ok_or_else(|| ToolError::invalid_args("remove needs `id`: the note's id"))?;
            let before = notes.notes.len();
            notes.notes.retain(|n| n.id != id);
            if notes.notes.len() == before {
                return Err(ToolError::invalid_args(format!(
                    "there is no note {id}; list the notes to see their ids"
                )));
            }
            save(path, &notes)?;
            Ok(json!({"removed": id}).to_string())
        }
    }
}

struct Memory;

impl TypedTool for Memory {
    type Args = MemoryArgs;

    fn name(&self) -> &str {
        "memory"
    }

    fn description(&self) -> &str {
        "Your own notes, kept across conversations: facts about the person, their \
         preferences, decisions made. action=add saves `text`; list shows every note with \
         its id; search finds notes containing every word of `query`; remove deletes the \
         note `id`. Save short, self-contained notes; search before asking the person \
         something they may have told you before."
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    async fn run(&self, ctx: &ToolContext<'_>, args: MemoryArgs) -> Result<String, ToolError> {
        let path = ctx.state_dir().await?.join("memory.json");
        let (result, said) = ctx
            .blocking(move |_| {
                let mut said = Vec::new();
                (run(&path, args, &mut said), said)
            })
            .await
            .map_err(ToolError::failed)?;
        for line in said {
            ctx.log(LogLevel::WARN, &line);
        }
        result
    }
}

export_plugin! {
    name: "memory",
    version: env!("CARGO_PKG_VERSION"),
    tools: [Memory],
}
