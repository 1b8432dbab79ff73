//! `rustc_explain`: the long explanation of a compiler error code (`rustc --explain
//! E0382`), the code checked first, rustc run like the other tools (sandboxed, in the
//! first workspace root when there is one, so a `rust-toolchain.toml` there picks the
//! toolchain).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_plugin_api::{CancelFlag, ToolContext, ToolError, WorkspaceAnswer, tool};

use crate::exec::{self, Command};
use crate::project::Workspace;

/// Arguments of `rustc_explain`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainArgs {
    /// The error code: `E` and four digits, as the compiler prints it (`E0382`).
    code: String,
}

/// Returns the Rust compiler's long explanation of an error code (`rustc --explain
/// E0382`): what the error means, an example that causes it and how to fix it, as
/// Markdown. `code` is `E` and four digits, as in `error[E0382]`.
#[tool(risk = read, programs = ["rustc"], workspace)]
pub async fn rustc_explain(
    ctx: &ToolContext<'_>,
    #[args] args: ExplainArgs,
) -> Result<String, ToolError> {
    let code = validate(&args.code)?;
    let answer = Workspace::answer(ctx).await?;
    let command = rustc_command(&answer, vec!["--explain".to_owned(), code.clone()]);
    let ran = ctx
        .blocking(move |cancel: &CancelFlag| exec::run(command, cancel))
        .await
        .map_err(ToolError::failed)??;
    let stdout = ran.stdout();
    if ran.exit_code() == Some(0) && !stdout.trim().is_empty() {
        return Ok(format!("# {code}\n\n{}", stdout.trim_end()));
    }
    let stderr = ran.stderr();
    if stderr.contains("is not a valid error code") || stderr.contains("no extended information") {
        return Err(ToolError::failed(format!(
            "{code} is not an error code this rustc knows (it may be new, or retired): \
                 check the code in the compiler's message"
        )));
    }
    Err(ToolError::failed(format!(
        "rustc --explain {code} failed ({}): {}{}",
        ran.exit_code()
            .map_or("killed".to_owned(), |c| format!("exit code {c}")),
        stderr.trim(),
        ran.notes
            .iter()
            .map(|n| format!("; {n}"))
            .collect::<String>()
    )))
}

/// A rustc command that writes nothing but its temporary folder: in the first root of
/// `answer` if it has one (its toolchain file applies), else in `/`.
pub(crate) fn rustc_command(answer: &WorkspaceAnswer, args: Vec<String>) -> Command {
    let mut notes = Vec::new();
    Command {
        program: "rustc",
        args,
        cwd: toolchain_folder(answer),
        write: Vec::new(),
        cargo_caches: false,
        network: false,
        local_tcp: false,
        configured_env: answer.env.clone(),
        timeout: exec::time_limit(None, answer.command_timeout_secs.min(60), &mut notes),
    }
}

/// Where a command that reads no crate runs: the first root of `answer` if it has one
/// (its toolchain file applies), else `/`.
pub(crate) fn toolchain_folder(answer: &WorkspaceAnswer) -> PathBuf {
    answer
        .roots
        .first()
        .and_then(|r| std::fs::canonicalize(r).ok())
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// `E0382` from `E0382`, `e0382` or `0382`; anything else is refused with the form.
fn validate(code: &str) -> Result<String, ToolError> {
    let code = code.trim();
    let digits = code
        .strip_prefix('E')
        .or_else(|| code.strip_prefix('e'))
        .unwrap_or(code);
    if digits.len() == 4 && digits.bytes().all(|b| b.is_ascii_digit()) {
        Ok(format!("E{digits}"))
    } else {
        Err(ToolError::invalid_args(format!(
            "`{code}` is not an error code: give `E` and four digits, as in `error[E0382]` \
             (lint names such as `unused_variables` have no --explain entry)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_validated_and_normalized() {
        assert_eq!(validate("E0382").expect("ok"), "E0382");
        assert_eq!(validate(" e0499 ").expect("ok"), "E0499");
        assert_eq!(validate("0308").expect("ok"), "E0308");
        for bad in [
            "E382",
            "E03820",
            "X0382",
            "E03a2",
            "",
            "--help",
            "E0382; rm",
        ] {
            let e = validate(bad).expect_err(bad);
            assert!(matches!(e, ToolError::InvalidArgs(_)), "{bad}");
        }
    }
}
