//! Node-splitting validation for `edit_file`: the bundled tree-sitter grammars (Rust,
//! Python, JavaScript, TypeScript, TSX, JSON, TOML, chosen by file extension) parse the
//! file before and after an edit; an edit that turns a clean parse into one with an
//! ERROR or MISSING node is named by the error's place and by the node of the original
//! tree the edit cut through.
//!
//! Weak spots: tree-sitter recovers from errors, so "clean" means what its grammar
//! accepts, which is close to but not the compiler's language (a Rust file with a type
//! error parses fine); a file that had errors before is not checked at all.

use std::ops::Range;
use std::path::Path;

use tree_sitter::{Language, Node, Parser, Tree};

/// A bundled grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grammar {
    /// `.rs`
    Rust,
    /// `.py`, `.pyi`
    Python,
    /// `.js`, `.mjs`, `.cjs`, `.jsx`
    JavaScript,
    /// `.ts`, `.mts`, `.cts`
    TypeScript,
    /// `.tsx`
    Tsx,
    /// `.json`
    Json,
    /// `.toml`
    Toml,
}

impl Grammar {
    /// The grammar for `path`'s extension, if one is bundled.
    pub(crate) fn for_path(path: &Path) -> Option<Grammar> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "rs" => Grammar::Rust,
            "py" | "pyi" => Grammar::Python,
            "js" | "mjs" | "cjs" | "jsx" => Grammar::JavaScript,
            "ts" | "mts" | "cts" => Grammar::TypeScript,
            "tsx" => Grammar::Tsx,
            "json" => Grammar::Json,
            "toml" => Grammar::Toml,
            _ => return None,
        })
    }

    /// The language's name, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Grammar::Rust => "Rust",
            Grammar::Python => "Python",
            Grammar::JavaScript => "JavaScript",
            Grammar::TypeScript => "TypeScript",
            Grammar::Tsx => "TSX",
            Grammar::Json => "JSON",
            Grammar::Toml => "TOML",
        }
    }

    fn language(self) -> Language {
        match self {
            Grammar::Rust => tree_sitter_rust::LANGUAGE.into(),
            Grammar::Python => tree_sitter_python::LANGUAGE.into(),
            Grammar::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Grammar::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Grammar::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Grammar::Json => tree_sitter_json::LANGUAGE.into(),
            Grammar::Toml => tree_sitter_toml_ng::LANGUAGE.into(),
        }
    }

    fn parse(self, text: &str) -> Result<Tree, String> {
        let mut parser = Parser::new();
        parser
            .set_language(&self.language())
            .map_err(|e| format!("the {} grammar could not be loaded: {e}", self.name()))?;
        parser
            .parse(text, None)
            .ok_or_else(|| format!("the {} parser gave up on the file", self.name()))
    }
}

/// One edit: the bytes it replaced in the original text and the bytes its replacement
/// occupies in the edited text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EditSpan {
    /// In the original text.
    pub(crate) before: Range<usize>,
    /// In the edited text.
    pub(crate) after: Range<usize>,
}

/// Where a parse found its first error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ErrorSite {
    /// Line, from 1.
    pub(crate) line: usize,
    /// Column in characters, from 1.
    pub(crate) column: usize,
    /// What is wrong: "missing `}`" or "unexpected `...`".
    pub(crate) what: String,
}

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The edited text parses as cleanly as the original.
    Clean(Grammar),
    /// The original already had syntax errors: the edit was not judged.
    AlreadyBroken(Grammar, ErrorSite),
    /// The edit turned a clean file into one with a syntax error.
    Broken(Breakage),
    /// The grammar could not run (never expected; the edit is not blocked).
    Unchecked(String),
}

/// A syntax error an edit introduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Breakage {
    /// The grammar.
    pub(crate) grammar: Grammar,
    /// The first error in the edited text.
    pub(crate) error: ErrorSite,
    /// The node the edit split (or the one holding the error), in words.
    pub(crate) node: String,
    /// The lines of the edited text the edit nearest the error wrote (from 1, both
    /// ends included; for a deletion, the line where the text was taken out).
    pub(crate) edited: (usize, usize),
}

impl Breakage {
    /// One sentence: where the error is and which node the edit split.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} syntax error at line {}, column {}: {}; {}",
            self.grammar.name(),
            self.error.line,
            self.error.column,
            self.error.what,
            self.node
        )
    }
}

/// Parses `before` and `after` with `grammar` and judges the edit `spans` describe.
pub(crate) fn check(grammar: Grammar, before: &str, after: &str, spans: &[EditSpan]) -> Verdict {
    let old = match grammar.parse(before) {
        Ok(tree) => tree,
        Err(e) => return Verdict::Unchecked(e),
    };
    if let Some(site) = first_error(old.root_node(), before) {
        return Verdict::AlreadyBroken(grammar, site);
    }
    let new = match grammar.parse(after) {
        Ok(tree) => tree,
        Err(e) => return Verdict::Unchecked(e),
    };
    let candidates = error_nodes(new.root_node());
    // The error nearest an edit (a MISSING node before an ERROR at the same distance):
    // the likeliest to be the edit's doing, and the edit nearest it the likeliest culprit.
    let nearest_span = |node: &Node<'_>| {
        spans
            .iter()
            .min_by_key(|s| gap(&s.after, &node.byte_range()))
            .map_or(usize::MAX, |s| gap(&s.after, &node.byte_range()))
    };
    let Some(error_node) = candidates
        .iter()
        .min_by_key(|n| (nearest_span(n), n.is_error()))
        .copied()
    else {
        return Verdict::Clean(grammar);
    };
    let error = site(error_node, after);
    let mut by_distance: Vec<&EditSpan> = spans.iter().collect();
    by_distance.sort_by_key(|s| gap(&s.after, &error_node.byte_range()));
    let split = by_distance
        .iter()
        .find_map(|span| smallest_split(old.root_node(), &span.before));
    let node = if let Some(node) = split {
        format!("the edit splits {}", describe_node(node, before))
    } else if let Some(node) = by_distance
        .first()
        .and_then(|span| smallest_containing(old.root_node(), &span.before))
    {
        format!("the edit is inside {}", describe_node(node, before))
    } else if let Some(node) = holder(error_node) {
        format!(
            "the error is inside {} of the edited text",
            describe_node(node, after)
        )
    } else {
        "the error is at the top level of the file".to_owned()
    };
    let edited = by_distance
        .first()
        .map_or((error.line, error.line), |span| {
            let line_of = |at: usize| after.get(..at).map_or(1, |t| t.matches('\n').count() + 1);
            let start = line_of(span.after.start);
            // The last line the new text is on (its final line break belongs to it).
            let end_at = span.after.end.saturating_sub(1).max(span.after.start);
            (start, line_of(end_at).max(start))
        });
    Verdict::Broken(Breakage {
        grammar,
        error,
        node,
        edited,
    })
}

/// The bytes between two ranges (0 when they overlap or touch).
fn gap(a: &Range<usize>, b: &Range<usize>) -> usize {
    if b.end < a.start {
        a.start - b.end
    } else {
        b.start.saturating_sub(a.end)
    }
}

/// Every MISSING node and every ERROR node without an ERROR inside it.
fn error_nodes(root: Node<'_>) -> Vec<Node<'_>> {
    let mut found = Vec::new();
    if !root.has_error() {
        return found;
    }
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        let mut inner_error = false;
        for i in 0..node.child_count() {
            if let Some(child) = node.child(i)
                && (child.has_error() || child.is_missing())
            {
                inner_error |= child.is_error() || child.has_error();
                stack.push(child);
            }
        }
        if node.is_missing() || (node.is_error() && !inner_error) {
            found.push(node);
        }
    }
    found
}

/// The smallest named node, other than the root, that holds all of `range`.
fn smallest_containing<'t>(root: Node<'t>, range: &Range<usize>) -> Option<Node<'t>> {
    let mut best = None;
    let mut current = root;
    'descend: loop {
        for i in 0..current.child_count() {
            if let Some(child) = current.child(i)
                && child.start_byte() <= range.start
                && range.end <= child.end_byte()
                && child.end_byte() > child.start_byte()
            {
                if child.is_named() {
                    best = Some(child);
                }
                current = child;
                continue 'descend;
            }
        }
        return best;
    }
}

/// The first ERROR or MISSING node in document order, if any.
fn first_error_node(root: Node<'_>) -> Option<Node<'_>> {
    if !root.has_error() {
        return None;
    }
    // Pre-order with an explicit stack (deeply nested files must not exhaust the stack):
    // children pushed last-first, so the first one is visited first.
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if node.is_error() || node.is_missing() {
            return Some(node);
        }
        for i in (0..node.child_count()).rev() {
            if let Some(child) = node.child(i)
                && (child.has_error() || child.is_missing())
            {
                stack.push(child);
            }
        }
    }
    None
}

fn first_error(root: Node<'_>, text: &str) -> Option<ErrorSite> {
    first_error_node(root).map(|node| site(node, text))
}

/// Where `node` is and what it is, in words. For an ERROR node, the place is its first
/// token that did not fit (the start of what the parser could not match), not the start
/// of the complete pieces it wraps.
fn site(node: Node<'_>, text: &str) -> ErrorSite {
    let place = if node.is_error() {
        (0..node.child_count())
            .filter_map(|i| node.child(i))
            .find(|c| !c.is_named() || c.is_error() || c.is_missing())
            .unwrap_or(node)
    } else {
        node
    };
    let start = place.start_position();
    let at = place.start_byte();
    let line_start = text
        .get(..at)
        .and_then(|t| t.rfind('\n'))
        .map_or(0, |i| i + 1);
    let column = text
        .get(line_start..at)
        .map_or(start.column, |s| s.chars().count())
        + 1;
    let what = if node.is_missing() {
        format!("missing `{}`", node.kind())
    } else {
        let rest = text.get(at..node.end_byte()).unwrap_or("").trim();
        if rest.is_empty() {
            "unexpected end of input".to_owned()
        } else {
            format!("cannot parse from `{}`", snippet(rest))
        }
    };
    ErrorSite {
        line: start.row + 1,
        column,
        what,
    }
}

/// The first line of `text`, at most 40 characters.
fn snippet(text: &str) -> String {
    let first = text.lines().next().unwrap_or("").trim();
    let mut out: String = first.chars().take(40).collect();
    if out.len() < first.len() || text.trim().lines().nth(1).is_some() {
        out.push_str(" …");
    }
    out
}

/// The smallest named node that `cut` cuts partly: it starts inside the range and ends
/// after it, or starts before it and ends inside it. A pure insertion (an empty range)
/// cuts nothing.
fn smallest_split<'t>(root: Node<'t>, cut: &Range<usize>) -> Option<Node<'t>> {
    if cut.is_empty() {
        return None;
    }
    let mut best: Option<Node<'t>> = None;
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        let (start, end) = (node.start_byte(), node.end_byte());
        let overlaps = start < cut.end && cut.start < end;
        if !overlaps {
            continue;
        }
        let contains_cut = start <= cut.start && cut.end <= end;
        let inside_cut = cut.start <= start && end <= cut.end;
        if node.is_named()
            && !contains_cut
            && !inside_cut
            && best.is_none_or(|b| end - start < b.end_byte() - b.start_byte())
        {
            best = Some(node);
        }
        if !inside_cut {
            for i in 0..node.child_count() {
                if let Some(child) = node.child(i) {
                    stack.push(child);
                }
            }
        }
    }
    best
}

/// The nearest named ancestor of `node` that is not an error and not the root.
fn holder(node: Node<'_>) -> Option<Node<'_>> {
    let mut current = node.parent();
    while let Some(n) = current {
        n.parent()?;
        if n.is_named() && !n.is_error() {
            return Some(n);
        }
        current = n.parent();
    }
    None
}

/// "the function_item `parse` (lines 10-24)", or for a node without a name, its first
/// line; a nameless node inside a named one says which ("the block (lines 11-24) of the
/// function_item `parse`").
fn describe_node(node: Node<'_>, text: &str) -> String {
    let lines = line_span(node);
    match name_of(node, text) {
        Some(name) => format!("the {} `{name}` ({lines})", node.kind()),
        None => {
            let mut out = format!("the {} ({lines})", node.kind());
            let mut up = node.parent();
            while let Some(parent) = up {
                if let Some(name) = name_of(parent, text) {
                    out.push_str(&format!(" of the {} `{name}`", parent.kind()));
                    return out;
                }
                up = parent.parent();
            }
            let first = snippet(text.get(node.byte_range()).unwrap_or(""));
            if !first.is_empty() {
                out.push_str(&format!(" starting `{first}`"));
            }
            out
        }
    }
}

fn line_span(node: Node<'_>) -> String {
    let end = node.end_position();
    // A node that ends with a line break ends on the line before the next one starts.
    let last = if end.column == 0 && end.row > node.start_position().row {
        end.row
    } else {
        end.row + 1
    };
    let (a, b) = (node.start_position().row + 1, last);
    if a == b {
        format!("line {a}")
    } else {
        format!("lines {a}-{b}")
    }
}

/// The node's `name` (or `key`) field, as written.
fn name_of(node: Node<'_>, text: &str) -> Option<String> {
    let field = node
        .child_by_field_name("name")
        .or_else(|| node.child_by_field_name("key"))?;
    let name = text.get(field.byte_range())?.trim();
    (!name.is_empty()).then(|| snippet(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The span of replacing `old` (found once in `before`) by `new`.
    fn edit(before: &str, old: &str, new: &str) -> (String, EditSpan) {
        let at = before.find(old).expect("old text present");
        let after = format!("{}{new}{}", &before[..at], &before[at + old.len()..]);
        (
            after,
            EditSpan {
                before: at..at + old.len(),
                after: at..at + new.len(),
            },
        )
    }

    const RUST: &str = "fn keep() {}\n\nfn parse(input: &str) -> u32 {\n    let n = input.len();\n    n as u32\n}\n\nfn other() {}\n";

    #[test]
    fn grammars_are_chosen_by_extension() {
        for (path, grammar) in [
            ("a.rs", Some(Grammar::Rust)),
            ("b/c.PY", Some(Grammar::Python)),
            ("x.jsx", Some(Grammar::JavaScript)),
            ("x.mts", Some(Grammar::TypeScript)),
            ("x.tsx", Some(Grammar::Tsx)),
            ("package.json", Some(Grammar::Json)),
            ("Cargo.toml", Some(Grammar::Toml)),
            ("README.md", None),
            ("Makefile", None),
        ] {
            assert_eq!(Grammar::for_path(Path::new(path)), grammar, "{path}");
        }
    }

    #[test]
    fn every_grammar_loads_and_parses_a_clean_sample() {
        for (grammar, sample) in [
            (Grammar::Rust, RUST),
            (Grammar::Python, "def f(x):\n    return x\n"),
            (Grammar::JavaScript, "const f = (x) => <b>{x}</b>;\n"),
            (Grammar::TypeScript, "let n: number = 1;\n"),
            (Grammar::Tsx, "const e = <div>{1 as number}</div>;\n"),
            (Grammar::Json, "{\"a\": [1, 2]}\n"),
            (Grammar::Toml, "[package]\nname = \"x\"\n"),
        ] {
            let tree = grammar.parse(sample).expect("parses");
            assert!(!tree.root_node().has_error(), "{grammar:?}: {sample}");
        }
    }

    #[test]
    fn deleting_a_closing_brace_names_the_error_and_the_split_function() {
        let (after, span) = edit(RUST, "    n as u32\n}\n", "    n as u32\n");
        let Verdict::Broken(b) = check(Grammar::Rust, RUST, &after, &[span]) else {
            panic!("not judged broken");
        };
        // tree-sitter notices where the function can no longer close: after the edit.
        assert!(b.error.line >= 5, "{b:?}");
        assert!(
            b.node
                .starts_with("the edit splits the block (lines 3-6) of the function_item `parse`"),
            "{}",
            b.describe()
        );
    }

    #[test]
    fn a_valid_edit_is_clean_and_a_broken_original_is_not_judged() {
        let (after, span) = edit(RUST, "n as u32", "(n * 2) as u32");
        assert_eq!(
            check(Grammar::Rust, RUST, &after, &[span]),
            Verdict::Clean(Grammar::Rust)
        );
        let broken = "fn f( {\n";
        let (after, span) = edit(broken, "f(", "g(");
        assert!(matches!(
            check(Grammar::Rust, broken, &after, &[span]),
            Verdict::AlreadyBroken(Grammar::Rust, ErrorSite { line: 1, .. })
        ));
    }

    #[test]
    fn an_edit_inside_one_node_names_the_node_holding_the_error() {
        let (after, span) = edit(RUST, "input.len()", "input.len(");
        let Verdict::Broken(b) = check(Grammar::Rust, RUST, &after, &[span]) else {
            panic!("not judged broken");
        };
        assert_eq!(b.error.line, 4, "{b:?}");
        assert!(b.node.contains("parse"), "{}", b.describe());
    }

    #[test]
    fn json_and_toml_and_python_breakage_is_found() {
        let json = "{\n  \"a\": 1,\n  \"b\": [1, 2]\n}\n";
        let (after, span) = edit(json, "[1, 2]", "[1, 2");
        assert!(matches!(
            check(Grammar::Json, json, &after, &[span]),
            Verdict::Broken(_)
        ));
        let toml = "[package]\nname = \"x\"\n";
        let (after, span) = edit(toml, "name = \"x\"", "name = ");
        assert!(matches!(
            check(Grammar::Toml, toml, &after, &[span]),
            Verdict::Broken(_)
        ));
        let py = "def f(x):\n    return x\n";
        let (after, span) = edit(py, "def f(x):", "def f(x:");
        let Verdict::Broken(b) = check(Grammar::Python, py, &after, &[span]) else {
            panic!("not judged broken");
        };
        assert!(b.node.contains("function_definition"), "{}", b.describe());
    }
}
