//! Paths in a plugin's settings: [`SettingsPath`], a path that
//! [`ToolContext::settings`](crate::ToolContext::settings) resolves as the host resolves the
//! paths of its own config (relative to the config file's folder, `~/` for the host user's
//! home), whatever the working folder of the host or of the worker the plugin runs in.

use std::cell::RefCell;
use std::fmt;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where the settings being read came from: what a relative path and `~/` mean.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SettingsBase {
    /// The config file's folder.
    pub(crate) base: Option<PathBuf>,
    /// The host user's home folder.
    pub(crate) home: Option<PathBuf>,
}

thread_local! {
    /// Set by [`with_base`] for the length of one (synchronous) deserialization.
    static BASE: RefCell<Option<SettingsBase>> = const { RefCell::new(None) };
}

/// Runs `read` (a deserialization) with `base` as what [`SettingsPath`]s resolve against.
pub(crate) fn with_base<R>(base: SettingsBase, read: impl FnOnce() -> R) -> R {
    struct Reset(Option<SettingsBase>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let before = self.0.take();
            BASE.with(|b| *b.borrow_mut() = before);
        }
    }
    let before = BASE.with(|b| b.borrow_mut().replace(base));
    let _reset = Reset(before);
    read()
}

/// A path in a plugin's settings (`[plugins.NAME.settings]`), resolved as the host resolves
/// the paths of its own config: a relative path is relative to the folder of the config
/// file that holds it, `~/...` is under the home folder of the host's user, an absolute
/// path stays as written. Use it for a settings field that names a file or folder, and
/// read the settings with [`ToolContext::settings`](crate::ToolContext::settings).
///
/// Read by plain `serde` outside `ctx.settings()` (or from a host older than plugin-api
/// 0.1.4, which does not say where its config is), it keeps the path as written.
///
/// ```
/// use std::path::Path;
/// use serde_json::json;
/// use toolhost_plugin_api::testing::TestHost;
/// use toolhost_plugin_api::{Risk, SettingsPath, Tool, ToolContext, ToolError};
///
/// #[derive(serde::Deserialize)]
/// struct Settings {
///     index: SettingsPath,
/// }
///
/// struct IndexPath;
///
/// impl Tool for IndexPath {
///     fn name(&self) -> &str { "index_path" }
///     fn description(&self) -> &str { "Says where the index is." }
///     fn schema(&self) -> serde_json::Value { json!({"type": "object"}) }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn call(&self, ctx: &ToolContext<'_>, _: serde_json::Value) -> Result<String, ToolError> {
///         let settings: Settings = ctx.settings().await?;
///         Ok(settings.index.display().to_string())
///     }
/// }
///
/// // `index = "notes/index.db"` in /etc/toolhost/config.toml
/// let host = TestHost::new()
///     .settings(json!({"index": "notes/index.db"}))
///     .settings_base("/etc/toolhost", "/home/ann");
/// assert_eq!(host.call(&IndexPath, json!({})).unwrap(), "/etc/toolhost/notes/index.db");
/// let host = host.settings(json!({"index": "~/notes.db"}));
/// assert_eq!(host.call(&IndexPath, json!({})).unwrap(), "/home/ann/notes.db");
/// let host = host.settings(json!({"index": "/srv/notes.db"}));
/// assert_eq!(host.call(&IndexPath, json!({})).unwrap(), "/srv/notes.db");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SettingsPath(PathBuf);

impl SettingsPath {
    /// `written` resolved against `base` (the config file's folder) and `home`.
    fn resolve(written: PathBuf, base: &SettingsBase) -> PathBuf {
        if let Ok(rest) = written.strip_prefix("~")
            && let Some(home) = &base.home
        {
            return home.join(rest);
        }
        match &base.base {
            Some(dir) if written.is_relative() && !written.starts_with("~") => dir.join(written),
            _ => written,
        }
    }

    /// The path.
    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// The path, owned.
    pub fn into_path_buf(self) -> PathBuf {
        self.0
    }
}

impl Deref for SettingsPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for SettingsPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl From<SettingsPath> for PathBuf {
    fn from(path: SettingsPath) -> PathBuf {
        path.0
    }
}

impl From<PathBuf> for SettingsPath {
    /// A path taken as it is (already resolved).
    fn from(path: PathBuf) -> SettingsPath {
        SettingsPath(path)
    }
}

impl fmt::Debug for SettingsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl<'de> Deserialize<'de> for SettingsPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let written = PathBuf::deserialize(deserializer)?;
        let base = BASE.with(|b| b.borrow().clone()).unwrap_or_default();
        Ok(SettingsPath(SettingsPath::resolve(written, &base)))
    }
}

impl Serialize for SettingsPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(value: serde_json::Value) -> Vec<SettingsPath> {
        serde_json::from_value(value).expect("paths")
    }

    #[test]
    fn paths_resolve_against_the_config_folder_and_home_only_while_settings_are_read() {
        let written = serde_json::json!(["a/b", "~/c", "/d", "~", "./e"]);
        let base = SettingsBase {
            base: Some(PathBuf::from("/etc/toolhost")),
            home: Some(PathBuf::from("/home/ann")),
        };
        let resolved = with_base(base, || read(written.clone()));
        let paths: Vec<&Path> = resolved.iter().map(SettingsPath::as_path).collect();
        assert_eq!(
            paths,
            [
                Path::new("/etc/toolhost/a/b"),
                Path::new("/home/ann/c"),
                Path::new("/d"),
                Path::new("/home/ann"),
                Path::new("/etc/toolhost/./e"),
            ]
        );
        // Outside `with_base` (and after it): as written.
        let plain = read(written);
        assert_eq!(plain[0].as_path(), Path::new("a/b"));
        assert_eq!(plain[1].as_path(), Path::new("~/c"));
        // No home known: `~/` stays, not joined to the config folder.
        let no_home = SettingsBase {
            base: Some(PathBuf::from("/etc/toolhost")),
            home: None,
        };
        let kept = with_base(no_home, || read(serde_json::json!(["~/c"])));
        assert_eq!(kept[0].as_path(), Path::new("~/c"));
    }
}
