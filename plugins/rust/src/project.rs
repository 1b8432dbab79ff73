//! Where a Rust tool runs: the profile's workspace (its `[workspace] roots` and rules,
//! asked of the host) and the crate or cargo workspace in it, found by its `Cargo.toml`.
//! A folder the model names is resolved beneath a root (relative to the first one, or
//! absolute beneath any) with links followed by the kernel (`canonicalize`), so neither
//! `..` nor a symbolic link leads a tool outside the roots.

use std::path::{Component, Path, PathBuf};

use toolhost_plugin_api::{ServiceError, ToolContext, ToolError, WorkspaceAnswer};

/// The profile's workspace: its roots (real paths) and rules.
pub(crate) struct Workspace {
    /// The roots, real paths, in the configured order.
    pub(crate) roots: Vec<PathBuf>,
    /// The rules commands run under (network, env, time limit).
    pub(crate) rules: WorkspaceAnswer,
}

/// A crate (or cargo workspace) folder beneath a root.
pub(crate) struct Project {
    /// The folder holding the `Cargo.toml`, real path.
    pub(crate) dir: PathBuf,
    /// The root it is beneath (writable for cargo).
    pub(crate) root: PathBuf,
}

/// What a cargo tool reads before it plans its run: the workspace, the crate the call names
/// (by default the first root), the time limit (with a note when the call's was capped) and
/// whether the workspace allows the network.
pub(crate) struct CargoCall {
    /// The call's workspace.
    pub(crate) workspace: Workspace,
    /// The crate it runs in.
    pub(crate) project: Project,
    /// Notes for the report so far.
    pub(crate) notes: Vec<String>,
    /// How long cargo may run.
    pub(crate) timeout: std::time::Duration,
    /// Whether cargo may use the network (else it runs `--offline`).
    pub(crate) network: bool,
}

impl CargoCall {
    /// Reads the workspace and finds the crate at `path` (see [`Workspace::project`]),
    /// with the time limit the call asks for (`timeout_secs`) capped by the workspace's.
    pub(crate) async fn of(
        ctx: &ToolContext<'_>,
        path: Option<&str>,
        timeout_secs: Option<u64>,
    ) -> Result<CargoCall, ToolError> {
        let workspace = Workspace::of(ctx).await?;
        let project = workspace.project(path)?;
        let mut notes = Vec::new();
        let timeout = crate::exec::time_limit(
            timeout_secs,
            workspace.rules.command_timeout_secs,
            &mut notes,
        );
        let network = workspace.rules.allow_network;
        Ok(CargoCall {
            workspace,
            project,
            notes,
            timeout,
            network,
        })
    }
}

impl Workspace {
    /// The call's workspace: the profile's `[workspace]`, roots opened. No roots is an
    /// error naming the config line to add.
    pub(crate) async fn of(ctx: &ToolContext<'_>) -> Result<Workspace, ToolError> {
        let answer = Self::answer(ctx).await?;
        Workspace::open(answer)
    }

    /// The profile's `[workspace]` as the host answers it (roots may be empty).
    pub(crate) async fn answer(ctx: &ToolContext<'_>) -> Result<WorkspaceAnswer, ToolError> {
        ctx.workspace().await.map_err(|e| match e {
            ServiceError::Unavailable(why) => ToolError::failed(format!(
                "this host cannot say which folders the Rust tools may use ({why}); update \
                 toolhost to a version with plugin-api 0.1.4 or later"
            )),
            other => ToolError::failed(other.to_string()),
        })
    }

    /// The workspace of `answer`; its roots must exist.
    pub(crate) fn open(answer: WorkspaceAnswer) -> Result<Workspace, ToolError> {
        if answer.roots.is_empty() {
            let place = if answer.config_hint.is_empty() {
                "the profile's config.toml (or the host config)".to_owned()
            } else {
                answer.config_hint.clone()
            };
            return Err(ToolError::failed(format!(
                "no workspace configured: add `[workspace]` with `roots = [\"/path/to/crate\"]` \
                 to {place}, or start toolhost with `--workspace DIR`"
            )));
        }
        let roots = answer
            .roots
            .iter()
            .map(|root| {
                std::fs::canonicalize(root).map_err(|e| {
                    ToolError::failed(format!(
                        "the workspace root {root} cannot be opened: {e}; fix [workspace] \
                         roots in the config"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Workspace {
            roots,
            rules: answer,
        })
    }

    /// The crate folder `path` names (default: the first root), which must hold a
    /// `Cargo.toml`.
    pub(crate) fn project(&self, path: Option<&str>) -> Result<Project, ToolError> {
        let shown = path.map_or(".", str::trim).to_owned();
        let asked = Path::new(&shown);
        if asked
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(ToolError::invalid_args(format!(
                "{shown}: `path` may not contain `..`; name the crate's folder from the \
                 workspace root ({})",
                self.roots[0].display()
            )));
        }
        let joined = if asked.is_absolute() {
            asked.to_path_buf()
        } else {
            self.roots[0].join(asked)
        };
        let dir = std::fs::canonicalize(&joined).map_err(|e| {
            ToolError::failed(format!(
                "{shown} cannot be opened ({e}); `path` is a folder beneath the workspace \
                 roots ({})",
                self.roots_list()
            ))
        })?;
        let root = self
            .roots
            .iter()
            .filter(|r| dir.starts_with(r))
            .max_by_key(|r| r.as_os_str().len())
            .cloned()
            .ok_or_else(|| {
                ToolError::failed(format!(
                    "{shown} is outside the workspace; the Rust tools run only beneath {}",
                    self.roots_list()
                ))
            })?;
        let dir = if dir.is_file() {
            dir.parent().map(Path::to_path_buf).unwrap_or(dir)
        } else {
            dir
        };
        if !dir.join("Cargo.toml").is_file() {
            return Err(ToolError::failed(format!(
                "{shown} holds no Cargo.toml; give `path`: the folder of the crate (or cargo \
                 workspace) to work on, beneath {}",
                self.roots_list()
            )));
        }
        Ok(Project { dir, root })
    }

    /// The roots, for messages.
    pub(crate) fn roots_list(&self) -> String {
        self.roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(dir: &Path) -> Workspace {
        Workspace::open(WorkspaceAnswer::with_roots([dir.display().to_string()])).expect("open")
    }

    #[test]
    fn a_crate_folder_is_found_beneath_a_root_and_nothing_outside() {
        let tmp = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("Cargo.toml"), "").expect("toml");
        std::fs::create_dir_all(tmp.path().join("member")).expect("member");
        std::fs::write(tmp.path().join("member/Cargo.toml"), "").expect("toml");
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("out")).expect("link");
        let ws = workspace(tmp.path());
        let e = ws.project(None).err().expect("no Cargo.toml at the root");
        assert!(e.to_string().contains("holds no Cargo.toml"), "{e}");
        let member = ws.project(Some("member")).expect("member");
        assert!(member.dir.ends_with("member"));
        for escape in ["../x", "out", &outside.path().display().to_string()] {
            let e = ws.project(Some(escape)).err().expect("escaped");
            let text = e.to_string();
            assert!(
                text.contains("outside the workspace") || text.contains("`..`"),
                "{escape}: {text}"
            );
        }
        let e = Workspace::open(WorkspaceAnswer::default())
            .err()
            .expect("no roots");
        assert!(e.to_string().contains("roots = ["), "{e}");
    }
}
