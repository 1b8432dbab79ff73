//! Plugin settings: the config's `[plugins.NAME.settings]` tables (read once into JSON
//! when the config is parsed, in `config::plugin_settings`), and what a plugin's calls
//! are answered with when it asks for them (`ctx.settings()`, the `plugin.settings` host
//! request), in process and in a worker alike. A plugin without a table gets `{}`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// Every plugin's settings, by plugin name (the name in its `export_plugin!`). Cheap to
/// clone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PluginSettings(Arc<BTreeMap<String, Value>>);

impl PluginSettings {
    /// The settings of each plugin named.
    pub fn new(by_plugin: BTreeMap<String, Value>) -> PluginSettings {
        PluginSettings(Arc::new(by_plugin))
    }

    /// The tables that name none of `plugins` (the loaded plugins' names), each with the
    /// nearest of those names when one is close (a misspelling: `notes_index` for
    /// `notes-index`): no plugin reads them.
    pub fn unread<'a>(&self, plugins: &[&'a str]) -> Vec<(String, Option<&'a str>)> {
        self.0
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

    /// The settings of `plugin`: its table, or `{}`.
    pub fn of(&self, plugin: &str) -> Arc<Value> {
        Arc::new(
            self.0
                .get(plugin)
                .cloned()
                .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
        )
    }
}

/// The answer to a `plugin.settings` request, for a plugin with `settings`.
pub(crate) fn answer(settings: &Value) -> toolhost_plugin_api::HostAnswer {
    toolhost_plugin_api::HostAnswer::from(toolhost_plugin_api::SettingsAnswer {
        settings: settings.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_without_a_table_gets_an_empty_one() {
        let all = PluginSettings::new(BTreeMap::from([(
            "weather".to_owned(),
            serde_json::json!({"units": "metric"}),
        )]));
        assert_eq!(all.of("weather")["units"], "metric");
        assert_eq!(*all.of("other"), serde_json::json!({}));
    }

    #[test]
    fn a_table_no_plugin_reads_is_named_with_the_nearest_plugin() {
        let all = PluginSettings::new(BTreeMap::from([
            ("notes_index".to_owned(), serde_json::json!({})),
            ("weather".to_owned(), serde_json::json!({})),
            ("zzz".to_owned(), serde_json::json!({})),
        ]));
        assert_eq!(
            all.unread(&["notes-index", "weather", "memory"]),
            vec![
                ("notes_index".to_owned(), Some("notes-index")),
                ("zzz".to_owned(), None)
            ]
        );
    }
}
