//! `write_file`: a write tool that creates, replaces or appends to a file. Replacing goes
//! through a temporary file and a rename, so a reader never sees half a file.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};

/// How `write_file` treats an existing file.
#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WriteMode {
    /// Fail if the file exists.
    #[default]
    Create,
    /// Replace the file's content (atomically).
    Overwrite,
    /// Add to the end of the file, creating it if needed.
    Append,
}

/// Arguments of `write_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteFileArgs {
    /// The file to write. Relative paths are relative to the host's working directory.
    path: PathBuf,
    /// The text to write.
    content: String,
    /// "create" (default: fail if the file exists), "overwrite" or "append".
    #[serde(default)]
    mode: WriteMode,
}

pub(crate) struct WriteFile;

impl TypedTool for WriteFile {
    type Args = WriteFileArgs;

    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Writes text to a file on the host machine. mode \"create\" (the default) refuses to \
         touch an existing file, \"overwrite\" replaces its content atomically, \"append\" adds \
         to its end. The parent directory must exist. Returns what was written and where."
    }

    fn risk(&self) -> Risk {
        Risk::Write
    }

    async fn run(&self, _ctx: &ToolContext<'_>, args: WriteFileArgs) -> Result<String, ToolError> {
        let path = &args.path;
        let bytes = args.content.len();
        let shown = path.display();
        match args.mode {
            WriteMode::Create => {
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .map_err(|e| io_error("create", path, e))?;
                f.write_all(args.content.as_bytes())
                    .map_err(|e| io_error("write", path, e))?;
                Ok(format!("created {shown} ({bytes} bytes)"))
            }
            WriteMode::Overwrite => {
                replace(path, &args.content).map_err(|e| io_error("overwrite", path, e))?;
                Ok(format!("overwrote {shown} ({bytes} bytes)"))
            }
            WriteMode::Append => {
                let mut f = fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .map_err(|e| io_error("open", path, e))?;
                f.write_all(args.content.as_bytes())
                    .map_err(|e| io_error("append to", path, e))?;
                Ok(format!("appended {bytes} bytes to {shown}"))
            }
        }
    }
}

fn io_error(action: &str, path: &Path, e: std::io::Error) -> ToolError {
    let hint = match e.kind() {
        std::io::ErrorKind::AlreadyExists => " (use mode \"overwrite\" or \"append\")",
        std::io::ErrorKind::NotFound => " (the parent directory must exist)",
        _ => "",
    };
    ToolError::Failed(format!("could not {action} {}: {e}{hint}", path.display()))
}

fn replace(path: &Path, content: &str) -> std::io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    let tmp = path.with_file_name(format!(
        ".{}.toolhost-tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = fs::write(&tmp, content).and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}
