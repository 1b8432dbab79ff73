//! Saying what a worker's sandbox refused: a call of a plugin in a worker that fails with
//! "Permission denied" or "Operation not permitted" gets a note naming the sandbox, the
//! path it refused (when the message names one outside what the worker may reach) and
//! the config key that would allow it. The sandbox itself cannot say (Landlock reports
//! nothing), so the note is the host's reading of the plugin's message against the rules
//! it gave the worker.

use std::path::{Path, PathBuf};

use super::IsolationPolicy;
use toolhost_calls::profile_dirs::ProfileDirs;

/// Whether `text` reads like an access refused by the kernel (EACCES, EPERM).
fn refused(text: &str) -> bool {
    text.contains("Permission denied")
        || text.contains("Operation not permitted")
        || text.contains("(os error 13)")
        || text.contains("(os error 1)")
}

/// The absolute paths `text` names (as messages write them: after a space, in quotes or
/// parentheses, before a colon).
fn paths_in(text: &str) -> Vec<PathBuf> {
    text.split(|c: char| c.is_whitespace() || "\"'`()[]{},;".contains(c))
        .map(|word| word.trim_end_matches(['.', ':']))
        .filter(|word| word.len() > 1 && word.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

fn under(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

/// The note for a failed call of `plugin` in `profile`'s worker whose message is `text`,
/// or `None` when the message does not read like a refusal.
pub(super) fn explain(
    text: &str,
    policy: &IsolationPolicy,
    plugin: &str,
    profile: &str,
) -> Option<String> {
    if !refused(text) || text.contains("toolhost: plugin '") {
        return None;
    }
    let roots = policy
        .workspace_roots
        .get(profile)
        .cloned()
        .unwrap_or_default();
    let mut read = toolhost_sandbox::system_read_paths();
    read.extend(policy.read_paths.iter().cloned());
    read.extend(roots.iter().cloned());
    let mut write = policy.write_paths.clone();
    write.extend(roots.iter().cloned());
    if let Some(states) = &policy.profile_states {
        write.extend(ProfileDirs::under(states, profile).worker_writable());
    }
    read.extend(write.iter().cloned());
    let keep = format!(
        "or keep the plugin out of the sandbox: [isolation.plugins] {plugin} = \"in-process\""
    );
    let outside = paths_in(text).into_iter().find_map(|path| {
        if !under(&path, &read) {
            Some((path, "read_paths", "read"))
        } else if !under(&path, &write) {
            Some((path, "write_paths", "write"))
        } else {
            None
        }
    });
    Some(match outside {
        Some((path, key, verb)) => format!(
            "toolhost: plugin '{plugin}' runs in a sandboxed worker, which may not {verb} {}: \
             add it (or a folder above it) to [isolation] {key} in the config, {keep}",
            path.display()
        ),
        None => format!(
            "toolhost: plugin '{plugin}' runs in a sandboxed worker, which refuses paths that \
             [isolation] read_paths and write_paths do not list (besides the system's \
             libraries, the profile's workspace roots and its state folder); if this was \
             the sandbox, add the path to one of them, {keep}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_path_outside_the_rules_is_named_with_its_key() {
        let policy = IsolationPolicy {
            read_paths: vec![PathBuf::from("/srv/data")],
            write_paths: vec![PathBuf::from("/srv/out")],
            ..IsolationPolicy::default()
        };
        let note = explain(
            "could not read /home/ann/notes.md: Permission denied (os error 13)",
            &policy,
            "notes",
            "default",
        )
        .expect("a note");
        assert!(
            note.contains("may not read /home/ann/notes.md")
                && note.contains("[isolation] read_paths")
                && note.contains("notes = \"in-process\""),
            "{note}"
        );
        let note = explain(
            "open \"/srv/data/x\": Permission denied",
            &policy,
            "notes",
            "default",
        )
        .expect("a note");
        assert!(
            note.contains("may not write /srv/data/x") && note.contains("write_paths"),
            "{note}"
        );
        let note = explain("Permission denied", &policy, "notes", "default").expect("a note");
        assert!(note.contains("read_paths and write_paths"), "{note}");
        assert_eq!(explain("no such file", &policy, "notes", "default"), None);
        // Said once: a note already there is not noted again.
        assert_eq!(explain(&note, &policy, "notes", "default"), None);
    }
}
