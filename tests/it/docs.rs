//! The book (`docs/book`) and the front page (`README.md`) as promises the tests keep:
//! every page is in `SUMMARY.md`, every internal link and anchor resolves, the front page
//! reaches each operator task in at most two links, no benchmark figure is copied outside
//! the benchmarks page, the reference pages generated from the code match it
//! (`UPDATE_DOCS=1` rewrites them), and every ```` ```console ```` example runs against the
//! built binary with HOME and XDG folders of its own, its shown output compared.
//!
//! Why a runner of our own rather than trycmd: the operators' pages start a host in the
//! background (`toolhost serve ... &`) and talk to it in the next steps, and every page
//! needs a fresh HOME with the bundled plugins where the set-up command puts them; trycmd
//! runs each command to completion in isolation.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{built, toolhost_command, workspace_root};

fn book_src() -> PathBuf {
    workspace_root().join("docs").join("book").join("src")
}

/// Every markdown page of the book, and the README, by path (read once per test run).
fn pages() -> &'static BTreeMap<PathBuf, String> {
    static PAGES: std::sync::OnceLock<BTreeMap<PathBuf, String>> = std::sync::OnceLock::new();
    PAGES.get_or_init(read_pages)
}

fn read_pages() -> BTreeMap<PathBuf, String> {
    let mut pages = BTreeMap::new();
    let mut dirs = vec![book_src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the book's folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&path).expect("read a page");
                let text = with_includes(&path, &text);
                pages.insert(path, text);
            }
        }
    }
    let readme = workspace_root().join("README.md");
    let text = std::fs::read_to_string(&readme).expect("README.md");
    pages.insert(readme, text);
    pages
}

/// `text` with each `{{#include FILE}}` line replaced by the file, as mdBook does.
fn with_includes(page: &Path, text: &str) -> String {
    text.lines()
        .map(|line| {
            match line
                .trim()
                .strip_prefix("{{#include ")
                .and_then(|r| r.strip_suffix("}}"))
            {
                Some(file) => {
                    let path = page.parent().expect("a page's folder").join(file.trim());
                    std::fs::read_to_string(&path).unwrap_or_else(|e| {
                        panic!("{}: includes {}: {e}", page.display(), path.display())
                    })
                }
                None => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The lines of `text` outside fenced code blocks, with their line numbers, inline code
/// spans blanked (a link inside backticks is not a link).
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut out = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(' ');
            } else if in_code {
                out.push(' ');
            } else {
                out.push(c);
            }
        }
        lines.push((n + 1, out));
    }
    lines
}

/// The targets of the inline links `[text](target)` of `text`, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose_lines(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            found.push((n, target.to_owned()));
            rest = &after[end..];
        }
    }
    found
}

/// The anchors mdBook gives `text`'s headings: the heading's text lowercased, spaces to
/// `-`, everything but letters, digits, `-` and `_` dropped; a repeated one gets `-1`,
/// `-2`...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    let mut anchors = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        // Link text stays, its target goes: `[a](b)` reads `a`.
        let mut plain = String::new();
        let mut chars = title.chars().peekable();
        while let Some(c) = chars.next() {
            if c == ']' && chars.peek() == Some(&'(') {
                for c in chars.by_ref() {
                    if c == ')' {
                        break;
                    }
                }
                continue;
            }
            plain.push(c);
        }
        let slug: String = plain
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                c if c.is_whitespace() => Some('-'),
                _ => None,
            })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        let id = if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        };
        *count += 1;
        anchors.insert(id);
    }
    anchors
}

/// Where an internal link of `page` leads: the file and the anchor, or `None` for a link
/// that leaves the book (a URL, a mail address).
fn resolve(page: &Path, target: &str) -> Option<(PathBuf, Option<String>)> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor.to_owned())),
        None => (target, None),
    };
    let path = if file.is_empty() {
        page.to_path_buf()
    } else {
        normalize(&page.parent().expect("a page's folder").join(file))
    };
    Some((path, anchor))
}

/// `path` with its `.` and `..` parts folded (the files need not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_page_is_in_the_summary_and_every_internal_link_and_anchor_resolves() {
    let pages = pages();
    let summary = book_src().join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&pages[&summary])
        .into_iter()
        .filter_map(|(_, t)| resolve(&summary, &t).map(|(p, _)| p))
        .collect();
    let mut problems = Vec::new();
    for page in pages.keys() {
        if page.starts_with(book_src()) && page != &summary && !listed.contains(page) {
            problems.push(format!(
                "{}: not in SUMMARY.md (no reader finds it)",
                page.display()
            ));
        }
    }
    for (page, text) in pages {
        for (line, target) in links(text) {
            let Some((file, anchor)) = resolve(page, &target) else {
                continue;
            };
            let Some(linked) = pages.get(&file) else {
                if !file.exists() {
                    problems.push(format!(
                        "{}:{line}: links to {target}, which does not exist",
                        page.display()
                    ));
                } else if page.starts_with(book_src()) && !file.starts_with(book_src()) {
                    problems.push(format!(
                        "{}:{line}: links to {target}, outside the book (it breaks once the \
                         book is built): link to the file on GitHub instead",
                        page.display()
                    ));
                }
                continue;
            };
            if let Some(anchor) = anchor
                && !anchors(linked).contains(&anchor)
            {
                problems.push(format!(
                    "{}:{line}: links to {target}, but {} has no heading with that anchor",
                    page.display(),
                    file.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What an operator or a plugin author comes to do, and the page (and heading) where the
/// steps are: each must be at most two links from the front page.
const TASKS: &[(&str, &str)] = &[
    ("install", "operating/install.md"),
    (
        "serve MCP over HTTP with a token per client",
        "using/mcp.md#over-http-a-token-per-client",
    ),
    ("reload", "operating/reloads.md"),
    (
        "approve from a terminal",
        "operating/approvals.md#approving-an-mcp-clients-calls-from-a-terminal",
    ),
    (
        "verify the audit log",
        "operating/audit-log.md#verifying-the-chain",
    ),
    ("scrape metrics", "operating/metrics.md"),
    ("write, test and install a plugin", "plugins/tutorial.md"),
];

#[test]
fn each_operator_task_is_at_most_two_links_from_the_front_page() {
    let pages = pages();
    let readme = workspace_root().join("README.md");
    // Breadth first over internal links, two steps deep.
    let mut depth: BTreeMap<(PathBuf, Option<String>), usize> = BTreeMap::new();
    let mut queue = VecDeque::from([(readme.clone(), 0)]);
    let mut visited = BTreeSet::new();
    while let Some((page, d)) = queue.pop_front() {
        if d == 2 || !visited.insert(page.clone()) {
            continue;
        }
        let Some(text) = pages.get(&page) else {
            continue;
        };
        for (_, target) in links(text) {
            if let Some((file, anchor)) = resolve(&page, &target) {
                depth.entry((file.clone(), anchor)).or_insert(d + 1);
                depth.entry((file.clone(), None)).or_insert(d + 1);
                queue.push_back((file, d + 1));
            }
        }
    }
    let mut missing = Vec::new();
    for (task, target) in TASKS {
        let (file, anchor) = resolve(&book_src().join("x.md"), target).expect("internal");
        assert!(
            pages.contains_key(&file),
            "{task}: {target} is not a page of the book"
        );
        if let Some(a) = &anchor {
            assert!(
                anchors(&pages[&file]).contains(a),
                "{task}: {target} names no heading of its page"
            );
        }
        // A link to the page's heading, or to the page itself when the steps are the page.
        let reached = depth.contains_key(&(file.clone(), anchor.clone()))
            || (anchor.is_none() && depth.contains_key(&(file.clone(), None)));
        if !reached {
            missing.push(format!("{task} ({target})"));
        }
    }
    assert!(
        missing.is_empty(),
        "more than two links from README.md: {}",
        missing.join(", ")
    );
}

#[test]
fn benchmark_figures_live_only_on_the_benchmarks_page() {
    let mut problems = Vec::new();
    for (page, text) in pages() {
        if page.ends_with("benchmarks.md") {
            continue;
        }
        for (n, line) in prose_lines(text) {
            let lower = line.to_lowercase();
            let figure = ["µs", " ns ", " ns)", "ns/call", "median", "p99"]
                .iter()
                .find(|w| lower.contains(*w));
            if let Some(word) = figure {
                problems.push(format!(
                    "{}:{n}: `{word}`: a measured figure belongs on the benchmarks page \
                     (docs/bench.sh writes it): link there",
                    page.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Reference pages generated from the code.

const GENERATED: &str = "<!-- Generated from the code by tests/it/docs.rs: do not edit. After a \
                         change, `UPDATE_DOCS=1 cargo test -p toolhost-cli --test it docs::` \
                         rewrites it. -->";

/// `toolhost ARGS --help`, as a user sees it.
fn help(args: &[&str]) -> String {
    let out = toolhost_command()
        .args(args)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .expect("run toolhost --help");
    assert!(out.status.success(), "toolhost {args:?} --help failed");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// The subcommands a help text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect()
}

fn cli_reference() -> String {
    let mut page = format!(
        "# Command line\n\n{GENERATED}\n\nEvery command and its options, as `toolhost \
         COMMAND --help` prints them. `toolhost man | man -l -` shows the same as a manual \
         page; `toolhost completions bash|zsh|fish` prints a completion script.\n"
    );
    let mut queue = vec![Vec::<String>::new()];
    while let Some(path) = queue.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        let title = if path.is_empty() {
            "toolhost".to_owned()
        } else {
            format!("toolhost {}", path.join(" "))
        };
        page.push_str(&format!(
            "\n## `{title}`\n\n```text\n{}\n```\n",
            text.trim_end()
        ));
        let mut subs = subcommands(&text);
        subs.reverse();
        for sub in subs {
            let mut next = path.clone();
            next.push(sub);
            queue.push(next);
        }
    }
    page
}

/// The JSON type of a schema, for people.
fn type_name(schema: &Value, defs: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return type_name(&defs[name], defs);
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(" \\| ");
    }
    if let Some(any) = schema
        .get("anyOf")
        .or(schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        let alternatives: Vec<&Value> = any
            .iter()
            .filter(|s| s.get("type") != Some(&json!("null")))
            .collect();
        // An enum whose variants carry doc comments: each is a `const`; show its values.
        if alternatives.iter().all(|s| s.get("const").is_some()) {
            return alternatives
                .iter()
                .map(|s| format!("`{}`", s["const"]))
                .collect::<Vec<_>>()
                .join(" \\| ");
        }
        let names: Vec<String> = alternatives.iter().map(|s| type_name(s, defs)).collect();
        return names.join(" or ");
    }
    let types: Vec<String> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .map(str::to_owned)
            .collect(),
        _ => vec!["any".to_owned()],
    };
    types
        .iter()
        .map(|t| match t.as_str() {
            "array" => format!("array of {}", type_name(&schema["items"], defs)),
            "object" if schema.get("properties").is_some() => "table".to_owned(),
            "object" => match schema.get("additionalProperties") {
                Some(v) if v.is_object() => format!("table of {}", type_name(v, defs)),
                _ => "table".to_owned(),
            },
            "integer" => "integer".to_owned(),
            "number" => "number".to_owned(),
            "boolean" => "boolean".to_owned(),
            "string" => "string".to_owned(),
            other => other.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The object schema `schema` leads to (through `$ref`, an optional's `anyOf`, an array's
/// items), if it has properties: a table of its own.
fn table_of<'a>(schema: &'a Value, defs: &'a Value) -> Option<&'a Value> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return table_of(&defs[name], defs);
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        return any.iter().find_map(|s| table_of(s, defs));
    }
    if let Some(items) = schema.get("items") {
        return table_of(items, defs);
    }
    if let Some(add) = schema.get("additionalProperties")
        && add.is_object()
    {
        return table_of(add, defs);
    }
    schema.get("properties").map(|_| schema)
}

/// One table's keys as a markdown table, then each key that is a table of its own; a key
/// without a description is a problem.
fn config_section(
    name: &str,
    intro: Option<&str>,
    schema: &Value,
    defs: &Value,
    out: &mut String,
    problems: &mut Vec<String>,
) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let title = if name.starts_with('[') {
        format!("`{name}`")
    } else {
        name.to_owned()
    };
    // A table is introduced by its key's description in the table above it.
    match intro.or_else(|| schema.get("description").and_then(Value::as_str)) {
        Some(text) => out.push_str(&format!("\n## {title}\n\n{}\n", one_paragraph(text))),
        None => out.push_str(&format!("\n## {title}\n")),
    }
    let mut nested = Vec::new();
    out.push_str("\n| key | type | what it does |\n| --- | --- | --- |\n");
    for (key, prop) in props {
        let path = if name.starts_with('[') {
            format!("{}.{key}", name.trim_matches(['[', ']']))
        } else {
            key.clone()
        };
        let description = prop
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                // A key whose type is a table documented once (its struct's doc comment).
                let r = prop.get("$ref").and_then(Value::as_str)?;
                defs[r.rsplit('/').next()?]
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        let Some(description) = description else {
            problems.push(format!(
                "`{path}` has no description (a doc comment on its field)"
            ));
            continue;
        };
        let ty = type_name(prop, defs);
        out.push_str(&format!(
            "| `{key}` | {} | {} |\n",
            ty.replace('|', "\\|").replace("\\\\|", "\\|"),
            one_paragraph(&description).replace('|', "\\|")
        ));
        if let Some(table) = table_of(prop, defs) {
            let is_list = prop.get("type") == Some(&json!("array"));
            let is_map = prop
                .get("additionalProperties")
                .is_some_and(Value::is_object);
            let shown = if is_list {
                format!("[[{path}]]")
            } else if is_map {
                format!("[{path}.NAME]")
            } else {
                format!("[{path}]")
            };
            nested.push((shown, description.clone(), table.clone()));
        }
    }
    for (shown, intro, table) in nested {
        config_section(&shown, Some(&intro), &table, defs, out, problems);
    }
}

/// A doc comment's text on one line (a table cell holds one), its paragraphs kept apart.
fn one_paragraph(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(" ")
}

fn config_reference() -> (String, Vec<String>) {
    let mut page = format!(
        "# Configuration keys\n\n{GENERATED}\n\nEvery key of the host's config file \
         (`$XDG_CONFIG_HOME/toolhost/config.toml`, or `--config FILE`) and of a profile's \
         (`<profiles_dir>/<name>/config.toml`), from the types the host reads them into: \
         an unknown key or a wrong type is refused with its line. How the keys work \
         together is in [Configuration, profiles and approval](../using/configuration.md); \
         a commented example is `toolhost.example.toml` in the repository.\n\n# The host's \
         config file\n"
    );
    let mut problems = Vec::new();
    for (title, schema) in [
        ("", toolhost::config_file_schema()),
        (
            "\n# A profile's config file\n",
            toolhost::profile_file_schema(),
        ),
    ] {
        page.push_str(title);
        let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
        config_section(
            "Top-level keys",
            None,
            &schema,
            &defs,
            &mut page,
            &mut problems,
        );
    }
    (page, problems)
}

fn metrics_reference() -> String {
    use toolhost::CallObserver as _;
    // One call of each outcome and one of each fact, so that every family is rendered
    // (a family without samples is not).
    let metrics = toolhost::CallMetrics::new();
    let failed = toolhost::ToolResult::refused(
        "1".to_owned(),
        "echo".to_owned(),
        "no".to_owned(),
        toolhost::CallErrorKind::InvalidArgs,
    );
    let mut pending = failed.clone();
    pending.decision = toolhost::Decision::Pending {
        by: "the client".to_owned(),
    };
    metrics.record(&toolhost::CallContext::default(), &failed);
    metrics.record(&toolhost::CallContext::default(), &pending);
    let text = metrics.render_as(
        &toolhost::ScrapeFacts {
            mcp_sessions: vec!["2025-11-25".to_owned()],
            workers: vec![("basic".to_owned(), 1, 0, false)],
            mcp_servers: vec![("files".to_owned(), true, 0, false)],
            ..toolhost::ScrapeFacts::default()
        },
        toolhost::MetricsFormat::Classic,
    );
    let mut rows: BTreeMap<String, (String, String)> = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(4, ' ');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("#"), Some("HELP"), Some(name), help) => {
                rows.entry(name.to_owned()).or_default().1 = help.unwrap_or_default().to_owned();
            }
            (Some("#"), Some("TYPE"), Some(name), Some(kind)) => {
                rows.entry(name.to_owned()).or_default().0 = kind.to_owned();
            }
            _ => {}
        }
    }
    let mut page = format!(
        "# Metrics\n\n{GENERATED}\n\nWhat `toolhost serve --metrics ADDR` serves at \
         `/metrics` (see [Metrics](../operating/metrics.md) for how to scrape it), in the \
         classic text format's names (OpenMetrics names a counter's family without \
         `_total`).\n\n| metric | type | what it counts |\n| --- | --- | --- |\n"
    );
    for (name, (kind, help)) in rows {
        page.push_str(&format!(
            "| `{name}` | {kind} | {} |\n",
            help.replace('|', "\\|")
        ));
    }
    page
}

fn control_reference() -> String {
    use toolhost::{AnswerParams, ApprovalReply, CallParams, ControlRequest};
    let mut page = format!(
        "# Control protocol messages\n\n{GENERATED}\n\nOne request line of each method, \
         as `toolhost`'s own client writes them (the methods: {}). The protocol itself is \
         described in [The control protocol](control-protocol.md).\n\n",
        ControlRequest::METHODS
    );
    let requests = [
        ControlRequest::Reload,
        ControlRequest::Status,
        ControlRequest::List,
        ControlRequest::Call(CallParams {
            tool: "time_now".to_owned(),
            arguments: json!({"timezone": "Europe/Paris"}),
            profile: Some("coder".to_owned()),
            timeout: Some(Duration::from_secs(30)),
            ask: true,
            yes: false,
        }),
        ControlRequest::ApprovalsPending,
        ControlRequest::ApprovalsAnswer(AnswerParams {
            id: 3,
            reply: ApprovalReply::No {
                reason: "not on a Friday".to_owned(),
            },
        }),
    ];
    for (id, request) in requests.iter().enumerate() {
        let mut line = serde_json::to_value(request).expect("a request serializes");
        if let Some(object) = line.as_object_mut() {
            object.insert("jsonrpc".to_owned(), json!("2.0"));
            object.insert("id".to_owned(), json!(id + 1));
        }
        let method = line["method"].as_str().unwrap_or_default().to_owned();
        page.push_str(&format!(
            "## `{method}`\n\n```json\n{}\n```\n\n",
            serde_json::to_string(&line).expect("json")
        ));
    }
    page.push_str("## Answers to an approval question\n\n");
    for reply in [
        ApprovalReply::Once,
        ApprovalReply::Session,
        ApprovalReply::Always,
        ApprovalReply::No {
            reason: "not now".to_owned(),
        },
    ] {
        page.push_str(&format!(
            "- `{}`\n",
            serde_json::to_string(&json!({"jsonrpc": "2.0", "id": "approval-1", "result": reply}))
                .expect("json")
        ));
    }
    page
}

fn abi_reference() -> String {
    use toolhost_plugin_api::ffi;
    let mut page = format!(
        "# The plugin ABI\n\n{GENERATED}\n\nWhat crosses between the host and a plugin \
         built against `toolhost-plugin-api` {api} (ABI {abi}), as abi_stable records the \
         layouts it checks at load. A plugin exports its root module under the symbol \
         `{symbol}`, and its settings schema (when it declares one) under `{settings}`. \
         Tables only grow at the end (a field is a prefix-type field: a plugin built \
         against an older release lacks the newer ones, and the host falls back for \
         each); see [Versions and compatibility](../plugins/versions.md).\n\n\
         | ABI | crate releases |\n| --- | --- |\n",
        api = toolhost_plugin_api::API_VERSION,
        abi = toolhost_plugin_api::ABI_VERSION,
        symbol = toolhost_plugin_api::__root_module_symbol!(),
        settings = ffi::SETTINGS_SCHEMA_SYMBOL,
    );
    for (abi, crates) in ffi::ABI_RELEASES {
        page.push_str(&format!("| {abi} | {} |\n", crates.join(", ")));
    }
    for (name, fields) in ffi::abi_tables() {
        let what = match name {
            "PluginRoot" => "the root module: what the host reads first",
            "ToolVTable" => "one tool: what the host calls",
            _ => "the host's services a call reaches through its context",
        };
        page.push_str(&format!("\n## `{name}`: {what}\n\n```text\n"));
        for field in fields {
            page.push_str(&field);
            page.push('\n');
        }
        page.push_str("```\n");
    }
    page
}

/// Compares each generated page with the book's file, or writes it with `UPDATE_DOCS=1`.
fn keep_generated(pages: &[(&str, String)]) {
    let update = std::env::var_os("UPDATE_DOCS").is_some();
    let mut stale = Vec::new();
    for (file, text) in pages {
        let path = book_src().join("reference").join(file);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk != *text {
            if update {
                std::fs::write(&path, text).expect("write a generated page");
            } else {
                stale.push(path.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "generated pages differ from the code: {} (run `UPDATE_DOCS=1 cargo test -p \
         toolhost-cli --test it docs::` and commit them)",
        stale.join(", ")
    );
}

#[test]
fn the_reference_pages_are_what_the_code_says() {
    let (config, problems) = config_reference();
    assert!(
        problems.is_empty(),
        "config keys without documentation:\n{}",
        problems.join("\n")
    );
    keep_generated(&[
        ("cli.md", cli_reference()),
        ("config.md", config),
        ("metrics.md", metrics_reference()),
        ("control-messages.md", control_reference()),
        ("abi.md", abi_reference()),
    ]);
}

// ---------------------------------------------------------------------------------------
// Running the examples.

/// One `$ command` of a ```` ```console ```` block and the output the page shows for it.
#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    expected: Vec<String>,
}

fn console_steps(text: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_console = false;
    let mut in_other = false;
    let mut continued = false;
    for (n, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        if fence && !in_console && !in_other {
            if line.trim() == "```console" {
                in_console = true;
            } else {
                in_other = true;
            }
            continue;
        }
        if fence {
            in_console = false;
            in_other = false;
            continue;
        }
        if !in_console {
            continue;
        }
        if continued && let Some(step) = steps.last_mut() {
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            continued = command.ends_with('\\');
            steps.push(Step {
                line: n + 1,
                command: command.to_owned(),
                expected: Vec::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            step.expected.push(line.to_owned());
        }
    }
    steps
}

/// Whether `actual` is what the page shows: line by line, `...` standing for any number of
/// lines and `[..]` for any text within a line.
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "..." => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && matches(rest, more)),
    }
}

fn line_matches(pattern: &str, line: &str) -> bool {
    let pattern = pattern.trim_end();
    let line = line.trim_end();
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let mut rest = line;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(after) = rest.strip_prefix(part) else {
                return false;
            };
            rest = after;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            let Some(at) = rest.find(part) else {
                return false;
            };
            rest = &rest[at + part.len()..];
        }
    }
    true
}

/// A fresh machine for one page: HOME and the XDG folders in a temporary folder, a
/// checkout whose `target/release` holds the bundled plugins (as after the set-up
/// command), `toolhost` on `PATH`.
struct Machine {
    root: tempfile::TempDir,
    background: Vec<Child>,
    /// The ports the pages name, each with a free one of this machine's that the steps
    /// use instead (so a port in use elsewhere on the machine cannot fail a page).
    ports: Vec<(String, String)>,
}

/// The loopback ports the pages listen on.
const PAGE_PORTS: [&str; 2] = ["127.0.0.1:8765", "127.0.0.1:9464"];

/// A loopback port nothing listens on now.
fn free_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").to_string()
}

impl Machine {
    fn new() -> Machine {
        let root = tempfile::tempdir().expect("temp dir");
        let machine = Machine {
            root,
            background: Vec::new(),
            ports: PAGE_PORTS
                .iter()
                .map(|p| ((*p).to_owned(), free_port()))
                .collect(),
        };
        let release = machine.checkout().join("target").join("release");
        std::fs::create_dir_all(&release).expect("checkout");
        std::fs::create_dir_all(machine.home().join("tmp")).expect("tmp");
        let runtime = machine.root.path().join("run");
        std::fs::create_dir_all(&runtime).expect("runtime dir");
        std::fs::set_permissions(
            &runtime,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod");
        for entry in std::fs::read_dir(built().join("debug")).expect("test build") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.starts_with("libtoolhost_") && name.ends_with(".so") {
                std::fs::copy(&path, release.join(name)).expect("copy a bundled plugin");
            }
        }
        // As `cargo build --release` leaves it: the `#[tool]` macros' library too.
        let (macros, name) = crate::support::proc_macro_library();
        std::fs::copy(macros, release.join(name)).expect("copy the proc-macro library");
        machine
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    fn checkout(&self) -> PathBuf {
        self.home().join("toolhost")
    }

    fn shell(&self, command: &str) -> Command {
        let bin = Path::new(env!("CARGO_BIN_EXE_toolhost"))
            .parent()
            .expect("the binary's folder")
            .to_path_buf();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![bin];
        paths.extend(std::env::split_paths(&path));
        let home = self.home();
        let mut command = command.to_owned();
        for (named, free) in &self.ports {
            command = command.replace(named.as_str(), free);
        }
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!("exec 2>&1\n{command}"))
            .current_dir(self.checkout())
            .env_clear()
            .env("PATH", std::env::join_paths(paths).expect("PATH"))
            .env("HOME", &home)
            .env(
                "USER",
                std::env::var_os("USER").unwrap_or_else(|| "root".into()),
            )
            .env("LANG", "C.UTF-8")
            .env("TMPDIR", home.join("tmp"))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_RUNTIME_DIR", self.root.path().join("run"))
            .env("COLUMNS", "100")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `step`; what went wrong, if anything.
    fn run(&mut self, page: &Path, step: &Step) -> Option<String> {
        let here = format!("{}:{}: `{}`", page.display(), step.line, step.command);
        if let Some(command) = step.command.trim_end().strip_suffix('&') {
            let mut cmd = self.shell(command);
            let log = std::fs::File::create(
                self.root
                    .path()
                    .join(format!("background-{}.log", self.background.len())),
            )
            .expect("log");
            cmd.stdout(log).process_group(0);
            self.background
                .push(cmd.spawn().expect("start a background step"));
            return None;
        }
        let mut child = self
            .shell(&step.command)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run a step");
        let mut stdout = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
            text
        });
        let deadline = Instant::now() + Duration::from_secs(180);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Some(format!("{here}: still running after 180 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = reader.join().expect("reader");
        if std::env::var_os("DOCS_SHOW").is_some() {
            eprintln!("{here}\n{output}");
        }
        let mut expected = step.expected.clone();
        while expected.last().is_some_and(|l| l.trim().is_empty()) {
            expected.pop();
        }
        let want_code = match expected.last().and_then(|l| {
            l.trim()
                .strip_prefix("[exit ")
                .and_then(|c| c.strip_suffix(']'))
        }) {
            Some(code) => {
                let code = code.parse::<i32>().expect("[exit N]");
                expected.pop();
                code
            }
            None => 0,
        };
        if status.code() != Some(want_code) {
            return Some(format!(
                "{here}: exited {status} (the page expects {want_code}); it printed:\n{output}"
            ));
        }
        let actual: Vec<&str> = output.trim_end().lines().collect();
        if !expected.is_empty() && !matches(&expected, &actual) {
            return Some(format!(
                "{here}: printed\n{output}\nwhere the page shows\n{}",
                expected.join("\n")
            ));
        }
        None
    }
}

impl Drop for Machine {
    /// Ends what the page left in the background: its whole process group, at once.
    fn drop(&mut self) {
        for child in &mut self.background {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill has no memory preconditions; the group is our child's.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            let _ = child.wait();
        }
    }
}

#[test]
fn every_console_example_runs_and_prints_what_its_page_shows() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (page, text) in pages() {
        let steps = console_steps(text);
        if steps.is_empty() {
            continue;
        }
        let mut machine = Machine::new();
        for step in &steps {
            ran += 1;
            if let Some(failure) = machine.run(page, step) {
                failures.push(failure);
                // The steps after a failed one build on it.
                break;
            }
        }
    }
    assert!(ran > 0, "no ```console example found");
    eprintln!("{ran} console steps run");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `operating/service.md` names the unit's settings as `Key=value`: each must be a line of
/// `contrib/toolhost.service` or its drop-in, the unit's `Documentation=` must lead to a
/// heading of the book, and its stop timeout must cover the drain the page describes.
#[test]
fn the_service_page_names_only_settings_the_unit_has() {
    let root = crate::support::workspace_root();
    let unit = std::fs::read_to_string(root.join("contrib/toolhost.service")).expect("unit");
    let drop_in = std::fs::read_to_string(root.join("contrib/toolhost.service.d/serve-http.conf"))
        .expect("drop-in");
    let lines: BTreeSet<&str> = unit.lines().chain(drop_in.lines()).map(str::trim).collect();
    let page = std::fs::read_to_string(book_src().join("operating/service.md")).expect("page");
    let mut named = Vec::new();
    for span in page.split('`').skip(1).step_by(2) {
        let Some((key, value)) = span.split_once('=') else {
            continue;
        };
        let directive = key.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && key.chars().all(|c| c.is_ascii_alphanumeric())
            && key.chars().any(|c| c.is_ascii_lowercase());
        if directive && !value.is_empty() {
            named.push(span.to_owned());
        }
    }
    assert!(
        named.len() > 20,
        "the page names the unit's settings: {named:?}"
    );
    let missing: Vec<&String> = named
        .iter()
        .filter(|s| !lines.contains(s.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the page names settings the unit lacks: {missing:?}"
    );

    let url = unit
        .lines()
        .find_map(|l| l.strip_prefix("Documentation="))
        .expect("a Documentation= line");
    let (file, anchor) = url
        .strip_prefix("https://github.com/toolhost/toolhost/blob/main/")
        .and_then(|rest| rest.split_once('#'))
        .unwrap_or_else(|| panic!("Documentation= is a page of the book with a heading: {url}"));
    let text = std::fs::read_to_string(root.join(file)).expect("the documented page");
    assert!(
        anchors(&text).contains(anchor),
        "{url}: no heading #{anchor}"
    );

    // Drain: 10 s for the balancer's check, 10 s for requests in flight, 5 s for the
    // control socket's calls, 1.5 s for a worker to be killed; then a margin.
    let stop = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.strip_suffix('s'))
        .and_then(|v| v.parse::<u32>().ok())
        .expect("TimeoutStopSec=Ns");
    assert!(
        stop >= 27 + 10,
        "TimeoutStopSec={stop}s leaves no margin over the drain"
    );
}
