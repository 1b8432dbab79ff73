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

pub(crate) struct EditText {
    /// Reads an environment variable (`$VISUAL`, `$EDITOR`): the process's, or a test's.
    env: fn(&str) -> Option<String>,
}

impl Default for EditText {
    fn default() -> Self {
        EditText {
            env: |name| std::env::var(name).ok(),
        }
    }
}

/// The editor to run: `$VISUAL`, else `$EDITOR` (the first one set and not blank), else
/// `vi` when a terminal is attached.
fn choose_editor(
    env: impl Fn(&str) -> Option<String>,
    terminal: impl FnOnce() -> bool,
) -> Result<String, ToolError> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|v| env(v))
        .find(|v| !v.trim().is_empty());
    match editor {
        Some(e) => Ok(e),
        None if terminal() => Ok("vi".to_owned()),
        None => Err(ToolError::failed(
            "no editor is available: $VISUAL and $EDITOR are unset and no terminal is \
             attached; ask the person in the conversation instead",
        )),
    }
}

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
        let editor = choose_editor(self.env, || std::io::stdin().is_terminal())?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use serde_json::json;
    use toolhost_plugin_api::testing::TestHost;
    use toolhost_plugin_api::{LogLevel, ToolError};

    use super::{EditText, choose_editor};

    /// `edit_text` with `$VISUAL` set to `editor` (and no `$EDITOR`), whatever the test
    /// process's environment says.
    macro_rules! with_editor {
        ($editor:expr) => {
            EditText {
                env: |name| (name == "VISUAL").then(|| $editor.to_owned()),
            }
        };
    }

    /// The draft's path, from the line the tool logs before opening it.
    fn draft_path(host: &TestHost) -> PathBuf {
        let logs = host.logs();
        let (level, line) = logs.first().expect("a log line");
        assert_eq!(*level, LogLevel::INFO);
        let rest = line.strip_prefix("opening ").unwrap();
        PathBuf::from(&rest[..rest.find(" in '").unwrap()])
    }

    #[test]
    fn is_interactive() {
        let info = TestHost::new().describe(&EditText::default());
        assert_eq!(info.name, "edit_text");
        assert!(info.interactive);
        assert_eq!(info.risk, toolhost_plugin_api::Risk::Read);
    }

    #[test]
    fn returns_what_the_person_saved_and_removes_the_draft() {
        let host = TestHost::new();
        let tool = with_editor!("sh -c 'printf \" and more\" >> \"$1\"' editor");
        let out = host.call(&tool, json!({"text": "a draft", "extension": "md"}));
        assert_eq!(out, Ok("a draft and more".to_owned()));
        let draft = draft_path(&host);
        assert_eq!(draft.extension().unwrap(), "md");
        assert!(draft.starts_with(std::env::temp_dir()));
        assert!(!draft.exists(), "the draft is removed");
    }

    #[test]
    fn the_draft_is_private_and_an_odd_extension_is_txt() {
        let host = TestHost::new();
        let tool = with_editor!("sh -c 'ls -l \"$1\" | cut -c1-10 > \"$1\"' editor");
        let out = host.call(&tool, json!({"text": "secret", "extension": "../x"}));
        assert_eq!(out, Ok("-rw-------\n".to_owned()));
        assert_eq!(draft_path(&host).extension().unwrap(), "txt");
    }

    #[test]
    fn an_editor_that_fails_abandons_the_edit() {
        let out = TestHost::new().call(&with_editor!("false"), json!({"text": "x"}));
        assert_eq!(
            out,
            Err(ToolError::Failed(
                "the editor 'false' exited with exit status: 1; the edit was abandoned".to_owned()
            ))
        );
        let out = TestHost::new().call(&with_editor!("/no/such/editor"), json!({}));
        assert!(
            matches!(&out, Err(ToolError::Failed(m)) if m.contains("exit status: 127")),
            "{out:?}"
        );
    }

    #[test]
    fn a_cancelled_call_kills_the_editor() {
        let host = TestHost::new();
        host.cancel_after(Duration::from_millis(100));
        let started = Instant::now();
        let out = host.call(&with_editor!("sleep 30; true"), json!({"text": "x"}));
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(
            out,
            Err(ToolError::Failed(
                "the call was cancelled; the edit was abandoned".to_owned()
            ))
        );
        assert!(!draft_path(&host).exists());
    }

    #[test]
    fn the_editor_is_visual_then_editor_then_vi_on_a_terminal() {
        let env = |visual: &'static str, editor: &'static str| {
            move |name: &str| match name {
                "VISUAL" => Some(visual.to_owned()).filter(|_| visual != "-"),
                "EDITOR" => Some(editor.to_owned()).filter(|_| editor != "-"),
                _ => None,
            }
        };
        let no_terminal = || false;
        assert_eq!(
            choose_editor(env("code --wait", "nano"), no_terminal),
            Ok("code --wait".into())
        );
        assert_eq!(
            choose_editor(env("  ", "nano"), no_terminal),
            Ok("nano".into())
        );
        assert_eq!(
            choose_editor(env("-", "nano"), no_terminal),
            Ok("nano".into())
        );
        assert_eq!(choose_editor(env("-", "-"), || true), Ok("vi".into()));
        let none = choose_editor(env("", "-"), no_terminal);
        assert!(
            matches!(&none, Err(ToolError::Failed(m)) if m.starts_with("no editor is available")),
            "{none:?}"
        );
    }

    #[test]
    fn refuses_unknown_fields() {
        let out = TestHost::new().call(&with_editor!("true"), json!({"text": "x", "path": "/etc"}));
        assert!(matches!(out, Err(ToolError::InvalidArgs(_))), "{out:?}");
    }
}
