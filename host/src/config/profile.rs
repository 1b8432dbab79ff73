//! Profiles: `<profiles_dir>/<name>/config.toml`, each with its own state folder (under
//! the state directory, `<state_dir>/profiles/<name>/state`), the
//! toolsets it expands, and the view of the registry its agent sees. (Reading one from
//! the config's profiles folder, `Profile::load`, is with the loaded config.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ConfigError;
use toolhost_calls::profile_dirs::ProfileDirs;
use toolhost_calls::registry::ToolRegistry;

/// A profile: `<profiles_dir>/<name>/config.toml` and its own state folder.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Where it keeps what it keeps ([`ProfileDirs`]: `<state_dir>/profiles/<name>/`,
    /// the plugins' `state/` created (mode 0700) on load); state older releases kept in
    /// `<dir>/` is moved there.
    pub dirs: ProfileDirs,
    /// The tools its agent gets (`@toolset` entries expanded); `None`: every tool.
    pub tools: Option<Vec<String>>,
    /// Its config file, if it has one.
    pub file: PathBuf,
    /// Its agent's system prompt, if it sets one.
    pub system_prompt: Option<String>,
    /// Its output budget and kept outputs (`[output]`: the host config's, with the
    /// profile's keys in their place).
    pub output: toolhost_calls::outputs::OutputSettings,
    /// Its workspace (`[workspace]`: the host config's, with the profile's keys in their
    /// place, and `--workspace` roots in place of both).
    pub workspace: super::WorkspaceSettings,
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
    /// The host requests this profile answers on its own: its state folder and its
    /// workspace.
    pub fn requests(&self) -> crate::ProfileRequests {
        crate::ProfileRequests::new(self.dirs.state()).with_workspace(self.workspace.answer())
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
pub(super) fn expand(
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
