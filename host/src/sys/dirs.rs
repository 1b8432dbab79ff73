//! Where the platform puts things (the XDG base directories): config, data, state and
//! the runtime folder, through `etcetera` (the one place that knows it), or the system
//! service's folders when the process runs with `--system` ([`SystemLayout`]), whose
//! plugin folder is root's and outside the service's writable state. An
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

/// Where the system service's plugin folder is unless [`SYSTEM_PLUGIN_DIR_VAR`] says otherwise:
/// root's, readable by the service and not writable by it (the unit lists it in
/// `ReadOnlyPaths=`).
pub const SYSTEM_PLUGIN_DIR: &str = "/usr/local/lib/toolhost/plugins";

/// The environment variable that moves the system plugin folder (an absolute path), for
/// tests and for packagers whose prefix is not `/usr/local`.
pub const SYSTEM_PLUGIN_DIR_VAR: &str = "TOOLHOST_SYSTEM_PLUGIN_DIR";

/// The folders of toolhost as a system service: the ones systemd makes for the unit's
/// `ConfigurationDirectory=`, `StateDirectory=` and `RuntimeDirectory=` (and names in
/// `$CONFIGURATION_DIRECTORY`, `$STATE_DIRECTORY`, `$RUNTIME_DIRECTORY` for the service),
/// else their usual places, and the plugin folder, which is root's. `toolhost --system`
/// uses them for every command, so `serve` in the unit and an operator's `toolhost
/// --system token add` find the same files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemLayout {
    /// The config folder (`config.toml`, `profiles/`): `/etc/toolhost`.
    pub config: PathBuf,
    /// The state folder (tokens, trust pins, sessions, kept outputs, the audit log, the
    /// plugin index): `/var/lib/toolhost`, the service user's.
    pub state: PathBuf,
    /// The runtime folder (the control socket): `/run/toolhost`.
    pub runtime: PathBuf,
    /// The plugin folder: [`SYSTEM_PLUGIN_DIR`], owned by root and written only by root
    /// (`toolhost --system install`), never inside the state folder the service can
    /// write, so nothing running as the service's user can add code it would load.
    pub plugins: PathBuf,
}

impl SystemLayout {
    /// systemd's variables for the unit's folders where set (the first of a
    /// colon-separated list, absolute), else `/etc/toolhost`, `/var/lib/toolhost` and
    /// `/run/toolhost`; the plugin folder from [`SYSTEM_PLUGIN_DIR_VAR`] (absolute), else
    /// [`SYSTEM_PLUGIN_DIR`].
    pub fn from_env() -> Self {
        Self::from_vars(|var| std::env::var_os(var))
    }

    /// [`SystemLayout::from_env`] with the variables `var` reads.
    fn from_vars(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Self {
        let dir = |name: &str, default: &str| {
            var(name)
                .and_then(|v| {
                    v.to_string_lossy()
                        .split(':')
                        .next()
                        .map(PathBuf::from)
                        .filter(|p| p.is_absolute())
                })
                .unwrap_or_else(|| PathBuf::from(default))
        };
        let plugins = var(SYSTEM_PLUGIN_DIR_VAR)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| PathBuf::from(SYSTEM_PLUGIN_DIR));
        SystemLayout {
            config: dir("CONFIGURATION_DIRECTORY", "/etc/toolhost"),
            state: dir("STATE_DIRECTORY", "/var/lib/toolhost"),
            runtime: dir("RUNTIME_DIRECTORY", "/run/toolhost"),
            plugins,
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

/// The system service's layout, if this process uses it (`--system`).
pub fn system_layout() -> Option<&'static SystemLayout> {
    SYSTEM.get()
}

/// The config folder: the system one, else `$XDG_CONFIG_HOME/toolhost` (else
/// `~/.config/toolhost`).
pub(crate) fn config_dir() -> Option<PathBuf> {
    system(|l| &l.config).or_else(|| xdg().map(|x| x.config_dir().join("toolhost")))
}

/// The default plugin folder: the system one (root's), else
/// `$XDG_DATA_HOME/toolhost/plugins` (else `~/.local/share/toolhost/plugins`).
pub(crate) fn plugin_dir() -> Option<PathBuf> {
    system(|l| &l.plugins).or_else(|| xdg().map(|x| x.data_dir().join("toolhost/plugins")))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(vars: &[(&str, &str)]) -> SystemLayout {
        SystemLayout::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| std::ffi::OsString::from(v))
        })
    }

    #[test]
    fn the_system_plugin_folder_is_roots_and_outside_the_state_folder() {
        let l = layout(&[]);
        assert_eq!(l.plugins, Path::new(SYSTEM_PLUGIN_DIR));
        assert_eq!(l.state, Path::new("/var/lib/toolhost"));
        assert!(!l.plugins.starts_with(&l.state));
        // systemd moving the state folder does not move the plugins into it.
        let moved = layout(&[("STATE_DIRECTORY", "/srv/state:/other")]);
        assert_eq!(moved.state, Path::new("/srv/state"));
        assert_eq!(moved.plugins, Path::new(SYSTEM_PLUGIN_DIR));
    }

    #[test]
    fn the_plugin_folder_variable_moves_it_when_absolute() {
        let l = layout(&[(SYSTEM_PLUGIN_DIR_VAR, "/tmp/x/plugins")]);
        assert_eq!(l.plugins, Path::new("/tmp/x/plugins"));
        for ignored in ["", "relative/plugins"] {
            assert_eq!(
                layout(&[(SYSTEM_PLUGIN_DIR_VAR, ignored)]).plugins,
                Path::new(SYSTEM_PLUGIN_DIR),
                "{ignored:?}"
            );
        }
    }
}
