//! `rustdoc_lookup`: an item of the standard library (`std::collections::HashMap::entry`)
//! looked up in the toolchain's local documentation, the rust-docs component under
//! `$(rustc --print sysroot)/share/doc/rust/html`. Items are found by rustdoc's file
//! layout: a module is a folder with `index.html` and a `sidebar-items*.js` listing its
//! items by kind, an item is `KIND.NAME.html`, and a member (method, variant, field,
//! associated item) is an element with the id `KIND.NAME` in its type's page. The page
//! is parsed with html5ever (through htmd), the signature taken as text and the doc
//! block turned into Markdown.
//!
//! Weak spots: rustdoc's HTML is not a stable format (the classes read here are those of
//! rustdoc since 2023: `item-decl`, `top-doc`, `code-header`, `docblock`); a name only
//! re-exported (not inlined) is found through the index of every module's items, by its
//! last segment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use markup5ever_rcdom::{Node, NodeData};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_plugin_api::{CancelFlag, Structured, ToolContext, ToolError, tool};

use crate::exec;
use crate::explain::rustc_command;
use crate::project::Workspace;

/// The crates the rust-docs component documents, in the order a bare name is looked up.
const CRATES: &[&str] = &["std", "core", "alloc", "proc_macro", "test"];

/// Member kinds: the prefixes of their ids in a type's page.
const MEMBER_KINDS: &[&str] = &[
    "method",
    "tymethod",
    "variant",
    "structfield",
    "associatedtype",
    "associatedconstant",
];

/// How many near matches a "not found" answer names.
const NEAR_MATCHES: usize = 8;

/// Arguments of `rustdoc_lookup`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LookupArgs {
    /// The item's path: `std::collections::HashMap::entry`, `std::vec::Vec`,
    /// `Option::map`, `core::mem::swap`, `std::println`, `str::split_once`. A path that
    /// does not start with a crate (std, core, alloc, proc_macro, test) is looked up in
    /// std first.
    item: String,
}

/// What `rustdoc_lookup` returns.
#[derive(Serialize, JsonSchema)]
pub struct DocEntry {
    /// The item's full path in the documentation.
    pub path: String,
    /// Its kind: `struct`, `fn`, `method`, `mod`, `trait`, `variant`, ...
    pub kind: String,
    /// Its signature (declaration), as text.
    pub signature: String,
    /// Its documentation, as Markdown.
    pub doc: String,
    /// Members of a type (methods, variants, fields) or items of a module, by kind.
    pub members: BTreeMap<String, Vec<String>>,
    /// The HTML page (and anchor) it was read from.
    pub source: String,
}

/// Looks up an item of the Rust standard library (std, core, alloc) in the toolchain's
/// local documentation and returns its signature and documentation as Markdown, with a
/// type's methods or a module's items listed. `item` is a path:
/// `std::collections::HashMap::entry`, `Vec::push`, `Option`, `std::fs`,
/// `str::split_once`. Works offline; an unknown path gets near matches.
#[tool(risk = read, programs = ["rustc"], workspace)]
pub async fn rustdoc_lookup(
    ctx: &ToolContext<'_>,
    #[args] args: LookupArgs,
) -> Result<Structured<DocEntry>, ToolError> {
    let answer = Workspace::answer(ctx).await?;
    let command = rustc_command(&answer, vec!["--print".to_owned(), "sysroot".to_owned()]);
    let value = ctx
        .blocking(move |cancel: &CancelFlag| {
            let ran = exec::run(command, cancel)?;
            let sysroot = ran.stdout().trim().to_owned();
            if ran.exit_code() != Some(0) || sysroot.is_empty() {
                return Err(ToolError::failed(format!(
                    "rustc --print sysroot failed: {}",
                    ran.stderr().trim()
                )));
            }
            let docs = docs_folder(Path::new(&sysroot))?;
            lookup(&docs, &args.item)
        })
        .await
        .map_err(ToolError::failed)??;
    let text = rustdoc_lookup_text(&value);
    Ok(Structured::new(value).text(text))
}

/// The text the model reads for a result of `rustdoc_lookup`.
fn rustdoc_lookup_text(e: &DocEntry) -> String {
    let mut text = format!("# {} ({})\n\n", e.path, e.kind);
    if !e.signature.trim().is_empty() {
        text.push_str(&format!("```rust\n{}\n```\n\n", e.signature.trim()));
    }
    if !e.doc.trim().is_empty() {
        text.push_str(e.doc.trim());
        text.push_str("\n\n");
    }
    for (kind, names) in &e.members {
        text.push_str(&format!("{kind}: {}\n", names.join(", ")));
    }
    text
}

/// The rust-docs HTML folder of the toolchain at `sysroot`, or the answer that says how
/// to install it.
pub fn docs_folder(sysroot: &Path) -> Result<PathBuf, ToolError> {
    let docs = sysroot.join("share/doc/rust/html");
    if docs.join("std/index.html").is_file() {
        return Ok(docs);
    }
    let toolchain = sysroot
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|_| sysroot.parent().is_some_and(|p| p.ends_with("toolchains")));
    let install = match toolchain {
        Some(name) => format!("rustup component add rust-docs --toolchain {name}"),
        None => "rustup component add rust-docs".to_owned(),
    };
    Err(ToolError::failed(format!(
        "the Rust documentation is not installed for this toolchain (no {}); install it \
         with `{install}` (or your system's rust-doc package), then ask again",
        docs.join("std/index.html").display()
    )))
}

/// What a path resolved to.
struct Found {
    /// The item's page.
    file: PathBuf,
    /// The item's kind (`mod` for a module).
    kind: String,
    /// Its path in the docs.
    path: Vec<String>,
    /// A member of it, if the path named one.
    member: Option<String>,
}

/// Looks `item` up in the docs at `docs`.
pub fn lookup(docs: &Path, item: &str) -> Result<DocEntry, ToolError> {
    let segments: Vec<String> = item
        .trim()
        .trim_end_matches("()")
        .trim_end_matches('!')
        .trim_start_matches("::")
        .split("::")
        .map(|s| s.trim().to_owned())
        .collect();
    if segments.iter().any(|s| {
        s.is_empty()
            || !s
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '#')
    }) {
        return Err(ToolError::invalid_args(format!(
            "`{item}` is not an item path: give names joined by `::`, as in \
             `std::collections::HashMap::entry`"
        )));
    }
    let found = resolve(docs, &segments).ok_or_else(|| not_found(docs, item, &segments))?;
    render(docs, found, item)
}

/// Finds the page of `segments`: as written, then under each crate, then by its first
/// item name in the index of every module.
fn resolve(docs: &Path, segments: &[String]) -> Option<Found> {
    if CRATES.contains(&segments[0].as_str())
        && let Some(found) = resolve_in(docs, segments)
    {
        return Some(found);
    }
    for krate in CRATES {
        let mut full = vec![(*krate).to_owned()];
        full.extend(segments.iter().cloned());
        if let Some(found) = resolve_in(docs, &full) {
            return Some(found);
        }
    }
    // A name re-exported elsewhere, or given without its module: `HashMap::entry`.
    let start = usize::from(CRATES.contains(&segments[0].as_str()));
    let name = segments.get(start)?;
    let index = index(docs);
    let mut candidates: Vec<&IndexEntry> = index
        .iter()
        .filter(|e| &e.name == name && e.kind != "mod")
        .collect();
    candidates.sort_by_key(|e| (e.path.len(), e.path[0] != "std"));
    let best = candidates.first()?;
    let mut full = best.path.clone();
    full.extend(segments[start + 1..].iter().cloned());
    resolve_in(docs, &full)
}

/// Resolves a full path (`crate::module::...::Item[::member]`).
fn resolve_in(docs: &Path, segments: &[String]) -> Option<Found> {
    let module_dir = docs.join(segments.join("/"));
    if module_dir.join("index.html").is_file() && segments.len() > 1
        || (segments.len() == 1 && module_dir.join("index.html").is_file())
    {
        return Some(Found {
            file: module_dir.join("index.html"),
            kind: "mod".to_owned(),
            path: segments.to_vec(),
            member: None,
        });
    }
    if segments.len() >= 2 {
        let (last, parent) = segments.split_last()?;
        if let Some((kind, file)) = item_in(docs, parent, last) {
            return Some(Found {
                file,
                kind,
                path: segments.to_vec(),
                member: None,
            });
        }
    }
    if segments.len() >= 3 {
        let (member, item) = segments.split_last()?;
        let (name, module) = item.split_last()?;
        if let Some((kind, file)) = item_in(docs, module, name) {
            return Some(Found {
                file,
                kind,
                path: item.to_vec(),
                member: Some(member.clone()),
            });
        }
    }
    None
}

/// The item `name` of the module `module`: its kind and page (not submodules).
fn item_in(docs: &Path, module: &[String], name: &str) -> Option<(String, PathBuf)> {
    let dir = docs.join(module.join("/"));
    let items = sidebar(&dir)?;
    items
        .iter()
        .filter(|(kind, names)| kind.as_str() != "mod" && names.iter().any(|n| n == name))
        .map(|(kind, _)| (kind.clone(), dir.join(format!("{kind}.{name}.html"))))
        .find(|(_, file)| file.is_file())
}

/// A module folder's `sidebar-items*.js`: its items by kind.
fn sidebar(dir: &Path) -> Option<BTreeMap<String, Vec<String>>> {
    let file = std::fs::read_dir(dir).ok()?.flatten().find(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with("sidebar-items") && name.ends_with(".js")
    })?;
    let text = std::fs::read_to_string(file.path()).ok()?;
    let json = text
        .trim()
        .strip_prefix("window.SIDEBAR_ITEMS = ")?
        .trim_end_matches(';');
    serde_json::from_str(json).ok()
}

/// One item of the index of every module.
struct IndexEntry {
    /// Its path (crate first).
    path: Vec<String>,
    /// Its last segment.
    name: String,
    /// Its kind.
    kind: String,
}

/// Every item of the documented crates, from every module's sidebar.
fn index(docs: &Path) -> Vec<IndexEntry> {
    let mut out = Vec::new();
    let mut stack: Vec<Vec<String>> = CRATES.iter().map(|c| vec![(*c).to_owned()]).collect();
    while let Some(module) = stack.pop() {
        let Some(items) = sidebar(&docs.join(module.join("/"))) else {
            continue;
        };
        for (kind, names) in items {
            for name in names {
                let mut path = module.clone();
                path.push(name.clone());
                if kind == "mod" {
                    stack.push(path.clone());
                }
                out.push(IndexEntry {
                    path,
                    name,
                    kind: kind.clone(),
                });
            }
        }
    }
    out
}

/// The "not found" answer, with the nearest names.
fn not_found(docs: &Path, item: &str, segments: &[String]) -> ToolError {
    let asked = segments.last().map(String::as_str).unwrap_or_default();
    // Missing from a module or an item that exists: the near items or members of it.
    if segments.len() >= 2 {
        let parent = &segments[..segments.len() - 1];
        if let Some(found) = resolve(docs, parent).filter(|f| f.member.is_none()) {
            let names: Vec<String> = if found.kind == "mod" {
                found
                    .file
                    .parent()
                    .and_then(sidebar)
                    .map(|items| items.into_values().flatten().collect())
                    .unwrap_or_default()
            } else {
                std::fs::read_to_string(&found.file)
                    .map(|html| member_ids(&html))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(_, name)| name)
                    .collect()
            };
            let near = nearest(asked, names.iter().map(String::as_str));
            return ToolError::failed(format!(
                "`{item}` is not in the local documentation: {} has no {} `{asked}`{}",
                found.path.join("::"),
                if found.kind == "mod" {
                    "item"
                } else {
                    "member"
                },
                suggestion(&near, &found.path.join("::"))
            ));
        }
    }
    let index = index(docs);
    let near: Vec<String> = {
        let names = nearest(asked, index.iter().map(|e| e.name.as_str()));
        names
            .iter()
            .filter_map(|n| index.iter().find(|e| &e.name == n))
            .map(|e| e.path.join("::"))
            .collect()
    };
    ToolError::failed(format!(
        "`{item}` is not in the local documentation of std, core and alloc{}",
        if near.is_empty() {
            "; check the spelling, or name the module it is in".to_owned()
        } else {
            format!("; near matches: {}", near.join(", "))
        }
    ))
}

/// "; near matches: ..." for members of `parent`.
fn suggestion(near: &[String], parent: &str) -> String {
    if near.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = near.iter().map(|n| format!("{parent}::{n}")).collect();
        format!("; near matches: {}", list.join(", "))
    }
}

/// The names among `names` nearest to `asked`: containing it (either case) or within a
/// small edit distance, best first, at most [`NEAR_MATCHES`].
fn nearest<'a>(asked: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let lower = asked.to_lowercase();
    let limit = (asked.chars().count() / 3).clamp(1, 3);
    let mut scored: Vec<(usize, String)> = names
        .filter_map(|n| {
            let d = edit_distance(&lower, &n.to_lowercase());
            let contains = n.to_lowercase().contains(&lower) || lower.contains(&n.to_lowercase());
            (d <= limit || (contains && n.len() > 2)).then(|| (d, n.to_owned()))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(NEAR_MATCHES)
        .map(|(_, n)| n)
        .collect()
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The member ids of a page (`method.entry` as `("method", "entry")`), each once.
fn member_ids(html: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for part in html.split("id=\"").skip(1) {
        let Some(id) = part.split('"').next() else {
            continue;
        };
        let Some((kind, name)) = id.split_once('.') else {
            continue;
        };
        if !MEMBER_KINDS.contains(&kind) {
            continue;
        }
        // Trait implementations repeat a name as `method.eq-1`.
        let name = match name.rsplit_once('-') {
            Some((base, n)) if n.bytes().all(|b| b.is_ascii_digit()) => base,
            _ => name,
        };
        let entry = (kind.to_owned(), name.to_owned());
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out
}

/// Reads the page of `found` and builds the entry.
fn render(docs: &Path, found: Found, asked: &str) -> Result<DocEntry, ToolError> {
    let html = std::fs::read_to_string(&found.file)
        .map_err(|e| ToolError::failed(format!("could not read {}: {e}", found.file.display())))?;
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec!["script", "style", "button"])
        .build();
    let tree = converter
        .html_to_tree(&html)
        .map_err(|e| ToolError::failed(format!("could not parse {}: {e}", found.file.display())))?;
    let rel = found
        .file
        .strip_prefix(docs)
        .unwrap_or(&found.file)
        .display()
        .to_string();
    if let Some(member) = &found.member {
        for kind in MEMBER_KINDS {
            let id = format!("{kind}.{member}");
            let Some(chain) = find_path(&tree, &|n| attr(n, "id").as_deref() == Some(&id)) else {
                continue;
            };
            let Some(node) = chain.last() else {
                continue;
            };
            let signature = find_path(node, &|n| has_class(n, "code-header"))
                .or_else(|| find_path(node, &|n| element_name(n) == Some("code")))
                .and_then(|c| c.last().map(|n| text_of(n)))
                .unwrap_or_else(|| text_of(node));
            let doc = member_doc(&chain)
                .map(|d| markdown(&converter, &d))
                .unwrap_or_default();
            let mut path = found.path.clone();
            path.push(member.clone());
            return Ok(DocEntry {
                path: path.join("::"),
                kind: (*kind).to_owned(),
                signature: signature.trim().to_owned(),
                doc,
                members: BTreeMap::new(),
                source: format!("{rel}#{id}"),
            });
        }
        let near: Vec<String> = nearest(
            member,
            member_ids(&html).iter().map(|(_, name)| name.as_str()),
        );
        return Err(ToolError::failed(format!(
            "`{asked}` is not in the local documentation: {} has no member `{member}`{}",
            found.path.join("::"),
            suggestion(&near, &found.path.join("::"))
        )));
    }
    let signature = find_path(&tree, &|n| has_class(n, "item-decl"))
        .and_then(|c| c.last().map(|n| text_of(n)))
        .unwrap_or_default();
    let doc = find_path(&tree, &|n| has_class(n, "top-doc"))
        .and_then(|c| c.last().cloned())
        .and_then(|top| find_path(&top, &|n| has_class(n, "docblock")))
        .and_then(|c| c.last().cloned())
        .map(|d| markdown(&converter, &d))
        .unwrap_or_default();
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if found.kind == "mod" {
        if let Some(parent) = found.file.parent().and_then(sidebar) {
            members = parent;
        }
    } else {
        for (kind, name) in member_ids(&html) {
            members.entry(kind).or_default().push(name);
        }
    }
    Ok(DocEntry {
        path: found.path.join("::"),
        kind: found.kind,
        signature: signature.trim().to_owned(),
        doc,
        members,
        source: rel,
    })
}

/// A member's doc block: in a `<details>` whose `<summary>` holds the member's section,
/// or the element right after it.
fn member_doc(chain: &[Rc<Node>]) -> Option<Rc<Node>> {
    let node = chain.last()?;
    if chain.len() >= 3 && element_name(&chain[chain.len() - 2]) == Some("summary") {
        let details = &chain[chain.len() - 3];
        let children = details.children.borrow();
        if let Some(doc) = children.iter().find(|c| has_class(c, "docblock")) {
            return Some(doc.clone());
        }
    }
    let parent = chain.get(chain.len().checked_sub(2)?)?;
    let siblings = parent.children.borrow();
    let at = siblings.iter().position(|c| Rc::ptr_eq(c, node))?;
    siblings[at + 1..]
        .iter()
        .find(|c| element_name(c).is_some())
        .filter(|c| has_class(c, "docblock"))
        .cloned()
}

/// The path from `root` down to the first node (depth first) for which `hit` holds.
fn find_path(root: &Rc<Node>, hit: &dyn Fn(&Node) -> bool) -> Option<Vec<Rc<Node>>> {
    if hit(root) {
        return Some(vec![root.clone()]);
    }
    for child in root.children.borrow().iter() {
        if let Some(mut path) = find_path(child, hit) {
            path.insert(0, root.clone());
            return Some(path);
        }
    }
    None
}

/// An element's tag name.
fn element_name(node: &Node) -> Option<&str> {
    match &node.data {
        NodeData::Element { name, .. } => Some(&name.local),
        _ => None,
    }
}

/// An element's attribute.
fn attr(node: &Node, wanted: &str) -> Option<String> {
    match &node.data {
        NodeData::Element { attrs, .. } => attrs
            .borrow()
            .iter()
            .find(|a| &*a.name.local == wanted)
            .map(|a| a.value.to_string()),
        _ => None,
    }
}

/// Whether an element has the class `class`.
fn has_class(node: &Node, class: &str) -> bool {
    attr(node, "class").is_some_and(|c| c.split_whitespace().any(|c| c == class))
}

/// The text of a node and its descendants (`<br>` as a line break).
fn text_of(node: &Node) -> String {
    let mut out = String::new();
    collect_text(node, &mut out);
    out
}

/// Appends the text beneath `node` to `out`.
fn collect_text(node: &Node, out: &mut String) {
    match &node.data {
        NodeData::Text { contents } => out.push_str(&contents.borrow()),
        NodeData::Element { name, .. } if &*name.local == "br" => out.push('\n'),
        NodeData::Element { .. } if has_class(node, "where") && !out.ends_with('\n') => {
            out.push('\n');
        }
        _ => {}
    }
    for child in node.children.borrow().iter() {
        collect_text(child, out);
    }
}

/// A doc block as Markdown: rustdoc's heading anchors (`§`) and playground links left
/// out, and links to other items pointing to their paths (which this tool looks up)
/// instead of HTML files.
fn markdown(converter: &htmd::HtmlToMarkdown, node: &Rc<Node>) -> String {
    let text = converter.tree_to_markdown(node);
    text.lines()
        .filter(|l| !l.trim_start().starts_with("[](https://play.rust-lang.org"))
        .map(tidy_links)
        .collect::<Vec<_>>()
        .join("\n")
}

/// One Markdown line with `[§](#anchor)` removed and `[x](fn.x.html "fn std::mem::x")`
/// made `[x](std::mem::x)`.
fn tidy_links(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let (before, after) = rest.split_at(at);
        let target = &after[2..];
        let Some(end) = target.find(')') else {
            break;
        };
        // rustdoc's titles are `kind path`: no parentheses before the closing one.
        let inside = &target[..end];
        if let Some(kept) = before.strip_suffix("[§") {
            out.push_str(kept);
            rest = &target[end + 1..];
            continue;
        }
        let item_path = inside
            .split_once(" \"")
            .and_then(|(_, title)| title.strip_suffix('"'))
            .and_then(|title| title.split_once(' '))
            .map(|(_, path)| path)
            .filter(|path| path.contains("::"));
        out.push_str(before);
        out.push_str("](");
        out.push_str(item_path.unwrap_or(inside));
        out.push(')');
        rest = &target[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_matches_take_close_spellings_and_containing_names() {
        let names = ["entry", "entries", "insert", "get", "remove_entry", "len"];
        let near = nearest("entri", names.iter().copied());
        assert_eq!(near[..2], ["entry", "entries"], "{near:?}");
        assert!(!near.contains(&"len".to_owned()), "{near:?}");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn links_point_to_item_paths_and_anchors_are_dropped() {
        assert_eq!(
            tidy_links(
                r#"## Examples[§](#examples) see [`take`](fn.take.html "fn core::mem::take") or [web](https://x.org)"#
            ),
            "## Examples see [`take`](core::mem::take) or [web](https://x.org)"
        );
    }

    #[test]
    fn member_ids_are_read_once_without_their_repeat_suffix() {
        let html = r#"<section id="method.eq" class="method"></section>
            <section id="method.eq-1"></section><span id="structfield.x"></span>
            <div id="implementations"></div>"#;
        assert_eq!(
            member_ids(html),
            [
                ("method".to_owned(), "eq".to_owned()),
                ("structfield".to_owned(), "x".to_owned())
            ]
        );
    }

    #[test]
    fn a_missing_component_names_the_install_command() {
        let tmp = tempfile::tempdir().expect("tmp");
        let sysroot = tmp
            .path()
            .join("toolchains")
            .join("1.95.0-x86_64-unknown-linux-gnu");
        std::fs::create_dir_all(&sysroot).expect("sysroot");
        let e = docs_folder(&sysroot).expect_err("no docs").to_string();
        assert!(
            e.contains(
                "rustup component add rust-docs --toolchain 1.95.0-x86_64-unknown-linux-gnu"
            ),
            "{e}"
        );
    }
}
