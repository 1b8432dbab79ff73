//! The workspace a call may touch: the profile's roots, each opened once as a directory
//! handle, and the resolution of a path the model names to one root and a path beneath
//! it. Every open goes through the root's handle (cap-std: `openat2` with
//! `RESOLVE_BENEATH` where the kernel has it, a checked walk otherwise), so no `..`,
//! absolute path or symbolic link leads outside a root, not even one swapped in between a
//! check and the open.

use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use toolhost_plugin_api::{ServiceError, ToolContext, ToolError, WorkspaceAnswer};

/// The profile's workspace, opened.
pub(crate) struct Workspace {
    /// The roots, in the configured order (the first is where relative paths start).
    pub(crate) roots: Vec<Root>,
    /// The rules for commands and fetches.
    pub(crate) rules: WorkspaceAnswer,
    /// What no workspace tool reads or writes, whatever the roots: the host's state,
    /// audit log, config files and plugin folders (from the host's answer), links
    /// resolved as far as they exist.
    pub(crate) protected: Vec<PathBuf>,
}

/// One root folder.
pub(crate) struct Root {
    /// Its real path (links resolved when it was opened).
    pub(crate) path: PathBuf,
    /// The handle every open beneath it goes through.
    pub(crate) dir: Dir,
}

/// A path the model named, resolved to a root and a path beneath it.
pub(crate) struct Resolved<'a> {
    /// The root it is beneath.
    pub(crate) root: &'a Root,
    /// The path relative to the root: normal components only (`.` for the root itself).
    pub(crate) rel: PathBuf,
    /// Whether the root is the first one (paths beneath it are shown relative).
    first: bool,
    /// The workspace's protected paths ([`Workspace::protected`]).
    protected: &'a [PathBuf],
}

impl Workspace {
    /// The call's workspace: asks the host for the profile's `[workspace]`, opens its roots.
    /// No roots is an error that says which config line to add.
    pub(crate) async fn of(ctx: &ToolContext<'_>) -> Result<Workspace, ToolError> {
        let answer = ctx.workspace().await.map_err(|e| match e {
            ServiceError::Unavailable(why) => ToolError::failed(format!(
                "this host cannot say which folders the workspace tools may use ({why}); \
                 update toolhost to a version with plugin-api 0.1.4 or later"
            )),
            other => ToolError::failed(other.to_string()),
        })?;
        Workspace::open(answer)
    }

    /// Opens the roots of `answer`.
    pub(crate) fn open(answer: WorkspaceAnswer) -> Result<Workspace, ToolError> {
        if answer.roots.is_empty() {
            let place = if answer.config_hint.is_empty() {
                "the profile's config.toml (or the host config)".to_owned()
            } else {
                answer.config_hint.clone()
            };
            return Err(ToolError::failed(format!(
                "no workspace configured: add `[workspace]` with `roots = [\"/path/to/project\"]` \
                 to {place}, or start toolhost with `--workspace DIR`"
            )));
        }
        let mut roots = Vec::with_capacity(answer.roots.len());
        for configured in &answer.roots {
            let path = std::fs::canonicalize(configured).map_err(|e| {
                ToolError::failed(format!(
                    "the workspace root {configured} cannot be opened: {e}; fix [workspace] \
                     roots in the config"
                ))
            })?;
            let dir = Dir::open_ambient_dir(&path, ambient_authority()).map_err(|e| {
                ToolError::failed(format!(
                    "the workspace root {} cannot be opened: {e}; fix [workspace] roots in the \
                     config",
                    path.display()
                ))
            })?;
            roots.push(Root { path, dir });
        }
        let protected = answer
            .protected
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|p| toolhost_sandbox::protected::resolved(&p))
            .collect();
        Ok(Workspace {
            roots,
            rules: answer,
            protected,
        })
    }

    /// The protected path (see [`Workspace::protected`]) that `abs`, a real path, is or is
    /// beneath.
    pub(crate) fn protected_at(&self, abs: &Path) -> Option<&Path> {
        protected_at(&self.protected, abs)
    }

    /// The first root: where relative paths start and commands run by default.
    pub(crate) fn first(&self) -> &Root {
        &self.roots[0]
    }

    /// Resolves `path`: relative to the first root, or absolute beneath one of the roots.
    /// `..` components are refused (a path that needs them names something outside, or
    /// something reachable without them). Symbolic links are not judged here: the opens
    /// through [`Root::dir`] refuse any that lead outside.
    pub(crate) fn resolve(&self, path: &str) -> Result<Resolved<'_>, ToolError> {
        let asked = Path::new(path.trim());
        let (index, remainder) = if asked.is_absolute() {
            self.roots
                .iter()
                .enumerate()
                .filter_map(|(i, root)| asked.strip_prefix(&root.path).ok().map(|r| (i, r)))
                .max_by_key(|(i, _)| self.roots[*i].path.as_os_str().len())
                .ok_or_else(|| {
                    ToolError::failed(format!(
                        "{path} is outside the workspace; paths must be beneath {} (or relative \
                         to {})",
                        self.roots_list(),
                        self.first().path.display()
                    ))
                })?
        } else {
            (0, asked)
        };
        let mut rel = PathBuf::new();
        for component in remainder.components() {
            match component {
                Component::Normal(part) => rel.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(ToolError::failed(format!(
                        "{path}: paths may not contain `..`; name the file from the workspace \
                         root ({}) instead",
                        self.roots[index].path.display()
                    )));
                }
                Component::RootDir | Component::Prefix(_) => {}
            }
        }
        if rel.as_os_str().is_empty() {
            rel.push(".");
        }
        let resolved = Resolved {
            root: &self.roots[index],
            rel,
            first: index == 0,
            protected: &self.protected,
        };
        let abs = resolved.root.path.join(&resolved.rel);
        if let Some(protected) = self.protected_at(&abs) {
            return Err(refusal(&resolved.shown(), protected));
        }
        // Where a link beneath the root leads, as far as the path exists now (the opens
        // check the handle they get again: the link may change in between).
        if !self.protected.is_empty() {
            let real = toolhost_sandbox::protected::resolved(&abs);
            if let Some(protected) = self.protected_at(&real) {
                return Err(refusal(&resolved.shown(), protected));
            }
        }
        Ok(resolved)
    }

    /// The roots, for messages.
    pub(crate) fn roots_list(&self) -> String {
        self.roots
            .iter()
            .map(|r| r.path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How to show `abs` (a path found beneath a root, e.g. by a walk): relative to the
    /// first root when beneath it, else absolute.
    pub(crate) fn show(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.first().path) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => abs.display().to_string(),
        }
    }

    /// The root `abs` is beneath and the path relative to it (for paths a walk found).
    pub(crate) fn locate<'a>(&'a self, abs: &Path) -> Option<(&'a Root, PathBuf)> {
        self.roots
            .iter()
            .filter_map(|root| {
                abs.strip_prefix(&root.path)
                    .ok()
                    .map(|rel| (root, rel.to_path_buf()))
            })
            .max_by_key(|(root, _)| root.path.as_os_str().len())
    }
}

impl Resolved<'_> {
    /// The path as the model should see it: relative to the first root, else absolute.
    pub(crate) fn shown(&self) -> String {
        if self.first {
            self.rel.display().to_string()
        } else {
            self.root.path.join(&self.rel).display().to_string()
        }
    }

    /// The real absolute path of a folder, checked to be beneath the root: opens it
    /// through the root's handle (so no link leads out) and asks the kernel where the
    /// handle is. Walks start from this path.
    pub(crate) fn real_dir(&self) -> Result<PathBuf, ToolError> {
        let dir = self
            .root
            .dir
            .open_dir(&self.rel)
            .map_err(|e| io_error(&self.shown(), &e))?;
        let real = fd_path(&dir)?;
        if let Some(protected) = protected_at(self.protected, &real) {
            return Err(refusal(&self.shown(), protected));
        }
        if real.starts_with(&self.root.path) {
            Ok(real)
        } else {
            Err(ToolError::failed(format!(
                "{} leads outside the workspace",
                self.shown()
            )))
        }
    }
}

impl<'a> Resolved<'a> {
    /// Another path beneath the same root (e.g. where a symbolic link found beneath it
    /// points, or a file's folder), shown the same way.
    pub(crate) fn with_rel(&self, rel: PathBuf) -> Resolved<'a> {
        let rel = if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel
        };
        Resolved {
            root: self.root,
            rel,
            first: self.first,
            protected: self.protected,
        }
    }

    /// Refuses a handle opened for this path that turned out to be in a protected place
    /// (through a link beneath the root that leads into it).
    pub(crate) fn check_opened(&self, handle: &impl std::os::fd::AsRawFd) -> Result<(), ToolError> {
        if self.protected.is_empty() {
            return Ok(());
        }
        let real = fd_path(handle)?;
        match protected_at(self.protected, &real) {
            Some(protected) => Err(refusal(&self.shown(), protected)),
            None => Ok(()),
        }
    }
}

/// The protected path of `protected` that `abs` is or is beneath.
pub(crate) fn protected_at<'p>(protected: &'p [PathBuf], abs: &Path) -> Option<&'p Path> {
    protected
        .iter()
        .find(|p| abs.starts_with(p))
        .map(PathBuf::as_path)
}

/// The refusal of `shown`, which is in `protected`.
fn refusal(shown: &str, protected: &Path) -> ToolError {
    ToolError::failed(format!(
        "{shown} is in {}, which holds toolhost's own state, config or plugins: the workspace          tools never read or write it, whatever the workspace roots are (lasting approvals,          tokens, config and plugins are changed with the toolhost command, outside the          agent)",
        protected.display()
    ))
}

/// Where an open handle is, as the kernel says (`/proc/self/fd/N`).
fn fd_path(handle: &impl std::os::fd::AsRawFd) -> Result<PathBuf, ToolError> {
    std::fs::read_link(format!("/proc/self/fd/{}", handle.as_raw_fd()))
        .map_err(|e| ToolError::failed(format!("cannot tell where a folder is: {e}")))
}

/// An I/O error on `shown` in words a model can act on; an escape says so.
pub(crate) fn io_error(shown: &str, e: &io::Error) -> ToolError {
    ToolError::failed(describe_io(shown, e))
}

/// The words of [`io_error`].
pub(crate) fn describe_io(shown: &str, e: &io::Error) -> String {
    let text = e.to_string();
    if text.contains("outside of the filesystem") || e.raw_os_error() == Some(libc::EXDEV) {
        return format!(
            "{shown} leads outside the workspace (through a symbolic link or `..`); only \
             files beneath the workspace roots can be used"
        );
    }
    match e.kind() {
        io::ErrorKind::NotFound => format!("{shown} does not exist"),
        io::ErrorKind::PermissionDenied => format!("{shown}: permission denied"),
        io::ErrorKind::AlreadyExists => format!("{shown} already exists"),
        _ => format!("{shown}: {text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(dir: &Path) -> Workspace {
        Workspace::open(WorkspaceAnswer::with_roots([dir.display().to_string()])).expect("open")
    }

    #[test]
    fn no_roots_says_which_line_to_add() {
        let Err(e) = Workspace::open(WorkspaceAnswer::default()) else {
            panic!("opened a workspace without roots");
        };
        let text = e.to_string();
        assert!(text.contains("no workspace configured"), "{text}");
        assert!(text.contains("roots = ["), "{text}");
        assert!(text.contains("--workspace DIR"), "{text}");
    }

    #[test]
    fn relative_and_absolute_paths_resolve_and_dotdot_and_outside_are_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ws = workspace(tmp.path());
        let real = std::fs::canonicalize(tmp.path()).expect("real");
        assert_eq!(
            ws.resolve("src/a.rs").expect("rel").rel,
            Path::new("src/a.rs")
        );
        assert_eq!(ws.resolve("").expect("root").rel, Path::new("."));
        let abs = real.join("b.txt");
        let r = ws.resolve(&abs.display().to_string()).expect("abs");
        assert_eq!(
            (r.rel.as_path(), r.shown()),
            (Path::new("b.txt"), "b.txt".to_owned())
        );
        let e = ws.resolve("../x").err().expect("dotdot").to_string();
        assert!(e.contains("may not contain `..`"), "{e}");
        let e = ws
            .resolve("/etc/passwd")
            .err()
            .expect("outside")
            .to_string();
        assert!(e.contains("outside the workspace"), "{e}");
    }

    #[test]
    fn a_symlink_out_of_the_root_is_refused_at_the_open() {
        let tmp = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("secret"), "s").expect("write");
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("out")).expect("link");
        let ws = workspace(tmp.path());
        let r = ws.resolve("out/secret").expect("lexically fine");
        let e = r.root.dir.open(&r.rel).expect_err("escaped");
        assert!(
            describe_io(&r.shown(), &e).contains("leads outside the workspace"),
            "{e}"
        );
        let e = ws
            .resolve("out")
            .expect("fine")
            .real_dir()
            .expect_err("escaped");
        assert!(e.to_string().contains("outside the workspace"), "{e}");
    }
}
