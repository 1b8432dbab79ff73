//! Running cargo and rustc for a tool: the program found on `PATH`, an environment
//! reduced to what the toolchain needs (rustup's and cargo's homes and toolchain choice,
//! locale, proxies for registry lookups, plus `[workspace] env`), a private temporary
//! folder, and the same Landlock sandbox, time limit and process-tree kill as
//! `run_command` (`toolhost_sandbox::runner`). The sandbox lets the command read and
//! execute everywhere (rustup's toolchains included) but write only beneath the crate's
//! workspace root, a target folder set in the environment, cargo's download caches in
//! its home (`registry/`, `git/` and their lock files) and its temporary folder; the
//! network only where a tool needs the registry.
//!
//! Weak spots: a `target-dir` set in a cargo config file (not the environment) outside
//! the root is refused by the sandbox, and the error says so; reading is not restricted
//! (as for `run_command`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toolhost_plugin_api::{CancelFlag, ToolError};
use toolhost_sandbox::runner::{self, Finished, Launch};
use toolhost_sandbox::{SandboxMode, SandboxOutcome, SandboxRules};

/// Variables a toolchain command gets from the host's environment when set there (a
/// trailing `*` matches any ending).
const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Variables a registry lookup also gets: proxies and cargo's registry and network
/// settings, so the lookup goes where the user's own cargo goes.
const NETWORK_ENV: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "CARGO_HTTP_*",
    "CARGO_NET_*",
    "CARGO_REGISTRY_*",
    "CARGO_REGISTRIES_*",
];

/// The `PATH` a command gets when the host has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// One toolchain command.
pub(crate) struct Command {
    /// `cargo` or `rustc`, found on the command's `PATH`.
    pub(crate) program: &'static str,
    /// Its arguments.
    pub(crate) args: Vec<String>,
    /// Where it runs.
    pub(crate) cwd: PathBuf,
    /// Folders it may write besides its temporary folder and cargo's caches (the crate's
    /// workspace root).
    pub(crate) write: Vec<PathBuf>,
    /// Whether cargo's download caches are writable (every cargo command).
    pub(crate) cargo_caches: bool,
    /// Whether it may use the network (and gets the proxy and registry variables).
    pub(crate) network: bool,
    /// Whether the sandbox leaves TCP open anyway, for a local server cargo itself
    /// runs (`cargo fix`'s lock server on 127.0.0.1): Landlock filters TCP by port, not
    /// by address.
    pub(crate) local_tcp: bool,
    /// `[workspace] env`.
    pub(crate) configured_env: Vec<String>,
    /// The time limit.
    pub(crate) timeout: Duration,
}

/// A finished command.
pub(crate) struct Ran {
    /// How it ended and what it wrote.
    pub(crate) finished: Finished,
    /// Notes for the model: a time-out, a cancel, a sandbox this kernel could not hold.
    pub(crate) notes: Vec<String>,
}

impl Ran {
    /// Standard output.
    pub(crate) fn stdout(&self) -> String {
        self.finished.stdout.text()
    }

    /// Standard error.
    pub(crate) fn stderr(&self) -> String {
        self.finished.stderr.text()
    }

    /// The exit code (none after a signal).
    pub(crate) fn exit_code(&self) -> Option<i32> {
        self.finished.status.code()
    }

    /// It ran to its end (not killed for its time limit or a cancel).
    pub(crate) fn completed(&self) -> bool {
        !self.finished.timed_out && !self.finished.cancelled
    }
}

/// The time limit of a call: `asked`, capped to the workspace's `command_timeout_secs`
/// (the default), with a note when capped.
pub(crate) fn time_limit(asked: Option<u64>, cap: u64, notes: &mut Vec<String>) -> Duration {
    let cap = cap.max(1);
    let secs = match asked {
        Some(asked) if asked > cap => {
            notes.push(format!(
                "timeout_secs {asked} was capped to the workspace's {cap} s \
                 (command_timeout_secs)"
            ));
            cap
        }
        Some(asked) => asked.max(1),
        None => cap,
    };
    Duration::from_secs(secs)
}

/// Runs `command` in its sandbox to its end, its time limit or the call's cancel.
pub(crate) fn run(command: Command, cancel: &CancelFlag) -> Result<Ran, ToolError> {
    let tmp = tempfile::Builder::new()
        .prefix("toolhost-rust-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .map_err(|e| ToolError::failed(format!("could not make a temporary folder: {e}")))?;
    let tmp_path = std::fs::canonicalize(tmp.path())
        .map_err(|e| ToolError::failed(format!("could not find the temporary folder: {e}")))?;
    let mut env = toolchain_env(
        std::env::vars(),
        &command.configured_env,
        command.network,
        &tmp_path,
    );
    set(&mut env, "CARGO_TERM_COLOR", "never");
    set(&mut env, "CARGO_TERM_PROGRESS_WHEN", "never");
    let path_var = get(&env, "PATH").unwrap_or(DEFAULT_PATH).to_owned();
    let program = find_program(command.program, &path_var).ok_or_else(|| {
        ToolError::failed(format!(
            "{} is not on PATH ({path_var}); install the Rust toolchain (https://rustup.rs) \
             or add its folder to PATH (`[workspace] env = [\"PATH=...\"]`)",
            command.program
        ))
    })?;
    let mut write: Vec<PathBuf> = command.write.clone();
    write.push(tmp_path.clone());
    if let Some(target) = get(&env, "CARGO_TARGET_DIR") {
        write.push(command.cwd.join(target));
    }
    if let Some(home) = cargo_home(&env).filter(|_| command.cargo_caches) {
        write.extend(cargo_cache_paths(&home));
    }
    write.extend(
        [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
        ]
        .map(PathBuf::from),
    );
    let rules = SandboxRules {
        read: vec![PathBuf::from("/")],
        write,
        network: command.network || command.local_tcp,
        ..SandboxRules::default()
    };
    let sandbox = toolhost_sandbox::prepare(SandboxMode::BestEffort, &rules).map_err(|e| {
        ToolError::failed(format!(
            "could not set up the sandbox for {}: {e}",
            command.program
        ))
    })?;
    let mut notes = Vec::new();
    match sandbox.outcome() {
        SandboxOutcome::Full { .. } | SandboxOutcome::Off => {}
        other => notes.push(format!(
            "{other}; {} ran with less confinement",
            command.program
        )),
    }
    let launch = Launch {
        program: program.clone(),
        arg0: command.program.to_owned(),
        args: command.args,
        cwd: command.cwd,
        env,
        stdin: None,
        timeout: command.timeout,
        sandbox: Arc::new(sandbox),
        tag: toolhost_sandbox::process_tree::new_tag(),
    };
    let finished = runner::run(launch, &|| cancel.is_cancelled()).map_err(|e| {
        ToolError::failed(format!(
            "could not run {} ({}): {e}",
            command.program,
            program.display()
        ))
    })?;
    drop(tmp);
    if finished.timed_out {
        notes.push(format!(
            "timed out after {} s: {} and every process it started were killed; pass a \
             larger timeout_secs (up to the workspace's command_timeout_secs) if it needs \
             longer",
            command.timeout.as_secs(),
            command.program
        ));
    } else if finished.cancelled {
        notes.push(format!(
            "cancelled: {} and every process it started were killed",
            command.program
        ));
    }
    Ok(Ran { finished, notes })
}

/// cargo's home as cargo finds it: `$CARGO_HOME`, else `$HOME/.cargo` (none without
/// either: then no cache is writable).
pub(crate) fn cargo_home(env: &[(String, String)]) -> Option<PathBuf> {
    match (get(env, "CARGO_HOME"), get(env, "HOME")) {
        (Some(home), _) if !home.is_empty() => Some(PathBuf::from(home)),
        (_, Some(home)) if !home.is_empty() => Some(Path::new(home).join(".cargo")),
        _ => None,
    }
}

/// What cargo writes in its home while building offline or downloading: the registry
/// and git caches and the lock and last-use files beside them. Not `bin/` (the rustup
/// proxies a command could otherwise replace) nor the config.
fn cargo_cache_paths(home: &Path) -> Vec<PathBuf> {
    [
        "registry",
        "git",
        ".package-cache",
        ".package-cache-mutate",
        ".global-cache",
        ".global-cache-journal",
        ".global-cache-wal",
        ".global-cache-shm",
    ]
    .into_iter()
    .map(|p| home.join(p))
    .collect()
}

/// The environment of a toolchain command: the allowlisted variables of `host` (and the
/// network ones when `network`), then `configured` (`[workspace] env`: a name or pattern
/// to pass through, or `NAME=value` to set), then `TMPDIR`, `TMP` and `TEMP` pointing
/// to `tmp`. `PATH` is always set.
pub(crate) fn toolchain_env(
    host: impl Iterator<Item = (String, String)>,
    configured: &[String],
    network: bool,
    tmp: &Path,
) -> Vec<(String, String)> {
    let passes = |name: &str| {
        ENV_ALLOWLIST.iter().any(|p| pattern_matches(p, name))
            || (network && NETWORK_ENV.iter().any(|p| pattern_matches(p, name)))
            || configured
                .iter()
                .filter(|c| !c.contains('='))
                .any(|p| pattern_matches(p.trim(), name))
    };
    let mut env: Vec<(String, String)> = host.filter(|(name, _)| passes(name)).collect();
    for entry in configured {
        if let Some((name, value)) = entry.split_once('=') {
            set(&mut env, name.trim(), value);
        }
    }
    if get(&env, "PATH").is_none() {
        env.push(("PATH".to_owned(), DEFAULT_PATH.to_owned()));
    }
    let tmp = tmp.display().to_string();
    for name in ["TMPDIR", "TMP", "TEMP"] {
        set(&mut env, name, &tmp);
    }
    env
}

/// Whether `name` matches `pattern` (exactly, or by prefix for a trailing `*`).
fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The value of `name` in `env`.
fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Sets `name` to `value` in `env`, replacing an earlier value.
fn set(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    env.retain(|(n, _)| n != name);
    env.push((name.to_owned(), value.to_owned()));
}

/// The first executable file named `program` on `path_var`.
fn find_program(program: &str, path_var: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::split_paths(path_var)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Why a cargo run that failed before compiling anything failed, in words a model can
/// act on: missing dependencies offline, a sandbox refusal, or cargo's own message.
pub(crate) fn explain_cargo_failure(stderr: &str, network: bool) -> Option<String> {
    let offline_miss = [
        "--offline",
        "attempting to make an HTTP request",
        "failed to download",
        "no matching package named",
        "failed to get `",
    ];
    if !network && offline_miss.iter().any(|m| stderr.contains(m)) {
        return Some(
            "dependencies are missing from cargo's cache and this workspace has no network \
             (cargo ran with --offline): fetch them outside toolhost (`cargo fetch` in the \
             crate), or have the operator set `allow_network = true` under `[workspace]`"
                .to_owned(),
        );
    }
    if stderr.contains("failed to bind TCP listener") {
        return Some(
            "cargo could not open its local lock server (a TCP port on 127.0.0.1): the \
             sandbox denies TCP for this tool"
                .to_owned(),
        );
    }
    if stderr.contains("Permission denied") || stderr.contains("Read-only file system") {
        return Some(
            "cargo was refused a write by the sandbox: the Rust tools may write only beneath \
             the workspace roots, a CARGO_TARGET_DIR given in `[workspace] env`, cargo's \
             download caches and a temporary folder; a `target-dir` set in a cargo config \
             file must be beneath a root too"
                .to_owned(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_keeps_the_toolchain_and_drops_secrets_and_proxies_offline() {
        let host = [
            ("PATH", "/usr/bin"),
            ("RUSTUP_HOME", "/r"),
            ("CARGO_HOME", "/c"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("CARGO_REGISTRIES_MINE_INDEX", "sparse+https://x"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
        let tmp = Path::new("/tmp/t");
        let offline = toolchain_env(host.clone().into_iter(), &["X=1".to_owned()], false, tmp);
        assert_eq!(get(&offline, "RUSTUP_HOME"), Some("/r"));
        assert_eq!(get(&offline, "X"), Some("1"));
        assert_eq!(get(&offline, "TMPDIR"), Some("/tmp/t"));
        assert_eq!(get(&offline, "AWS_SECRET_ACCESS_KEY"), None);
        assert_eq!(get(&offline, "HTTPS_PROXY"), None);
        let online = toolchain_env(host.into_iter(), &[], true, tmp);
        assert_eq!(get(&online, "HTTPS_PROXY"), Some("http://proxy:3128"));
        assert_eq!(
            get(&online, "CARGO_REGISTRIES_MINE_INDEX"),
            Some("sparse+https://x")
        );
        assert_eq!(cargo_home(&online), Some(PathBuf::from("/c")));
        let no_home = [("HOME".to_owned(), "/home/u".to_owned())];
        assert_eq!(cargo_home(&no_home), Some(PathBuf::from("/home/u/.cargo")));
        assert_eq!(cargo_home(&[]), None);
    }

    #[test]
    fn time_limits_are_capped_with_a_note() {
        let mut notes = Vec::new();
        assert_eq!(time_limit(None, 120, &mut notes), Duration::from_secs(120));
        assert_eq!(time_limit(Some(5), 120, &mut notes), Duration::from_secs(5));
        assert!(notes.is_empty());
        assert_eq!(
            time_limit(Some(500), 120, &mut notes),
            Duration::from_secs(120)
        );
        assert!(notes[0].contains("capped"), "{notes:?}");
    }
}
