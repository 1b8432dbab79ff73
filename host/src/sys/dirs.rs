//! Where the platform puts things (the XDG base directories): config, data, state and
//! the runtime folder, through `etcetera` (the one place that knows it). An environment
//! value that is empty or relative is ignored, as the XDG spec says; a missing `HOME`
//! falls back to the password database. Nothing here creates a folder.

use std::path::PathBuf;

use etcetera::BaseStrategy as _;

/// The XDG strategy, or `None` when no home folder can be found at all.
fn xdg() -> Option<etcetera::base_strategy::Xdg> {
    etcetera::base_strategy::Xdg::new()
        .ok()
        .filter(|x| !x.home_dir().as_os_str().is_empty())
}

/// `$XDG_CONFIG_HOME/toolhost` (else `~/.config/toolhost`).
pub(crate) fn config_dir() -> Option<PathBuf> {
    xdg().map(|x| x.config_dir().join("toolhost"))
}

/// `$XDG_DATA_HOME/toolhost` (else `~/.local/share/toolhost`).
pub(crate) fn data_dir() -> Option<PathBuf> {
    xdg().map(|x| x.data_dir().join("toolhost"))
}

/// `$XDG_STATE_HOME/toolhost` (else `~/.local/state/toolhost`).
pub(crate) fn state_dir() -> Option<PathBuf> {
    xdg()
        .and_then(|x| x.state_dir())
        .map(|d| d.join("toolhost"))
}

/// `$XDG_RUNTIME_DIR/toolhost`, when the variable is set (to an absolute path).
pub(crate) fn runtime_dir() -> Option<PathBuf> {
    // Not through `xdg()`: the runtime folder needs no home.
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .map(|d| d.join("toolhost"))
}
