//! Profiles: `<profiles_dir>/<name>/config.toml`, each with its own state folder, the
//! toolsets it expands, and the view of the registry its agent sees.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::loaded::read_config_text;
use super::{ConfigError, LoadedConfig, RawProfile};
use crate::calls::registry::ToolRegistry;

/// A profile: `<profiles_dir>/<name>/config.toml` and its own state folder.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Where its state lives (memory notes, sessions): `<dir>/state`, created (mode 0700)
    /// on load.
    pub state_dir: PathBuf,
    /// The tools its agent gets (`@toolset` entries expanded); `None`: every tool.
    pub tools: Option<Vec<String>>,
    /// Its config file, if it has one.
    pub file: PathBuf,
    /// Its agent's system prompt, if it sets one.
    pub system_prompt: Option<String>,
}

/// What a profile's agent sees now, and what it lists that is missing.
#[derive(Debug, Clone)]
pub struct ProfileView {
    /// Its tools. `registry.specs()` (what the model sees) leaves deny tools out.
    pub registry: ToolRegistry,
    /// Listed tools no loaded plugin provides right now.
    pub missing: Vec<String>,
}

impl Profile {
    /// Loads profile `name`. The default profile may have no directory: it then gets
    /// every tool. Its state folder is created.
    pub fn load(config: &LoadedConfig, name: &str) -> Result<Profile, ConfigError> {
        let invalid_name = name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']);
        let dir = config.profiles_dir().join(name);
        let file = dir.join("config.toml");
        if invalid_name {
            return Err(ConfigError::NoProfile {
                profile: name.to_owned(),
                file,
            });
        }
        let text = match read_config_text(&file) {
            Ok(t) => Some(t),
            Err(ConfigError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                if name != config.config.default_profile {
                    return Err(ConfigError::NoProfile {
                        profile: name.to_owned(),
                        file,
                    });
                }
                None
            }
            Err(e) => return Err(e),
        };
        let parsed = match text {
            Some(t) => toml::from_str::<RawProfile>(&t).map_err(|e| ConfigError::Parse {
                path: file.clone(),
                message: e.to_string().trim_end().to_owned(),
            })?,
            None => RawProfile::default(),
        };
        let tools = match parsed.tools {
            None => None,
            Some(list) => Some(expand(&list, &config.config.toolsets, &file)?),
        };
        let state_dir = dir.join("state");
        if dir.exists() {
            // Notes and conversations: private to the host's user (0700, tightened).
            // A link there is refused, not followed.
            crate::sys::private::ensure_private_dir(&state_dir).map_err(|source| {
                ConfigError::Invalid {
                    path: state_dir.clone(),
                    message: format!(
                        "the profile's state folder could not be made private (mode 0700): \
                         {source}"
                    ),
                }
            })?;
        }
        Ok(Profile {
            name: name.to_owned(),
            dir,
            state_dir,
            tools,
            file,
            system_prompt: parsed.system_prompt,
        })
    }

    /// What the profile's agent gets from `full`: its listed tools (or all). Listed tools
    /// that are missing are reported, not fatal (hot reload).
    pub fn view(&self, full: &ToolRegistry) -> ProfileView {
        let mut missing = Vec::new();
        let registry = match &self.tools {
            None => full.clone(),
            Some(list) => {
                let present: Vec<&str> = list
                    .iter()
                    .filter(|t| {
                        let there = full.get(t).is_some();
                        if !there {
                            missing.push((*t).clone());
                        }
                        there
                    })
                    .map(String::as_str)
                    .collect();
                full.only(&present).unwrap_or_default()
            }
        };
        // Deny tools stay in the registry (so a call gets "denied by policy") but
        // `specs()` never shows them to the model.
        ProfileView { registry, missing }
    }

    /// Like [`Profile::view`], but a listed tool that is missing is an error: how
    /// start-up checks a profile.
    pub fn check(&self, full: &ToolRegistry) -> Result<ToolRegistry, ConfigError> {
        let view = self.view(full);
        match view.missing.first() {
            Some(tool) => Err(ConfigError::MissingTool {
                profile: self.name.clone(),
                tool: tool.clone(),
                file: self.file.clone(),
            }),
            None => Ok(view.registry),
        }
    }
}

/// Expands the `@toolset` entries of the profile `file`; an unknown toolset is an error
/// naming it.
fn expand(
    list: &[String],
    toolsets: &BTreeMap<String, Vec<String>>,
    file: &Path,
) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for entry in list {
        let names: Vec<String> = match entry.strip_prefix('@') {
            Some(set) => toolsets
                .get(set)
                .cloned()
                .ok_or_else(|| ConfigError::NoToolset {
                    path: file.to_path_buf(),
                    toolset: set.to_owned(),
                })?,
            None => vec![entry.clone()],
        };
        for name in names {
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    Ok(out)
}
