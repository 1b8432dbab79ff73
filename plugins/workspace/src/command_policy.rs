//! What `run_command` lets a command be and see: the denylist of programs (built in plus
//! `[workspace] deny_programs`), the program's path as `PATH` finds it, the words of a
//! shell command line, and the environment reduced to an allowlist (plus
//! `[workspace] env`).
//!
//! Weak spot, said in the tool's description too: a shell command line can evade any
//! denylist (`$(printf su)do`, an alias, a script that runs the program); the denylist
//! is a guard against mistakes, the sandbox is what holds.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Programs no command may run, whatever the config says: privilege changes, power and
/// init control, disk formatting and partitioning, kernel modules. A trailing `*` matches
/// any ending (`mkfs*`: `mkfs`, `mkfs.ext4`).
pub(crate) const BUILT_IN_DENYLIST: &[&str] = &[
    "sudo", "su", "doas", "pkexec", "runuser", "shutdown", "reboot", "poweroff", "halt", "init",
    "telinit", "mkfs*", "mke2fs", "mkswap", "fdisk", "sfdisk", "cfdisk", "parted", "wipefs",
    "insmod", "rmmod", "modprobe", "kexec",
];

/// Environment variables a command gets from the host's environment when set there. A
/// trailing `*` matches any ending.
pub(crate) const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOMODCACHE",
    "JAVA_HOME",
    "VIRTUAL_ENV",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// The `PATH` a command gets when the host has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A denylist: the built-in entries and the config's.
pub(crate) struct Denylist {
    /// Each entry as written: a name (pattern) or an absolute path.
    entries: Vec<String>,
}

impl Denylist {
    /// The built-in entries plus `configured` (`[workspace] deny_programs`).
    pub(crate) fn new(configured: &[String]) -> Denylist {
        let entries = BUILT_IN_DENYLIST
            .iter()
            .map(|s| (*s).to_owned())
            .chain(configured.iter().map(|s| s.trim().to_owned()))
            .filter(|s| !s.is_empty())
            .collect();
        Denylist { entries }
    }

    /// The entry that refuses the program named `given` (as written), found at
    /// `resolved` (its path, if `PATH` found it): matched by base name (of what was
    /// given, of the path and of the path with links resolved) and, for entries that are
    /// paths, by path.
    pub(crate) fn refuses(&self, given: &str, resolved: Option<&Path>) -> Option<&str> {
        let real = resolved.and_then(|p| std::fs::canonicalize(p).ok());
        let mut names: Vec<&OsStr> = Vec::new();
        let mut paths: Vec<&Path> = Vec::new();
        if let Some(name) = Path::new(given).file_name() {
            names.push(name);
        }
        for path in resolved.into_iter().chain(real.as_deref()) {
            paths.push(path);
            if let Some(name) = path.file_name() {
                names.push(name);
            }
        }
        self.entries
            .iter()
            .find(|entry| {
                if entry.contains('/') {
                    let entry_real = std::fs::canonicalize(entry.as_str()).ok();
                    paths.iter().any(|p| {
                        *p == Path::new(entry.as_str()) || Some(*p) == entry_real.as_deref()
                    })
                } else {
                    names
                        .iter()
                        .any(|n| n.to_str().is_some_and(|n| pattern_matches(entry, n)))
                }
            })
            .map(String::as_str)
    }

    /// The entry that refuses a word of the shell command line `line`, and the word.
    pub(crate) fn refuses_shell_words(&self, line: &str, path_var: &str) -> Option<(&str, String)> {
        shell_words(line).into_iter().find_map(|word| {
            let resolved = find_program(&word, path_var, Path::new("/"));
            self.refuses(&word, resolved.as_deref())
                .map(|entry| (entry, word))
        })
    }
}

/// Whether `name` matches `pattern` (exactly, or by prefix for a trailing `*`).
fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The words of a shell command line, split at blanks and shell punctuation, quotes
/// removed; enough to find a program's name, not a shell parser.
pub(crate) fn shell_words(line: &str) -> Vec<String> {
    line.split(|c: char| c.is_whitespace() || ";&|()<>`{}$=!".contains(c))
        .map(|w| w.replace(['\'', '"', '\\'], ""))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Where `program` is: a name with no `/` is looked up in `path_var` (the first
/// executable file), a path is taken relative to `cwd`. `None`: not found.
pub(crate) fn find_program(program: &str, path_var: &str, cwd: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let path = cwd.join(program);
        return is_executable(&path).then_some(path);
    }
    std::env::split_paths(path_var)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

/// A regular file (after links) with an execute bit.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The environment of a command: the allowlisted variables the host has, then
/// `configured` (`[workspace] env`: a name or pattern to pass through, or `NAME=value`
/// to set), then `TMPDIR`, `TMP` and `TEMP` pointing to `tmp`. `PATH` is always set.
pub(crate) fn command_env(configured: &[String], tmp: &Path) -> Vec<(String, String)> {
    command_env_from(std::env::vars(), configured, tmp)
}

/// [`command_env`] over a given host environment (for tests).
fn command_env_from(
    host: impl Iterator<Item = (String, String)>,
    configured: &[String],
    tmp: &Path,
) -> Vec<(String, String)> {
    let host: Vec<(String, String)> = host.collect();
    let passes = |name: &str| {
        ENV_ALLOWLIST.iter().any(|p| pattern_matches(p, name))
            || configured
                .iter()
                .filter(|c| !c.contains('='))
                .any(|p| pattern_matches(p.trim(), name))
    };
    let mut env: Vec<(String, String)> =
        host.into_iter().filter(|(name, _)| passes(name)).collect();
    for entry in configured {
        if let Some((name, value)) = entry.split_once('=') {
            set(&mut env, name.trim(), value);
        }
    }
    if !env.iter().any(|(n, _)| n == "PATH") {
        env.push(("PATH".to_owned(), DEFAULT_PATH.to_owned()));
    }
    let tmp = tmp.display().to_string();
    for name in ["TMPDIR", "TMP", "TEMP"] {
        set(&mut env, name, &tmp);
    }
    env
}

/// Sets `name` to `value` in `env`, replacing an earlier value.
fn set(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    env.retain(|(n, _)| n != name);
    env.push((name.to_owned(), value.to_owned()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_and_configured_entries_refuse_by_name_and_path() {
        let list = Denylist::new(&["git".to_owned(), "/opt/tool/bin/x".to_owned()]);
        assert_eq!(list.refuses("sudo", None), Some("sudo"));
        assert_eq!(list.refuses("/usr/sbin/mkfs.ext4", None), Some("mkfs*"));
        assert_eq!(list.refuses("git", None), Some("git"));
        assert_eq!(
            list.refuses("x", Some(Path::new("/opt/tool/bin/x"))),
            Some("/opt/tool/bin/x")
        );
        // The resolved path's name counts even when the given name differs.
        assert_eq!(
            list.refuses("./s", Some(Path::new("/usr/bin/sudo"))),
            Some("sudo")
        );
        assert_eq!(list.refuses("ls", None), None);
        assert_eq!(list.refuses("sudoku", None), None);
    }

    #[test]
    fn a_link_to_a_denied_program_is_refused_by_its_target() {
        let dir = tempfile::tempdir().expect("tmp");
        let target = dir.path().join("reboot");
        std::fs::write(&target, "#!/bin/sh\n").expect("write");
        let link = dir.path().join("harmless");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        let list = Denylist::new(&[]);
        assert_eq!(list.refuses("harmless", Some(&link)), Some("reboot"));
    }

    #[test]
    fn shell_words_find_programs_behind_punctuation_and_quotes() {
        assert_eq!(
            shell_words("echo hi && 'sudo' ls|$(su -c x)>f"),
            ["echo", "hi", "sudo", "ls", "su", "-c", "x", "f"]
        );
        let list = Denylist::new(&[]);
        let hit = list.refuses_shell_words("true; (sudo id)", "/usr/bin:/bin");
        assert_eq!(hit, Some(("sudo", "sudo".to_owned())));
        assert_eq!(
            list.refuses_shell_words("ls -la | wc -l", "/usr/bin:/bin"),
            None
        );
    }

    #[test]
    fn programs_are_found_on_path_or_relative_to_the_folder() {
        let sh = find_program("sh", "/nonexistent:/usr/bin:/bin", Path::new("/")).expect("sh");
        assert!(sh.ends_with("sh"), "{}", sh.display());
        assert!(find_program("no-such-program-here", "/usr/bin:/bin", Path::new("/")).is_none());
        assert_eq!(
            find_program("./sh", "", Path::new("/bin")),
            Some(PathBuf::from("/bin/./sh"))
        );
    }

    #[test]
    fn the_environment_keeps_the_allowlist_and_the_config_and_sets_tmpdir() {
        let host = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("LC_ALL", "C"),
            ("SECRET_TOKEN", "s3cret"),
            ("MY_VAR", "kept"),
            ("TMPDIR", "/tmp"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
        let env = command_env_from(
            host.into_iter(),
            &["MY_*".to_owned(), "EXTRA=1".to_owned()],
            Path::new("/tmp/private"),
        );
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/usr/bin"));
        assert_eq!(get("LC_ALL"), Some("C"));
        assert_eq!(get("MY_VAR"), Some("kept"));
        assert_eq!(get("EXTRA"), Some("1"));
        assert_eq!(get("SECRET_TOKEN"), None);
        assert_eq!(get("TMPDIR"), Some("/tmp/private"));
        assert_eq!(get("TEMP"), Some("/tmp/private"));
        let bare = command_env_from(std::iter::empty(), &[], Path::new("/t"));
        assert!(bare.iter().any(|(k, v)| k == "PATH" && v == DEFAULT_PATH));
    }
}
