//! `toolhost new PATH`: writes a plugin crate that builds, tests, checks and installs out
//! of the box (Cargo.toml, one typed tool with tests through the API's test harness, a
//! README with the build, check, install and sign steps).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::usage;
use crate::output::outln;

/// `toolhost new`.
#[derive(clap::Args)]
pub(crate) struct NewArgs {
    /// The folder to create (it must not exist, or be empty).
    path: PathBuf,
    /// The plugin's (and crate's) name: letters, digits, `-` and `_`, starting with a
    /// letter. Default: the folder's name.
    #[arg(long)]
    name: Option<String>,
    /// Depend on toolhost-plugin-api at this path (a checkout's `plugin-api` folder)
    /// instead of crates.io.
    #[arg(long, value_name = "DIR", conflicts_with = "api_git")]
    api_path: Option<PathBuf>,
    /// Depend on toolhost-plugin-api from this git repository instead of crates.io.
    #[arg(long, value_name = "URL")]
    api_git: Option<String>,
}

/// The plugin-api release the template is written against.
const API_VERSION: &str = toolhost::API_VERSION;

impl NewArgs {
    pub(crate) fn run(self) -> anyhow::Result<ExitCode> {
        let name = match &self.name {
            Some(n) => n.clone(),
            None => self
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_owned)
                .ok_or_else(|| {
                    usage(format!(
                        "{}: cannot take a plugin name from this path; give one with --name",
                        self.path.display()
                    ))
                })?,
        };
        check_name(&name)?;
        let dependency = self.dependency()?;
        ensure_empty(&self.path)?;
        let files = files(&name, &dependency);
        for (relative, text) in &files {
            write_new(&self.path.join(relative), text)?;
        }
        let lib = lib_name(&name);
        outln!("created plugin crate '{name}' in {}", self.path.display())?;
        for (relative, _) in &files {
            outln!("  {relative}")?;
        }
        if self.api_path.is_none() && self.api_git.is_none() {
            outln!(
                "toolhost-plugin-api {API_VERSION} comes from crates.io; until it is published \
                 there, write the crate with --api-path DIR (a toolhost checkout's plugin-api \
                 folder) or --api-git URL instead"
            )?;
        }
        outln!(
            "next: cd {} && cargo test && cargo build --release && toolhost check target/release/lib{lib}.so",
            self.path.display()
        )?;
        Ok(ExitCode::SUCCESS)
    }

    /// The keys of the dependency on toolhost-plugin-api (inside `{ }`).
    fn dependency(&self) -> anyhow::Result<String> {
        if let Some(dir) = &self.api_path {
            let manifest = dir.join("Cargo.toml");
            let text = fs::read_to_string(&manifest).with_context(|| {
                format!(
                    "--api-path {}: cannot read {} (give the plugin-api folder of a toolhost \
                     checkout)",
                    dir.display(),
                    manifest.display()
                )
            })?;
            if !text.contains("name = \"toolhost-plugin-api\"") {
                return Err(usage(format!(
                    "--api-path {}: {} is not toolhost-plugin-api's manifest (give the \
                     plugin-api folder of a toolhost checkout)",
                    dir.display(),
                    manifest.display()
                )));
            }
            let absolute =
                fs::canonicalize(dir).with_context(|| format!("--api-path {}", dir.display()))?;
            let path = absolute.to_str().ok_or_else(|| {
                usage(format!(
                    "--api-path {}: the path is not UTF-8",
                    absolute.display()
                ))
            })?;
            return Ok(format!(
                "path = {}, version = \"{API_VERSION}\"",
                toml_string(path)
            ));
        }
        if let Some(url) = &self.api_git {
            return Ok(format!(
                "git = {}, version = \"{API_VERSION}\"",
                toml_string(url)
            ));
        }
        Ok(format!("version = \"{API_VERSION}\""))
    }
}

/// Crate names cargo accepts that also make good plugin and file names.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 48
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(usage(format!(
            "'{name}' cannot name a plugin crate: use up to 48 letters, digits, '-' and '_', \
             starting with a letter (give one with --name)"
        )))
    }
}

/// The library's name: the crate name with `-` as `_` (the .so is `lib<that>.so`).
fn lib_name(name: &str) -> String {
    name.replace('-', "_")
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn ensure_empty(path: &Path) -> anyhow::Result<()> {
    match fs::read_dir(path) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(usage(format!(
                    "{} exists and is not empty; give a new folder (nothing was written)",
                    path.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
    }
}

/// Writes a file that must not exist yet, creating its folder.
fn write_new(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The crate's files: (path relative to the crate, contents).
fn files(name: &str, dependency: &str) -> Vec<(&'static str, String)> {
    let lib = lib_name(name);
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{lib}}", &lib)
            .replace("{{dependency}}", dependency)
            .replace("{{api_version}}", API_VERSION)
    };
    vec![
        ("Cargo.toml", fill(CARGO_TOML)),
        ("src/lib.rs", fill(LIB_RS)),
        ("README.md", fill(README_MD)),
        (".gitignore", "/target\n".to_owned()),
    ]
}

const CARGO_TOML: &str = r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# A plugin is a shared library (cdylib: target/release/lib{{lib}}.so). The rlib lets
# integration tests (tests/*.rs) and doctests link the crate as a library; unit tests in
# src/ work either way. Link at most one plugin's rlib into one binary: each exports the
# same root-module symbol.
crate-type = ["cdylib", "rlib"]

[dependencies]
toolhost-plugin-api = { {{dependency}} }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
schemars = "1"

[dev-dependencies]
# The same dependency with the test harness (toolhost_plugin_api::testing).
toolhost-plugin-api = { {{dependency}}, features = ["testing"] }

# What a plugin's release build needs: panics must unwind (hosts refuse plugins built with
# panic = "abort", whose panics would kill the host), full optimisation, no debug info.
[profile.release]
panic = "unwind"
opt-level = 3
lto = "thin"
codegen-units = 1
debug = false
strip = "debuginfo"

# A crate of its own, even inside another workspace's folder. Delete this to make it a
# member of an enclosing workspace instead.
[workspace]
"#;

const LIB_RS: &str = r#"//! {{name}}: a toolhost plugin. Each tool is a function with `#[tool]` (or a type
//! implementing `TypedTool` or `Tool`); `export_plugin!` at the end exports them all.

use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use toolhost_plugin_api::{ToolError, export_plugin, tool};

/// How to greet. The doc comments on the values are what the model reads in the schema.
#[derive(Deserialize, Serialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    /// A plain hello.
    Plain,
    /// An enthusiastic hello.
    Excited,
}

/// Greets someone by name. Use it when the user asks to greet a person; returns the
/// greeting.
///
/// (This comment is the tool's description: written for the model, what the tool does,
/// when to use it, what comes back. Read-only tools run without asking; see `Risk` for
/// the others.)
#[tool(risk = read, name = "{{lib}}_greet")]
pub async fn greet(
    /// Who to greet.
    #[arg(length = 1..=100)]
    name: String,
    /// How to greet them.
    #[arg(default = Style::Plain)]
    style: Style,
) -> Result<String, ToolError> {
    let name = name.trim();
    if name.is_empty() {
        // The model sees "invalid arguments: ..." and can correct itself.
        return Err(ToolError::invalid_args("`name` is blank: say who to greet"));
    }
    Ok(match style {
        Style::Plain => format!("Hello, {name}!"),
        Style::Excited => format!("Hello, {name}!!! So good to see you!"),
    })
}

export_plugin! {
    name: "{{name}}",
    version: env!("CARGO_PKG_VERSION"),
    tools: [greet],
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolhost_plugin_api::testing::{TestHost, call};

    #[test]
    fn greets_by_name() {
        assert_eq!(call(&greet, json!({"name": "Ada"})), Ok("Hello, Ada!".to_owned()));
    }

    #[test]
    fn greets_excitedly_when_asked() {
        let out = call(&greet, json!({"name": "Ada", "style": "excited"}));
        assert_eq!(out, Ok("Hello, Ada!!! So good to see you!".to_owned()));
    }

    #[test]
    fn an_empty_name_is_refused_so_the_model_can_fix_it() {
        let err = call(&greet, json!({"name": "  "})).expect_err("refused");
        assert!(matches!(err, ToolError::InvalidArgs(_)), "{err}");
    }

    #[test]
    fn arguments_of_the_wrong_shape_are_refused_as_the_host_refuses_them() {
        // Checked against the schema before the tool runs, with the host's message.
        let err = call(&greet, json!({"name": "Ada", "style": "shouty"})).expect_err("refused");
        assert!(matches!(err, ToolError::InvalidArgs(_)), "{err}");
        let err = call(&greet, json!({"name": ""})).expect_err("refused");
        assert_eq!(err, ToolError::InvalidArgs("/name: \"\" is shorter than 1 character".to_owned()));
    }

    #[test]
    fn a_host_takes_every_tool_the_plugin_exports() {
        // What `toolhost check` refuses (names, schemas, two tools of one name, a
        // constructor that panics), refused here first, with the host's messages.
        let tools = toolhost_plugin_api::testing::check_plugin(&__TOOLHOST_PLUGIN_ROOT);
        assert_eq!(tools.map(|t| t.len()), Ok(1));
    }

    #[test]
    fn the_schema_the_model_sees_lists_the_styles() {
        let info = TestHost::new().describe(&greet);
        assert_eq!(info.name, "{{lib}}_greet");
        assert_eq!(info.schema["properties"]["style"]["enum"], json!(["plain", "excited"]));
    }
}
"#;

const README_MD: &str = r#"# {{name}}

A [toolhost](https://github.com/toolhost/toolhost) plugin, built against
`toolhost-plugin-api` {{api_version}}.

## Build and test

```sh
cargo test                # the tools' tests, through toolhost_plugin_api::testing
cargo build --release     # target/release/lib{{lib}}.so
```

Tests call the tools with the same argument parsing and panic handling as a host:
`call(&greet, json!({...}))`, or a `TestHost` with a profile, a session, a temporary
state folder, scripted answers for `ask_user`, `sample` and child turns, captured log and
progress events, and a cancel trigger.

## Check

```sh
toolhost check target/release/lib{{lib}}.so          # loads it and lists its tools
toolhost check --isolate target/release/lib{{lib}}.so  # the same, in a sandboxed worker
toolhost call {{lib}}_greet '{"name": "Ada"}' --plugins target/release
```

## Install

The host watches its plugin folder (`~/.local/share/toolhost/plugins` unless configured)
and loads new and changed files. Copy under a temporary name, then rename into place: a
rename is atomic, so the host never reads a half-written file.

```sh
dir=~/.local/share/toolhost/plugins
mkdir -p "$dir"
cp target/release/lib{{lib}}.so "$dir/.lib{{lib}}.so.tmp"
mv "$dir/.lib{{lib}}.so.tmp" "$dir/lib{{lib}}.so"
toolhost reload    # a running host picks it up by itself; this says what changed
```

## Sign

Hosts with `[trust] mode = "signed"` load only files signed by a publisher they list.
Sign each release with [minisign](https://jedisct1.github.io/minisign/) and publish your
public key (the second line of `minisign.pub`):

```sh
minisign -G                                    # once: your key pair
minisign -Sm target/release/lib{{lib}}.so      # writes lib{{lib}}.so.minisig
```

Ship `lib{{lib}}.so` with `lib{{lib}}.so.minisig`; operators install the `.minisig` first,
then the library, each by rename.

## Versions

Bump `version` in Cargo.toml for each release; hosts show it. A build keeps loading in
every host of its plugin-api ABI series (see the API's COMPATIBILITY.md); rebuild to use
new host services.
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["hello", "my-plugin", "a_1"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1abc", "has space", "dot.ted", "-x", &"a".repeat(49)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(r#"a"b\c"#), r#""a\"b\\c""#);
    }

    #[test]
    fn every_placeholder_is_filled() {
        for (path, text) in files("my-plugin", "version = \"0.1.4\"") {
            assert!(!text.contains("{{"), "{path}: {text}");
        }
    }
}
