//! `edit_text`: an interactive tool that opens a draft in the person's editor
//! (`$VISUAL`, else `$EDITOR`, the way git does) and returns what they saved.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{CancelFlag, LogLevel, Risk, ToolContext, ToolError, TypedTool};

/// Arguments of `edit_text`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EditTextArgs {
    /// The draft the person starts from (may be empty).
    #[serde(default)]
    text: String,
    /// File extension for the draft, so the editor highlights it (e.g. "md", "toml").
    #[serde(default)]
    extension: Option<String>,
}

pub(crate) struct EditText;

static DRAFTS: AtomicU32 = AtomicU32::new(0);

impl TypedTool for EditText {
    type Args = EditTextArgs;

    fn name(&self) -> &str {
        "edit_text"
    }

    fn description(&self) -> &str {
        "Opens a draft in the person's own text editor and returns the text they saved. \
         Use it when the person should review or rewrite something before you go on (a \
         message, a commit text, a config). Returns an error if they leave the editor with \
         a failure or no editor is available."
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    fn interactive(&self) -> bool {
        true
    }

    async fn run(&self, ctx: &ToolContext<'_>, args: EditTextArgs) -> Result<String, ToolError> {
        let editor = ["VISUAL", "EDITOR"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .find(|v| !v.trim().is_empty());
        let editor = match editor {
            Some(e) => e,
            None if std::io::stdin().is_terminal() => "vi".to_owned(),
            None => {
                return Err(ToolError::failed(
                    "no editor is available: $VISUAL and $EDITOR are unset and no terminal is \
                     attached; ask the person in the conversation instead",
                ));
            }
        };
        let ext = args
            .extension
            .as_deref()
            .filter(|e| e.chars().all(|c| c.is_ascii_alphanumeric()) && !e.is_empty())
            .unwrap_or("txt");
        let path = std::env::temp_dir().join(format!(
            "toolhost-draft-{}-{}.{ext}",
            std::process::id(),
            DRAFTS.fetch_add(1, Ordering::Relaxed)
        ));
        ctx.log(
            LogLevel::INFO,
            &format!("opening {} in '{editor}'", path.display()),
        );
        let outcome = ctx
            .blocking(move |cancel| edit_in(&editor, path, &args.text, cancel))
            .await
            .map_err(ToolError::failed)?;
        outcome.map_err(ToolError::Failed)
    }
}

fn edit_in(
    editor: &str,
    path: PathBuf,
    draft: &str,
    cancel: &CancelFlag,
) -> Result<String, String> {
    write_private(&path, draft)
        .map_err(|e| format!("could not create the draft {}: {e}", path.display()))?;
    // `sh -c 'exec $EDITOR "$1"'` lets $EDITOR hold arguments ("code --wait"), as git does;
    // `exec` makes the editor the process we wait for (and kill, if the call is cancelled).
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("exec {editor} \"$1\""))
        .arg("editor")
        .arg(&path)
        .spawn()
        .and_then(|child| wait_or_kill(child, cancel));
    let result = match status {
        Ok(s) if s.success() => std::fs::read_to_string(&path)
            .map_err(|e| format!("could not read the edited draft: {e}")),
        Ok(_) if cancel.is_cancelled() => {
            Err("the call was cancelled; the edit was abandoned".to_owned())
        }
        Ok(s) => Err(format!(
            "the editor '{editor}' exited with {s}; the edit was abandoned"
        )),
        Err(e) => Err(format!("could not start the editor '{editor}': {e}")),
    };
    let _ = std::fs::remove_file(&path);
    result
}

/// Waits for the editor; kills it if the call is cancelled (the edit is abandoned).
fn wait_or_kill(mut child: Child, cancel: &CancelFlag) -> std::io::Result<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if cancel.is_cancelled() {
            let _ = child.kill();
            return child.wait();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn write_private(path: &PathBuf, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(text.as_bytes())
}
