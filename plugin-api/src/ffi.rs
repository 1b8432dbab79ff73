//! The types that cross the plugin boundary: the root module a plugin exports, the tool
//! vtable, the call context and the host-services vtable. Everything here has a fixed C
//! layout (`#[repr(C)]`, or `#[repr(transparent)]` for the one-byte codes) that is checked
//! when a plugin loads: the root module and what it reaches by abi_stable's layout check,
//! the two growable tables ([`ToolVTable`], [`HostVTable`]) by the host, through
//! [`TableLayouts`].
//!
//! Plugin authors need nothing here but [`LogLevel`] (re-exported at the crate root); they
//! implement [`crate::Tool`] and call [`crate::export_plugin!`], which builds these. Hosts
//! and tests read them. Growable parts are prefix types (see [Binary
//! compatibility](crate#binary-compatibility) in the crate docs).
//!
//! How a host reads a plugin, in one piece (here the plugin is compiled into the example;
//! a host gets the same header from the library file, see [`PluginRoot`]):
//!
//! ```
//! use toolhost_plugin_api::ffi::PluginRoot_Ref;
//! # use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};
//! # #[derive(serde::Deserialize, schemars::JsonSchema)]
//! # struct GreetArgs { name: String }
//! # struct Greet;
//! # impl TypedTool for Greet {
//! #     type Args = GreetArgs;
//! #     fn name(&self) -> &str { "greet" }
//! #     fn description(&self) -> &str { "Greets someone by name." }
//! #     fn risk(&self) -> Risk { Risk::Read }
//! #     async fn run(&self, _: &ToolContext<'_>, a: GreetArgs) -> Result<String, ToolError> {
//! #         Ok(format!("Hello, {}!", a.name))
//! #     }
//! # }
//!
//! toolhost_plugin_api::export_plugin! { name: "hello", version: "1.2.3", tools: [Greet] }
//!
//! // The version and layout checks, then the plugin's root module.
//! let root = __TOOLHOST_PLUGIN_ROOT.init_root_module::<PluginRoot_Ref>().expect("loads");
//! assert_eq!(root.name().as_str(), "hello");
//! assert!(root.panic_unwind());
//! let tools = root.tools()().into_result().expect("no panic");
//! for tool in tools {
//!     // SAFETY: `this` and its vtable came together from the plugin; dropped once, last.
//!     unsafe {
//!         let name = (tool.vtable.name())(tool.this).into_result().expect("no panic");
//!         assert_eq!(name.as_str(), "greet");
//!         (tool.vtable.drop())(tool.this);
//!     }
//! }
//! ```

use std::ffi::c_void;
use std::marker::PhantomData;

use abi_stable::StableAbi;
use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RResult, RStr, RString, RVec};
use abi_stable::type_layout::TypeLayout;
use async_ffi::{BorrowingFfiFuture, FfiFuture};

use crate::risk::RiskCode;

/// The root module every plugin exports, built by [`crate::export_plugin!`].
///
/// Every field is required (a prefix type that may never grow: changing it breaks every
/// plugin, see [Binary compatibility](crate#binary-compatibility)). Hosts read it through
/// [`PluginRoot_Ref`], after abi_stable's version and layout checks:
///
/// ```
/// use abi_stable::library::LibHeader;
/// use toolhost_plugin_api::ffi::{PluginRoot_Ref, TableLayouts};
///
/// // What a host does with a plugin's header. A host gets it from the library file with
/// // `abi_stable::library::{RawLibrary::load_at, lib_header_from_raw_library}`.
/// fn read(header: &LibHeader) -> Result<(), String> {
///     let root = header.init_root_module::<PluginRoot_Ref>().map_err(|e| e.to_string())?;
///     if !root.panic_unwind() {
///         return Err("built with panic = \"abort\"".to_owned());
///     }
///     let _theirs: TableLayouts = root.table_layouts()(); // checked against our tables
///     let tools = root.tools()().into_result().map_err(|panic| panic.into_string())?;
///     println!("{} {} (plugin-api {}): {} tools",
///         root.name(), root.version(), root.api_version(), tools.len());
///     for tool in tools {
///         // SAFETY: each tool is freed once, with its own vtable's `drop`.
///         unsafe { (tool.vtable.drop())(tool.this) };
///     }
///     Ok(())
/// }
///
/// # struct Nothing;
/// # impl toolhost_plugin_api::Tool for Nothing {
/// #     fn name(&self) -> &str { "nothing" }
/// #     fn description(&self) -> &str { "Does nothing." }
/// #     fn schema(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
/// #     fn risk(&self) -> toolhost_plugin_api::Risk { toolhost_plugin_api::Risk::Read }
/// #     async fn call(&self, _: &toolhost_plugin_api::ToolContext<'_>, _: serde_json::Value)
/// #         -> Result<String, toolhost_plugin_api::ToolError> { Ok(String::new()) }
/// # }
/// // Here the plugin is compiled into the example; its header is the static the macro
/// // exports.
/// toolhost_plugin_api::export_plugin! { name: "demo", version: "0.1.0", tools: [Nothing] }
/// read(&__TOOLHOST_PLUGIN_ROOT).expect("loads");
/// ```
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginRoot_Ref)))]
#[sabi(missing_field(panic))]
pub struct PluginRoot {
    /// The plugin's name, e.g. `"utils"`.
    pub name: RStr<'static>,
    /// The plugin's own version, e.g. its `CARGO_PKG_VERSION`.
    pub version: RStr<'static>,
    /// The version of this API crate the plugin was built against.
    pub api_version: RStr<'static>,
    /// `cfg!(panic = "unwind")` evaluated in the plugin. Hosts refuse `false`: a panic in
    /// a plugin built with `panic = "abort"` would kill the host.
    pub panic_unwind: bool,
    /// The layouts of the growable tables as this plugin was built (see [`TableLayouts`]).
    pub table_layouts: extern "C" fn() -> TableLayouts,
    /// Creates the plugin's tools. `Err` carries the message of a panic.
    #[sabi(last_prefix_field)]
    pub tools: extern "C" fn() -> RResult<RVec<FfiTool>, RString>,
}

/// The name of [`SETTINGS_SCHEMA_SYMBOL`], as a literal `export_plugin!` can put in an
/// `export_name` attribute: the one place it is written.
#[doc(hidden)]
#[macro_export]
macro_rules! __settings_schema_symbol {
    () => {
        "toolhost_plugin_settings_schema"
    };
}

/// The symbol under which a plugin that declares its settings type
/// (`export_plugin! { settings: T, .. }`) exports a function returning that type's JSON
/// Schema as JSON text (`extern "C" fn() -> RResult<RString, RString>`; `Err` carries the
/// message of a panic). A symbol of its own, not a root-module field: abi_stable's
/// root-module check refuses a plugin whose root is shorter than the host's, so the root
/// never grows. Hosts look it up after the root module; a plugin without it (one that
/// declares no settings, or was built before plugin-api 0.1.4) declares no schema, and a
/// host before 0.1.4 never looks.
pub const SETTINGS_SCHEMA_SYMBOL: &str = __settings_schema_symbol!();

/// [`SETTINGS_SCHEMA_SYMBOL`] as the NUL-terminated bytes a symbol lookup takes.
pub const SETTINGS_SCHEMA_SYMBOL_C: &[u8] = concat!(__settings_schema_symbol!(), "\0").as_bytes();

/// What the function exported under [`SETTINGS_SCHEMA_SYMBOL`] returns: the schema as JSON
/// text, or the message of a panic while it was derived.
pub type SettingsSchemaResult = RResult<RString, RString>;

/// The type of the function exported under [`SETTINGS_SCHEMA_SYMBOL`].
pub type SettingsSchemaFn = extern "C" fn() -> SettingsSchemaResult;

impl RootModule for PluginRoot_Ref {
    abi_stable::declare_root_module_statics! {PluginRoot_Ref}
    const BASE_NAME: &'static str = "toolhost_plugin";
    const NAME: &'static str = "toolhost plugin";
    const VERSION_STRINGS: VersionStrings = ABI_VERSION_STRINGS;
}

/// The ABI version, as the root-module version check reads it.
///
/// ```
/// use toolhost_plugin_api::ffi::ABI_VERSION_STRINGS;
///
/// let abi = ABI_VERSION_STRINGS.parsed().expect("major.minor.patch");
/// let text = format!("{}.{}.{}", abi.major, abi.minor, abi.patch);
/// assert_eq!(text, toolhost_plugin_api::ABI_VERSION);
/// ```
pub const ABI_VERSION_STRINGS: VersionStrings = VersionStrings::new(ABI_VERSION);

/// The name [`ABI_VERSION_STRINGS`] had up to 0.1.3, kept so code that named it still
/// builds: the root-module check reads the ABI version.
///
/// ```
/// #[allow(deprecated)]
/// let strings = toolhost_plugin_api::ffi::API_VERSION_STRINGS;
/// assert_eq!(strings.version, toolhost_plugin_api::ABI_VERSION);
/// ```
#[deprecated(
    since = "0.1.4",
    note = "use ABI_VERSION_STRINGS: loaders check the ABI version, not the crate version"
)]
pub const API_VERSION_STRINGS: VersionStrings = ABI_VERSION_STRINGS;

/// The version of the binary interface, which loaders check: it changes only when the
/// types in this module change, never for additions to the Rust-side API. A host refuses
/// a plugin whose ABI has a different major version or, before 1.0, a lower minor
/// version; everything else is judged by the layout checks (see [Binary
/// compatibility](crate#binary-compatibility) in the crate docs, and
/// [COMPATIBILITY.md](https://github.com/toolhost/toolhost/blob/main/plugin-api/COMPATIBILITY.md)
/// for which hosts load which plugin builds). Releases of this crate that leave the ABI
/// alone keep this number.
///
/// ```
/// use toolhost_plugin_api::{ABI_VERSION, API_VERSION};
///
/// // What `toolhost check` shows for a plugin built with this crate.
/// println!("plugin-api: ABI {ABI_VERSION}, built with toolhost-plugin-api {API_VERSION}");
///
/// // The ABI changes only with a new crate release, so it is never ahead of the crate.
/// let numbers = |v: &str| -> Vec<u32> {
///     v.split('.').map(|n| n.parse().expect("a number")).collect()
/// };
/// assert!(numbers(ABI_VERSION) <= numbers(API_VERSION));
/// ```
#[cfg(not(feature = "__test_newer_api"))]
pub const ABI_VERSION: &str = "0.1.4";

/// The ABI's three tables (the root module, a tool's vtable, the host's services), each
/// with its fields as abi_stable records their layouts (`name: type`; a function pointer's
/// parameters and result, type names without their generic arguments): what the ABI
/// record test compares, and what the book's ABI reference shows.
#[doc(hidden)]
pub fn abi_tables() -> [(&'static str, Vec<String>); 3] {
    fn fields_of(layout: &'static TypeLayout, name: &str) -> Vec<String> {
        std::iter::once(layout)
            .chain(layout.shared_vars().type_layouts().iter().map(|get| get()))
            .find(|l| l.name() == name)
            .and_then(|found| found.get_fields())
            .map(|fields| {
                fields
                    .iter()
                    .map(|f| {
                        let ty = f
                            .function_range()
                            .iter()
                            .next()
                            .map(|sig| sig.to_string())
                            .unwrap_or_else(|| f.layout().full_type().to_string());
                        let ty = ty.lines().next().unwrap_or_default().to_owned();
                        format!("{}: {ty}", f.name())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    [
        (
            "PluginRoot",
            fields_of(<PluginRoot_Ref as StableAbi>::LAYOUT, "PluginRoot"),
        ),
        (
            "ToolVTable",
            fields_of(<ToolVTable_Ref as StableAbi>::LAYOUT, "ToolVTable"),
        ),
        (
            "HostVTable",
            fields_of(<HostVTable_Ref as StableAbi>::LAYOUT, "HostVTable"),
        ),
    ]
}

/// Which releases of this crate carry each ABI version, oldest first, as messages name
/// them ("rebuild it against toolhost-plugin-api 0.1.4 (ABI 0.1.4)"). The ABI
/// record test (`the_abi_version_names_exactly_these_fields`) keeps it: the last entry is
/// [`ABI_VERSION`] and lists [`API_VERSION`]. A release adds its version to its ABI's
/// entry, or one line for a new ABI.
#[doc(hidden)]
pub const ABI_RELEASES: &[(&str, &[&str])] = &[
    ("0.1.0", &["0.1.0"]),
    ("0.1.1", &["0.1.1"]),
    ("0.1.2", &["0.1.2"]),
    ("0.1.3", &["0.1.3"]),
    ("0.1.4", &["0.1.4"]),
];

/// The crate releases that carry `abi`, with the ABI, as messages name them:
/// `toolhost-plugin-api 0.1.4 (ABI 0.1.4)`; for an ABI of no release,
/// `toolhost-plugin-api with ABI 0.1.99`.
///
/// ```
/// use toolhost_plugin_api::ffi::abi_with_crates;
/// assert_eq!(abi_with_crates("0.1.1"), "toolhost-plugin-api 0.1.1 (ABI 0.1.1)");
/// assert_eq!(abi_with_crates("9.9.9"), "toolhost-plugin-api with ABI 9.9.9");
/// ```
#[doc(hidden)]
pub fn abi_with_crates(abi: &str) -> String {
    match ABI_RELEASES.iter().find(|(a, _)| *a == abi) {
        Some((_, crates)) => {
            format!("toolhost-plugin-api {} (ABI {abi})", crates.join(" or "))
        }
        None => format!("toolhost-plugin-api with ABI {abi}"),
    }
}

/// The ABI version the test-only newer API pretends to have.
#[cfg(feature = "__test_newer_api")]
pub const ABI_VERSION: &str = "0.1.99";

/// The version of this crate as text, e.g. `"0.1.4"`. Plugins record it in their root
/// module ([`PluginRoot::api_version`]) so hosts can name the release a plugin was built
/// with; loaders check [`ABI_VERSION`] instead.
///
/// ```
/// use toolhost_plugin_api::API_VERSION;
/// use toolhost_plugin_api::ffi::PluginRoot_Ref;
/// # struct Nothing;
/// # impl toolhost_plugin_api::Tool for Nothing {
/// #     fn name(&self) -> &str { "nothing" }
/// #     fn description(&self) -> &str { "Does nothing." }
/// #     fn schema(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
/// #     fn risk(&self) -> toolhost_plugin_api::Risk { toolhost_plugin_api::Risk::Read }
/// #     async fn call(&self, _: &toolhost_plugin_api::ToolContext<'_>, _: serde_json::Value)
/// #         -> Result<String, toolhost_plugin_api::ToolError> { Ok(String::new()) }
/// # }
///
/// toolhost_plugin_api::export_plugin! { name: "demo", version: "2.0.0", tools: [Nothing] }
///
/// let root = __TOOLHOST_PLUGIN_ROOT.init_root_module::<PluginRoot_Ref>().expect("loads");
/// assert_eq!(root.version().as_str(), "2.0.0"); // the plugin's own version
/// assert_eq!(root.api_version().as_str(), API_VERSION); // the crate it was built with
/// ```
pub const API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The layouts of the two growable tables, as the plugin was built.
///
/// abi_stable's check of a root module accepts a prefix type only when the library's
/// version has at least the fields the host's has, which would refuse every plugin built
/// before a field was appended. So the tables are opaque to that check, and hosts check
/// them with these layouts instead: the common fields must match, and the longer table
/// must only append to the shorter one, whichever side is older.
///
/// A host's check, with abi_stable's layout comparison (which accepts an implementation
/// that appends to the interface, so it is tried both ways round):
///
/// ```
/// use abi_stable::abi_stability::abi_checking::check_layout_compatibility;
/// use toolhost_plugin_api::ffi::TableLayouts;
///
/// fn tables_fit(theirs: TableLayouts) -> bool {
///     let ours = TableLayouts::CURRENT;
///     [(ours.tool_vtable, theirs.tool_vtable), (ours.host_vtable, theirs.host_vtable)]
///         .into_iter()
///         .all(|(ours, theirs)| {
///             check_layout_compatibility(ours, theirs).is_ok() // newer plugin
///                 || check_layout_compatibility(theirs, ours).is_ok() // older plugin
///         })
/// }
///
/// assert!(tables_fit(TableLayouts::CURRENT));
/// ```
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct TableLayouts {
    /// Layout of [`ToolVTable_Ref`] in the plugin.
    pub tool_vtable: &'static TypeLayout,
    /// Layout of [`HostVTable_Ref`] in the plugin.
    pub host_vtable: &'static TypeLayout,
}

impl TableLayouts {
    /// The layouts as compiled into the caller. A plugin's root module returns this (its
    /// [`PluginRoot::table_layouts`]); a host compares it with its own.
    ///
    /// ```
    /// use toolhost_plugin_api::ffi::TableLayouts;
    ///
    /// let ours = TableLayouts::CURRENT;
    /// println!("{}", ours.tool_vtable.full_type());
    /// ```
    pub const CURRENT: TableLayouts = TableLayouts {
        tool_vtable: <ToolVTable_Ref as StableAbi>::LAYOUT,
        host_vtable: <HostVTable_Ref as StableAbi>::LAYOUT,
    };
}

/// One tool exported by a plugin: an opaque object and the plugin's vtable for it.
///
/// Invariant (what makes the `Send`/`Sync` impls below sound): `this` is a `Box<T>` leaked
/// by the plugin for a `T: Tool` (so `Send + Sync`), and `vtable` is the one generated for
/// that `T`. Only `export_plugin!` builds these. The host owns it and calls `drop` once.
///
/// ```
/// use toolhost_plugin_api::ffi::FfiTool;
/// use toolhost_plugin_api::{Risk, RiskCode};
///
/// /// What a host reads of a tool before it registers it.
/// fn describe(tool: &FfiTool) -> Result<(String, Risk), String> {
///     // SAFETY: `tool` came from a plugin's `tools` and was not dropped yet.
///     unsafe {
///         let name = (tool.vtable.name())(tool.this).into_result();
///         let risk = (tool.vtable.risk())(tool.this).into_result();
///         let name = name.map_err(|panic| panic.into_string())?;
///         let risk: RiskCode = risk.map_err(|panic| panic.into_string())?;
///         Ok((name.into_string(), risk.risk()))
///     }
/// }
/// # struct Nothing;
/// # impl toolhost_plugin_api::Tool for Nothing {
/// #     fn name(&self) -> &str { "nothing" }
/// #     fn description(&self) -> &str { "Does nothing." }
/// #     fn schema(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
/// #     fn risk(&self) -> Risk { Risk::Write }
/// #     async fn call(&self, _: &toolhost_plugin_api::ToolContext<'_>, _: serde_json::Value)
/// #         -> Result<String, toolhost_plugin_api::ToolError> { Ok(String::new()) }
/// # }
/// # toolhost_plugin_api::export_plugin! { name: "demo", version: "0.1.0", tools: [Nothing] }
/// # let root = __TOOLHOST_PLUGIN_ROOT
/// #     .init_root_module::<toolhost_plugin_api::ffi::PluginRoot_Ref>()
/// #     .expect("loads");
/// # let tool = root.tools()().into_result().expect("tools").pop().expect("one tool");
/// assert_eq!(describe(&tool), Ok(("nothing".to_owned(), Risk::Write)));
/// // SAFETY: dropped once, after its last use.
/// unsafe { (tool.vtable.drop())(tool.this) };
/// ```
#[repr(C)]
#[derive(StableAbi)]
pub struct FfiTool {
    /// The plugin's object (a leaked `Box<T>` for the tool type `T`).
    pub this: *const c_void,
    /// The functions that operate on `this`. Opaque to the root-module check: hosts check
    /// it with [`TableLayouts`].
    #[sabi(unsafe_opaque_field)]
    pub vtable: ToolVTable_Ref,
}

// SAFETY: per the invariant above, `this` is a `T: Tool`, which is `Send + Sync`; the vtable
// is static.
unsafe impl Send for FfiTool {}
// SAFETY: as above.
unsafe impl Sync for FfiTool {}

/// What one call of a plugin tool returns.
///
/// ```
/// use abi_stable::std_types::{RResult, RString};
/// use toolhost_plugin_api::ffi::{FfiCallResult, FfiToolError};
///
/// fn output(result: FfiCallResult) -> Result<String, String> {
///     match result {
///         RResult::ROk(text) => Ok(text.into_string()),
///         RResult::RErr(e) if e.kind == FfiToolError::INVALID_ARGS => {
///             Err(format!("invalid arguments: {}", e.message))
///         }
///         RResult::RErr(e) => Err(e.message.into_string()),
///     }
/// }
///
/// assert_eq!(output(RResult::ROk(RString::from("42"))), Ok("42".to_owned()));
/// ```
pub type FfiCallResult = RResult<RString, FfiToolError>;

/// The whole outcome of one successful call as it crosses (ABI 0.1.4): the text the model
/// reads, raw (a 10 MB text is never escaped), and everything else as one JSON object,
/// `""` when there is nothing else: `{"structured": ..., "details": {...}, "content": [...]}`.
/// Hosts ignore keys they do not know, so later additions are new keys, not a new layout.
/// A fixed layout: it can never change.
///
/// ```
/// use toolhost_plugin_api::ffi::FfiOutcome;
///
/// let outcome = FfiOutcome { text: "21 °C".into(), extra: r#"{"structured":{"c":21}}"#.into() };
/// let extra: serde_json::Value = serde_json::from_str(&outcome.extra).expect("JSON");
/// assert_eq!(extra["structured"]["c"], 21);
/// ```
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiOutcome {
    /// What the model reads.
    pub text: RString,
    /// The rest, as a JSON object's text, or `""`.
    pub extra: RString,
}

/// What one call through [`ToolVTable::call_outcome`] returns.
///
/// ```
/// use abi_stable::std_types::RResult;
/// use toolhost_plugin_api::ffi::{FfiOutcome, FfiOutcomeResult};
///
/// let ok: FfiOutcomeResult = RResult::ROk(FfiOutcome { text: "ok".into(), extra: "".into() });
/// assert!(ok.is_ok());
/// ```
pub type FfiOutcomeResult = RResult<FfiOutcome, FfiToolError>;

/// The metadata getters return the value, or `Err` with the message of a panic.
///
/// ```
/// use abi_stable::std_types::{RResult, RString};
/// use toolhost_plugin_api::ffi::FfiMeta;
///
/// let answer: FfiMeta<bool> = RResult::RErr(RString::from("index out of bounds"));
/// let answer = answer.into_result().map_err(RString::into_string);
/// assert_eq!(answer, Err("index out of bounds".to_owned()));
/// ```
pub type FfiMeta<T> = RResult<T, RString>;

/// The functions a plugin provides for each of its tools.
///
/// Fields after `call` are optional: a host reads them as `Option` and falls back to a
/// default for plugins built before they existed.
///
/// ```
/// use toolhost_plugin_api::Requirements;
/// use toolhost_plugin_api::ffi::FfiTool;
///
/// /// A tool's requirements: none for plugins built before plugin-api 0.1.1.
/// fn requirements(tool: &FfiTool) -> Result<Requirements, String> {
///     let Some(requirements) = tool.vtable.requirements() else {
///         return Ok(Requirements::default());
///     };
///     // SAFETY: `tool` is alive, and `this` belongs to this vtable.
///     let json = unsafe { requirements(tool.this) }.into_result();
///     let json = json.map_err(|panic| panic.into_string())?;
///     serde_json::from_str(&json).map_err(|e| e.to_string())
/// }
/// ```
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = ToolVTable_Ref)))]
#[sabi(missing_field(option))]
pub struct ToolVTable {
    /// Frees the tool object.
    pub drop: unsafe extern "C" fn(this: *const c_void),
    /// The tool's name.
    pub name: unsafe extern "C" fn(this: *const c_void) -> FfiMeta<RString>,
    /// The description the model reads.
    pub description: unsafe extern "C" fn(this: *const c_void) -> FfiMeta<RString>,
    /// The JSON Schema of the arguments, as JSON text.
    pub schema: unsafe extern "C" fn(this: *const c_void) -> FfiMeta<RString>,
    /// The declared risk level.
    pub risk: unsafe extern "C" fn(this: *const c_void) -> FfiMeta<RiskCode>,
    /// Whether calls need a person at hand (forces one-at-a-time dispatch).
    pub interactive: unsafe extern "C" fn(this: *const c_void) -> FfiMeta<bool>,
    /// Runs the tool. `args` is JSON text that the host already validated against the
    /// schema. The future borrows `ctx` and `args`; the host keeps both alive until the
    /// future is dropped.
    #[sabi(last_prefix_field)]
    pub call: for<'a> unsafe extern "C" fn(
        this: *const c_void,
        ctx: &'a FfiCallContext<'a>,
        args: RStr<'a>,
    ) -> BorrowingFfiFuture<'a, FfiCallResult>,
    /// What the tool needs to be available (JSON: `{"env": [...], "programs": [...]}`).
    /// Appended after the prefix: hosts read it as `Option`, so plugins built before it
    /// existed keep loading and have no requirements.
    pub requirements: unsafe extern "C" fn(this: *const c_void) -> FfiMeta<RString>,
    /// (ABI 0.1.4) The JSON Schema of the tool's structured result, as JSON text; `""`
    /// when the tool declares none. Hosts read it as `Option`: older plugins declare none.
    pub output_schema: unsafe extern "C" fn(this: *const c_void) -> FfiMeta<RString>,
    /// (ABI 0.1.4) Runs the tool and returns its whole outcome ([`FfiOutcome`]). A host
    /// that has it calls it instead of `call`; hosts that predate it call `call`, which
    /// returns the outcome's degraded text (see `ToolOutput::degraded_text`).
    pub call_outcome: for<'a> unsafe extern "C" fn(
        this: *const c_void,
        ctx: &'a FfiCallContext<'a>,
        args: RStr<'a>,
    ) -> BorrowingFfiFuture<'a, FfiOutcomeResult>,
    /// Test-only stand-in for a method a later API version appends.
    #[cfg(feature = "__test_newer_api")]
    #[doc(hidden)]
    pub newer_method: unsafe extern "C" fn(this: *const c_void) -> bool,
}

/// A tool error as it crosses the boundary: a growable kind code and a message.
///
/// ```
/// use toolhost_plugin_api::ToolError;
/// use toolhost_plugin_api::ffi::FfiToolError;
///
/// fn to_tool_error(e: FfiToolError) -> ToolError {
///     match e.kind {
///         FfiToolError::INVALID_ARGS => ToolError::InvalidArgs(e.message.into_string()),
///         FfiToolError::PANICKED => ToolError::failed(format!("it panicked: {}", e.message)),
///         _ => ToolError::Failed(e.message.into_string()), // FAILED, and codes added later
///     }
/// }
///
/// let e = FfiToolError { kind: 7, message: "from a newer plugin".into() };
/// assert_eq!(to_tool_error(e), ToolError::failed("from a newer plugin"));
/// ```
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiToolError {
    /// [`FfiToolError::INVALID_ARGS`], [`FfiToolError::FAILED`] or
    /// [`FfiToolError::PANICKED`]; unknown codes are read as `FAILED`.
    pub kind: u8,
    /// What went wrong, written for the model.
    pub message: RString,
}

impl FfiToolError {
    /// The arguments did not make sense to the tool.
    pub const INVALID_ARGS: u8 = 0;
    /// The tool ran and failed.
    pub const FAILED: u8 = 1;
    /// The tool panicked; the panic was caught in the plugin.
    pub const PANICKED: u8 = 2;
}

/// The context of one call, as it crosses the boundary: the host's opaque call state and
/// the host's service table. Only valid for the duration of the call.
///
/// Tools see it as a [`ToolContext`](crate::ToolContext); at this level every service is a
/// function of the table called with the context:
///
/// ```
/// use toolhost_plugin_api::ffi::FfiCallContext;
///
/// fn profile<'a>(ctx: &'a FfiCallContext<'a>) -> &'a str {
///     // SAFETY: the host keeps the context valid while the call runs.
///     unsafe { (ctx.host.profile_id())(ctx) }.as_str()
/// }
/// ```
#[repr(C)]
#[derive(StableAbi)]
pub struct FfiCallContext<'a> {
    /// The host's call state, passed back to every service.
    pub data: *const c_void,
    /// The host's services. Opaque to the root-module check: hosts check it with
    /// [`TableLayouts`].
    #[sabi(unsafe_opaque_field)]
    pub host: HostVTable_Ref,
    /// Ties the context to the call it belongs to.
    pub _marker: PhantomData<&'a ()>,
}

// SAFETY: `data` points at the host's call state, which the host guarantees is `Sync` (its
// own code checks that at compile time) and outlives `'a`.
unsafe impl Send for FfiCallContext<'_> {}
// SAFETY: as above.
unsafe impl Sync for FfiCallContext<'_> {}

/// Log levels a plugin can log at through [`HostVTable::log`] (tools use
/// [`ToolContext::log`](crate::ToolContext::log)). A one-byte code: a host reads a level it
/// does not know as [`LogLevel::DEBUG`].
///
/// ```
/// use toolhost_plugin_api::{LogLevel, ToolContext};
///
/// fn report(ctx: &ToolContext<'_>, fetched: usize) {
///     ctx.log(LogLevel::INFO, &format!("fetched {fetched} pages"));
///     if fetched == 0 {
///         ctx.log(LogLevel::WARN, "nothing fetched");
///     }
/// }
/// ```
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLevel(pub u8);

impl LogLevel {
    /// Errors.
    pub const ERROR: LogLevel = LogLevel(0);
    /// Warnings.
    pub const WARN: LogLevel = LogLevel(1);
    /// Information (`toolhost serve` shows it by default; one-shot commands such as
    /// `toolhost call` show warnings and errors only).
    pub const INFO: LogLevel = LogLevel(2);
    /// Debugging detail.
    pub const DEBUG: LogLevel = LogLevel(3);
}

/// The services a host gives each call. Every function takes the call's context (whose
/// `data` is the host's call state); strings it returns live as long as the context.
///
/// Services added by later API versions go after `child_turn` (0.1.2 added `progress`,
/// `ask_user` and `sample`; 0.1.3 `host_request`); a plugin calling one on a host that
/// predates it gets [`ServiceError::Unavailable`](crate::ServiceError::Unavailable) (the
/// field reads as `None`), never a crash. A host builds the table once and passes it with
/// every call's [`FfiCallContext`].
///
/// ```
/// use toolhost_plugin_api::ffi::FfiCallContext;
///
/// /// Whether the host of this call can ask its person questions (plugin-api 0.1.2).
/// fn can_ask(ctx: &FfiCallContext<'_>) -> bool {
///     ctx.host.ask_user().is_some()
/// }
/// ```
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostVTable_Ref)))]
#[sabi(missing_field(option))]
pub struct HostVTable {
    /// The profile the call works for.
    pub profile_id: for<'a> unsafe extern "C" fn(ctx: &'a FfiCallContext<'a>) -> RStr<'a>,
    /// The session (conversation) the call works for.
    pub session_id: for<'a> unsafe extern "C" fn(ctx: &'a FfiCallContext<'a>) -> RStr<'a>,
    /// The model that asked for the call.
    pub model: for<'a> unsafe extern "C" fn(ctx: &'a FfiCallContext<'a>) -> RStr<'a>,
    /// Whether the call was cancelled (the turn was stopped or the call timed out).
    pub is_cancelled: unsafe extern "C" fn(ctx: &FfiCallContext<'_>) -> bool,
    /// Resolves when the call is cancelled. Owns what it needs: it may outlive the call.
    pub cancelled: unsafe extern "C" fn(ctx: &FfiCallContext<'_>) -> FfiFuture<()>,
    /// Writes a line to the host's log, tagged with the plugin and tool.
    pub log: unsafe extern "C" fn(ctx: &FfiCallContext<'_>, level: LogLevel, message: RStr<'_>),
    /// Sleeps on the host's timer. Resolves `true` when the time passed, `false` when the
    /// call was cancelled first.
    pub sleep: unsafe extern "C" fn(ctx: &FfiCallContext<'_>, nanos: u64) -> FfiFuture<bool>,
    /// Runs a child turn of the agent running this call. `request` is JSON
    /// (`{"prompt": "..."}`); the result is the child's final answer or an error message.
    #[sabi(last_prefix_field)]
    pub child_turn: unsafe extern "C" fn(
        ctx: &FfiCallContext<'_>,
        request: RStr<'_>,
    ) -> FfiFuture<RResult<RString, RString>>,
    /// (0.1.2) Reports how far the call got to whoever asked for it. `total` is NaN when
    /// unknown; `message` may be empty.
    pub progress: unsafe extern "C" fn(
        ctx: &FfiCallContext<'_>,
        progress: f64,
        total: f64,
        message: RStr<'_>,
    ),
    /// (0.1.2) Asks the person behind the call a question. `request` is JSON
    /// (`{"message": "...", "schema": {...}}`); the answer is JSON
    /// (`{"action": "accept" | "decline" | "cancel", "content": {...}}`) or an error message.
    pub ask_user: unsafe extern "C" fn(
        ctx: &FfiCallContext<'_>,
        request: RStr<'_>,
    ) -> FfiFuture<RResult<RString, RString>>,
    /// (0.1.2) Asks the caller's model for a completion. `request` is JSON
    /// (`{"prompt": "...", "system": "...", "max_tokens": N}`); the answer is JSON
    /// (`{"text": "...", "model": "..."}`) or an error message.
    pub sample: unsafe extern "C" fn(
        ctx: &FfiCallContext<'_>,
        request: RStr<'_>,
    ) -> FfiFuture<RResult<RString, RString>>,
    /// (0.1.3) A named request to the host, JSON in and out: `profile.state_dir`,
    /// `sessions.search`, and whatever later hosts add (an unknown method is an
    /// "unavailable" error). New capabilities arrive as methods, not table fields.
    pub host_request: unsafe extern "C" fn(
        ctx: &FfiCallContext<'_>,
        method: RStr<'_>,
        params: RStr<'_>,
    ) -> FfiFuture<RResult<RString, RString>>,
    /// Test-only stand-in for a service a later API version appends.
    #[cfg(feature = "__test_newer_api")]
    #[doc(hidden)]
    pub newer_service: unsafe extern "C" fn(ctx: &FfiCallContext<'_>) -> RString,
}
