//! Argument schemas as models read them best: generated from Rust types with every
//! subschema inline (no `$defs`/`$ref`), without the argument struct's own title and doc
//! comment at the top, and with documented enums as a plain `enum` whose values are
//! described in the text models read.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};

/// The JSON Schema of `T` as a tool's argument schema, in the form models read best:
///
/// - every subschema inline: no `$defs` and `$ref`, which some model APIs reject and
///   others ignore (the model then sees a bare reference);
/// - without the `$schema` key (some model APIs reject it), and without the type's own
///   `title` and doc comment at the top level (the tool's description says what the
///   arguments are for; a struct's doc comment is written for Rust readers);
/// - documented enums (`oneOf` of `const`s, as schemars derives them) as one `enum`, so a
///   validator can name the allowed values, with each value's doc comment added to the
///   description (see [`tidy_schema`]).
///
/// [`TypedTool`](crate::TypedTool) uses it for its schema.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use serde_json::json;
///
/// /// Arguments of `convert` (a doc comment for Rust readers: not in the schema).
/// #[derive(Deserialize, JsonSchema)]
/// struct ConvertArgs {
///     /// The unit to convert to.
///     to: Unit,
/// }
///
/// #[derive(Deserialize, JsonSchema)]
/// #[serde(rename_all = "lowercase")]
/// enum Unit {
///     /// Degrees Celsius.
///     Celsius,
///     /// Degrees Fahrenheit.
///     Fahrenheit,
/// }
///
/// let schema = toolhost_plugin_api::schema_for::<ConvertArgs>();
/// assert_eq!(
///     schema,
///     json!({
///         "type": "object",
///         "properties": {
///             "to": {
///                 "type": "string",
///                 "enum": ["celsius", "fahrenheit"],
///                 "description": "The unit to convert to. Values: `celsius`: Degrees Celsius. `fahrenheit`: Degrees Fahrenheit."
///             }
///         },
///         "required": ["to"]
///     })
/// );
/// ```
pub fn schema_for<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("title");
        map.remove("description");
    }
    tidy_schema(schema)
}

/// Rewrites an argument schema into an equivalent one that models and validators handle
/// better; hosts apply it to every tool's schema before serving it, so plugins built
/// before [`schema_for`] inlined subschemas get the same treatment:
///
/// - local references to definitions (`#/$defs/Name`, `#/definitions/Name`) are replaced
///   by what they point to, and the definitions are dropped. A definition that refers to
///   itself, directly or through others (a recursive type), cannot be inlined: references
///   to it stay, and it is kept, with its own references to other definitions inlined.
///   When the reference or its definition has nothing but annotations (`description`,
///   `title`, `default`, `examples`...), as generated schemas do, the two merge and the
///   reference's annotations win; otherwise the definition goes under `allOf` beside the
///   reference's own keywords, which JSON Schema evaluates apart
///   (`additionalProperties` sees only the `properties` next to it);
/// - a `oneOf`/`anyOf` whose alternatives are all fixed values (`const` or `enum`, as
///   schemars derives documented enums) becomes one `enum`, and the values'
///   descriptions are appended to the description as "Values: `a`: ... `b`: ...". Its
///   `type` is added when every alternative declares the same one.
///
/// - a `format` JSON Schema does not define (`uint64`, `double`, as schemars writes for
///   Rust's number types) becomes what it means: an integer format its bounds, any other
///   dropped (see [`standard_formats`]); this applies to every schema, one that names its
///   dialect too, so no validator warns about a format it does not know.
///
/// The result accepts exactly the arguments the input accepts. Where that cannot be made
/// sure, the schema is returned exactly as written:
///
/// - a schema that names its dialect (a top-level `$schema`): its author chose JSON
///   Schema's full vocabulary on purpose, and MCP clients are owed it unchanged (the MCP
///   conformance suite checks that `$schema`, `$defs` and `$ref` reach them). Generated
///   schemas never name one ([`schema_for`] and the schema generation of every earlier
///   release leave `$schema` out);
/// - a reference to anything but a whole definition or the root (`#/$defs/A/properties/x`,
///   an anchor, another document), or under a keyword it does not know; an `$id`,
///   `$anchor`, dynamic reference, `$schema` or `$defs` below the top level: all of these
///   would point elsewhere, or change how the schema is read, once its shape changes;
/// - a schema whose inlined form would grow past a size budget (definitions that each
///   refer to the next several times grow exponentially when inlined; a long `enum`
///   referred to from many places multiplies).
///
/// ```
/// use serde_json::json;
/// use toolhost_plugin_api::tidy_schema;
///
/// let built_long_ago = json!({
///     "type": "object",
///     "properties": {"mode": {"$ref": "#/$defs/Mode"}},
///     "$defs": {"Mode": {"oneOf": [
///         {"type": "string", "const": "append", "description": "Add to the end."},
///         {"type": "string", "const": "replace", "description": "Replace the file."}
///     ]}}
/// });
/// assert_eq!(
///     tidy_schema(built_long_ago),
///     json!({
///         "type": "object",
///         "properties": {"mode": {
///             "type": "string",
///             "enum": ["append", "replace"],
///             "description": "Values: `append`: Add to the end. `replace`: Replace the file."
///         }}
///     })
/// );
/// ```
pub fn tidy_schema(schema: Value) -> Value {
    let mut schema = match tidied(&schema) {
        Some(tidied) => tidied,
        None => schema,
    };
    standard_formats(&mut schema);
    schema
}

/// The formats JSON Schema defines (2020-12 and the drafts before it). A validator knows
/// these; others (`uint64`, `double`, as schemars writes for Rust's number types) make
/// validators warn on every schema (Ajv: `unknown format "uint64" ignored`).
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// What an integer format of Rust's means as bounds (`None`: no bound that JSON numbers
/// carry exactly).
fn integer_bounds(format: &str) -> Option<(Option<i64>, Option<i64>)> {
    Some(match format {
        "int8" => (Some(i8::MIN.into()), Some(i8::MAX.into())),
        "int16" => (Some(i16::MIN.into()), Some(i16::MAX.into())),
        "int32" => (Some(i32::MIN.into()), Some(i32::MAX.into())),
        "uint8" => (Some(0), Some(u8::MAX.into())),
        "uint16" => (Some(0), Some(u16::MAX.into())),
        "uint32" => (Some(0), Some(u32::MAX.into())),
        "uint64" | "uint128" | "uint" => (Some(0), None),
        "int64" | "int128" | "int" => (None, None),
        _ => return None,
    })
}

/// Replaces every format a standard validator does not know by what it means: an integer
/// format by its bounds (`uint64`: `minimum: 0`; a bound already as strict stays), any
/// other (`float`, `double`) dropped, as it only annotates. Values (`const`, `enum`,
/// `default`, `examples`) are data and left alone.
///
/// ```
/// use serde_json::json;
/// use toolhost_plugin_api::tidy_schema;
///
/// let schema = json!({"type": "object", "properties": {
///     "count": {"type": "integer", "format": "uint64", "minimum": 0},
///     "small": {"type": "integer", "format": "uint8", "minimum": 0},
///     "ratio": {"type": "number", "format": "double"},
///     "when": {"type": "string", "format": "date-time"}
/// }});
/// assert_eq!(tidy_schema(schema), json!({"type": "object", "properties": {
///     "count": {"type": "integer", "minimum": 0},
///     "small": {"type": "integer", "minimum": 0, "maximum": 255},
///     "ratio": {"type": "number"},
///     "when": {"type": "string", "format": "date-time"}
/// }}));
/// ```
pub fn standard_formats(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(format)) = map.get("format")
                && !STANDARD_FORMATS.contains(&format.as_str())
            {
                let bounds = integer_bounds(format);
                map.remove("format");
                if let Some((low, high)) = bounds {
                    let tighten =
                        |map: &mut serde_json::Map<String, Value>,
                         key: &str,
                         bound: Option<i64>,
                         stricter: fn(f64, f64) -> bool| {
                            let Some(bound) = bound else { return };
                            let keep = map
                                .get(key)
                                .and_then(Value::as_f64)
                                .is_some_and(|have| !stricter(bound as f64, have));
                            if !keep {
                                map.insert(key.to_owned(), Value::from(bound));
                            }
                        };
                    tighten(map, "minimum", low, |new, have| new > have);
                    tighten(map, "maximum", high, |new, have| new < have);
                }
            }
            for (key, value) in map.iter_mut() {
                match key.as_str() {
                    // Values, not schemas.
                    "const" | "enum" | "default" | "examples" => {}
                    // Maps of names to schemas: a property named `default` is a schema.
                    "properties" | "patternProperties" | "$defs" | "definitions"
                    | "dependentSchemas" => {
                        if let Value::Object(named) = value {
                            named.values_mut().for_each(standard_formats);
                        }
                    }
                    _ => standard_formats(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(standard_formats),
        _ => {}
    }
}

/// How many nodes the inlined schema may have: at least this many, or four times the
/// input's.
const MIN_BUDGET: u64 = 10_000;

/// Where the definitions live, and each one's name (decoded from its pointer).
type DefKey = (String, String);

/// The tidied schema, or `None` when it must be served as written.
fn tidied(schema: &Value) -> Option<Value> {
    let Value::Object(root) = schema else {
        return None;
    };
    if root.contains_key("$schema") {
        return None;
    }
    let mut body = root.clone();
    let mut defs: HashMap<DefKey, Value> = HashMap::new();
    for section in ["$defs", "definitions"] {
        match body.remove(section) {
            None => {}
            Some(Value::Object(d)) => {
                for (name, def) in d {
                    defs.insert((section.to_owned(), name), def);
                }
            }
            Some(_) => return None,
        }
    }
    let mut body = Value::Object(body);

    // Every reference must point at the root or a whole definition, and nothing may move
    // the base a reference resolves against.
    let mut refs = Vec::new();
    if !collect_refs(&body, true, &mut refs) {
        return None;
    }
    let mut edges: HashMap<&DefKey, Vec<DefKey>> = HashMap::new();
    for (key, def) in &defs {
        let mut own = Vec::new();
        if !collect_refs(def, false, &mut own) {
            return None;
        }
        let mut targets = Vec::new();
        for pointer in &own {
            if let Target::Def(k) = resolve(pointer, &defs)? {
                targets.push(k);
            }
        }
        edges.insert(key, targets);
    }
    for pointer in &refs {
        resolve(pointer, &defs)?;
    }

    // A definition that can reach itself is recursive: it stays a definition.
    let recursive: HashSet<DefKey> = defs
        .keys()
        .filter(|key| reaches(key, key, &edges))
        .cloned()
        .collect();

    let mut inliner = Inliner {
        defs: &defs,
        recursive: &recursive,
        sizes: HashMap::new(),
        done: HashMap::new(),
    };
    let budget = MIN_BUDGET.max(node_count(schema).saturating_mul(4));
    let mut total = inliner.size(&body);
    for key in &recursive {
        if let Some(def) = defs.get(key) {
            total = total.saturating_add(inliner.size(def));
        }
    }
    if total > budget {
        return None;
    }

    inliner.inline(&mut body);
    collapse_enums(&mut body);

    // Keep the recursive definitions the result still refers to, and those they refer to.
    let mut pending = Vec::new();
    collect_refs(&body, true, &mut pending);
    let mut kept: Vec<(DefKey, Value)> = Vec::new();
    while let Some(pointer) = pending.pop() {
        let Some(Target::Def(key)) = resolve(&pointer, &defs) else {
            continue;
        };
        if kept.iter().any(|(k, _)| *k == key) {
            continue;
        }
        let Some(def) = defs.get(&key) else {
            continue;
        };
        let mut def = def.clone();
        inliner.inline(&mut def);
        collapse_enums(&mut def);
        collect_refs(&def, false, &mut pending);
        kept.push((key, def));
    }
    if let Value::Object(root) = &mut body {
        for ((section, name), def) in kept {
            if let Value::Object(map) = root
                .entry(section)
                .or_insert_with(|| Value::Object(Map::new()))
            {
                map.insert(name, def);
            }
        }
    }
    Some(body)
}

/// What a local reference points at.
enum Target {
    Root,
    Def(DefKey),
}

/// Resolves `#` and `#/$defs/Name` (or `#/definitions/Name`), with the URI fragment's
/// percent-encoding and JSON Pointer's `~0`/`~1` decoded; `None` for anything else.
fn resolve(pointer: &str, defs: &HashMap<DefKey, Value>) -> Option<Target> {
    let fragment = percent_decode(pointer.strip_prefix('#')?)?;
    if fragment.is_empty() {
        return Some(Target::Root);
    }
    let mut segments = fragment.strip_prefix('/')?.split('/');
    let (Some(section), Some(name), None) = (segments.next(), segments.next(), segments.next())
    else {
        return None;
    };
    let unescape = |s: &str| s.replace("~1", "/").replace("~0", "~");
    let key = (unescape(section), unescape(name));
    defs.contains_key(&key).then_some(Target::Def(key))
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Whether `to` can be reached from `from` through one or more references.
fn reaches(from: &DefKey, to: &DefKey, edges: &HashMap<&DefKey, Vec<DefKey>>) -> bool {
    let mut seen: HashSet<&DefKey> = HashSet::new();
    let mut stack: Vec<&DefKey> = edges
        .get(from)
        .map(|e| e.iter().collect())
        .unwrap_or_default();
    while let Some(key) = stack.pop() {
        if key == to {
            return true;
        }
        if seen.insert(key)
            && let Some(next) = edges.get(key)
        {
            stack.extend(next);
        }
    }
    false
}

/// Keywords whose value is one subschema.
const SCHEMA_KEYS: &[&str] = &[
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value is a list of subschemas.
const SCHEMA_LIST_KEYS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas.
const SCHEMA_MAP_KEYS: &[&str] = &[
    "properties",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "$defs",
    "definitions",
];
/// Keywords that move the base references resolve against, resolve dynamically, or
/// change how a schema is read (its dialect), which must not travel into another schema.
const BASE_KEYS: &[&str] = &[
    "$id",
    "$schema",
    "$vocabulary",
    "$anchor",
    "$dynamicAnchor",
    "$dynamicRef",
    "$recursiveAnchor",
    "$recursiveRef",
];

/// Keywords whose value is data (instances), not schemas.
const DATA_KEYS: &[&str] = &["const", "enum", "default", "examples"];

fn is_schema(value: &Value) -> bool {
    value.is_object() || value.is_boolean()
}

/// Whether `key` is a keyword whose value holds subschemas.
fn is_schema_keyword(key: &str) -> bool {
    SCHEMA_KEYS.contains(&key) || SCHEMA_LIST_KEYS.contains(&key) || SCHEMA_MAP_KEYS.contains(&key)
}

/// Whether any object in `value` has a `$ref` key.
fn holds_ref(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$ref") || map.values().any(holds_ref),
        Value::Array(items) => items.iter().any(holds_ref),
        _ => false,
    }
}

/// Nodes in a JSON value.
fn json_size(value: &Value) -> u64 {
    match value {
        Value::Object(map) => map.values().fold(1, |n, v| n.saturating_add(json_size(v))),
        Value::Array(items) => items.iter().fold(1, |n, v| n.saturating_add(json_size(v))),
        _ => 1,
    }
}

/// Nodes in a schema's own keys: the data in full, one per keyword that holds
/// subschemas (the subschemas are counted by the caller).
fn own_size(map: &Map<String, Value>) -> u64 {
    map.iter().fold(1, |n, (key, value)| {
        let size = if is_schema_keyword(key) {
            1
        } else {
            1 + json_size(value)
        };
        n.saturating_add(size)
    })
}

/// The subschemas directly inside a schema: values of keywords, never of data such as
/// `const`, `enum`, `default` or `examples`.
fn subschemas(map: &Map<String, Value>) -> Vec<&Value> {
    let mut out = Vec::new();
    for (key, value) in map {
        let key = key.as_str();
        match value {
            Value::Array(items) if SCHEMA_LIST_KEYS.contains(&key) => {
                out.extend(items.iter().filter(|v| is_schema(v)));
            }
            Value::Object(names) if SCHEMA_MAP_KEYS.contains(&key) => {
                out.extend(names.values().filter(|v| is_schema(v)));
            }
            v if SCHEMA_KEYS.contains(&key) && is_schema(v) => out.push(v),
            _ => {}
        }
    }
    out
}

fn subschemas_mut(map: &mut Map<String, Value>) -> Vec<&mut Value> {
    let mut out = Vec::new();
    for (key, value) in map.iter_mut() {
        let key = key.as_str();
        if SCHEMA_KEYS.contains(&key) && is_schema(value) {
            out.push(value);
            continue;
        }
        match value {
            Value::Array(items) if SCHEMA_LIST_KEYS.contains(&key) => {
                out.extend(items.iter_mut().filter(|v| is_schema(v)));
            }
            Value::Object(names) if SCHEMA_MAP_KEYS.contains(&key) => {
                out.extend(names.values_mut().filter(|v| is_schema(v)));
            }
            _ => {}
        }
    }
    out
}

/// Collects every `$ref` in a schema; `false` when a reference is not a string, sits where
/// this walk does not go (an unknown keyword), or a key moves the base or brings
/// definitions of its own (allowed only at the top, where `$id` names the document).
fn collect_refs(value: &Value, top: bool, refs: &mut Vec<String>) -> bool {
    let Value::Object(map) = value else {
        return true;
    };
    for (key, value) in map {
        match key.as_str() {
            "$ref" => match value {
                Value::String(pointer) => refs.push(pointer.clone()),
                _ => return false,
            },
            "$id" if top => {}
            "$defs" | "definitions" if !top => return false,
            k if BASE_KEYS.contains(&k) => return false,
            k if DATA_KEYS.contains(&k) || is_schema_keyword(k) => {}
            _ => {
                if holds_ref(value) {
                    return false;
                }
            }
        }
    }
    subschemas(map)
        .into_iter()
        .all(|s| collect_refs(s, false, refs))
}

/// Nodes in a schema, its data included.
fn node_count(value: &Value) -> u64 {
    match value {
        Value::Object(map) => subschemas(map)
            .into_iter()
            .fold(own_size(map), |n, s| n.saturating_add(node_count(s))),
        _ => 1,
    }
}

/// Inlines references to definitions that are not recursive, remembering each inlined
/// definition.
struct Inliner<'a> {
    defs: &'a HashMap<DefKey, Value>,
    recursive: &'a HashSet<DefKey>,
    /// Nodes in each definition once inlined.
    sizes: HashMap<DefKey, u64>,
    /// Each definition once inlined.
    done: HashMap<DefKey, Value>,
}

impl Inliner<'_> {
    /// The definition a schema's `$ref` inlines, if it does.
    fn inlined_target(&self, map: &Map<String, Value>) -> Option<DefKey> {
        let Some(Value::String(pointer)) = map.get("$ref") else {
            return None;
        };
        match resolve(pointer, self.defs)? {
            Target::Def(key) if !self.recursive.contains(&key) => Some(key),
            _ => None,
        }
    }

    /// Nodes in `value` once inlined, without building it.
    fn size(&mut self, value: &Value) -> u64 {
        let Value::Object(map) = value else {
            return 1;
        };
        let mut n = own_size(map);
        if let Some(key) = self.inlined_target(map) {
            let size = match self.sizes.get(&key) {
                Some(size) => *size,
                None => {
                    let size = match self.defs.get(&key) {
                        Some(def) => self.size(def),
                        None => 1,
                    };
                    self.sizes.insert(key, size);
                    size
                }
            };
            n = n.saturating_add(size);
        }
        for s in subschemas(map) {
            n = n.saturating_add(self.size(s));
        }
        n
    }

    /// A definition with its own references inlined.
    fn definition(&mut self, key: &DefKey) -> Value {
        if let Some(done) = self.done.get(key) {
            return done.clone();
        }
        let mut def = self.defs.get(key).cloned().unwrap_or(Value::Bool(true));
        self.inline(&mut def);
        self.done.insert(key.clone(), def.clone());
        def
    }

    fn inline(&mut self, value: &mut Value) {
        let Value::Object(map) = value else {
            return;
        };
        for s in subschemas_mut(map) {
            self.inline(s);
        }
        let Some(key) = self.inlined_target(map) else {
            return;
        };
        map.remove("$ref");
        match self.definition(&key) {
            Value::Object(target) => merge_target(map, target),
            // `true` adds nothing to the reference's own keys; `false` refuses all.
            Value::Bool(false) => *value = Value::Bool(false),
            _ => {}
        }
    }
}

/// Keys that describe and never constrain: where a reference and its target both have
/// one, the reference's is kept.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
];

/// Merges what a reference points to into the reference's own keys, when one side has
/// nothing but annotations (the reference's win). Otherwise the target is kept whole
/// under `allOf`: keywords on the two sides are evaluated apart (`additionalProperties`
/// sees only its own side's `properties`, `then` only its own `if`...), and merging would
/// let them see each other.
fn merge_target(map: &mut Map<String, Value>, target: Map<String, Value>) {
    let only_annotations =
        |m: &Map<String, Value>| m.keys().all(|k| ANNOTATIONS.contains(&k.as_str()));
    if only_annotations(map) || only_annotations(&target) {
        for (k, v) in target {
            map.entry(k).or_insert(v);
        }
        return;
    }
    let mut all = match map.remove("allOf") {
        Some(Value::Array(all)) => all,
        Some(other) => vec![json!({ "allOf": other })],
        None => Vec::new(),
    };
    all.push(Value::Object(target));
    map.insert("allOf".to_owned(), Value::Array(all));
}

/// Turns every `oneOf`/`anyOf` of fixed values into an `enum`, innermost first.
fn collapse_enums(value: &mut Value) {
    let Value::Object(map) = value else {
        return;
    };
    for s in subschemas_mut(map) {
        collapse_enums(s);
    }
    if map.contains_key("enum") || map.contains_key("const") {
        return;
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(alternatives)) = map.get(key)
            && let Some(fixed) = fixed_values(alternatives, key == "oneOf")
        {
            map.remove(key);
            apply_fixed(map, fixed);
            break;
        }
    }
}

/// The values and their descriptions, when every alternative is a fixed value with
/// nothing else to it.
struct Fixed {
    values: Vec<Value>,
    described: Vec<(Vec<Value>, String)>,
    ty: Option<Value>,
}

fn fixed_values(alternatives: &[Value], one_of: bool) -> Option<Fixed> {
    let mut fixed = Fixed {
        values: Vec::new(),
        described: Vec::new(),
        ty: None,
    };
    let mut types = Vec::new();
    if alternatives.is_empty() {
        return None;
    }
    for alternative in alternatives {
        let Value::Object(a) = alternative else {
            return None;
        };
        let values: Vec<Value> = match (a.get("const"), a.get("enum")) {
            (Some(c), None) => vec![c.clone()],
            (None, Some(Value::Array(e))) => e.clone(),
            _ => return None,
        };
        // Anything but a type or annotations would change what is accepted.
        if a.keys().any(|k| {
            !matches!(k.as_str(), "const" | "enum" | "type") && !ANNOTATIONS.contains(&k.as_str())
        }) {
            return None;
        }
        let ty = a.get("type");
        // A value its own alternative's type refuses is not accepted at all.
        if let Some(ty) = ty
            && !values.iter().all(|v| has_type(v, ty))
        {
            return None;
        }
        types.push(ty.cloned());
        if let Some(Value::String(d)) = a.get("description").or_else(|| a.get("title"))
            && !values.is_empty()
        {
            fixed.described.push((values.clone(), d.clone()));
        }
        for v in values {
            if fixed.values.iter().any(|seen| same_value(seen, &v)) {
                // oneOf refuses a value two alternatives accept; an enum would accept it.
                if one_of {
                    return None;
                }
                continue;
            }
            fixed.values.push(v);
        }
    }
    if let Some(Some(first)) = types.first()
        && types.iter().all(|t| t.as_ref() == Some(first))
    {
        fixed.ty = Some(first.clone());
    }
    Some(fixed)
}

/// JSON Schema's equality: numbers by value (`1` and `1.0` are the same), integers
/// exactly (`9007199254740993` is not `9007199254740992`, which `f64` cannot tell apart).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let exact = |n: &serde_json::Number| {
                n.as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
                    .or_else(|| {
                        // A float with no fraction, within i128, is that integer.
                        n.as_f64()
                            .filter(|f| f.fract() == 0.0 && f.abs() < 1e38)
                            .map(|f| f as i128)
                    })
            };
            match (exact(x), exact(y)) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

/// Whether a value is of a schema's `type` (a name or a list of names).
fn has_type(value: &Value, ty: &Value) -> bool {
    let is = |name: &str| match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        _ => false,
    };
    match ty {
        Value::String(name) => is(name),
        Value::Array(names) => names.iter().any(|n| n.as_str().is_some_and(is)),
        _ => false,
    }
}

fn apply_fixed(map: &mut Map<String, Value>, fixed: Fixed) {
    if let Some(ty) = fixed.ty {
        map.entry("type").or_insert(ty);
    }
    map.insert("enum".to_owned(), Value::Array(fixed.values));
    if fixed.described.is_empty() {
        return;
    }
    let values = fixed
        .described
        .iter()
        .map(|(values, d)| {
            let values = values
                .iter()
                .map(|v| match v {
                    Value::String(s) => format!("`{s}`"),
                    other => format!("`{other}`"),
                })
                .collect::<Vec<_>>()
                .join(", ");
            format!("{values}: {d}")
        })
        .collect::<Vec<_>>()
        .join(" ");
    let description = match map.get("description") {
        Some(Value::String(own)) if !own.is_empty() => format!("{own} Values: {values}"),
        _ => format!("Values: {values}"),
    };
    map.insert("description".to_owned(), Value::String(description));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[allow(dead_code, reason = "only the schema is used")]
    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    /// Units (a doc comment on the type).
    enum Unit {
        /// Degrees Celsius.
        Celsius,
        /// Degrees Fahrenheit.
        Fahrenheit,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    #[derive(Deserialize, JsonSchema)]
    enum Plain {
        A,
        B,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    /// A place.
    #[derive(Deserialize, JsonSchema)]
    struct Place {
        /// East.
        x: f64,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    /// Arguments, documented for Rust readers.
    #[derive(Deserialize, JsonSchema)]
    struct Args {
        /// The unit.
        to: Unit,
        from: Option<Unit>,
        plain: Plain,
        places: Vec<Place>,
        here: Place,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    #[derive(Deserialize, JsonSchema)]
    struct Tree {
        children: Vec<Tree>,
    }

    fn has_key(v: &Value, key: &str) -> bool {
        match v {
            Value::Object(m) => m.contains_key(key) || m.values().any(|v| has_key(v, key)),
            Value::Array(a) => a.iter().any(|v| has_key(v, key)),
            _ => false,
        }
    }

    #[test]
    fn generated_schemas_are_inline_untitled_and_enums_are_enums() {
        let s = schema_for::<Args>();
        for key in ["$defs", "$ref", "$schema", "oneOf"] {
            assert!(!has_key(&s, key), "{key} in {s:#}");
        }
        assert!(
            s.get("title").is_none() && s.get("description").is_none(),
            "{s:#}"
        );
        assert_eq!(
            s["properties"]["to"],
            json!({
                "type": "string",
                "enum": ["celsius", "fahrenheit"],
                "description": "The unit. Values: `celsius`: Degrees Celsius. `fahrenheit`: Degrees Fahrenheit."
            })
        );
        assert_eq!(
            s["properties"]["plain"],
            json!({"type": "string", "enum": ["A", "B"]})
        );
        assert_eq!(
            s["properties"]["here"]["properties"]["x"]["description"],
            "East."
        );
        assert_eq!(s["properties"]["places"]["items"]["type"], "object");
        let from = &s["properties"]["from"]["anyOf"];
        assert_eq!(from[0]["enum"], json!(["celsius", "fahrenheit"]), "{s:#}");
        assert_eq!(from[1], json!({"type": "null"}));
    }

    #[test]
    fn recursive_types_keep_their_reference() {
        let s = schema_for::<Tree>();
        let text = s.to_string();
        assert!(text.contains("$ref"), "{s:#}");
        let pointer = s["properties"]["children"]["items"]["$ref"]
            .as_str()
            .expect("a reference");
        if pointer == "#" {
            return; // The root itself: nothing to keep.
        }
        let (section, name) = pointer
            .strip_prefix("#/")
            .and_then(|p| p.split_once('/'))
            .expect("local");
        assert!(
            s[section][name].is_object(),
            "the definition is kept: {s:#}"
        );
    }

    #[test]
    fn a_recursive_definition_stays_with_its_reference_and_the_rest_is_inlined() {
        let old = json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Tree"}, "unit": {"$ref": "#/$defs/Unit"}},
            "$defs": {
                "Tree": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}},
                "Unit": {"type": "string", "enum": ["c"]}
            }
        });
        let s = tidy_schema(old);
        assert_eq!(
            s["properties"]["unit"],
            json!({"type": "string", "enum": ["c"]})
        );
        assert_eq!(s["properties"]["tree"], json!({"$ref": "#/$defs/Tree"}));
        assert_eq!(
            s["$defs"]["Tree"]["properties"]["kids"]["items"]["$ref"],
            "#/$defs/Tree"
        );
        assert!(
            s["$defs"]["Tree"].is_object() && s["$defs"].get("Unit").is_none(),
            "{s:#}"
        );
    }

    #[test]
    fn old_schemas_with_refs_are_inlined_and_sibling_keys_win() {
        let old = json!({
            "type": "object",
            "properties": {
                "a": {"$ref": "#/definitions/Mode", "description": "Field doc."},
                "b": {"type": "array", "items": {"$ref": "#/definitions/Mode"}}
            },
            "definitions": {"Mode": {"type": "string", "enum": ["x", "y"], "description": "Type doc."}}
        });
        assert_eq!(
            tidy_schema(old),
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "string", "enum": ["x", "y"], "description": "Field doc."},
                    "b": {"type": "array", "items": {"type": "string", "enum": ["x", "y"], "description": "Type doc."}}
                }
            })
        );
    }

    /// What the MCP conformance suite's `json-schema-2020-12` scenario sends through.
    #[test]
    fn a_schema_that_names_its_dialect_is_left_exactly_as_written() {
        let declared = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"}}}},
            "properties": {
                "address": {"$ref": "#/$defs/address"},
                "mode": {"oneOf": [{"const": "a"}, {"const": "b"}]}
            },
            "additionalProperties": false
        });
        assert_eq!(tidy_schema(declared.clone()), declared);
    }

    #[test]
    fn alternatives_that_are_not_all_fixed_values_stay() {
        for kept in [
            json!({"oneOf": [{"const": "a"}, {"type": "integer"}]}),
            json!({"oneOf": [{"const": "a"}, {"const": "a"}]}),
            json!({"oneOf": [{"const": "a", "minLength": 3}]}),
            json!({"anyOf": []}),
        ] {
            let schema = json!({"type": "object", "properties": {"p": kept.clone()}});
            assert_eq!(tidy_schema(schema)["properties"]["p"], kept);
        }
    }

    #[allow(dead_code, reason = "only the schema is used")]
    #[derive(Deserialize, JsonSchema)]
    struct Node {
        unit: Unit,
        children: Vec<Node>,
    }

    #[allow(dead_code, reason = "only the schema is used")]
    #[derive(Deserialize, JsonSchema)]
    struct Holder {
        node: Node,
        unit: Unit,
    }

    /// Every local reference in `s` resolves in `s`.
    fn assert_refs_resolve(s: &Value) {
        let mut refs = Vec::new();
        assert!(collect_refs(s, true, &mut refs), "{s:#}");
        let mut defs = HashMap::new();
        for section in ["$defs", "definitions"] {
            if let Some(Value::Object(d)) = s.get(section) {
                for (name, def) in d {
                    defs.insert((section.to_owned(), name.clone()), def.clone());
                }
            }
        }
        for pointer in refs {
            assert!(
                resolve(&pointer, &defs).is_some(),
                "{pointer} dangles in {s:#}"
            );
        }
    }

    #[test]
    fn a_kept_recursive_definition_has_its_other_references_inlined() {
        let s = schema_for::<Holder>();
        assert_refs_resolve(&s);
        assert_eq!(
            s["properties"]["unit"]["enum"],
            json!(["celsius", "fahrenheit"])
        );
        let node = s["properties"]["node"]["$ref"].as_str().map_or_else(
            || s["properties"]["node"].clone(),
            |pointer| {
                let name = pointer.rsplit('/').next().unwrap_or_default();
                s["$defs"][name].clone()
            },
        );
        assert_eq!(
            node["properties"]["unit"]["enum"],
            json!(["celsius", "fahrenheit"]),
            "{s:#}"
        );
        assert!(s["$defs"].get("Unit").is_none(), "{s:#}");

        let old = json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Tree"}},
            "$defs": {
                "Tree": {"type": "object", "properties": {
                    "unit": {"$ref": "#/$defs/Unit"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}
                }},
                "Unit": {"type": "string", "enum": ["c", "f"]}
            }
        });
        let s = tidy_schema(old);
        assert_refs_resolve(&s);
        assert_eq!(
            s["$defs"]["Tree"]["properties"]["unit"],
            json!({"type": "string", "enum": ["c", "f"]})
        );
        assert!(s["$defs"].get("Unit").is_none(), "{s:#}");
    }

    #[test]
    fn mutually_recursive_definitions_are_both_kept() {
        let old = json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}, "n": {"$ref": "#/$defs/N"}},
            "$defs": {
                "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
                "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}, "n": {"$ref": "#/$defs/N"}}},
                "N": {"type": "integer"}
            }
        });
        let s = tidy_schema(old);
        assert_refs_resolve(&s);
        assert_eq!(s["properties"]["a"], json!({"$ref": "#/$defs/A"}));
        assert_eq!(s["properties"]["n"], json!({"type": "integer"}));
        assert_eq!(
            s["$defs"]["B"]["properties"]["n"],
            json!({"type": "integer"})
        );
        assert!(s["$defs"].get("N").is_none(), "{s:#}");
    }

    #[test]
    fn escaped_definition_names_are_resolved() {
        let old = json!({
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/a~1b"},
                "b": {"$ref": "#/$defs/with%20space"},
                "c": {"$ref": "#/$defs/t~0ilde"}
            },
            "$defs": {
                "a/b": {"type": "integer"},
                "with space": {"type": "string"},
                "t~ilde": {"type": "boolean"}
            }
        });
        assert_eq!(
            tidy_schema(old),
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "integer"},
                    "b": {"type": "string"},
                    "c": {"type": "boolean"}
                }
            })
        );
    }

    #[test]
    fn references_it_cannot_follow_leave_the_schema_as_written() {
        for written in [
            // Into a definition.
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/A/properties/y"}},
                   "$defs": {"A": {"type": "object", "properties": {"y": {"type": "string"}}}}}),
            // An anchor.
            json!({"type": "object", "properties": {"x": {"$ref": "#thing"}},
                   "$defs": {"A": {"$anchor": "thing", "type": "string"}}}),
            // Another document.
            json!({"type": "object", "properties": {"x": {"$ref": "other.json#/$defs/A"}},
                   "$defs": {"A": {"oneOf": [{"const": 1}, {"const": 2}]}}}),
            // A definition that is not there.
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}}),
            // An `$id` below the top moves the base.
            json!({"type": "object", "properties": {"x": {"$id": "http://e/x", "$ref": "#/$defs/A"}},
                   "$defs": {"A": {"type": "string"}}}),
        ] {
            assert_eq!(tidy_schema(written.clone()), written);
        }
    }

    #[test]
    fn an_exponential_expansion_is_left_as_written() {
        // D0 refers to D1 twice, D1 to D2 twice...: 2^40 copies of D40 once inlined.
        let mut defs = Map::new();
        for i in 0..40 {
            let next = format!("#/$defs/D{}", i + 1);
            defs.insert(
                format!("D{i}"),
                json!({"type": "object", "properties": {"l": {"$ref": next}, "r": {"$ref": next}}}),
            );
        }
        defs.insert("D40".to_owned(), json!({"type": "string"}));
        let written =
            json!({"type": "object", "properties": {"d": {"$ref": "#/$defs/D0"}}, "$defs": defs});
        assert_eq!(tidy_schema(written.clone()), written);

        // A few levels fit the budget and are inlined.
        let small = json!({"type": "object", "properties": {"d": {"$ref": "#/$defs/D35"}}, "$defs": written["$defs"]});
        let s = tidy_schema(small);
        assert!(!has_key(&s, "$ref"), "{s:#}");
        assert_eq!(
            s["properties"]["d"]["properties"]["l"]["properties"]["r"]["properties"]["l"]["properties"]
                ["r"]["properties"]["l"],
            json!({"type": "string"})
        );
    }

    #[test]
    fn keywords_that_read_each_other_are_never_merged_across_a_reference() {
        let a = |def: Value, site: Value| {
            let mut site = site;
            site["$ref"] = json!("#/$defs/A");
            json!({"type": "object", "properties": {"p": site}, "$defs": {"A": def}})
        };
        for (def, site) in [
            (
                json!({"additionalProperties": false}),
                json!({"properties": {"a": {}}}),
            ),
            (
                json!({"properties": {"a": {}}}),
                json!({"additionalProperties": false}),
            ),
            (
                json!({"unevaluatedProperties": false}),
                json!({"patternProperties": {"^x": {}}}),
            ),
            (json!({"prefixItems": [{}]}), json!({"items": false})),
            (
                json!({"then": {"required": ["b"]}}),
                json!({"if": {"required": ["a"]}}),
            ),
            (json!({"contains": {"const": 1}}), json!({"minContains": 0})),
        ] {
            let s = tidy_schema(a(def.clone(), site.clone()));
            let mut expected = site;
            expected["allOf"] = json!([def]);
            assert_eq!(s["properties"]["p"], expected, "{s:#}");
        }
        // One side with nothing but annotations merges.
        let s = tidy_schema(a(
            json!({"type": "integer", "description": "Theirs."}),
            json!({"description": "Mine."}),
        ));
        assert_eq!(
            s["properties"]["p"],
            json!({"type": "integer", "description": "Mine."})
        );
        let s = tidy_schema(a(json!({"description": "Theirs."}), json!({"minimum": 1})));
        assert_eq!(
            s["properties"]["p"],
            json!({"minimum": 1, "description": "Theirs."})
        );
    }

    #[test]
    fn big_integers_are_told_apart() {
        let any =
            json!({"anyOf": [{"const": 9007199254740992_u64}, {"const": 9007199254740993_u64}]});
        let s = tidy_schema(json!({"type": "object", "properties": {"p": any}}));
        assert_eq!(
            s["properties"]["p"],
            json!({"enum": [9007199254740992_u64, 9007199254740993_u64]})
        );
        assert!(same_value(&json!(3), &json!(3.0)));
        assert!(!same_value(&json!(u64::MAX), &json!(u64::MAX - 1)));
    }

    #[test]
    fn what_would_travel_or_dangle_leaves_the_schema_as_written() {
        for written in [
            // A dialect inside a definition would become the root's.
            json!({"$ref": "#/$defs/A", "$defs": {"A": {
                "$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}}}),
            // Definitions of its own inside a definition.
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/A"}},
                   "$defs": {"A": {"$defs": {"B": {}}, "type": "string"}}}),
            // A reference under a keyword this walk does not know.
            json!({"type": "object", "x-alt": {"$ref": "#/$defs/A"},
                   "properties": {"x": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}}),
            // Not a percent-encoding.
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/%+41"}},
                   "$defs": {"A": {"type": "string"}, "%+41": {"type": "string"}}}),
        ] {
            assert_eq!(tidy_schema(written.clone()), written);
        }
    }

    #[test]
    fn data_counts_toward_the_budget() {
        let values: Vec<String> = (0..2_000).map(|i| format!("v{i}")).collect();
        let properties: Map<String, Value> = (0..200)
            .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/E"})))
            .collect();
        let written =
            json!({"type": "object", "properties": properties, "$defs": {"E": {"enum": values}}});
        assert_eq!(tidy_schema(written.clone()), written);
    }

    #[test]
    fn a_group_of_values_keeps_its_description() {
        let one_of = json!({"oneOf": [
            {"enum": ["a", "b"], "description": "Letters."},
            {"const": 1, "title": "One."}
        ]});
        let s = tidy_schema(json!({"type": "object", "properties": {"p": one_of}}));
        assert_eq!(
            s["properties"]["p"],
            json!({"enum": ["a", "b", 1], "description": "Values: `a`, `b`: Letters. `1`: One."})
        );
    }

    #[test]
    fn a_reference_and_its_target_that_disagree_keep_both_constraints() {
        let old = json!({
            "type": "object",
            "properties": {
                "n": {"$ref": "#/$defs/Small", "maximum": 5, "description": "Mine."},
                "m": {"$ref": "#/$defs/Small", "minimum": 1, "description": "Mine."}
            },
            "$defs": {"Small": {"type": "integer", "maximum": 10, "description": "Theirs."}}
        });
        let s = tidy_schema(old);
        assert_eq!(
            s["properties"]["n"],
            json!({"maximum": 5, "description": "Mine.", "allOf": [
                {"type": "integer", "maximum": 10, "description": "Theirs."}
            ]})
        );
        assert_eq!(
            s["properties"]["m"],
            json!({"minimum": 1, "description": "Mine.", "allOf": [
                {"type": "integer", "maximum": 10, "description": "Theirs."}
            ]})
        );
    }

    #[test]
    fn fixed_values_collapse_only_where_it_changes_nothing() {
        // The type is added only when every alternative declares the same one.
        let mixed = json!({"oneOf": [{"const": "a", "type": "string"}, {"const": "b"}]});
        let s = tidy_schema(json!({"type": "object", "properties": {"p": mixed}}));
        assert_eq!(s["properties"]["p"], json!({"enum": ["a", "b"]}));
        // Different types make one enum too; no type is claimed.
        let kinds =
            json!({"oneOf": [{"const": "a", "type": "string"}, {"const": 1, "type": "integer"}]});
        let s = tidy_schema(json!({"type": "object", "properties": {"p": kinds}}));
        assert_eq!(s["properties"]["p"], json!({"enum": ["a", 1]}));

        for kept in [
            // An enum already there: the oneOf stays beside it.
            json!({"enum": ["a", "b", "c"], "oneOf": [{"const": "a"}, {"const": "b"}]}),
            // `1` and `1.0` are the same value: the oneOf refuses it.
            json!({"oneOf": [{"const": 1}, {"const": 1.0}]}),
            // A value its own type refuses is accepted by no alternative.
            json!({"oneOf": [{"const": "a", "type": "integer"}, {"const": "b"}]}),
        ] {
            let schema = json!({"type": "object", "properties": {"p": kept.clone()}});
            assert_eq!(tidy_schema(schema)["properties"]["p"], kept);
        }
        // anyOf accepts a value twice: duplicates fold.
        let any = json!({"anyOf": [{"const": 1}, {"const": 1.0}, {"const": 2}]});
        let s = tidy_schema(json!({"type": "object", "properties": {"p": any}}));
        assert_eq!(s["properties"]["p"], json!({"enum": [1, 2]}));
    }

    #[test]
    fn data_is_never_rewritten() {
        let data = json!({"$ref": "#/$defs/A", "oneOf": [{"const": 1}, {"const": 2}]});
        let written = json!({
            "type": "object",
            "properties": {
                "p": {"const": data, "default": data, "examples": [data]},
                "q": {"enum": [data]},
                // Property names that are keywords elsewhere are only names here.
                "const": {"oneOf": [{"const": 1}, {"const": 2}]}
            },
            "$defs": {"A": {"type": "string"}}
        });
        let s = tidy_schema(written);
        assert_eq!(s["properties"]["p"]["const"], data);
        assert_eq!(s["properties"]["p"]["default"], data);
        assert_eq!(s["properties"]["p"]["examples"][0], data);
        assert_eq!(s["properties"]["q"]["enum"][0], data);
        assert_eq!(s["properties"]["const"], json!({"enum": [1, 2]}));
        assert!(s.get("$defs").is_none(), "{s:#}");
    }

    #[test]
    fn anything_but_an_object_is_returned_as_it_is() {
        assert_eq!(tidy_schema(json!(true)), json!(true));
        assert_eq!(tidy_schema(json!([1])), json!([1]));
    }
}
