//! `write_file`: a write tool that creates, replaces or appends to a file. Replacing goes
//! through a temporary file and a rename, so a reader never sees half a file.
//!
//! Deprecated: the workspace plugin's `write_file` does the same confined to the
//! profile's workspace roots. This one stays for one release; its schema says
//! `"deprecated": true`, so a host that loads both serves the workspace one under the
//! name.
//!
//! It writes anywhere the host's user can, so it is careful about what it writes
//! through: the temporary file is created exclusively (O_EXCL) in the target's folder
//! with an unpredictable name, so a link planted in a shared folder can never redirect
//! it; a symbolic link at the target path is refused unless the call says
//! `follow_symlinks: true` (then the file it points to is written and the link kept);
//! `create` never follows a link (dangling or not) and `append` opens with O_NOFOLLOW. An
//! overwritten file keeps its mode, and its owner and group where the host may set them.
//! Only the last component of the path is checked: folders on the way are followed as
//! the operating system does.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{ToolContext, ToolError, tool};

/// How `write_file` treats an existing file.
#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WriteMode {
    /// Fail if the file exists (a symbolic link there counts as existing).
    #[default]
    Create,
    /// Replace the file's content atomically, keeping its mode (and owner where allowed).
    Overwrite,
    /// Add to the end of the file, creating it if needed.
    Append,
}

/// Arguments of `write_file`. The schema's root carries JSON Schema's `"deprecated":
/// true` annotation: hosts let a tool of the same name that is not deprecated (the
/// workspace plugin's) keep the name.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("deprecated" = true))]
pub(crate) struct WriteFileArgs {
    /// The file to write. Relative paths are relative to the host's working directory.
    path: PathBuf,
    /// The text to write.
    content: String,
    /// "create" (default: fail if the file exists), "overwrite" or "append".
    #[serde(default)]
    mode: WriteMode,
    /// If `path` is a symbolic link, write the file it points to (keeping the link).
    /// Default false: a symbolic link at `path` is refused.
    #[serde(default)]
    follow_symlinks: bool,
}

/// Deprecated: use the workspace plugin's write_file, confined to the profile's
/// workspace roots; this one will be removed in the next release. Writes text to a file
/// on the host machine. mode "create" (the default) refuses to touch an existing file,
/// "overwrite" replaces its content atomically (keeping its permissions), "append" adds
/// to its end. The parent directory must exist. A symbolic link at the path is refused
/// unless follow_symlinks is true, which writes the file the link points to. Returns
/// what was written and where.
#[tool(risk = write)]
pub(crate) async fn write_file(
    ctx: &ToolContext<'_>,
    #[args] args: WriteFileArgs,
) -> Result<String, ToolError> {
    ctx.blocking(move |_| write(&args))
        .await
        .map_err(ToolError::failed)?
}

fn write(args: &WriteFileArgs) -> Result<String, ToolError> {
    let asked = &args.path;
    let path = target(asked, args.follow_symlinks)?;
    let bytes = args.content.len();
    let shown = if &path == asked {
        asked.display().to_string()
    } else {
        format!("{} (through the link {})", path.display(), asked.display())
    };
    match args.mode {
        WriteMode::Create => {
            // O_EXCL: fails on anything at the path, a dangling symbolic link included.
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| io_error("create", &path, e))?;
            f.write_all(args.content.as_bytes())
                .map_err(|e| io_error("write", &path, e))?;
            Ok(format!("created {shown} ({bytes} bytes)"))
        }
        WriteMode::Overwrite => {
            replace(&path, &args.content).map_err(|e| io_error("overwrite", &path, e))?;
            Ok(format!("overwrote {shown} ({bytes} bytes)"))
        }
        WriteMode::Append => {
            refuse_special(&path).map_err(|e| io_error("append to", &path, e))?;
            let mut options = fs::OpenOptions::new();
            options.append(true).create(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW);
            let mut f = options
                .open(&path)
                .map_err(|e| io_error("open", &path, e))?;
            f.write_all(args.content.as_bytes())
                .map_err(|e| io_error("append to", &path, e))?;
            Ok(format!("appended {bytes} bytes to {shown}"))
        }
    }
}

/// Symbolic links followed at most, as the kernel does.
const MAX_LINKS: usize = 40;

/// The path to write: `path` itself, or with `follow` the file its chain of symbolic links
/// ends at (which may not exist yet). Without `follow`, a link at `path` is an error.
fn target(path: &Path, follow: bool) -> Result<PathBuf, ToolError> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let points_to =
                    fs::read_link(&current).map_err(|e| io_error("read", &current, e))?;
                if !follow {
                    return Err(ToolError::failed(format!(
                        "{} is a symbolic link (to {}), and write_file does not write through \
                         links unless asked: pass \"follow_symlinks\": true to write the file \
                         it points to, or choose another path",
                        path.display(),
                        points_to.display()
                    )));
                }
                current = match current.parent() {
                    Some(dir) if points_to.is_relative() => dir.join(points_to),
                    _ => points_to,
                };
            }
            Ok(_) => return Ok(current),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(current),
            Err(e) => return Err(io_error("inspect", &current, e)),
        }
    }
    Err(ToolError::failed(format!(
        "{} is a chain of more than {MAX_LINKS} symbolic links (a loop?); choose another path",
        path.display()
    )))
}

fn io_error(action: &str, path: &Path, e: io::Error) -> ToolError {
    let hint = match e.kind() {
        io::ErrorKind::AlreadyExists => " (use mode \"overwrite\" or \"append\")",
        io::ErrorKind::NotFound => " (the parent directory must exist)",
        _ if e.raw_os_error() == Some(libc::ELOOP) => {
            " (it is a symbolic link: pass \"follow_symlinks\": true to write through it)"
        }
        _ => "",
    };
    ToolError::Failed(format!("could not {action} {}: {e}{hint}", path.display()))
}

/// An existing directory, FIFO, socket or device at `path` is not written: only regular
/// files (a FIFO would block the write until someone reads it).
fn refuse_special(path: &Path) -> io::Result<Option<fs::Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => Ok(Some(meta)),
        Ok(meta) if meta.file_type().is_symlink() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it became a symbolic link while being written; try again",
        )),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a regular file (a directory, FIFO, socket or device)",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `path` with `content`: a temporary file created exclusively (O_EXCL, mode
/// 0666 less the umask, an unpredictable name) in the same folder, given the old file's
/// mode and (where allowed) owner and group, synced, then renamed over `path`.
fn replace(path: &Path, content: &str) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let existing = refuse_special(path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".toolhost-tmp");
    #[cfg(unix)]
    let default_mode = {
        use std::os::unix::fs::PermissionsExt as _;
        fs::Permissions::from_mode(0o666)
    };
    #[cfg(unix)]
    builder.permissions(default_mode);
    // The temporary file is removed if anything below fails (it is dropped unpersisted).
    let mut tmp = builder.tempfile_in(dir)?;
    tmp.write_all(content.as_bytes())?;
    if let Some(meta) = existing {
        keep_owner_and_mode(tmp.as_file(), &meta)?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Gives the new file the old one's owner and group (where the host may: as root, or the
/// group if it is one of the host's) and then its mode. Set-id bits are kept only when the
/// owner and group both came across.
#[cfg(unix)]
fn keep_owner_and_mode(file: &fs::File, old: &fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let now = file.metadata()?;
    let mut same_ids = now.uid() == old.uid() && now.gid() == old.gid();
    if !same_ids {
        let tried = std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid()))
            .or_else(|_| std::os::unix::fs::fchown(file, None, Some(old.gid())));
        match tried {
            Ok(()) => {
                let after = file.metadata()?;
                same_ids = after.uid() == old.uid() && after.gid() == old.gid();
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => return Err(e),
        }
    }
    let mut mode = old.mode() & 0o7777;
    if !same_ids {
        mode &= !0o6000;
    }
    file.set_permissions(fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn keep_owner_and_mode(file: &fs::File, old: &fs::Metadata) -> io::Result<()> {
    file.set_permissions(old.permissions())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::fs;
    use std::path::Path;

    use serde_json::json;
    use toolhost_plugin_api::testing::TestHost;
    use toolhost_plugin_api::{Risk, ToolError};

    use super::write_file;

    /// Writes under the test host's state folder: a fresh temporary folder, removed with it.
    fn write(host: &TestHost, path: &Path, extra: serde_json::Value) -> Result<String, ToolError> {
        let mut args = json!({"path": path, "content": "hello"});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        host.call(&write_file, args)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn is_a_write_tool() {
        let info = TestHost::new().describe(&write_file);
        assert_eq!(info.name, "write_file");
        assert_eq!(info.risk, Risk::Write);
        assert_eq!(info.schema["required"], json!(["path", "content"]));
    }

    #[test]
    fn is_deprecated_in_its_description_and_schema() {
        let info = TestHost::new().describe(&write_file);
        assert!(
            info.description.starts_with(
                "Deprecated: use the workspace plugin's write_file, confined to the profile's \
                 workspace roots; this one will be removed in the next release."
            ),
            "{}",
            info.description
        );
        assert_eq!(info.schema["deprecated"], json!(true), "{}", info.schema);
    }

    #[test]
    fn create_makes_a_new_file_and_never_touches_an_existing_one() {
        let host = TestHost::new();
        let path = host.state_dir().join("new.txt");
        assert_eq!(
            write(&host, &path, json!({})),
            Ok(format!("created {} (5 bytes)", path.display()))
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "hello");
        let again = write(&host, &path, json!({"content": "other", "mode": "create"}));
        assert!(
            matches!(&again, Err(ToolError::Failed(m)) if m.starts_with("could not create") && m.ends_with("(use mode \"overwrite\" or \"append\")")),
            "{again:?}"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "hello");
    }

    #[test]
    fn overwrite_replaces_atomically_keeping_the_mode() {
        let host = TestHost::new();
        let path = host.state_dir().join("config.toml");
        fs::write(&path, "old content").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        }
        assert_eq!(
            write(&host, &path, json!({"content": "new", "mode": "overwrite"})),
            Ok(format!("overwrote {} (3 bytes)", path.display()))
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o7777, 0o640);
        }
        assert_eq!(
            names(host.state_dir()),
            ["config.toml"],
            "no temporary file is left"
        );
        // Overwriting a file that is not there creates it.
        let fresh = host.state_dir().join("fresh.txt");
        write(&host, &fresh, json!({"mode": "overwrite"})).unwrap();
        assert_eq!(fs::read_to_string(&fresh).unwrap(), "hello");
    }

    #[test]
    fn append_adds_to_the_end_creating_the_file_if_needed() {
        let host = TestHost::new();
        let path = host.state_dir().join("log.txt");
        assert_eq!(
            write(&host, &path, json!({"mode": "append"})),
            Ok(format!("appended 5 bytes to {}", path.display()))
        );
        write(
            &host,
            &path,
            json!({"mode": "append", "content": ", world"}),
        )
        .unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "hello, world");
    }

    #[test]
    fn the_parent_folder_must_exist_and_folders_are_not_files() {
        let host = TestHost::new();
        let path = host.state_dir().join("missing").join("x.txt");
        let out = write(&host, &path, json!({}));
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.ends_with("(the parent directory must exist)")),
            "{out:?}"
        );
        let dir = host.state_dir().join("sub");
        fs::create_dir(&dir).unwrap();
        for mode in ["overwrite", "append"] {
            let out = write(&host, &dir, json!({"mode": mode}));
            assert!(
                matches!(&out, Err(ToolError::Failed(m)) if m.contains("it is not a regular file")),
                "{mode}: {out:?}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn links_are_refused_unless_followed() {
        let host = TestHost::new();
        let dir = host.state_dir();
        let target = dir.join("target.txt");
        fs::write(&target, "original").unwrap();
        let link = dir.join("link.txt");
        std::os::unix::fs::symlink("target.txt", &link).unwrap();
        for mode in ["create", "overwrite", "append"] {
            let out = write(&host, &link, json!({"mode": mode}));
            assert!(
                matches!(&out, Err(ToolError::Failed(m)) if m.contains("is a symbolic link (to target.txt)") && m.contains("\"follow_symlinks\": true")),
                "{mode}: {out:?}"
            );
        }
        assert_eq!(fs::read_to_string(&target).unwrap(), "original");

        let out = write(
            &host,
            &link,
            json!({"mode": "overwrite", "follow_symlinks": true}),
        );
        assert_eq!(
            out,
            Ok(format!(
                "overwrote {} (through the link {}) (5 bytes)",
                target.display(),
                link.display()
            ))
        );
        assert_eq!(fs::read_to_string(&target).unwrap(), "hello");
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the link is kept"
        );

        // A dangling link, followed, creates the file it points to.
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("made.txt"), &dangling).unwrap();
        write(&host, &dangling, json!({"follow_symlinks": true})).unwrap();
        assert_eq!(fs::read_to_string(dir.join("made.txt")).unwrap(), "hello");

        // A loop of links ends with a message, not a hang.
        std::os::unix::fs::symlink("loop-b", dir.join("loop-a")).unwrap();
        std::os::unix::fs::symlink("loop-a", dir.join("loop-b")).unwrap();
        let out = write(&host, &dir.join("loop-a"), json!({"follow_symlinks": true}));
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.contains("a chain of more than 40 symbolic links")),
            "{out:?}"
        );
    }

    #[test]
    fn bad_arguments_are_refused() {
        let host = TestHost::new();
        let path = host.state_dir().join("x.txt");
        for args in [
            json!({"path": path}),
            json!({"content": "x"}),
            json!({"path": path, "content": "x", "mode": "truncate"}),
            json!({"path": path, "content": "x", "force": true}),
        ] {
            let out = host.call(&write_file, args.clone());
            assert!(
                matches!(out, Err(ToolError::InvalidArgs(_))),
                "{args}: {out:?}"
            );
        }
        assert!(!path.exists());
    }
}
