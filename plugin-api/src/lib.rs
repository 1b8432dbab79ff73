//! The interface toolhost plugins are built against: the [`Tool`] trait, the call
//! context, risk levels and the [`export_plugin!`] macro, over a stable ABI.
//!
//! A plugin is a `cdylib` crate (a shared library, `lib<name>.so`) that implements
//! [`Tool`] (or [`TypedTool`], for arguments deserialized into a Rust type with a derived
//! schema) and exports its tools once:
//!
//! ```
//! use toolhost_plugin_api::{export_plugin, Risk, ToolContext, ToolError, TypedTool};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct GreetArgs { name: String }
//!
//! struct Greet;
//!
//! impl TypedTool for Greet {
//!     type Args = GreetArgs;
//!     fn name(&self) -> &str { "greet" }
//!     fn description(&self) -> &str { "Greets someone by name." }
//!     fn risk(&self) -> Risk { Risk::Read }
//!     async fn run(&self, _ctx: &ToolContext<'_>, a: GreetArgs) -> Result<String, ToolError> {
//!         Ok(format!("Hello, {}!", a.name))
//!     }
//! }
//!
//! export_plugin! { name: "hello", version: env!("CARGO_PKG_VERSION"), tools: [Greet] }
//! ```
//!
//! The crate's [README](https://github.com/toolhost/toolhost/blob/main/plugin-api/README.md)
//! walks through a whole plugin: its `Cargo.toml`, building, checking and installing it,
//! and testing it. The toolhost book
//! ([docs/book](https://github.com/toolhost/toolhost/tree/main/docs/book)) covers the
//! host's side: its configuration (the `[plugins.NAME.settings]` tables, timeouts,
//! workspaces), approvals and how plugins are installed and reloaded.
//!
//! # What a tool can use
//! - [`ToolContext`]: the profile, session and model of the call, cancellation, and the
//!   host's services: [`log`](ToolContext::log), [`sleep`](ToolContext::sleep),
//!   [`progress`](ToolContext::progress), [`ask_user`](ToolContext::ask_user),
//!   [`sample`](ToolContext::sample) (the caller's model),
//!   [`child_turn`](ToolContext::child_turn), [`state_dir`](ToolContext::state_dir) (a
//!   folder per profile), [`search_sessions`](ToolContext::search_sessions),
//!   [`session_summary`](ToolContext::session_summary) (the current conversation's
//!   requests and outcomes) and
//!   [`settings`](ToolContext::settings) (the plugin's `[plugins.NAME.settings]` table
//!   from the host's config, beside its [`Requirements`]).
//! - [`ToolContext::blocking`] and [`blocking()`] for blocking work, [`Requirements`] for
//!   what a tool needs on the machine, [`Content`] for output that is more than text.
//! - [`schema_for`] and [`tidy_schema`] for argument schemas models read well.
//!
//! # Testing tools
//! With the `testing` feature (for dev-dependencies), `toolhost_plugin_api::testing` runs a
//! tool through the same glue and call boundary as a host, in a plain `#[test]`: scripted
//! host services, captured logs and progress, cancellation, a temporary state folder.
//!
//! # Crate features
//! - `testing`: the module `toolhost_plugin_api::testing` (above); enable it in
//!   `[dev-dependencies]` only. It enables `check`.
//! - `check`: the metadata check hosts run before they take a tool (name, schemas, the
//!   export list), which the harness runs too; it pulls in jsonschema, the schema
//!   compiler hosts use. Hosts enable it; a plugin's own build never needs it.
//! - `__test_newer_api`: for this repository's compatibility tests only; never enable it.
//!
//! # Rules a plugin lives by
//! - Build it with `panic = "unwind"` (the default). Hosts refuse to load plugins built
//!   with `panic = "abort"` into their own process, because their panics would kill the
//!   host (toolhost runs such a plugin only in a worker process, where an abort ends the
//!   worker). Panics in tool code
//!   (metadata methods, `call`, inside the future, the future's destructors when the host
//!   drops it after a timeout, a cancel or at shutdown, a tool's destructor) are caught in
//!   the plugin and reach the model as a tool error (or leave the tool out, at load); the
//!   plugin stays usable. A panic payload whose own `Drop` panics is handled too. What
//!   cannot be caught: a panic while a thread is already unwinding (a destructor that
//!   panics during another panic) aborts, as in any Rust program.
//! - Don't start a runtime. A plugin's own copy of tokio has no reactor: `tokio::time` and
//!   `tokio::spawn` panic inside a plugin. Use the context's services
//!   ([`ToolContext::sleep`], [`ToolContext::cancelled`], [`ToolContext::log`],
//!   [`ToolContext::child_turn`]) and [`ToolContext::blocking`] for blocking work.
//! - Host services work from any thread, for the length of the call: a future from
//!   [`ToolContext::sleep`], [`ToolContext::child_turn`], [`ToolContext::ask_user`], ...
//!   may be awaited on a thread of the plugin's own (say, a scoped thread driving it with
//!   a small `block_on`). The host runs it in the runtime the call started on; `sleep`
//!   asked from a thread outside the host's runtime uses a timer thread of the host's, so
//!   it ends even while the plugin blocks the thread that polls the call. The other
//!   services need the host's runtime to make progress: on a host running a
//!   current-thread runtime, blocking the thread that polls the call while waiting for
//!   one of them stalls it until the call times out. A service that fails inside the host
//!   comes back as a [`ServiceError`], never as a panic in the plugin.
//! - Watch [`ToolContext::is_cancelled`] or [`ToolContext::until_cancelled`] in anything
//!   long: the host cancels calls when a turn is stopped or a call times out.
//! - A tool that starts processes which may outlive its call (a server, a watcher, a
//!   background job) gives them `TOOLHOST_SESSION=<ctx.session_id()>` in their
//!   environment (the exact entry; inherited by whatever they start). When a child turn
//!   (a delegated task) ends, however it ends, toolhost ends every process of its user
//!   carrying its session's entry (SIGTERM, a short grace, SIGKILL) and tells the parent.
//!   A process that clears its environment before it execs escapes this; end it yourself.
//!
//!   ```no_run
//!   # use toolhost_plugin_api::ToolContext;
//!   fn start_server(ctx: &ToolContext<'_>) -> std::io::Result<std::process::Child> {
//!       std::process::Command::new("python3")
//!           .args(["-m", "http.server"])
//!           .env("TOOLHOST_SESSION", ctx.session_id())
//!           .spawn()
//!   }
//!   ```
//!
//! This crate does no I/O and its default build depends on none of the host's runtime
//! crates (tokio, notify, toml, jsonschema, ...); the workspace's CI checks that with
//! `cargo tree`. (The `check` feature, and `testing` with it, add jsonschema.) One
//! exception cannot be avoided: abi_stable itself links libloading 0.7 (for hosts that
//! load libraries); plugins never call it, and this crate adds no dependency on it.
//!
//! # Binary compatibility
//! Which hosts load which plugin builds, release by release, is in
//! [COMPATIBILITY.md](https://github.com/toolhost/toolhost/blob/main/plugin-api/COMPATIBILITY.md);
//! this is how it works.
//!
//! Every plugin exports one root module ([`ffi::PluginRoot`]). When the host loads it,
//! abi_stable checks the ABI version ([`ABI_VERSION`], which is not the crate's version:
//! it changes only when the `ffi` types do) and the layout of the root module and every
//! type it reaches (tools, the context, results) before any plugin code runs. The two growable
//! tables, [`ffi::ToolVTable`] (methods of a tool) and [`ffi::HostVTable`] (services of the
//! host), are prefix types and are checked separately, through [`ffi::TableLayouts`]: the
//! fields both sides know must match, and the longer table may only append to the shorter
//! one, whichever side is older. (abi_stable's own check only lets the plugin's side be the
//! longer one, which would refuse every plugin built before a field was appended.)
//!
//! What that means for changes to this crate:
//!
//! **Keep already-built plugins loading** (a new patch ABI version before 1.0, a minor one
//! after):
//! - appending a field after the last one of [`ffi::ToolVTable`] (a new tool method, e.g.
//!   an availability check) or of [`ffi::HostVTable`] (a new host service). The reader of
//!   a table sees fields the other side lacks as `None` and falls back to a default:
//!   a newer host reading an older plugin's tool table, or a newer plugin calling a
//!   service an older host lacks ([`ServiceError::Unavailable`], never a crash). The
//!   workspace's tests load plugins across such a change in both directions;
//! - adding a risk level, error kind or log level: they cross as one-byte codes, and an
//!   unknown risk code is read as [`Risk::Deny`], an unknown error kind as a failure;
//! - new keys in JSON that crosses as text (schemas, child-turn requests);
//! - anything in the Rust-side API that does not change the `ffi` types.
//!
//! **Break them** (a new minor ABI version before 1.0, a new major one after, so hosts
//! refuse the old plugins with a message naming both versions instead of misreading them):
//! - removing, reordering or retyping any field of an `ffi` type, or adding a field
//!   anywhere but at the end of the two tables above;
//! - changing [`ffi::PluginRoot`] (its fields are all required), [`ffi::FfiCallContext`],
//!   [`ffi::FfiTool`], [`ffi::FfiToolError`] or [`ffi::TableLayouts`], which cross as
//!   fixed layouts;
//! - changing a function signature in a table.
//!
//! The version check (abi_stable's, on [`ABI_VERSION`], before the layout checks): a
//! host refuses a plugin of a different major ABI version and, before 1.0, a plugin
//! built against an *older* minor one than its own (0.1.x plugins on a 0.2 host). A
//! plugin built against a newer patch or minor version passes the version check and is
//! then judged by the layout checks.
//!
//! The layout checks also compare the crate's series: every layout abi_stable derives
//! carries this crate's version, and layouts of another `0.minor` (major after 1.0) are
//! refused even where unchanged ("incompatible package versions"). So the crate's series
//! always equals the ABI's (a unit test keeps them together): a crate 0.2.0 comes with
//! ABI 0.2.0, and hosts name both numbers when they refuse a plugin.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// `#[tool]` names this crate by its path, in this crate's own tests too.
extern crate self as toolhost_plugin_api;

mod blocking;
mod budget;
#[cfg(feature = "check")]
#[cfg_attr(docsrs, doc(cfg(feature = "check")))]
pub mod check;
mod client;
mod content;
mod context;
mod export;
#[allow(
    non_camel_case_types,
    reason = "abi_stable names prefix references `Type_Ref`"
)]
pub mod ffi;
mod host_request;
mod lenient;
pub mod limits;
#[cfg(feature = "macros")]
mod macro_support;
mod outcome;
mod risk;
mod schema;
mod settings_path;
mod structured;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod tool;
mod unread_keys;
mod unwind;

pub use blocking::{CancelFlag, blocking};
pub use budget::{OutputBudget, Page};
pub use client::{
    AskAnswer, AskRequest, ClientAnswer, ClientAnswers, ClientQuestion, ClientQuestions,
    DetachAnswer, Root, RootsAnswer, SampleAnswer, SampleRequest, TaskSupport,
};
pub use content::{CONTENT_KEY, Content, EmbeddedResource, content_output, parse_content_output};
pub use context::{Cancelled, ChildTurnCall, ChildTurnRequest, ServiceError, ToolContext};
pub use ffi::{ABI_VERSION, API_VERSION, LogLevel};
pub use host_request::{
    ChildRole, DelegatedTask, DelegationAnswer, DelegationRequest, DelegationUnit, HostAnswer,
    HostRequest, HostRequestError, NoParams, RequestSummary, SessionHit, SessionQuery,
    SessionsSearchAnswer, SessionsSummaryAnswer, SettingsAnswer, StateDirAnswer, SummaryQuery,
    ToolUse, WorkspaceAnswer,
};
pub use outcome::{DIAGNOSTICS, Details, Diagnostic, FULL_OUTPUT, ToolOutput};
pub use risk::{Risk, RiskCode};
pub use schema::{schema_for, standard_formats, tidy_schema};
pub use settings_path::SettingsPath;
pub use structured::Structured;
pub use tool::{Requirements, Tool, ToolError, TypedOutputTool, TypedTool};
/// Makes a tool of a function: its name is the function's, its description the doc
/// comment, its parameters the arguments (each with its doc comment as the description
/// the model reads), and what it returns the kind of result.
///
/// ```
/// use toolhost_plugin_api::{ToolError, export_plugin, tool};
///
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Counted { words: usize }
///
/// /// Counts the words of a text.
/// #[tool(risk = read)]
/// async fn count_words(
///     /// The text.
///     text: String,
///     /// Count only words at least this long.
///     #[arg(default = 1, range = 1..=40)]
///     min_len: usize,
/// ) -> Result<Counted, ToolError> {
///     Ok(Counted { words: text.split_whitespace().filter(|w| w.len() >= min_len).count() })
/// }
///
/// export_plugin! { name: "words", version: "0.1.0", tools: [count_words] }
///
/// # use serde_json::json;
/// let host = toolhost_plugin_api::testing::TestHost::new();
/// let out = host.call_output(&count_words, json!({"text": "a bb ccc", "min_len": 2})).unwrap();
/// assert_eq!(out.structured, Some(json!({"words": 2})));
/// // What the host would refuse, the harness refuses, with the host's message.
/// assert_eq!(
///     host.call(&count_words, json!({"text": "a", "min_len": 0})),
///     Err(ToolError::InvalidArgs("/min_len: 0 is less than the minimum of 1".into()))
/// );
/// ```
///
/// The function becomes a unit struct of the same name (what `export_plugin!` lists)
/// that implements [`TypedTool`]; its body is `NAME::invoke(...)`, callable from Rust.
/// It may be `async` or not. Being a unit struct, the name is also a pattern where the
/// tool is in scope: `let greet = host.describe(&greet)` does not compile ("mismatched
/// types ... unit struct defined here"); name the binding otherwise (`let info = ...`).
///
/// # `#[tool(...)]`
/// - `risk = read | write | network | destructive | deny`: required (see [`Risk`]).
/// - `name = "..."`: instead of the function's name; either is checked against the
///   host's rule (1-64 of `A-Z a-z 0-9 _ -`) at compile time.
/// - `description = "..."`: instead of the doc comment (one of them is required).
/// - `interactive`, `workspace`, `env = ["KEY", ...]`, `programs = ["git", ...]`,
///   `task = optional | required`: as [`Tool::interactive`] and [`Requirements`] say.
/// - `crate = path`: where this crate is, when it is re-exported under another name.
///
/// # Parameters
/// - `ctx: &ToolContext<'_>` (any name): the call's context.
/// - `#[settings] s: T` (`T: Deserialize + Default`): the plugin's settings, read for the
///   call; a table that does not fit `T` is an error naming `[plugins.NAME.settings]`, and
///   a host too old to have settings (before plugin-api 0.1.4) gives `T::default()`.
///   Name `T` in `export_plugin! { settings: T, .. }` too (it then needs `JsonSchema`):
///   hosts check the table against its schema when they load the plugin, so settings
///   that do not fit refuse the load instead of failing every call, and keys `T` does not
///   have are warned about.
/// - `#[args] a: T` (`T: Deserialize + JsonSchema`): the whole arguments object, a type
///   of your own, instead of one parameter per argument.
/// - Any other parameter is one argument (an owned type: `String`, not `&str`). An
///   `Option<T>` may be left out. `#[arg(...)]` adds to it: `default = EXPR` (used when it
///   is left out, and shown in the schema; a string literal becomes a `String`),
///   `range = A..=B` (or `A..`, `..=B`), `length = A..=B` (of a string or a list),
///   `pattern = "regex"`, `description = "..."` (instead of the doc comment). Unknown
///   arguments are refused (`additionalProperties: false`).
///
/// # What it returns
/// `Result<T, E>` with any error `E` that displays (a [`ToolError`] is kept as it is, also
/// inside a `Box<dyn Error + Send + Sync>`, so `ToolError::invalid_args(..)` says invalid
/// arguments; any other error is a failure with its text), or `T` alone. By `T`:
/// - `String`: text.
/// - `ToolOutput`: the whole outcome (details, content blocks, `failed()`).
/// - `Vec<Diagnostic>`: findings, as [`ToolOutput::from_diagnostics`] makes them.
/// - `(String, T)`: a text for the model beside a structured value.
/// - [`Structured<T>`](Structured): a structured value with its text, details and error
///   flag (`Structured::new(report).text(..).failed_if(..)`).
/// - Any other `T: Serialize + JsonSchema`: a structured value (MCP `structuredContent`)
///   whose derived schema is the tool's output schema, and its JSON as the text. It must
///   be an object: a list, a number, a string or an `Option` is refused at compile time
///   (an enum is refused when the tool is checked: by `describe`, `call` and the host).
///
/// ```compile_fail
/// /// Lists files.
/// #[toolhost_plugin_api::tool(risk = read)]
/// async fn list() -> Vec<String> { Vec::new() } // not an object: wrap it in a struct
/// ```
#[cfg(feature = "macros")]
pub use toolhost_plugin_api_macros::tool;
pub use unwind::{CatchUnwind, dispose_payload, panic_message, take_message};

/// Reading a plugin, host side: each tool's metadata through its vtable
/// ([`read_tool_metadata`](host::read_tool_metadata)) and what its answer to a call means
/// ([`answer_from_ffi`](host::answer_from_ffi)), the one reading hosts and the test
/// harness share. Plugin authors need none of it.
pub mod host {
    pub use crate::export::{
        ToolMetadata, answer_from_ffi, read_settings_schema, read_tool_metadata,
    };
}

/// Used by `export_plugin!` and the plugins it builds; not part of the stable interface.
/// (Hosts read plugins through [`host`] and [`ffi`], and check tools with `check`.)
#[doc(hidden)]
pub mod __private {
    pub use crate::context::UNAVAILABLE_PREFIX;
    pub use crate::export::{
        CREATING_TOOL, FailedTool, ToolsResult, call_root_module_loader, create_tool, export_tools,
        into_ffi_tool, lib_header, root_module, settings_schema_of,
    };
    pub use crate::ffi::PluginRoot_Ref;
    #[cfg(feature = "macros")]
    pub use crate::macro_support::{
        AnyOutput, NotAnObject, ObjectOutput, OutputCheck, into_tool_error, output_text,
        settings_or_default,
    };
    pub use crate::outcome::{outcome_from_ffi, outcome_to_ffi};
    pub use crate::unwind::panic_hint;
    pub use abi_stable::library::{LibHeader, RootModuleResult};
    pub use {schemars, serde, serde_json};
}

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    /// What loaders check is [`crate::ABI_VERSION`]; it must change whenever the types that
    /// cross the boundary do. This records each field of the root module and both tables,
    /// with its type as abi_stable describes it (a function pointer's parameters and
    /// result, type names without their generic arguments): adding, removing, reordering
    /// or retyping one fails here until ABI_VERSION, this record, COMPATIBILITY.md and
    /// CHANGELOG.md are updated (and, for a release, its sources are kept in
    /// tests/compat/). Generic arguments (`RResult<RString, RString>`) and the types
    /// behind them are checked in full where it matters: the host loads the kept fixture
    /// of each released ABI, and abi_stable compares every layout.
    #[test]
    #[cfg(not(feature = "__test_newer_api"))]
    fn the_abi_version_names_exactly_these_fields() {
        let ctx = "&'a  FfiCallContext<'a> ";
        let this = "unsafe fn(this,: *const c_void )";
        let expected = (
            "0.1.4",
            vec![
                "name: RStr<'a>".to_owned(),
                "version: RStr<'a>".to_owned(),
                "api_version: RStr<'a>".to_owned(),
                "panic_unwind: bool".to_owned(),
                "table_layouts: fn()->TableLayouts".to_owned(),
                "tools: fn()->RResult".to_owned(),
            ],
            vec![
                format!("drop: {this}->()"),
                format!("name: {this}->RResult"),
                format!("description: {this}->RResult"),
                format!("schema: {this}->RResult"),
                format!("risk: {this}->RResult"),
                format!("interactive: {this}->RResult"),
                format!(
                    "call: unsafe fn(this,ctx,args,: *const c_void , param_1: {ctx}, \
                     param_2: RStr<'a>)->BorrowingFfiFuture<'a>"
                ),
                format!("requirements: {this}->RResult"),
                format!("output_schema: {this}->RResult"),
                format!(
                    "call_outcome: unsafe fn(this,ctx,args,: *const c_void , param_1: {ctx}, \
                     param_2: RStr<'a>)->BorrowingFfiFuture<'a>"
                ),
            ],
            vec![
                format!("profile_id: unsafe fn(ctx,: {ctx})->RStr<'a>"),
                format!("session_id: unsafe fn(ctx,: {ctx})->RStr<'a>"),
                format!("model: unsafe fn(ctx,: {ctx})->RStr<'a>"),
                format!("is_cancelled: unsafe fn(ctx,: {ctx})->bool"),
                format!("cancelled: unsafe fn(ctx,: {ctx})->BorrowingFfiFuture<'a>"),
                format!(
                    "log: unsafe fn(ctx,level,message,: {ctx}, param_1: LogLevel, \
                     param_2: RStr<'a>)->()"
                ),
                format!(
                    "sleep: unsafe fn(ctx,nanos,: {ctx}, param_1: u64)->BorrowingFfiFuture<'a>"
                ),
                format!(
                    "child_turn: unsafe fn(ctx,request,: {ctx}, \
                     param_1: RStr<'a>)->BorrowingFfiFuture<'a>"
                ),
                format!(
                    "progress: unsafe fn(ctx,progress,total,message,: {ctx}, param_1: f64, \
                     param_2: f64, param_3: RStr<'a>)->()"
                ),
                format!(
                    "ask_user: unsafe fn(ctx,request,: {ctx}, \
                     param_1: RStr<'a>)->BorrowingFfiFuture<'a>"
                ),
                format!(
                    "sample: unsafe fn(ctx,request,: {ctx}, \
                     param_1: RStr<'a>)->BorrowingFfiFuture<'a>"
                ),
                format!(
                    "host_request: unsafe fn(ctx,method,params,: {ctx}, param_1: RStr<'a>, \
                     param_2: RStr<'a>)->BorrowingFfiFuture<'a>"
                ),
            ],
        );
        // The table of releases names this crate's version under this ABI.
        assert!(
            crate::ffi::ABI_RELEASES
                .last()
                .is_some_and(|(abi, crates)| *abi == crate::ABI_VERSION
                    && crates.contains(&crate::API_VERSION)),
            "add {} to ABI {} in ffi::ABI_RELEASES",
            crate::API_VERSION,
            crate::ABI_VERSION
        );
        let [(_, root), (_, tool), (_, host)] = crate::ffi::abi_tables();
        assert_eq!((crate::ABI_VERSION, root, tool, host), expected);
    }

    /// abi_stable refuses layouts from another series of this crate (`0.minor`, `major`
    /// after 1.0: "incompatible package versions") even when they are unchanged, and
    /// loaders check the ABI version: the two agree only if the crate's series is the
    /// ABI's. A crate bumped to 0.2.0 must bump ABI_VERSION to 0.2.0 too.
    #[test]
    #[cfg(not(feature = "__test_newer_api"))]
    fn the_crate_series_is_the_abi_series() {
        fn series(v: &str) -> (&str, &str) {
            let mut parts = v.split('.');
            let major = parts.next().unwrap_or_default();
            let minor = parts.next().unwrap_or_default();
            if major == "0" {
                (major, minor)
            } else {
                (major, "")
            }
        }
        assert_eq!(
            series(crate::API_VERSION),
            series(crate::ABI_VERSION),
            "crate {} and ABI {} are of different series",
            crate::API_VERSION,
            crate::ABI_VERSION
        );
    }

    #[test]
    fn exported_symbol_is_the_one_abi_stable_looks_up() {
        assert_eq!(
            crate::__root_module_symbol!(),
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
    }
}
