//! Plugin settings: the config's `[plugins.NAME.settings]` tables (read once into JSON
//! when the config is parsed, in `config::plugin_settings`), and what a plugin's calls
//! are answered with when it asks for them (`ctx.settings()`, the `plugin.settings` host
//! request), in process and in a worker alike. A plugin without a table gets `{}`. The
//! answer says where the config file is (and the host user's home), so a plugin reads the
//! paths in its table as the host reads its own config's: relative to the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use toolhost_plugin_api::SettingsAnswer;

/// Every plugin's settings, by plugin name (the name in its `export_plugin!`), and the
/// folder of the config file they were read from. Cheap to clone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PluginSettings {
    tables: Arc<BTreeMap<String, Value>>,
    base: Option<PathBuf>,
}

impl PluginSettings {
    /// The settings of each plugin named, read from a config file in the folder `base`
    /// (`None`: from no file).
    pub fn new(by_plugin: BTreeMap<String, Value>, base: Option<&Path>) -> PluginSettings {
        PluginSettings {
            tables: Arc::new(by_plugin),
            // Absolute: a worker's working folder is not the host's.
            base: base.map(|b| std::path::absolute(b).unwrap_or_else(|_| b.to_path_buf())),
        }
    }

    /// The tables that name none of `plugins` (the loaded plugins' names), each with the
    /// nearest of those names when one is close (a misspelling: `notes_index` for
    /// `notes-index`): no plugin reads them.
    pub fn unread<'a>(&self, plugins: &[&'a str]) -> Vec<(String, Option<&'a str>)> {
        self.tables
            .keys()
            .filter(|name| !plugins.contains(&name.as_str()))
            .map(|name| {
                let nearest = plugins
                    .iter()
                    .map(|p| (strsim::levenshtein(name, p), *p))
                    .filter(|(d, p)| *d <= (p.len().max(name.len()) / 3).max(1))
                    .min()
                    .map(|(_, p)| p);
                (name.clone(), nearest)
            })
            .collect()
    }

    /// What `plugin` is answered when it asks for its settings: its table (or `{}`), the
    /// config file's folder and the host user's home (paths that are not UTF-8 are left
    /// out: the answer is JSON, and the plugin then reads its paths as written).
    pub fn of(&self, plugin: &str) -> Arc<SettingsAnswer> {
        let text = |p: &Path| p.to_str().map(str::to_owned);
        Arc::new(SettingsAnswer {
            settings: self
                .tables
                .get(plugin)
                .cloned()
                .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
            base: self.base.as_deref().and_then(text),
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from)
                .as_deref()
                .and_then(text),
            // Unread keys were warned of when the plugin loaded, from its schema.
            strict: false,
        })
    }

    /// Every warning about the config's plugin settings, given the plugins loaded (each
    /// name with the warnings its load gave: keys its settings schema does not read):
    /// those, then one per table that names no loaded plugin (most likely a misspelt
    /// plugin name, with the nearest one). What `serve` logs, `status` shows, and `list`,
    /// `call` and `check` print, so each says the same.
    pub fn warnings<'a>(
        &self,
        plugins: impl IntoIterator<Item = (&'a str, &'a [String])>,
    ) -> Vec<String> {
        let mut names = Vec::new();
        let mut warnings = Vec::new();
        for (name, own) in plugins {
            names.push(name);
            warnings.extend(own.iter().cloned());
        }
        for (table, nearest) in self.unread(&names) {
            warnings.push(unread_table(&table, nearest, &names));
        }
        warnings
    }

    /// The warning for each table whose name is close to `plugin`'s but not it (a
    /// misspelling: that plugin would not read it), as [`PluginSettings::warnings`] says
    /// it: what `check` of one plugin file adds.
    pub fn misspelt_tables(&self, plugin: &str) -> Vec<String> {
        self.unread(&[plugin])
            .into_iter()
            .filter(|(_, nearest)| nearest.is_some())
            .map(|(table, nearest)| unread_table(&table, nearest, &[plugin]))
            .collect()
    }

    /// Checks `plugin`'s settings against the settings schema it declares (none: nothing
    /// to check), as every load does, in process and for a worker alike: `Ok` with a
    /// warning per key the plugin does not read, `Err` when they do not fit (the plugin is
    /// then not loaded: every call would fail on them).
    pub(crate) fn check_declared(
        &self,
        plugin: &str,
        schema: Option<&Value>,
    ) -> Result<Vec<String>, crate::plugins::load::error::LoadErrorKind> {
        let Some(schema) = schema else {
            return Ok(Vec::new());
        };
        let empty = Value::Object(serde_json::Map::new());
        let table = self.tables.get(plugin).unwrap_or(&empty);
        match toolhost_plugin_api::check::check_settings(schema, table) {
            Ok(warnings) => Ok(warnings
                .into_iter()
                .map(|w| {
                    let folder =
                        crate::plugins::load::error::config_folder_note(self.base.as_deref());
                    format!("[plugins.{plugin}.settings]{folder}: {w}")
                })
                .collect()),
            Err(problems) => Err(crate::plugins::load::error::LoadErrorKind::Settings {
                plugin: plugin.to_owned(),
                problems,
                config_dir: self.base.clone(),
            }),
        }
    }
}

/// The warning for a settings table no loaded plugin (of `names`) reads; `nearest`, the
/// loaded plugin whose name is close to the table's.
fn unread_table(table: &str, nearest: Option<&str>, names: &[&str]) -> String {
    match nearest {
        Some(plugin) => format!(
            "[plugins.{table}.settings] names no loaded plugin, so no plugin reads it: did \
             you mean [plugins.{plugin}.settings]?"
        ),
        None => format!(
            "[plugins.{table}.settings] names no loaded plugin, so no plugin reads it \
             (loaded plugins: {}, as `toolhost status` names them)",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        ),
    }
}

/// The answer to a `plugin.settings` request, for a plugin with `settings`.
pub(crate) fn answer(settings: &SettingsAnswer) -> toolhost_plugin_api::HostAnswer {
    toolhost_plugin_api::HostAnswer::from(settings.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_without_a_table_gets_an_empty_one() {
        let all = PluginSettings::new(
            BTreeMap::from([("weather".to_owned(), serde_json::json!({"units": "metric"}))]),
            Some(Path::new("/etc/toolhost")),
        );
        assert_eq!(all.of("weather").settings["units"], "metric");
        assert_eq!(all.of("weather").base.as_deref(), Some("/etc/toolhost"));
        assert_eq!(all.of("other").settings, serde_json::json!({}));
    }

    #[test]
    fn a_table_no_plugin_reads_is_named_with_the_nearest_plugin() {
        let all = PluginSettings::new(
            BTreeMap::from([
                ("notes_index".to_owned(), serde_json::json!({})),
                ("weather".to_owned(), serde_json::json!({})),
                ("zzz".to_owned(), serde_json::json!({})),
            ]),
            None,
        );
        assert_eq!(
            all.unread(&["notes-index", "weather", "memory"]),
            vec![
                ("notes_index".to_owned(), Some("notes-index")),
                ("zzz".to_owned(), None)
            ]
        );
    }
}
