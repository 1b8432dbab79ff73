//! `crates_io_lookup`: searching and inspecting crates through cargo itself (`cargo
//! search`, `cargo info -v`), so the lookup goes to whatever registry, mirror and proxy
//! the user's cargo is configured for, and reads the answers into fields. cargo runs in
//! the sandbox with the network on, writing only its caches and a temporary folder.
//!
//! Weak spot: `cargo info`'s text is meant for people, not a stable format; lines this
//! parser does not know are kept in `raw` (and the model reads cargo's own text).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_plugin_api::{CancelFlag, Structured, ToolContext, ToolError, tool};

use crate::exec::{self, Command};
use crate::project::Workspace;

/// Arguments of `crates_io_lookup`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CratesArgs {
    /// Search the registry for crates matching these words (`cargo search`). Give this or
    /// `name`.
    #[serde(default)]
    query: Option<String>,
    /// Inspect this crate (`cargo info`): versions, description, features,
    /// dependencies, links. Give this or `query`.
    #[serde(default)]
    name: Option<String>,
    /// With `name`: the version (or requirement, e.g. `1.0`) to inspect. Default: the
    /// latest (or the one the workspace's lock file uses).
    #[serde(default)]
    version: Option<String>,
    /// With `query`: how many results, 1 to 100. Default: 10.
    #[serde(default)]
    limit: Option<u32>,
}

/// One search result.
#[derive(Debug, Serialize, JsonSchema, PartialEq, Eq)]
pub struct SearchHit {
    /// The crate's name.
    pub name: String,
    /// Its newest version.
    pub version: String,
    /// Its description.
    pub description: String,
}

/// One feature of a crate.
#[derive(Debug, Serialize, JsonSchema, PartialEq, Eq)]
pub struct Feature {
    /// Its name.
    pub name: String,
    /// Whether the default features enable it.
    pub default: bool,
    /// What it enables (features, `dep:` optional dependencies).
    pub enables: Vec<String>,
}

/// A crate as `cargo info` describes it.
#[derive(Debug, Default, Serialize, JsonSchema, PartialEq, Eq)]
pub struct CrateInfo {
    /// Its name.
    pub name: String,
    /// Its keywords.
    pub keywords: Vec<String>,
    /// Its description.
    pub description: Option<String>,
    /// The version shown (with cargo's remark, e.g. `(latest 1.2.0)`).
    pub version: Option<String>,
    /// Its license.
    pub license: Option<String>,
    /// The oldest Rust it supports.
    pub rust_version: Option<String>,
    /// Its documentation's address.
    pub documentation: Option<String>,
    /// Its home page.
    pub homepage: Option<String>,
    /// Its repository.
    pub repository: Option<String>,
    /// Its registry page.
    pub crates_io: Option<String>,
    /// Its features.
    pub features: Vec<Feature>,
    /// Its dependencies (`name@requirement`, `+` for those the default features use).
    pub dependencies: Vec<String>,
}

/// What `crates_io_lookup` returns.
#[derive(Serialize, JsonSchema)]
pub struct CratesReport {
    /// `search` or `info`.
    pub mode: String,
    /// Search results.
    pub results: Vec<SearchHit>,
    /// How many more crates the search found than it listed.
    pub more: Option<u64>,
    /// The inspected crate.
    pub info: Option<CrateInfo>,
    /// cargo's text, as it printed it.
    pub raw: String,
}

/// Searches the crate registry (crates.io, or the registry the user's cargo is
/// configured for) with `query`, or inspects one crate with `name` (and optionally
/// `version`): description, version, license, links, features (which are default) and
/// dependencies. Uses the network through cargo (`cargo search`, `cargo info`).
#[tool(risk = network, programs = ["cargo"], workspace)]
pub async fn crates_io_lookup(
    ctx: &ToolContext<'_>,
    #[args] args: CratesArgs,
) -> Result<Structured<CratesReport>, ToolError> {
    let (mode, cargo_args) = plan(args)?;
    let answer = Workspace::answer(ctx).await?;
    let mut notes = Vec::new();
    let command = Command {
        program: "cargo",
        args: cargo_args,
        cwd: crate::explain::toolchain_folder(&answer),
        write: Vec::new(),
        cargo_caches: true,
        network: true,
        local_tcp: false,
        configured_env: answer.env.clone(),
        timeout: exec::time_limit(None, answer.command_timeout_secs.min(120), &mut notes),
    };
    let ran = ctx
        .blocking(move |cancel: &CancelFlag| exec::run(command, cancel))
        .await
        .map_err(ToolError::failed)??;
    let stdout = ran.stdout();
    if ran.exit_code() != Some(0) {
        let stderr = ran.stderr();
        let said = stderr
            .lines()
            .filter(|l| !l.trim_start().starts_with("Updating") && !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        return Err(ToolError::failed(format!(
            "cargo {mode} failed: {}{}",
            if said.is_empty() {
                stderr.trim()
            } else {
                said.trim()
            },
            ran.notes
                .iter()
                .map(|n| format!("; {n}"))
                .collect::<String>()
        )));
    }
    let value = match mode {
        "search" => {
            let (results, more) = parse_search(&stdout);
            CratesReport {
                mode: mode.to_owned(),
                results,
                more,
                info: None,
                raw: stdout,
            }
        }
        _ => CratesReport {
            mode: mode.to_owned(),
            results: Vec::new(),
            more: None,
            info: Some(parse_info(&stdout)),
            raw: stdout,
        },
    };
    let text = crates_io_lookup_text(&value);
    Ok(Structured::new(value).text(text))
}

/// The text the model reads for a result of `crates_io_lookup`.
fn crates_io_lookup_text(r: &CratesReport) -> String {
    if r.mode == "search" && r.results.is_empty() {
        return "no crate matched the search".to_owned();
    }
    r.raw.trim_end().to_owned()
}

/// The cargo subcommand and arguments of a lookup, its inputs checked.
fn plan(args: CratesArgs) -> Result<(&'static str, Vec<String>), ToolError> {
    match (args.query, args.name) {
        (Some(query), None) => {
            let query = query.trim().to_owned();
            if query.is_empty() || query.starts_with('-') {
                return Err(ToolError::invalid_args(
                    "`query` is the words to search for (not starting with `-`)",
                ));
            }
            let limit = args.limit.unwrap_or(10).clamp(1, 100);
            Ok((
                "search",
                vec![
                    "search".into(),
                    "--limit".into(),
                    limit.to_string(),
                    "--color".into(),
                    "never".into(),
                    "--".into(),
                    query,
                ],
            ))
        }
        (None, Some(name)) => {
            let name = name.trim().to_owned();
            let valid = |s: &str, extra: &str| {
                !s.is_empty()
                    && s.len() <= 64
                    && !s.starts_with('-')
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c) || extra.contains(c))
            };
            if !valid(&name, "") {
                return Err(ToolError::invalid_args(format!(
                    "`{name}` is not a crate name: letters, digits, `_` and `-`"
                )));
            }
            let spec = match args.version.map(|v| v.trim().to_owned()) {
                Some(v) if !v.is_empty() => {
                    if !valid(&v, ".+^~=<>*") {
                        return Err(ToolError::invalid_args(format!(
                            "`{v}` is not a version or requirement (e.g. `1.0.2`, `1.0`)"
                        )));
                    }
                    format!("{name}@{v}")
                }
                _ => name,
            };
            Ok((
                "info",
                vec![
                    "info".into(),
                    "--verbose".into(),
                    "--color".into(),
                    "never".into(),
                    "--".into(),
                    spec,
                ],
            ))
        }
        (Some(_), Some(_)) => Err(ToolError::invalid_args(
            "give `query` (to search) or `name` (to inspect one crate), not both",
        )),
        (None, None) => Err(ToolError::invalid_args(
            "give `query` (words to search for) or `name` (a crate to inspect)",
        )),
    }
}

/// `cargo search`'s lines: `name = "1.2.3"    # description`, then perhaps
/// `... and 41 crates more (use --limit N to see more)`.
fn parse_search(text: &str) -> (Vec<SearchHit>, Option<u64>) {
    let mut hits = Vec::new();
    let mut more = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("... and ") {
            more = rest.split_whitespace().next().and_then(|n| n.parse().ok());
            continue;
        }
        let Some((name, rest)) = line.split_once(" = \"") else {
            continue;
        };
        let Some((version, rest)) = rest.split_once('"') else {
            continue;
        };
        let description = rest
            .trim()
            .strip_prefix('#')
            .map(|d| d.trim().to_owned())
            .unwrap_or_default();
        hits.push(SearchHit {
            name: name.trim().to_owned(),
            version: version.to_owned(),
            description,
        });
    }
    (hits, more)
}

/// `cargo info`'s text: the name and keywords, the description, `key: value` lines and
/// the `features:` and `dependencies:` sections.
fn parse_info(text: &str) -> CrateInfo {
    let mut info = CrateInfo::default();
    let mut lines = text.lines();
    if let Some(first) = lines.next() {
        let mut words = first.split_whitespace();
        info.name = words.next().unwrap_or_default().to_owned();
        info.keywords = words
            .filter_map(|w| w.strip_prefix('#'))
            .map(str::to_owned)
            .collect();
    }
    let mut section = "";
    for line in lines {
        if line.starts_with(' ') {
            let entry = line.trim();
            let default = entry.starts_with('+');
            let entry = entry.trim_start_matches(['+', ' ']);
            match section {
                "features" => {
                    let (name, enables) = entry.split_once('=').unwrap_or((entry, ""));
                    let enables = enables
                        .trim()
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect();
                    info.features.push(Feature {
                        name: name.trim().to_owned(),
                        default,
                        enables,
                    });
                }
                "dependencies" => info
                    .dependencies
                    .push(format!("{}{entry}", if default { "+" } else { "" })),
                _ => {}
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            if info.description.is_none() && section.is_empty() && !line.trim().is_empty() {
                info.description = Some(line.trim().to_owned());
            }
            continue;
        };
        let value = value.trim();
        let value_of = || (!value.is_empty()).then(|| value.to_owned());
        section = "";
        match key {
            "version" => info.version = value_of(),
            "license" => info.license = value_of(),
            "rust-version" => info.rust_version = value_of(),
            "documentation" => info.documentation = value_of(),
            "homepage" => info.homepage = value_of(),
            "repository" => info.repository = value_of(),
            "crates.io" => info.crates_io = value_of(),
            "features" => section = "features",
            "dependencies" => section = "dependencies",
            _ if info.description.is_none() && !line.contains(": ") => {
                info.description = Some(line.trim().to_owned());
            }
            _ => {}
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_lines_and_the_more_line_are_read() {
        let text = "serde = \"1.0.228\"    # A generic serialization/deserialization framework\nserde_json = \"1.0.145\"    # A JSON serialization file format\n... and 7421 crates more (use --limit N to see more)\n";
        let (hits, more) = parse_search(text);
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[1].name, "serde_json");
        assert_eq!(hits[1].version, "1.0.145");
        assert_eq!(hits[1].description, "A JSON serialization file format");
        assert_eq!(more, Some(7421));
    }

    #[test]
    fn cargo_infos_fields_features_and_dependencies_are_read() {
        let text = "cargo_metadata #cargo #metadata\nstructured access to the output of `cargo metadata`\nversion: 0.23.1 (latest 0.23.2)\nlicense: MIT\nrust-version: 1.86.0\ndocumentation: https://docs.rs/cargo_metadata/0.23.1\nrepository: https://github.com/oli-obk/cargo_metadata\ncrates.io: https://crates.io/crates/cargo_metadata/0.23.1\nfeatures:\n +default        = []\n  builder        = [derive_builder]\n  unstable       = []\ndependencies:\n +camino@1.1.10\n  derive_builder@0.20\n";
        let info = parse_info(text);
        assert_eq!(info.name, "cargo_metadata");
        assert_eq!(info.keywords, ["cargo", "metadata"]);
        assert_eq!(
            info.description.as_deref(),
            Some("structured access to the output of `cargo metadata`")
        );
        assert_eq!(info.version.as_deref(), Some("0.23.1 (latest 0.23.2)"));
        assert_eq!(info.rust_version.as_deref(), Some("1.86.0"));
        assert_eq!(
            info.features[1],
            Feature {
                name: "builder".into(),
                default: false,
                enables: vec!["derive_builder".into()]
            }
        );
        assert!(info.features[0].default);
        assert_eq!(info.dependencies, ["+camino@1.1.10", "derive_builder@0.20"]);
    }

    #[test]
    fn names_versions_and_queries_are_checked() {
        let args = |q: Option<&str>, n: Option<&str>, v: Option<&str>| CratesArgs {
            query: q.map(str::to_owned),
            name: n.map(str::to_owned),
            version: v.map(str::to_owned),
            limit: None,
        };
        let (mode, a) = plan(args(None, Some("serde"), Some("1.0"))).expect("ok");
        assert_eq!(
            (mode, a.last().map(String::as_str)),
            ("info", Some("serde@1.0"))
        );
        let (mode, a) = plan(args(Some("json parser"), None, None)).expect("ok");
        assert_eq!(
            (mode, a.last().map(String::as_str)),
            ("search", Some("json parser"))
        );
        for bad in [
            args(None, Some("--registry"), None),
            args(None, Some("a b"), None),
            args(None, Some("serde"), Some("1; rm")),
            args(Some("--index=x"), None, None),
            args(Some("a"), Some("b"), None),
            args(None, None, None),
        ] {
            assert!(matches!(plan(bad), Err(ToolError::InvalidArgs(_))));
        }
    }
}
