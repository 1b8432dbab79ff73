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

/// The worker a refused call ran in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Worker<'a> {
    /// The plugin's name.
    pub(super) plugin: &'a str,
    /// The profile the worker serves.
    pub(super) profile: &'a str,
    /// Whether it was given the profile's workspace roots (a tool declares them).
    pub(super) workspace: bool,
}

/// The note for a failed call in `worker` whose message is `text`, or `None` when the
/// message does not read like a refusal.
pub(super) fn explain(text: &str, policy: &IsolationPolicy, worker: Worker<'_>) -> Option<String> {
    if !refused(text) || text.contains("toolhost: plugin '") {
        return None;
    }
    let Worker {
        plugin,
        profile,
        workspace,
    } = worker;
    let roots = policy
        .workspace_roots
        .get(profile)
        .cloned()
        .unwrap_or_default();
    let given = if workspace { roots.clone() } else { Vec::new() };
    let mut read = toolhost_sandbox::system_read_paths();
    read.extend(policy.read_paths.iter().cloned());
    read.extend(given.iter().cloned());
    let mut write = policy.write_paths.clone();
    write.extend(given.iter().cloned());
    if let Some(states) = &policy.profile_states {
        write.extend(ProfileDirs::under(states, profile).worker_writable());
    }
    read.extend(write.iter().cloned());
    let keep = format!(
        "or keep the plugin out of the sandbox: [isolation.plugins] {plugin} = \"in-process\""
    );
    // Only the lines that say what was refused: a traceback's other lines name files the
    // program merely ran (its own sources, a library's), which the sandbox did not refuse.
    let paths: Vec<PathBuf> = text
        .lines()
        .filter(|line| refused(line))
        .flat_map(paths_in)
        .collect();
    if !workspace && let Some(path) = paths.iter().find(|p| under(p, &roots) && !under(p, &read)) {
        return Some(format!(
            "toolhost: plugin '{plugin}' runs in a sandboxed worker, which may not reach {} in \
             the profile's workspace: none of the plugin's tools declares that it works \
             there (`Requirements::workspace()` in plugin-api 0.1.4; its vendor adds it), \
             {keep}",
            path.display()
        ));
    }
    let outside = paths.into_iter().find_map(|path| {
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
             libraries, the profile's state folder and, for plugins whose tools declare \
             that they work there, its workspace roots); if this was the sandbox, add the \
             path to one of them, {keep}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTES: Worker<'static> = Worker {
        plugin: "notes",
        profile: "default",
        workspace: false,
    };

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
            NOTES,
        )
        .expect("a note");
        assert!(
            note.contains("may not read /home/ann/notes.md")
                && note.contains("[isolation] read_paths")
                && note.contains("notes = \"in-process\""),
            "{note}"
        );
        let note =
            explain("open \"/srv/data/x\": Permission denied", &policy, NOTES).expect("a note");
        assert!(
            note.contains("may not write /srv/data/x") && note.contains("write_paths"),
            "{note}"
        );
        let note = explain("Permission denied", &policy, NOTES).expect("a note");
        assert!(note.contains("read_paths and write_paths"), "{note}");
        assert_eq!(explain("no such file", &policy, NOTES), None);
        // A traceback's frames name files the program ran, not what was refused.
        let traceback = "Traceback (most recent call last):\n  File \"/usr/lib/python3/socket.py\", \
                         line 232, in __init__\nPermissionError: [Errno 1] Operation not permitted";
        let note = explain(traceback, &policy, NOTES).expect("a note");
        assert!(
            !note.contains("socket.py") && note.contains("read_paths and write_paths"),
            "{note}"
        );
        // Said once: a note already there is not noted again.
        assert_eq!(explain(&note, &policy, NOTES), None);
    }

    #[test]
    fn a_workspace_path_refused_to_a_plugin_that_does_not_declare_it_says_so() {
        let policy = IsolationPolicy {
            workspace_roots: std::collections::BTreeMap::from([(
                "default".to_owned(),
                vec![PathBuf::from("/home/ann/project")],
            )]),
            ..IsolationPolicy::default()
        };
        let text = "could not open /home/ann/project/src/lib.rs: Permission denied";
        let note = explain(text, &policy, NOTES).expect("a note");
        assert!(
            note.contains("none of the plugin's tools declares")
                && note.contains("Requirements::workspace()"),
            "{note}"
        );
        // The same path, to a worker that was given the roots: not the sandbox's doing
        // (the files' own permissions), so no key is named.
        let given = Worker {
            workspace: true,
            ..NOTES
        };
        let note = explain(text, &policy, given).expect("a note");
        assert!(note.contains("read_paths and write_paths"), "{note}");
    }
}
