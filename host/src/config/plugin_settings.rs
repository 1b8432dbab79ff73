//! `[plugins.NAME.settings]`: a plugin's settings table as the config gives it (any
//! TOML), checked and turned into the JSON plugins read (`ctx.settings()`), with errors
//! that name the key.

use serde_json::Value;

/// A `[plugins.NAME]` value as the config gives it: `NAME` must be a table with only
/// `settings`, itself a table; it becomes JSON. `Err` names the key.
pub(super) fn from_toml(name: &str, value: toml::Value) -> Result<Value, PluginSettingsError> {
    let plugin = || name.to_owned();
    let toml::Value::Table(table) = value else {
        return Err(PluginSettingsError::NotATable { plugin: plugin() });
    };
    let mut settings = None;
    for (key, value) in table {
        if key != "settings" {
            return Err(PluginSettingsError::UnknownKey {
                plugin: plugin(),
                key,
            });
        }
        settings = Some(value);
    }
    match settings {
        Some(value @ toml::Value::Table(_)) => to_json(&format!("plugins.{name}.settings"), value),
        Some(_) => Err(PluginSettingsError::SettingsNotATable { plugin: plugin() }),
        None => Err(PluginSettingsError::NoSettings { plugin: plugin() }),
    }
}

/// What is wrong with a `[plugins.NAME]` table: the message names the key and says what
/// to write.
#[derive(Debug, thiserror::Error)]
pub(super) enum PluginSettingsError {
    /// `plugins.NAME` is a value, not a table.
    #[error(
        "unknown key `plugins.{plugin}`: [plugins] takes strict_permissions, max_file_size \
         and one [plugins.NAME.settings] table per plugin"
    )]
    NotATable {
        /// The plugin.
        plugin: String,
    },
    /// A key besides `settings` in a plugin's table.
    #[error(
        "unknown key `plugins.{plugin}.{key}`: a plugin's table takes only `settings` \
         ([plugins.{plugin}.settings])"
    )]
    UnknownKey {
        /// The plugin.
        plugin: String,
        /// The key.
        key: String,
    },
    /// `settings` that is not a table.
    #[error(
        "`plugins.{plugin}.settings` must be a table: write [plugins.{plugin}.settings] and \
         its keys below it"
    )]
    SettingsNotATable {
        /// The plugin.
        plugin: String,
    },
    /// A plugin's table without `settings`.
    #[error(
        "`[plugins.{plugin}]` has no settings: write [plugins.{plugin}.settings] and its keys \
         below it"
    )]
    NoSettings {
        /// The plugin.
        plugin: String,
    },
    /// A number JSON cannot hold (NaN, an infinity).
    #[error("`{key}` is {value}, which JSON cannot hold; use a finite number")]
    NotFinite {
        /// The key, with its path (`plugins.NAME.settings.x[1]`).
        key: String,
        /// The number.
        value: f64,
    },
}

/// A TOML value as JSON (dates and times become their TOML text). `at` names it in errors.
fn to_json(at: &str, value: toml::Value) -> Result<Value, PluginSettingsError> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| PluginSettingsError::NotFinite {
                key: at.to_owned(),
                value: f,
            })?,
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| to_json(&format!("{at}[{i}]"), v))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(table) => Value::Object(
            table
                .into_iter()
                .map(|(k, v)| {
                    let v = to_json(&format!("{at}.{k}"), v)?;
                    Ok((k, v))
                })
                .collect::<Result<_, PluginSettingsError>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Value, String> {
        let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        let (name, value) = table.into_iter().next().ok_or("empty")?;
        from_toml(&name, value).map_err(|e| e.to_string())
    }

    #[test]
    fn any_toml_becomes_json() {
        let settings = parse(
            "[weather.settings]\nunits = \"metric\"\nretries = 3\nratio = 0.5\n\
             since = 2026-01-01\ncities = [\"Oslo\", \"Lima\"]\n[weather.settings.api]\nurl = \"x\"\n",
        )
        .expect("valid");
        assert_eq!(
            settings,
            serde_json::json!({
                "units": "metric", "retries": 3, "ratio": 0.5, "since": "2026-01-01",
                "cities": ["Oslo", "Lima"], "api": {"url": "x"}
            })
        );
    }

    #[test]
    fn errors_name_the_key() {
        for (text, key) in [
            ("weather = 3", "unknown key `plugins.weather`"),
            (
                "[weather]\nsetings = {}",
                "unknown key `plugins.weather.setings`",
            ),
            (
                "[weather]\nsettings = 3",
                "`plugins.weather.settings` must be a table",
            ),
            (
                "[weather.settings]\nx = nan",
                "`plugins.weather.settings.x` is NaN",
            ),
            (
                "[weather.settings]\nx = [1, inf]",
                "`plugins.weather.settings.x[1]` is inf",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.starts_with(key), "{text}: {err}");
        }
    }
}
