//! The host's own state kept out of every sandbox: which paths are hidden (the host puts
//! them in its environment, [`ENV`], where plugins in its process and the workers it
//! starts read them), and how a rule that covers one is carved around it ([`carve`]).
//!
//! Landlock grants access to whole hierarchies and has no "deny beneath": a rule on `/` or
//! on a home folder that holds `~/.local/state/toolhost` would reach the host's kept
//! outputs, approvals, tokens, audit log and sessions. So a rule above a hidden path is
//! replaced by rules on each entry beside the way down to it (read again at every
//! sandbox, so new entries count), and the folders on the way get only the right to list
//! them. What that costs: a file or folder created later directly in one of those folders
//! on the way (a new top-level entry of the home folder, say) is outside the sandbox until
//! the next command; the hidden folders' names can be listed, never their files read or
//! written. A rule beneath a hidden path is dropped unless the host granted it as private
//! (a worker's own profile state).

use std::path::{Path, PathBuf};

use landlock::{AccessFs, BitFlags};

/// The environment variable the host sets to the paths it hides: their bytes, one path a
/// line, with `%` and a newline inside a path written `%25` and `%0A` (a path is any bytes
/// but NUL; an environment value is too, so nothing is lost).
pub const ENV: &str = "TOOLHOST_PROTECTED_PATHS";

/// The environment variable a worker sets once its own sandbox hides the paths of
/// [`ENV`]: the sandboxes of the commands it starts are nested in its own, which only
/// narrows, so they need not carve again (and could not: the worker may not list the
/// folders on the way).
pub const HIDDEN_BY_OUTER: &str = "TOOLHOST_STATE_HIDDEN_BY_WORKER";

/// Whether this process is in a worker's sandbox that hides the host's state already.
pub fn hidden_by_outer() -> bool {
    std::env::var_os(HIDDEN_BY_OUTER).is_some_and(|v| v == "1")
}

/// How deep a rule is carved (folders on the way down to a hidden path); past that the
/// rule is dropped rather than granted whole.
const MAX_DEPTH: usize = 32;

/// The hidden paths of the environment ([`ENV`]); none when it is unset or unreadable.
pub fn from_env() -> Vec<PathBuf> {
    std::env::var_os(ENV).map(|v| parse(&v)).unwrap_or_default()
}

/// The paths of a value of [`ENV`] (relative ones dropped).
fn parse(value: &std::ffi::OsStr) -> Vec<PathBuf> {
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    value
        .as_bytes()
        .split(|b| *b == b'\n')
        .map(|line| PathBuf::from(std::ffi::OsString::from_vec(unescape(line))))
        .filter(|p| p.is_absolute())
        .collect()
}

/// The value of [`ENV`] for `paths`.
pub fn to_env(paths: &[PathBuf]) -> std::ffi::OsString {
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    let mut out = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        for &b in path.as_os_str().as_bytes() {
            match b {
                b'%' => out.extend_from_slice(b"%25"),
                b'\n' => out.extend_from_slice(b"%0A"),
                _ => out.push(b),
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

/// One line of [`ENV`] back to the path's bytes.
fn unescape(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut rest = line;
    while let Some((&b, tail)) = rest.split_first() {
        match (b, tail) {
            (b'%', [b'2', b'5', more @ ..]) => {
                out.push(b'%');
                rest = more;
            }
            (b'%', [b'0', b'A', more @ ..]) => {
                out.push(b'\n');
                rest = more;
            }
            _ => {
                out.push(b);
                rest = tail;
            }
        }
    }
    out
}

/// `path` with its links resolved as far as it exists (a hidden path that does not exist
/// yet is still hidden where it will be made).
pub fn resolved(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// `rules` (paths with the rights each grants) carved around `hidden`: a rule beneath a
/// hidden path is dropped (unless it is, or is beneath, one of `private`), a rule above
/// one becomes rules on each entry beside the way down, and the folders on that way get
/// `on_the_way` (listing) only. Rules that touch no hidden path are kept as they are.
pub fn carve(
    rules: Vec<(PathBuf, BitFlags<AccessFs>)>,
    hidden: &[PathBuf],
    private: &[PathBuf],
    on_the_way: BitFlags<AccessFs>,
) -> Vec<(PathBuf, BitFlags<AccessFs>)> {
    if hidden.is_empty() {
        return rules;
    }
    let hidden: Vec<PathBuf> = hidden.iter().map(|h| resolved(h)).collect();
    let private: Vec<PathBuf> = private.iter().map(|p| resolved(p)).collect();
    let mut out = Vec::new();
    for (path, access) in rules {
        let real = resolved(&path);
        carve_one(&real, access, &hidden, &private, on_the_way, 0, &mut out);
    }
    out
}

/// Carves one rule (see [`carve`]).
fn carve_one(
    path: &Path,
    access: BitFlags<AccessFs>,
    hidden: &[PathBuf],
    private: &[PathBuf],
    on_the_way: BitFlags<AccessFs>,
    depth: usize,
    out: &mut Vec<(PathBuf, BitFlags<AccessFs>)>,
) {
    if hidden.iter().any(|h| path.starts_with(h)) {
        if private.iter().any(|p| path.starts_with(p)) {
            out.push((path.to_path_buf(), access));
        }
        return;
    }
    if !hidden.iter().any(|h| h.starts_with(path)) {
        out.push((path.to_path_buf(), access));
        return;
    }
    // Above a hidden path: list this folder, and grant each entry beside the way down.
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        // Not listable: nothing beside the way can be granted, so nothing is.
        return;
    };
    out.push((path.to_path_buf(), access & on_the_way));
    for entry in entries.flatten() {
        let child = path.join(entry.file_name());
        // A link is granted where it leads (Landlock follows it), so it is carved as its
        // target: a link to the hidden folder, or above it, grants nothing more.
        let target = if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            match std::fs::canonicalize(&child) {
                Ok(real) => real,
                Err(_) => continue,
            }
        } else {
            child
        };
        if target.starts_with(path) && target != *path {
            carve_one(&target, access, hidden, private, on_the_way, depth + 1, out);
        } else {
            carve_one(&target, access, hidden, private, on_the_way, MAX_DEPTH, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rights() -> BitFlags<AccessFs> {
        AccessFs::ReadFile | AccessFs::ReadDir
    }

    #[test]
    fn a_rule_above_a_hidden_folder_is_carved_around_it() {
        let dir = tempfile::tempdir().expect("temp");
        let root = std::fs::canonicalize(dir.path()).expect("real");
        for p in ["a", ".local/state/toolhost/outputs", ".local/share", "b/c"] {
            std::fs::create_dir_all(root.join(p)).expect("mkdir");
        }
        std::fs::write(root.join("file"), "x").expect("write");
        std::os::unix::fs::symlink(root.join(".local/state"), root.join("sneaky")).expect("link");
        let hidden = vec![root.join(".local/state/toolhost")];
        let carved = carve(
            vec![(root.clone(), rights())],
            &hidden,
            &[],
            AccessFs::ReadDir.into(),
        );
        let find = |p: &Path| carved.iter().find(|(q, _)| q == p).map(|(_, a)| *a);
        assert_eq!(find(&root), Some(AccessFs::ReadDir.into()));
        assert_eq!(find(&root.join("a")), Some(rights()));
        assert_eq!(find(&root.join("b")), Some(rights()));
        assert_eq!(find(&root.join("file")), Some(rights()));
        assert_eq!(find(&root.join(".local")), Some(AccessFs::ReadDir.into()));
        assert_eq!(find(&root.join(".local/share")), Some(rights()));
        assert_eq!(
            find(&root.join(".local/state")),
            Some(AccessFs::ReadDir.into())
        );
        assert!(
            carved
                .iter()
                .all(|(p, _)| !p.starts_with(root.join(".local/state/toolhost"))),
            "{carved:?}"
        );
        // The link to a folder on the way grants no more than the folder itself.
        assert!(carved.iter().all(|(p, _)| !p.ends_with("sneaky")));
    }

    #[test]
    fn rules_beneath_are_dropped_unless_private_and_others_untouched() {
        let dir = tempfile::tempdir().expect("temp");
        let root = std::fs::canonicalize(dir.path()).expect("real");
        let state = root.join("state");
        std::fs::create_dir_all(state.join("profiles/p/state")).expect("mkdir");
        std::fs::create_dir_all(root.join("work")).expect("mkdir");
        let carved = carve(
            vec![
                (state.join("profiles"), rights()),
                (state.join("profiles/p/state"), rights()),
                (root.join("work"), rights()),
            ],
            std::slice::from_ref(&state),
            &[state.join("profiles/p/state")],
            AccessFs::ReadDir.into(),
        );
        assert_eq!(
            carved,
            vec![
                (state.join("profiles/p/state"), rights()),
                (root.join("work"), rights()),
            ]
        );
    }

    #[test]
    fn the_environment_round_trips_any_path_and_ignores_relative_paths() {
        use std::os::unix::ffi::OsStringExt as _;
        let paths = vec![
            PathBuf::from("/a b/c"),
            PathBuf::from("/d\nwith newline/100%25 and %0A"),
            PathBuf::from(std::ffi::OsString::from_vec(
                b"/not utf-8 \xff\xfe".to_vec(),
            )),
        ];
        let value = to_env(&paths);
        assert_eq!(parse(&value), paths);
        let mut with_relative = value;
        with_relative.push("\nrelative/path");
        assert_eq!(parse(&with_relative), paths);
        assert!(parse(std::ffi::OsStr::new("")).is_empty());
    }
}
