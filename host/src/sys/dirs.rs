//! Where the platform puts things (the XDG base directories): config, data, state and
//! the runtime folder, through `etcetera` (the one place that knows it), or the system
//! service's folders when the process runs with `--system` ([`SystemLayout`]). An
//! environment value that is empty or relative is ignored, as the XDG spec says; a missing
//! `HOME` falls back to the password database. Nothing here creates a folder.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use etcetera::BaseStrategy as _;

/// The XDG strategy, or `None` when no home folder can be found at all.
fn xdg() -> Option<etcetera::base_strategy::Xdg> {
    etcetera::base_strategy::Xdg::new()
        .ok()
        .filter(|x| !x.home_dir().as_os_str().is_empty())
}

/// The folders of toolhost as a system service: the ones systemd makes for the unit's
/// `ConfigurationDirectory=`, `StateDirectory=` and `RuntimeDirectory=` (and names in
/// `$CONFIGURATION_DIRECTORY`, `$STATE_DIRECTORY`, `$RUNTIME_DIRECTORY` for the service),
/// else their usual places. `toolhost --system` uses them for every command, so `serve`
/// in the unit and an operator's `toolhost --system token add` find the same files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemLayout {
    /// The config folder (`config.toml`, `profiles/`): `/etc/toolhost`.
    pub config: PathBuf,
    /// The state folder (tokens, trust pins, sessions, kept outputs, the audit log) and
    /// the plugin folder below it (`plugins/`): `/var/lib/toolhost`.
    pub state: PathBuf,
    /// The runtime folder (the control socket): `/run/toolhost`.
    pub runtime: PathBuf,
}

impl SystemLayout {
    /// systemd's variables for the unit's folders where set (the first of a
    /// colon-separated list, absolute), else `/etc/toolhost`, `/var/lib/toolhost` and
    /// `/run/toolhost`.
    pub fn from_env() -> Self {
        let dir = |var: &str, default: &str| {
            std::env::var_os(var)
                .and_then(|v| {
                    v.to_string_lossy()
                        .split(':')
                        .next()
                        .map(PathBuf::from)
                        .filter(|p| p.is_absolute())
                })
                .unwrap_or_else(|| PathBuf::from(default))
        };
        SystemLayout {
            config: dir("CONFIGURATION_DIRECTORY", "/etc/toolhost"),
            state: dir("STATE_DIRECTORY", "/var/lib/toolhost"),
            runtime: dir("RUNTIME_DIRECTORY", "/run/toolhost"),
        }
    }
}

static SYSTEM: OnceLock<SystemLayout> = OnceLock::new();

/// Makes every default folder of this process the system service's (`--system`). Call
/// it once, before anything reads a folder; `false` if a layout was chosen already.
pub fn use_system_layout(layout: SystemLayout) -> bool {
    SYSTEM.set(layout).is_ok()
}

fn system(pick: impl Fn(&SystemLayout) -> &Path) -> Option<PathBuf> {
    SYSTEM.get().map(|l| pick(l).to_path_buf())
}

/// The config folder: the system one, else `$XDG_CONFIG_HOME/toolhost` (else
/// `~/.config/toolhost`).
pub(crate) fn config_dir() -> Option<PathBuf> {
    system(|l| &l.config).or_else(|| xdg().map(|x| x.config_dir().join("toolhost")))
}

/// The data folder (where `plugins/` is): the system state folder, else
/// `$XDG_DATA_HOME/toolhost` (else `~/.local/share/toolhost`).
pub(crate) fn data_dir() -> Option<PathBuf> {
    system(|l| &l.state).or_else(|| xdg().map(|x| x.data_dir().join("toolhost")))
}

/// The state folder: the system one, else `$XDG_STATE_HOME/toolhost` (else
/// `~/.local/state/toolhost`).
pub(crate) fn state_dir() -> Option<PathBuf> {
    system(|l| &l.state).or_else(|| {
        xdg()
            .and_then(|x| x.state_dir())
            .map(|d| d.join("toolhost"))
    })
}

/// The runtime folder: the system one, else `$XDG_RUNTIME_DIR/toolhost` when the variable
/// is set (to an absolute path).
pub(crate) fn runtime_dir() -> Option<PathBuf> {
    // Not through `xdg()`: the runtime folder needs no home.
    system(|l| &l.runtime).or_else(|| {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|d| d.join("toolhost"))
    })
}
