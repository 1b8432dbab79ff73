//! A profile's workspace (`[workspace]`): the folders the workspace tools are confined to
//! and the rules for their commands and fetches, resolved and checked at load, answered
//! to plugins' `profile.workspace` requests and added to the profile's workers' sandbox.

use std::path::{Path, PathBuf};

use toolhost_plugin_api::WorkspaceAnswer;

use super::file::RawWorkspace;

/// A command's time limit when the config sets none, seconds.
pub(crate) const DEFAULT_COMMAND_TIMEOUT_SECS: u64 = 120;

/// A profile's workspace, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSettings {
    /// The roots: absolute, existing folders, links resolved. Empty: no workspace.
    pub roots: Vec<PathBuf>,
    /// Commands may use the network.
    pub allow_network: bool,
    /// `run_command` takes shell command lines.
    pub shell: bool,
    /// Programs `run_command` refuses besides its built-in list.
    pub deny_programs: Vec<String>,
    /// Environment variables commands get besides the built-in allowlist.
    pub env: Vec<String>,
    /// A command's time limit, seconds.
    pub command_timeout_secs: u64,
    /// `fetch_url` may reach loopback, private, link-local and metadata addresses.
    pub allow_private_addresses: bool,
    /// Commands may make Unix-domain sockets.
    pub allow_unix_sockets: bool,
    /// Where to add roots, for the tools' "no workspace configured" answer.
    pub config_hint: String,
    /// What the workspace tools never read or write, whatever the roots: the host's state,
    /// the audit log, its config files and plugin folders
    /// ([`LoadedConfig::workspace_protected_paths`](crate::LoadedConfig::workspace_protected_paths)).
    pub protected: Vec<PathBuf>,
}

impl Default for WorkspaceSettings {
    fn default() -> Self {
        WorkspaceSettings {
            roots: Vec::new(),
            allow_network: false,
            shell: false,
            deny_programs: Vec::new(),
            env: Vec::new(),
            command_timeout_secs: DEFAULT_COMMAND_TIMEOUT_SECS,
            allow_private_addresses: false,
            allow_unix_sockets: false,
            config_hint: String::new(),
            protected: Vec::new(),
        }
    }
}

impl WorkspaceSettings {
    /// Resolves `raw` (roots already absolute, see [`absolute_root`]); `hint` says where
    /// roots are added. A root that is not an existing folder, or not UTF-8, is an error
    /// naming it.
    pub(crate) fn resolve(
        raw: &RawWorkspace,
        hint: String,
    ) -> Result<WorkspaceSettings, WorkspaceError> {
        let mut roots = Vec::new();
        for root in raw.roots.iter().flatten() {
            let real = canonical_root(root)?;
            if !roots.contains(&real) {
                roots.push(real);
            }
        }
        let command_timeout_secs = raw
            .command_timeout_secs
            .unwrap_or(DEFAULT_COMMAND_TIMEOUT_SECS);
        if command_timeout_secs == 0 {
            return Err(WorkspaceError::NoCommandTime);
        }
        // What the workspace plugins take: `NAME` (passed from the host's environment),
        // `PREFIX*`, or `NAME=value` (set to that value).
        for entry in raw.env.iter().flatten() {
            let name = entry
                .split_once('=')
                .map_or(entry.as_str(), |(name, _)| name);
            let pattern = name.strip_suffix('*').unwrap_or(name);
            if pattern.is_empty()
                || entry.contains('\0')
                || (entry.contains('=') && name.ends_with('*'))
                || pattern.contains('*')
            {
                return Err(WorkspaceError::EnvEntry {
                    entry: entry.clone(),
                });
            }
        }
        Ok(WorkspaceSettings {
            roots,
            allow_network: raw.allow_network.unwrap_or(false),
            shell: raw.shell.unwrap_or(false),
            deny_programs: raw.deny_programs.clone().unwrap_or_default(),
            env: raw.env.clone().unwrap_or_default(),
            command_timeout_secs,
            allow_private_addresses: raw.allow_private_addresses.unwrap_or(false),
            allow_unix_sockets: raw.allow_unix_sockets.unwrap_or(false),
            config_hint: hint,
            protected: Vec::new(),
        })
    }

    /// These settings with `roots` (from `--workspace`) in place of the configured ones.
    pub(crate) fn with_roots(mut self, roots: &[PathBuf]) -> WorkspaceSettings {
        self.roots = roots.to_vec();
        self
    }

    /// What a plugin's `profile.workspace` request is answered with.
    pub fn answer(&self) -> WorkspaceAnswer {
        let mut answer = WorkspaceAnswer::with_roots(
            self.roots.iter().map(|r| r.to_string_lossy().into_owned()),
        );
        answer.allow_network = self.allow_network;
        answer.shell = self.shell;
        answer.deny_programs.clone_from(&self.deny_programs);
        answer.env.clone_from(&self.env);
        answer.command_timeout_secs = self.command_timeout_secs;
        answer.allow_private_addresses = self.allow_private_addresses;
        answer.allow_unix_sockets = self.allow_unix_sockets;
        answer.config_hint.clone_from(&self.config_hint);
        answer.protected = self
            .protected
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        answer
    }
}

/// A root as written in a file in `base`: `~/x` is beneath the home folder, a relative
/// path is relative to `base`.
pub(crate) fn absolute_root(root: &Path, base: &Path) -> PathBuf {
    if let Ok(rest) = root.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty())
    {
        return PathBuf::from(home).join(rest);
    }
    if root.is_relative() {
        base.join(root)
    } else {
        root.to_path_buf()
    }
}

/// `root`'s real path, checked to be an existing folder with a UTF-8 path (the tools
/// receive it as text).
pub(crate) fn canonical_root(root: &Path) -> Result<PathBuf, WorkspaceError> {
    let real = std::fs::canonicalize(root).map_err(|source| WorkspaceError::Unusable {
        root: root.to_path_buf(),
        source,
    })?;
    if !real.is_dir() {
        return Err(WorkspaceError::NotAFolder {
            root: root.to_path_buf(),
        });
    }
    if real.to_str().is_none() {
        return Err(WorkspaceError::NotUtf8 {
            root: root.to_path_buf(),
        });
    }
    Ok(real)
}

/// What is wrong with a `[workspace]` table (or a `--workspace` folder): the message
/// names the root or key and says what to do.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkspaceError {
    /// A root that does not exist or cannot be resolved.
    #[error(
        "the workspace root {} cannot be used: {source}; create it or fix `[workspace] roots`",
        root.display()
    )]
    Unusable {
        /// The root as configured.
        root: PathBuf,
        /// Why it cannot be resolved.
        source: std::io::Error,
    },
    /// A root that is a file, not a folder.
    #[error(
        "the workspace root {} is not a folder; fix `[workspace] roots`",
        root.display()
    )]
    NotAFolder {
        /// The root as configured.
        root: PathBuf,
    },
    /// A root whose real path is not UTF-8 (the tools receive it as text).
    #[error(
        "the workspace root {} is not valid UTF-8; use a folder whose path is",
        root.display()
    )]
    NotUtf8 {
        /// The root as configured.
        root: PathBuf,
    },
    /// `command_timeout_secs = 0`.
    #[error("`workspace.command_timeout_secs` must be at least 1 (seconds)")]
    NoCommandTime,
    /// An entry of `env` that is neither `NAME`, `PREFIX*` nor `NAME=value`.
    #[error(
        "`workspace.env` lists {entry:?}: give a variable's NAME (passed on from toolhost's \
         environment), a PREFIX* of names, or NAME=value"
    )]
    EnvEntry {
        /// The entry as written.
        entry: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_resolve_to_real_folders_and_bad_ones_are_named() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(tmp.path().join("proj")).expect("mkdir");
        let raw = RawWorkspace {
            roots: Some(vec![absolute_root(Path::new("proj"), tmp.path())]),
            ..RawWorkspace::default()
        };
        let settings = WorkspaceSettings::resolve(&raw, "here".into()).expect("resolve");
        let real = std::fs::canonicalize(tmp.path().join("proj")).expect("real");
        assert_eq!(settings.roots, std::slice::from_ref(&real));
        let answer = settings.answer();
        assert_eq!(answer.roots, [real.to_string_lossy().into_owned()]);
        assert_eq!(answer.command_timeout_secs, DEFAULT_COMMAND_TIMEOUT_SECS);
        assert_eq!(answer.config_hint, "here");

        let missing = RawWorkspace {
            roots: Some(vec![tmp.path().join("nope")]),
            ..RawWorkspace::default()
        };
        let e = WorkspaceSettings::resolve(&missing, String::new()).expect_err("missing");
        let e = e.to_string();
        assert!(e.contains("nope") && e.contains("[workspace] roots"), "{e}");
        let zero = RawWorkspace {
            command_timeout_secs: Some(0),
            ..RawWorkspace::default()
        };
        assert!(WorkspaceSettings::resolve(&zero, String::new()).is_err());
    }

    #[test]
    fn env_takes_names_prefixes_and_values_as_the_docs_show() {
        let with = |entries: &[&str]| RawWorkspace {
            env: Some(entries.iter().map(|e| (*e).to_owned()).collect()),
            ..RawWorkspace::default()
        };
        let good = with(&[
            "CARGO_HOME=/srv/root/.cargo",
            "RUST_LOG",
            "CARGO_TERM_*",
            "EMPTY=",
        ]);
        let settings = WorkspaceSettings::resolve(&good, String::new()).expect("valid");
        assert_eq!(settings.answer().env.len(), 4);
        for bad in ["", "=x", "*", "A*=x", "A*B", "NUL\0"] {
            let e = WorkspaceSettings::resolve(&with(&[bad]), String::new()).expect_err("refused");
            assert!(e.to_string().contains("NAME=value"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_profile_key_replaces_the_host_configs() {
        let host = RawWorkspace {
            roots: Some(vec![PathBuf::from("/a")]),
            shell: Some(true),
            ..RawWorkspace::default()
        };
        let profile = RawWorkspace {
            shell: Some(false),
            allow_network: Some(true),
            ..RawWorkspace::default()
        };
        let merged = host.overridden(&profile);
        assert_eq!(merged.roots, Some(vec![PathBuf::from("/a")]));
        assert_eq!(
            (merged.shell, merged.allow_network),
            (Some(false), Some(true))
        );
    }

    #[test]
    fn a_tilde_is_the_home_folder_and_relative_is_beside_the_file() {
        let base = Path::new("/etc/toolhost");
        assert_eq!(
            absolute_root(Path::new("proj"), base),
            Path::new("/etc/toolhost/proj")
        );
        assert_eq!(
            absolute_root(Path::new("/srv/p"), base),
            Path::new("/srv/p")
        );
        if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            assert_eq!(
                absolute_root(Path::new("~/p"), base),
                PathBuf::from(home).join("p")
            );
        }
    }
}
