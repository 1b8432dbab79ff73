//! The description rule: a tool's description, and every `description` in its argument
//! and output schemas, must not name a tool the same profile does not show. A description
//! that says "prefer web_search" makes a model call `web_search` where it is absent (the
//! seed's contract; hermes-agent's tools/AGENTS.md). `toolhost check`, `toolhost list
//! --profile` and the host (when it resolves a profile's tools) report every such
//! mention as a warning.
//!
//! What counts as a tool name: every tool of every loaded plugin (whichever profile
//! shows it), plus [`WELL_KNOWN_TOOLS`], the names models meet in other agents and the
//! seeds. A name is matched as a whole word (letters, digits, `_` and `-`), exactly as
//! written. A name that is also an ordinary word (letters only: `memory`, `terminal`,
//! `echo`) counts only where the text plainly means the tool: in backticks (`` `bash` ``)
//! or followed by "tool" ("the memory tool"), so "kept in memory" is not flagged. Never
//! flagged: the tool's own name and its own schema's property names.
//!
//! Weak spot: the host's own `read_output` is not counted (the host offers it wherever it
//! keeps cut outputs, and its own cut marker names it); a tool that tells the model about
//! a tool in other words ("the web search tool") is not found.

use std::collections::BTreeSet;

use serde_json::Value;

use toolhost_calls::registry::ToolRegistry;
use toolhost_calls::tool::ToolSpec;

/// Tool names models know from other agents (hermes-agent, rho, Claude Code, Codex,
/// OpenAI's hosted tools), counted besides the loaded plugins' tools. A trailing `*`
/// matches any name with that prefix.
pub const WELL_KNOWN_TOOLS: &[&str] = &[
    "web_search",
    "web_fetch",
    "web_extract",
    "terminal",
    "execute_code",
    "code_interpreter",
    "browser_*",
    "bash",
    "apply_patch",
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "run_command",
    "send_message",
    "cronjob",
    "todo",
];

/// A description that names a tool the profile does not show.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Mention {
    /// The plugin the tool comes from (`toolhost` for a native tool).
    pub plugin: String,
    /// The tool whose description it is.
    pub tool: String,
    /// The tool name it mentions.
    pub word: String,
    /// Where: `description`, or `input schema at /properties/x/description` (a JSON
    /// pointer), or `output schema at ...`.
    pub place: String,
}

impl std::fmt::Display for Mention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = if self.place == "description" {
            "its description".to_owned()
        } else {
            format!("its {}", self.place)
        };
        write!(
            f,
            "plugin '{}', tool '{}': {place} names '{}', a tool this profile does not show \
             (models call tools named to them); reword it or add the tool to the profile",
            self.plugin, self.tool, self.word
        )
    }
}

/// The names the rule counts as tools.
#[derive(Debug, Clone, Default)]
pub struct DescriptionRule {
    /// Exact names.
    names: BTreeSet<String>,
    /// Prefixes (`browser_` from `browser_*`).
    prefixes: Vec<String>,
}

impl DescriptionRule {
    /// The rule counting `known` (every loaded plugin's tool names) and
    /// [`WELL_KNOWN_TOOLS`] as tool names.
    pub fn new<'a>(known: impl IntoIterator<Item = &'a str>) -> DescriptionRule {
        let mut rule = DescriptionRule::default();
        for name in WELL_KNOWN_TOOLS.iter().copied().chain(known) {
            match name.strip_suffix('*') {
                Some(prefix) => rule.prefixes.push(prefix.to_owned()),
                None => {
                    rule.names.insert(name.to_owned());
                }
            }
        }
        rule
    }

    /// The rule over every tool of `plugins` (superseded ones included).
    pub fn for_plugins(plugins: &[crate::plugins::run::plugin_tool::LoadedPlugin]) -> Self {
        let names: Vec<&str> = plugins
            .iter()
            .flat_map(|p| p.tools.iter().map(|t| t.spec().name.as_str()))
            .collect();
        DescriptionRule::new(names)
    }

    /// The rule over `registry`'s tools (what a running host knows).
    pub fn for_registry(registry: &ToolRegistry) -> Self {
        DescriptionRule::new(registry.iter().map(|t| t.spec().name.as_str()))
    }

    /// Every tool name `spec`'s descriptions mention, but its own name and its own
    /// schema's property names, with where: `(word, place)`.
    pub fn mentions(&self, spec: &ToolSpec) -> Vec<(String, String)> {
        let mut own: BTreeSet<&str> = BTreeSet::from([spec.name.as_str()]);
        property_names(&spec.schema, &mut own);
        if let Some(output) = &spec.output_schema {
            property_names(output, &mut own);
        }
        let mut texts = vec![("description".to_owned(), spec.description.as_str())];
        schema_descriptions(&spec.schema, "", "input schema at ", &mut texts);
        if let Some(output) = &spec.output_schema {
            schema_descriptions(output, "", "output schema at ", &mut texts);
        }
        let mut out: Vec<(String, String)> = Vec::new();
        for (place, text) in texts {
            for word in self.tool_words(text) {
                let entry = (word.to_owned(), place.clone());
                if !own.contains(word) && !out.contains(&entry) {
                    out.push(entry);
                }
            }
        }
        out
    }

    /// What `view` (a profile's tools) breaks the rule with: mentions of tools it does
    /// not show (a tool it holds at `deny` is not shown).
    pub fn check(&self, view: &ToolRegistry) -> Vec<Mention> {
        let shown: BTreeSet<&str> = view
            .iter()
            .filter(|t| t.spec().risk != toolhost_calls::tool::Risk::Deny)
            .map(|t| t.spec().name.as_str())
            .collect();
        let mut out = Vec::new();
        for t in view
            .iter()
            .filter(|t| shown.contains(t.spec().name.as_str()))
        {
            for (word, place) in self.mentions(t.spec()) {
                if !shown.contains(word.as_str()) {
                    out.push(Mention {
                        plugin: t.tool().origin().plugin_name().to_owned(),
                        tool: t.spec().name.clone(),
                        word,
                        place,
                    });
                }
            }
        }
        out
    }

    /// The words of `text` that are tool names by the rule's matching.
    fn tool_words<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let words = words(text);
        let mut out = Vec::new();
        for (i, &(start, word)) in words.iter().enumerate() {
            let known = self.names.contains(word)
                || self
                    .prefixes
                    .iter()
                    .any(|p| word.len() > p.len() && word.starts_with(p.as_str()));
            if !known {
                continue;
            }
            let plain = word.chars().all(|c| c.is_ascii_alphabetic());
            if plain {
                let quoted =
                    text[..start].ends_with('`') && text[start + word.len()..].starts_with('`');
                let named_tool = words
                    .get(i + 1)
                    .is_some_and(|(_, next)| *next == "tool" || *next == "tools");
                if !quoted && !named_tool {
                    continue;
                }
            }
            out.push(word);
        }
        out
    }
}

/// The words of `text` with their byte offsets: maximal runs of ASCII letters, digits,
/// `_` and `-`, with leading and trailing `-` trimmed.
fn words(text: &str) -> Vec<(usize, &str)> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
        match (is_word(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let raw = &text[s..i];
                let trimmed = raw.trim_start_matches('-');
                let offset = s + (raw.len() - trimmed.len());
                let trimmed = trimmed.trim_end_matches('-');
                if !trimmed.is_empty() {
                    out.push((offset, trimmed));
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Keywords whose value is a map of names to schemas.
const SCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Keywords whose value is data or an annotation, never a schema.
const NOT_SCHEMAS: &[&str] = &[
    "const",
    "enum",
    "default",
    "examples",
    "description",
    "title",
];

/// Every `description` string of `schema`, with `label` and its JSON pointer.
fn schema_descriptions<'s>(
    schema: &'s Value,
    pointer: &str,
    label: &str,
    out: &mut Vec<(String, &'s str)>,
) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(text)) = map.get("description") {
                out.push((format!("{label}{pointer}/description"), text));
            }
            for (key, value) in map {
                let here = format!("{pointer}/{}", escape(key));
                if SCHEMA_MAPS.contains(&key.as_str()) {
                    if let Value::Object(named) = value {
                        for (name, sub) in named {
                            schema_descriptions(
                                sub,
                                &format!("{here}/{}", escape(name)),
                                label,
                                out,
                            );
                        }
                    }
                } else if !NOT_SCHEMAS.contains(&key.as_str()) {
                    schema_descriptions(value, &here, label, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                schema_descriptions(item, &format!("{pointer}/{i}"), label, out);
            }
        }
        _ => {}
    }
}

/// The names of every property `schema` declares, at any depth.
fn property_names<'s>(schema: &'s Value, out: &mut BTreeSet<&'s str>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                if SCHEMA_MAPS.contains(&key.as_str()) {
                    if let Value::Object(named) = value {
                        if key == "properties" {
                            out.extend(named.keys().map(String::as_str));
                        }
                        named.values().for_each(|sub| property_names(sub, out));
                    }
                } else if !NOT_SCHEMAS.contains(&key.as_str()) {
                    property_names(value, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| property_names(i, out)),
        _ => {}
    }
}

/// A JSON pointer token (`~` and `/` escaped).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(name: &str, description: &str, schema: Value) -> ToolSpec {
        serde_json::from_value(json!({
            "name": name, "description": description, "schema": schema, "risk": "read",
            "interactive": false, "requirements": {"env": [], "programs": []},
        }))
        .expect("spec")
    }

    fn words_of(rule: &DescriptionRule, s: &ToolSpec) -> Vec<(String, String)> {
        rule.mentions(s)
    }

    #[test]
    fn names_are_found_as_whole_words_in_the_description_and_schema() {
        let rule = DescriptionRule::new(["fetch_page", "memory", "lookup-v2"]);
        let s = spec(
            "fetch_page",
            "Reads a page (fetch_page: one at a time). If it fails, prefer web_search; \
             not web_searches, nor my_web_search. Uses lookup-v2.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "Or click with browser_navigate."},
                    "description": {"type": "string", "description": "Kept in memory."},
                    "web_fetch": {"type": "string"},
                },
                "$defs": {"x": {"description": "see the `memory` tool", "enum": ["bash"]}},
            }),
        );
        let mut found = words_of(&rule, &s);
        found.sort();
        assert_eq!(
            found,
            [
                (
                    "browser_navigate".to_owned(),
                    "input schema at /properties/url/description".to_owned()
                ),
                ("lookup-v2".to_owned(), "description".to_owned()),
                (
                    "memory".to_owned(),
                    "input schema at /$defs/x/description".to_owned()
                ),
                ("web_search".to_owned(), "description".to_owned()),
            ]
        );
    }

    #[test]
    fn plain_words_count_only_in_backticks_or_before_tool() {
        let rule = DescriptionRule::new(["memory", "echo"]);
        let found = |text: &str| {
            rule.mentions(&spec("t", text, json!({"type": "object"})))
                .into_iter()
                .map(|(w, _)| w)
                .collect::<Vec<_>>()
        };
        assert!(found("Kept in memory; the terminal shows it; echo it back.").is_empty());
        assert_eq!(found("Use `memory` to keep it."), ["memory"]);
        assert_eq!(found("The echo tool repeats."), ["echo"]);
        assert_eq!(found("Then run `bash`."), ["bash"]);
    }

    #[test]
    fn the_line_says_what_to_do() {
        let m = Mention {
            plugin: "p".to_owned(),
            tool: "fetch_page".to_owned(),
            word: "web_search".to_owned(),
            place: "description".to_owned(),
        };
        assert_eq!(
            m.to_string(),
            "plugin 'p', tool 'fetch_page': its description names 'web_search', a tool this \
             profile does not show (models call tools named to them); reword it or add the \
             tool to the profile"
        );
    }
}
