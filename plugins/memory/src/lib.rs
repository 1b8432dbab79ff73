//! The `memory` tool: the agent's own notes (add, list, search, remove), kept in the
//! profile's state folder (`memory.json`), so one profile never sees another's. Risk
//! `read`: it changes nothing but the agent's own notes.
//!
//! The notes are private: `memory.json` and its lock file are created 0600 (the notes by
//! an exclusive, unpredictably named temporary file renamed into place), and existing
//! ones that group or others can read are narrowed (through the open file, never by
//! path), with a line in the host's log. Neither is ever followed: both are opened with
//! `O_NOFOLLOW`, and a link (or a FIFO) in their place is refused, naming it.

use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::json;
use toolhost_plugin_api::{LogLevel, ToolContext, ToolError, export_plugin, tool};

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

/// Opens `path` without following a link (`O_NOFOLLOW`) and without blocking on a FIFO
/// (`O_NONBLOCK`), then refuses anything but a regular file by `fstat` of the opened file.
/// A link is refused with a message naming it: a plugin worker may write into the state
/// folder, and the host running this tool may be root.
fn open_regular(
    path: &Path,
    options: &mut std::fs::OpenOptions,
) -> Result<std::fs::File, std::io::Error> {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        options,
        libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
    );
    let refusal = |what: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is {what}; toolhost never follows links or opens anything but regular \
                 files in its state folders: remove it",
                path.display()
            ),
        )
    };
    let file = options
        .open(path)
        .map_err(|e| match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => refusal("a symbolic link"),
            Ok(meta) if !meta.is_file() => refusal("not a regular file"),
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(refusal("not a regular file"));
    }
    Ok(file)
}

/// Narrows the open `file` (at `path`) to 0600 if group or others have any access to it,
/// through the handle (`fchmod`), never by path; says so (for the host's log) when it did.
#[cfg(unix)]
fn tighten(file: &std::fs::File, path: &Path, said: &mut Vec<String>) -> Result<(), ToolError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = file
        .metadata()
        .map_err(|e| ToolError::failed(format!("could not inspect {}: {e}", path.display())))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| {
                ToolError::failed(format!(
                    "{} can be read by other users (mode {mode:04o}) and could not be narrowed \
                     to 0600: {e}; fix its mode or owner",
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
fn tighten(_file: &std::fs::File, _path: &Path, _said: &mut Vec<String>) -> Result<(), ToolError> {
    Ok(())
}

/// Holds an exclusive lock on `memory.lock` next to the notes while it lives.
fn lock_file(path: &Path, said: &mut Vec<String>) -> Result<std::fs::File, ToolError> {
    let lock_path = path.with_extension("lock");
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = open_regular(&lock_path, &mut options)
        .map_err(|e| ToolError::failed(format!("could not open {}: {e}", lock_path.display())))?;
    tighten(&file, &lock_path, said)?;
    // flock waits for the lock whatever O_NONBLOCK says.
    file.lock()
        .map_err(|e| ToolError::failed(format!("could not lock {}: {e}", lock_path.display())))?;
    Ok(file)
}

fn load(path: &Path, said: &mut Vec<String>) -> Result<Notes, ToolError> {
    use std::io::Read as _;
    let read_err = |e| {
        ToolError::failed(format!(
            "could not read the notes file {}: {e}",
            path.display()
        ))
    };
    let mut file = match open_regular(path, std::fs::OpenOptions::new().read(true)) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Notes::default()),
        Err(e) => return Err(read_err(e)),
    };
    tighten(&file, path, said)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(read_err)?;
    serde_json::from_str(&text).map_err(|e| {
        ToolError::failed(format!(
            "the notes file {} is damaged ({e}); move it aside to start afresh",
            path.display()
        ))
    })
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
    let mut notes = load(path, said)?;
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

/// Your own notes, kept across conversations: facts about the person, their preferences,
/// decisions made. action=add saves `text`; list shows every note with its id; search
/// finds notes containing every word of `query`; remove deletes the note `id`. Save short,
/// self-contained notes; search before asking the person something they may have told you
/// before.
#[tool(risk = read)]
async fn memory(ctx: &ToolContext<'_>, #[args] args: MemoryArgs) -> Result<String, ToolError> {
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

export_plugin! {
    name: "memory",
    version: env!("CARGO_PKG_VERSION"),
    tools: [memory],
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::{Value, json};
    use toolhost_plugin_api::testing::TestHost;
    use toolhost_plugin_api::{LogLevel, Risk, ToolError};

    use super::memory;

    fn ok(host: &TestHost, args: Value) -> Value {
        let out = host.call(&memory, args.clone());
        serde_json::from_str(&out.unwrap_or_else(|e| panic!("{args}: {e}"))).unwrap()
    }

    fn texts(listed: &Value) -> Vec<&str> {
        listed["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["text"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn describes_a_read_tool_with_four_actions() {
        let info = TestHost::new().describe(&memory);
        assert_eq!(info.name, "memory");
        assert_eq!(info.risk, Risk::Read);
        assert_eq!(info.schema["required"], json!(["action"]));
        let schema = info.schema.to_string();
        for action in ["add", "list", "search", "remove"] {
            assert!(
                schema.contains(&format!("\"{action}\"")),
                "{action}: {schema}"
            );
        }
    }

    #[test]
    fn notes_are_kept_in_the_state_folder_across_calls() {
        let host = TestHost::new();
        assert_eq!(ok(&host, json!({"action": "list"})), json!({"notes": []}));
        let added = ok(
            &host,
            json!({"action": "add", "text": "  Likes green tea  "}),
        );
        assert_eq!(added["added"]["id"], 1);
        assert_eq!(added["added"]["text"], "Likes green tea");
        let created = added["added"]["created"].as_str().unwrap();
        assert!(
            created.len() == 20 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
            "{created}"
        );
        let added = ok(
            &host,
            json!({"action": "add", "text": "Works at the harbour"}),
        );
        assert_eq!(added["added"]["id"], 2);

        let listed = ok(&host, json!({"action": "list"}));
        assert_eq!(texts(&listed), ["Likes green tea", "Works at the harbour"]);

        // On disk, private, where the host said.
        let file = host.state_dir().join("memory.json");
        let on_disk: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(on_disk["next_id"], 2);
        assert_eq!(on_disk["notes"], listed["notes"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            for name in ["memory.json", "memory.lock"] {
                let meta = std::fs::metadata(host.state_dir().join(name)).unwrap();
                assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
            }
        }
        assert!(host.logs().is_empty(), "{:?}", host.logs());
    }

    #[test]
    fn search_finds_notes_with_every_word_in_any_case() {
        let host = TestHost::new();
        for text in ["Likes GREEN tea", "Green door at home", "Drinks coffee"] {
            ok(&host, json!({"action": "add", "text": text}));
        }
        let found = ok(&host, json!({"action": "search", "query": "green"}));
        assert_eq!(texts(&found), ["Likes GREEN tea", "Green door at home"]);
        let found = ok(&host, json!({"action": "search", "query": "tea green"}));
        assert_eq!(texts(&found), ["Likes GREEN tea"]);
        let found = ok(&host, json!({"action": "search", "query": "milk"}));
        assert_eq!(texts(&found), Vec::<&str>::new());
    }

    #[test]
    fn remove_deletes_one_note_and_ids_are_not_reused() {
        let host = TestHost::new();
        ok(&host, json!({"action": "add", "text": "one"}));
        ok(&host, json!({"action": "add", "text": "two"}));
        assert_eq!(
            ok(&host, json!({"action": "remove", "id": 1})),
            json!({"removed": 1})
        );
        assert_eq!(texts(&ok(&host, json!({"action": "list"}))), ["two"]);
        assert_eq!(
            host.call(&memory, json!({"action": "remove", "id": 1})),
            Err(ToolError::InvalidArgs(
                "there is no note 1; list the notes to see their ids".to_owned()
            ))
        );
        let added = ok(&host, json!({"action": "add", "text": "three"}));
        assert_eq!(added["added"]["id"], 3);
    }

    #[test]
    fn each_profile_has_its_own_notes() {
        let work = TestHost::new().profile("work");
        let home = TestHost::new().profile("home");
        ok(&work, json!({"action": "add", "text": "standup at nine"}));
        ok(&home, json!({"action": "add", "text": "water the plants"}));
        assert_eq!(
            texts(&ok(&work, json!({"action": "list"}))),
            ["standup at nine"]
        );
        assert_eq!(
            texts(&ok(&home, json!({"action": "list"}))),
            ["water the plants"]
        );
        assert_ne!(work.state_dir(), home.state_dir());
    }

    #[test]
    fn missing_or_wrong_arguments_are_refused() {
        let host = TestHost::new();
        for (args, expected) in [
            (
                json!({"action": "add"}),
                "add needs `text`: the note to save",
            ),
            (
                json!({"action": "add", "text": "  "}),
                "add needs `text`: the note to save",
            ),
            (
                json!({"action": "search"}),
                "search needs `query`: words to find",
            ),
            (
                json!({"action": "search", "query": ""}),
                "search needs `query`: words to find",
            ),
            (
                json!({"action": "remove"}),
                "remove needs `id`: the note's id",
            ),
        ] {
            assert_eq!(
                host.call(&memory, args.clone()),
                Err(ToolError::InvalidArgs(expected.to_owned())),
                "{args}"
            );
        }
        for args in [
            json!({}),
            json!({"action": "forget"}),
            json!({"action": "remove", "id": -1}),
        ] {
            let out = host.call(&memory, args.clone());
            assert!(
                matches!(out, Err(ToolError::InvalidArgs(_))),
                "{args}: {out:?}"
            );
        }
        // Nothing was written.
        assert!(!host.state_dir().join("memory.json").exists());
    }

    #[test]
    fn a_damaged_notes_file_is_reported_not_overwritten() {
        let host = TestHost::new();
        let file = host.state_dir().join("memory.json");
        std::fs::write(&file, "{not json").unwrap();
        let out = host.call(&memory, json!({"action": "add", "text": "x"}));
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.contains("is damaged") && m.contains("move it aside")),
            "{out:?}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{not json");
    }

    #[cfg(unix)]
    #[test]
    fn a_notes_file_others_can_read_is_narrowed_with_a_warning() {
        use std::os::unix::fs::PermissionsExt as _;
        let host = TestHost::new();
        let file = host.state_dir().join("memory.json");
        std::fs::write(&file, r#"{"next_id": 1, "notes": [{"id": 1, "text": "old", "created": "2025-01-01T00:00:00Z"}]}"#).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(texts(&ok(&host, json!({"action": "list"}))), ["old"]);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let logs = host.logs();
        assert_eq!(logs.len(), 1, "{logs:?}");
        assert_eq!(logs[0].0, LogLevel::WARN);
        assert!(logs[0].1.contains("from 0644 to 0600"), "{}", logs[0].1);
    }

    /// Outside the state folder: a file (0644, "x") a planted link points at.
    #[cfg(unix)]
    fn victim() -> (tempfile::TempDir, std::path::PathBuf) {
        use std::os::unix::fs::PermissionsExt as _;
        let outside = tempfile::tempdir().unwrap();
        let file = outside.path().join("victim");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        (outside, file)
    }

    #[cfg(unix)]
    fn untouched(file: &std::path::Path) {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::read_to_string(file).unwrap(), "x");
        let mode = std::fs::metadata(file).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o644, "the link's target was chmodded");
    }

    #[cfg(unix)]
    fn refused_naming(host: &TestHost, args: Value, link: &std::path::Path) {
        let out = host.call(&memory, args);
        let needle = format!("{} is a symbolic link", link.display());
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.contains(&needle) && m.contains("remove it")),
            "{out:?}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_link_at_the_notes_is_refused_and_its_target_untouched() {
        let host = TestHost::new();
        let (_outside, target) = victim();
        let link = host.state_dir().join("memory.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for args in [
            json!({"action": "list"}),
            json!({"action": "add", "text": "secret"}),
        ] {
            refused_naming(&host, args, &link);
            untouched(&target);
        }
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_link_at_the_lock_file_is_refused_and_its_target_untouched() {
        let host = TestHost::new();
        let (outside, target) = victim();
        let link = host.state_dir().join("memory.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        refused_naming(&host, json!({"action": "add", "text": "secret"}), &link);
        untouched(&target);
        assert!(!host.state_dir().join("memory.json").exists());
        // A dangling link: its target (think /etc/nologin) is not created.
        std::fs::remove_file(&link).unwrap();
        let created = outside.path().join("nologin");
        std::os::unix::fs::symlink(&created, &link).unwrap();
        refused_naming(&host, json!({"action": "list"}), &link);
        assert!(!created.exists(), "the link's target was created");
    }
}
