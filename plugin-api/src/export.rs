//! The plugin side of the boundary: turns the author's [`Tool`]s into [`FfiTool`]s with
//! every entry point guarded against panics, and the [`crate::export_plugin!`] macro that
//! exports the root module.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};

use abi_stable::prefix_type::WithMetadata;
use abi_stable::std_types::{RResult, RStr, RString, RVec};
use async_ffi::BorrowingFfiFuture;

use crate::context::ToolContext;
use crate::ffi::{
    FfiCallContext, FfiCallResult, FfiMeta, FfiOutcome, FfiOutcomeResult, FfiTool, FfiToolError,
    PluginRoot, PluginRoot_Ref, SettingsSchemaResult, TableLayouts, ToolVTable, ToolVTable_Ref,
};
use crate::limits::{MAX_DESCRIPTION_BYTES, MAX_NAME_BYTES, MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH};
use crate::outcome::ToolOutput;
use crate::risk::RiskCode;
use crate::tool::{Tool, ToolError};
use crate::unwind::{CatchUnwind, dispose_payload, take_message};

/// The one symbol abi_stable looks up in every plugin; `export_plugin!` exports the root
/// module under it. (A test checks it against abi_stable's own constant.)
#[doc(hidden)]
#[macro_export]
macro_rules! __root_module_symbol {
    () => {
        "_1as_0lib_1header_0root_bmodule_bloader"
    };
}

/// Exports a plugin's root module. Call it once, at the crate root of a `cdylib` crate.
///
/// ```
/// # use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError};
/// # struct Greet;
/// # impl Tool for Greet {
/// #     fn name(&self) -> &str { "greet" }
/// #     fn description(&self) -> &str { "Greets." }
/// #     fn schema(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
/// #     fn risk(&self) -> Risk { Risk::Read }
/// #     async fn call(&self, _: &ToolContext<'_>, _: serde_json::Value) -> Result<String, ToolError> {
/// #         Ok("hi".into())
/// #     }
/// # }
/// toolhost_plugin_api::export_plugin! {
///     name: "hello",
///     version: env!("CARGO_PKG_VERSION"),
///     tools: [Greet],
/// }
/// ```
///
/// `tools` are expressions of types implementing [`Tool`] (or [`crate::TypedTool`]). They
/// are created when the host loads the plugin, each on its own: one whose expression
/// panics is left out with a message naming it (`creating tool #2 (`Search::new()`)
/// panicked: ...`) instead of crashing the host, and the others load.
///
/// `settings: T` (optional, before `tools`) names the plugin's settings type
/// (`Deserialize + JsonSchema`, every field defaulted): hosts check the config's
/// `[plugins.NAME.settings]` against its schema when they load the plugin, so settings
/// that do not fit refuse the load (naming the table and the problem) instead of failing
/// every call, and keys `T` does not have are warned about. Tools read them with
/// `ctx.settings::<T>()` or a `#[tool]` function's `#[settings]` parameter.
///
/// ```
/// # use toolhost_plugin_api::{ToolError, tool};
/// #[derive(serde::Deserialize, schemars::JsonSchema, Default)]
/// #[serde(default)]
/// struct Settings {
///     /// "metric" (the default) or "imperial".
///     units: Option<String>,
/// }
///
/// /// Says which units the plugin uses.
/// #[tool(risk = read)]
/// async fn units(#[settings] s: Settings) -> String {
///     s.units.unwrap_or_else(|| "metric".into())
/// }
///
/// toolhost_plugin_api::export_plugin! {
///     name: "weather",
///     version: "0.1.0",
///     settings: Settings,
///     tools: [units],
/// }
/// # let host = toolhost_plugin_api::testing::TestHost::new().settings(serde_json::json!({"units": "imperial"}));
/// # assert_eq!(host.call(&units, serde_json::json!({})), Ok("imperial".into()));
/// ```
#[macro_export]
macro_rules! export_plugin {
    (name: $name:expr, version: $version:expr, $(settings: $settings:ty,)? tools: [$($tool:expr),* $(,)?] $(,)?) => {
        #[doc(hidden)]
        #[unsafe(export_name = $crate::__root_module_symbol!())]
        pub static __TOOLHOST_PLUGIN_ROOT: $crate::__private::LibHeader = {
            fn __toolhost_tools() -> ::std::vec::Vec<$crate::ffi::FfiTool> {
                // Each tool is created on its own: one that panics is left out, named.
                let mut tools = ::std::vec::Vec::new();
                $(
                    tools.push($crate::__private::create_tool(
                        tools.len() + 1,
                        ::core::stringify!($tool),
                        || $tool,
                    ));
                )*
                tools
            }
            extern "C" fn __toolhost_export_tools() -> $crate::__private::ToolsResult {
                $crate::__private::export_tools(__toolhost_tools)
            }
            fn __toolhost_root() -> $crate::__private::PluginRoot_Ref {
                $crate::__private::root_module($name, $version, cfg!(panic = "unwind"), __toolhost_export_tools)
            }
            extern "C" fn __toolhost_load() -> $crate::__private::RootModuleResult {
                $crate::__private::call_root_module_loader(__toolhost_root)
            }
            // SAFETY: the constructor returns the root module type named here.
            unsafe { $crate::__private::lib_header::<$crate::__private::PluginRoot_Ref>(__toolhost_load) }
        };
        $(
            /// The plugin's settings schema, for hosts (see
            /// `toolhost_plugin_api::ffi::SETTINGS_SCHEMA_SYMBOL`).
            #[doc(hidden)]
            #[unsafe(export_name = $crate::__settings_schema_symbol!())]
            pub extern "C" fn __toolhost_settings_schema() -> $crate::ffi::SettingsSchemaResult {
                $crate::__private::settings_schema_of::<$settings>()
            }
        )?
    };
}

/// What the exported `tools` function returns.
#[doc(hidden)]
pub type ToolsResult = RResult<RVec<FfiTool>, RString>;

/// Builds the root module (leaked once per load of the library).
#[doc(hidden)]
pub fn root_module(
    name: &'static str,
    version: &'static str,
    panic_unwind: bool,
    tools: extern "C" fn() -> ToolsResult,
) -> PluginRoot_Ref {
    use abi_stable::prefix_type::PrefixTypeTrait;
    PluginRoot {
        name: RStr::from_str(name),
        version: RStr::from_str(version),
        api_version: RStr::from_str(crate::ffi::API_VERSION),
        panic_unwind,
        table_layouts,
        tools,
    }
    .leak_into_prefix()
}

/// The settings schema of `T`, derived as argument schemas are; a panic while deriving
/// it is caught and returned as its message.
#[doc(hidden)]
pub fn settings_schema_of<T: schemars::JsonSchema>() -> SettingsSchemaResult {
    match quietly(|| crate::schema::schema_for::<T>().to_string()) {
        Ok(text) => RResult::ROk(RString::from(text)),
        Err(payload) => RResult::RErr(RString::from(take_message(payload))),
    }
}

/// The settings schema a plugin declares, from the function it exports under
/// [`crate::ffi::SETTINGS_SCHEMA_SYMBOL`] (`None`: it exports none, so it declares none):
/// `Err` with a message when deriving it panicked or it is not JSON.
pub fn read_settings_schema(
    get: Option<crate::ffi::SettingsSchemaFn>,
) -> Result<Option<serde_json::Value>, String> {
    let Some(get) = get else {
        return Ok(None);
    };
    match get().into_result() {
        Ok(text) => serde_json::from_str(text.as_str())
            .map(Some)
            .map_err(|e| format!("its settings schema is not JSON: {e}")),
        Err(panic) => Err(format!(
            "deriving its settings schema panicked: {}",
            panic.as_str()
        )),
    }
}

extern "C" fn table_layouts() -> TableLayouts {
    TableLayouts::CURRENT
}

thread_local! {
    /// Set while the host reads the plugin's tools and metadata: a panic there is reported
    /// to the host (which logs one line naming the tool), so the panic hook stays quiet.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's panic output suppressed, catching its panic. The hook that
/// does so wraps whatever hook the plugin's standard library had, and stays quiet only on
/// a thread inside this function.
fn quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    // Built with panic = "abort", a panic here ends the process (a worker) uncaught: the
    // hook must print it, so the host can give the worker's last words.
    let was = QUIET.with(|q| q.replace(cfg!(panic = "unwind")));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    result
}

/// Creates the tools. Each constructor's panic is caught on its own (`create_tool`: that
/// tool becomes a [`FailedTool`]); this catches a panic anywhere else in making the list.
#[doc(hidden)]
pub fn export_tools(make: fn() -> Vec<FfiTool>) -> ToolsResult {
    match quietly(make) {
        Ok(tools) => RResult::ROk(tools.into_iter().collect()),
        Err(payload) => RResult::RErr(RString::from(format!(
            "creating the tools panicked: {}",
            take_message(payload)
        ))),
    }
}

/// The start of the message of a tool whose creation panicked (see [`create_tool`]):
/// hosts show that message as it is.
#[doc(hidden)]
pub const CREATING_TOOL: &str = "creating tool #";

/// Creates one tool of `export_plugin!`'s list, catching a panic: the tool that panicked
/// becomes a [`FailedTool`], which every host (old ones too) leaves out with the message,
/// and the plugin's other tools still load.
#[doc(hidden)]
pub fn create_tool<T: Tool>(position: usize, expr: &str, make: impl FnOnce() -> T) -> FfiTool {
    match quietly(make) {
        Ok(tool) => into_ffi_tool(tool),
        Err(payload) => into_ffi_tool(FailedTool(format!(
            "{CREATING_TOOL}{position} (`{expr}`) panicked: {}",
            take_message(payload)
        ))),
    }
}

/// A tool whose creation panicked, exported in its place. Reading its name fails with
/// the message (a host's metadata reader turns a panicking getter into an error, so every
/// host, including those that predate this, leaves it out with that message); it cannot
/// be called.
#[doc(hidden)]
pub struct FailedTool(String);

impl Tool for FailedTool {
    fn name(&self) -> &str {
        // The one way a 0.1.x tool table says "leave me out, because ...": a getter that
        // fails. `guarded` catches it quietly and hands the message to the host.
        std::panic::panic_any(self.0.clone())
    }
    fn description(&self) -> &str {
        &self.0
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }
    fn risk(&self) -> crate::Risk {
        crate::Risk::Deny
    }
    async fn call(&self, _: &ToolContext<'_>, _: serde_json::Value) -> Result<String, ToolError> {
        Err(ToolError::Failed(self.0.clone()))
    }
}

/// Boxes `tool` and pairs it with the vtable for its type.
#[doc(hidden)]
pub fn into_ffi_tool<T: Tool>(tool: T) -> FfiTool {
    FfiTool {
        this: Box::into_raw(Box::new(tool)).cast::<c_void>().cast_const(),
        vtable: VTableFor::<T>::VTABLE,
    }
}

/// One static vtable per tool type: calls are dispatched statically inside the plugin and
/// the tool's future lives in the one allocation the FFI future makes.
struct VTableFor<T>(PhantomData<T>);

impl<T: Tool> VTableFor<T> {
    const TABLE: &'static WithMetadata<ToolVTable> = &WithMetadata::new(ToolVTable {
        drop: drop_tool::<T>,
        name: tool_name::<T>,
        description: tool_description::<T>,
        schema: tool_schema::<T>,
        risk: tool_risk::<T>,
        interactive: tool_interactive::<T>,
        call: call_tool::<T>,
        requirements: tool_requirements::<T>,
        output_schema: tool_output_schema::<T>,
        call_outcome: call_tool_outcome::<T>,
        #[cfg(feature = "__test_newer_api")]
        newer_method,
    });
    const VTABLE: ToolVTable_Ref = ToolVTable_Ref(Self::TABLE.static_as_prefix());
}

/// # Safety
/// `this` must come from `into_ffi_tool::<T>` and still be alive.
unsafe fn tool_ref<'a, T>(this: *const c_void) -> &'a T {
    // SAFETY: per the function's contract.
    unsafe { &*this.cast::<T>() }
}

fn guarded<T>(f: impl FnOnce() -> T) -> FfiMeta<T> {
    match quietly(f) {
        Ok(v) => RResult::ROk(v),
        Err(payload) => RResult::RErr(RString::from(take_message(payload))),
    }
}

unsafe extern "C" fn drop_tool<T>(this: *const c_void) {
    // A panic in a tool's destructor is swallowed: it must not unwind into the host, and
    // neither may one from its payload's destructor.
    let dropped = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the host calls drop exactly once, on a pointer from `into_ffi_tool`.
        drop(unsafe { Box::from_raw(this.cast_mut().cast::<T>()) });
    }));
    if let Err(payload) = dropped {
        dispose_payload(payload);
    }
}

unsafe extern "C" fn tool_name<T: Tool>(this: *const c_void) -> FfiMeta<RString> {
    // SAFETY: the host passes the pointer it received with this vtable.
    guarded(|| RString::from(unsafe { tool_ref::<T>(this) }.name()))
}

unsafe extern "C" fn tool_description<T: Tool>(this: *const c_void) -> FfiMeta<RString> {
    // SAFETY: as above.
    guarded(|| RString::from(unsafe { tool_ref::<T>(this) }.description()))
}

unsafe extern "C" fn tool_schema<T: Tool>(this: *const c_void) -> FfiMeta<RString> {
    // SAFETY: as above.
    guarded(|| RString::from(unsafe { tool_ref::<T>(this) }.schema().to_string()))
}

unsafe extern "C" fn tool_risk<T: Tool>(this: *const c_void) -> FfiMeta<RiskCode> {
    // SAFETY: as above.
    guarded(|| unsafe { tool_ref::<T>(this) }.risk().code())
}

unsafe extern "C" fn tool_requirements<T: Tool>(this: *const c_void) -> FfiMeta<RString> {
    // SAFETY: as above.
    guarded(|| {
        let req = unsafe { tool_ref::<T>(this) }.requirements();
        // Every key written, `workspace` too: a missing one means a plugin built before
        // it existed (see `Requirements::workspace`). `task` only when the tool may run as
        // one (its absence reads as forbidden).
        let mut json = serde_json::json!({
            "env": req.env,
            "programs": req.programs,
            "workspace": req.workspace,
        });
        if req.task.supported() {
            json["task"] = serde_json::json!(req.task);
        }
        RString::from(json.to_string())
    })
}

unsafe extern "C" fn tool_output_schema<T: Tool>(this: *const c_void) -> FfiMeta<RString> {
    // SAFETY: as above.
    guarded(|| match unsafe { tool_ref::<T>(this) }.output_schema() {
        Some(schema) => RString::from(schema.to_string()),
        None => RString::new(),
    })
}

unsafe extern "C" fn tool_interactive<T: Tool>(this: *const c_void) -> FfiMeta<bool> {
    // SAFETY: as above.
    guarded(|| unsafe { tool_ref::<T>(this) }.interactive())
}

#[cfg(feature = "__test_newer_api")]
unsafe extern "C" fn newer_method(_this: *const c_void) -> bool {
    true
}

unsafe extern "C" fn call_tool<'a, T: Tool>(
    this: *const c_void,
    ctx: &'a FfiCallContext<'a>,
    args: RStr<'a>,
) -> BorrowingFfiFuture<'a, FfiCallResult> {
    // SAFETY: as above; the tool outlives every call (the host drops it last).
    let tool = unsafe { tool_ref::<T>(this) };
    // What a host that predates `call_outcome` gets: the outcome's degraded text.
    BorrowingFfiFuture::new(async move {
        match run_guarded(tool, ctx, args).await {
            // A failed call stays a failure there, with its whole text.
            Ok(output) if output.is_error => RResult::RErr(FfiToolError {
                kind: FfiToolError::FAILED,
                message: output.degraded_text().into(),
            }),
            Ok(output) => RResult::ROk(RString::from(output.degraded_text())),
            Err(e) => RResult::RErr(e),
        }
    })
}

unsafe extern "C" fn call_tool_outcome<'a, T: Tool>(
    this: *const c_void,
    ctx: &'a FfiCallContext<'a>,
    args: RStr<'a>,
) -> BorrowingFfiFuture<'a, FfiOutcomeResult> {
    // SAFETY: as above; the tool outlives every call (the host drops it last).
    let tool = unsafe { tool_ref::<T>(this) };
    BorrowingFfiFuture::new(async move {
        match run_guarded(tool, ctx, args).await {
            Ok(output) => {
                let (text, extra) = crate::outcome::outcome_to_ffi(output);
                RResult::ROk(FfiOutcome {
                    text: RString::from(text),
                    extra: RString::from(extra),
                })
            }
            Err(e) => RResult::RErr(e),
        }
    })
}

/// Runs one call of `tool`, its panics caught.
///
/// The tool's future lives inside `CatchUnwind`, which catches panics in `poll` and drops
/// the future under `catch_unwind`: whether it completes, or the host drops the FFI future
/// early (timeout, cancel, shutdown), no panic from the tool's destructors reaches
/// async-ffi's drop (which would abort the host). Everything else this holds is a
/// reference.
async fn run_guarded<'a, T: Tool>(
    tool: &'a T,
    ctx: &'a FfiCallContext<'a>,
    args: RStr<'a>,
) -> Result<ToolOutput, FfiToolError> {
    let outcome = CatchUnwind::new(async move {
        let ctx = ToolContext::from_ffi(ctx);
        tool.call_json_output(&ctx, args.as_str()).await
    })
    .await;
    match outcome {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(ToolError::InvalidArgs(m))) => Err(FfiToolError {
            kind: FfiToolError::INVALID_ARGS,
            message: m.into(),
        }),
        Ok(Err(ToolError::Failed(m))) => Err(FfiToolError {
            kind: FfiToolError::FAILED,
            message: m.into(),
        }),
        Err(panic) => Err(FfiToolError {
            kind: FfiToolError::PANICKED,
            message: panic.into(),
        }),
    }
}

/// The abi_stable header wrapping the root-module constructor.
///
/// # Safety
/// `constructor` must return a root module of type `M`.
#[doc(hidden)]
pub const unsafe fn lib_header<M: abi_stable::library::RootModule>(
    constructor: extern "C" fn() -> abi_stable::library::RootModuleResult,
) -> abi_stable::library::LibHeader {
    // SAFETY: per the function's contract.
    unsafe {
        abi_stable::library::LibHeader::from_constructor::<M>(
            constructor,
            abi_stable::library::CheckTypeLayout::Yes,
        )
    }
}

/// Runs the root-module constructor with abi_stable's bookkeeping and panic guard.
#[doc(hidden)]
pub fn call_root_module_loader(
    make: fn() -> PluginRoot_Ref,
) -> abi_stable::library::RootModuleResult {
    abi_stable::library::__call_root_module_loader(make)
}

/// A tool's metadata as a host reads it through the tool's vtable (see
/// [`read_tool_metadata`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolMetadata {
    /// The name the model calls it by.
    pub name: String,
    /// What the model reads about it.
    pub description: String,
    /// Its argument schema, after [`crate::tidy_schema`]: what hosts serve to models
    /// and validate calls against.
    pub schema: serde_json::Value,
    /// Its declared risk.
    pub risk: crate::Risk,
    /// Whether it needs a person at hand.
    pub interactive: bool,
    /// What it needs to be available (none for plugins built before 0.1.1).
    pub requirements: crate::Requirements,
    /// The schema of its structured result, after [`crate::tidy_schema`], if it declares
    /// one (none for plugins built before 0.1.4).
    pub output_schema: Option<serde_json::Value>,
}

/// Reads a tool's metadata through its vtable, the one way hosts and the test harness
/// do, so their messages are the same: `Err` says why a host leaves the tool out (a
/// panicking getter, a schema, an output schema or requirements that are not JSON, a
/// schema nested too deep, a text over a cap of
/// [`crate::limits`], measured before it is copied or parsed), naming the tool by name,
/// or as `tool #N` (numbered from 1, as in `export_plugin!`) when its name cannot be read.
///
/// # Safety
/// `tool` must be an object exported with its vtable (what [`into_ffi_tool`] and the
/// plugin's `tools` function make) and not yet dropped.
pub unsafe fn read_tool_metadata(tool: &FfiTool, index: usize) -> Result<ToolMetadata, String> {
    let (vt, this) = (tool.vtable, tool.this);
    let panicked = |what: &str, m: RString| format!("reading its {what} panicked: {m}");
    // Every text is measured as it crosses, before it is copied or parsed (see `limits`).
    // SAFETY (every vtable call below): the caller guarantees `this` is the live object
    // exported with `vt`.
    // Tools are numbered from 1, as they are written in `export_plugin!`.
    let position = index + 1;
    let name = unsafe { (vt.name())(this) }.into_result().map_err(|m| {
        if m.starts_with(CREATING_TOOL) {
            // A tool whose creation panicked (`create_tool`): the message names it.
            m.into_string()
        } else {
            format!("tool #{position}: {}", panicked("name", m))
        }
    })?;
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "tool #{position}: its name is {} bytes, more than the {} allowed; shorten it",
            grouped(name.len()),
            grouped(MAX_NAME_BYTES)
        ));
    }
    let name = name.into_string();
    let in_tool = |e: String| format!("tool '{name}': {e}");
    let too_long = |what: &str, len: usize, max: usize, fix: &str| {
        in_tool(format!(
            "its {what} is {} bytes, more than the {} allowed; {fix}",
            grouped(len),
            grouped(max)
        ))
    };
    // SAFETY: as above.
    let description = unsafe { (vt.description())(this) }
        .into_result()
        .map_err(|m| in_tool(panicked("description", m)))?;
    if description.len() > MAX_DESCRIPTION_BYTES {
        return Err(too_long(
            "description",
            description.len(),
            MAX_DESCRIPTION_BYTES,
            "shorten it",
        ));
    }
    let description = description.into_string();
    // SAFETY: as above.
    let schema_text = unsafe { (vt.schema())(this) }
        .into_result()
        .map_err(|m| in_tool(panicked("schema", m)))?;
    let schema = read_schema(&schema_text, "schema").map_err(in_tool)?;
    drop(schema_text);
    // SAFETY: as above.
    let risk = unsafe { (vt.risk())(this) }
        .into_result()
        .map_err(|m| in_tool(panicked("risk", m)))?
        .risk();
    // SAFETY: as above.
    let interactive = unsafe { (vt.interactive())(this) }
        .into_result()
        .map_err(|m| in_tool(panicked("interactive flag", m)))?;
    // Optional: plugins built before requirements existed have none (and, as every plugin
    // then, the workspace).
    let requirements = match vt.requirements() {
        None => crate::Requirements {
            workspace: true,
            ..crate::Requirements::default()
        },
        Some(get) => {
            // SAFETY: as above.
            let text = unsafe { get(this) }
                .into_result()
                .map_err(|m| in_tool(panicked("requirements", m)))?;
            if text.len() > MAX_SCHEMA_BYTES {
                return Err(too_long(
                    "requirements",
                    text.len(),
                    MAX_SCHEMA_BYTES,
                    "declare fewer",
                ));
            }
            serde_json::from_str(&text)
                .map_err(|e| in_tool(format!("its requirements are not valid JSON: {e}")))?
        }
    };
    // Optional: plugins built before 0.1.4 declare no output schema; "" declares none.
    let output_schema = match vt.output_schema() {
        None => None,
        Some(get) => {
            // SAFETY: as above.
            let text = unsafe { get(this) }
                .into_result()
                .map_err(|m| in_tool(panicked("output schema", m)))?;
            if text.trim().is_empty() {
                None
            } else {
                Some(read_schema(&text, "output schema").map_err(in_tool)?)
            }
        }
    };
    Ok(ToolMetadata {
        name,
        description,
        schema,
        risk,
        interactive,
        requirements,
        output_schema,
    })
}

/// A schema as it crossed (`what`: "schema", "output schema"), measured before it is
/// parsed and checked for depth, then tidied: what models and MCP clients are served,
/// and what calls and results are validated against (local `$ref`s inlined, enums of
/// documented values as `enum`s, so plugins built before `schema_for` did that read as
/// well as new ones). `Err` is the reason, for "tool 'x': ...".
fn read_schema(text: &str, what: &str) -> Result<serde_json::Value, String> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its {what} is {} bytes, more than the {} allowed; make it smaller (move long \
             explanations into the description)",
            grouped(text.len()),
            grouped(MAX_SCHEMA_BYTES)
        ));
    }
    let schema: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("its {what} is not valid JSON: {e}"))?;
    if crate::limits::nesting_depth(&schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH {
        return Err(format!(
            "its {what} nests deeper than the {MAX_SCHEMA_DEPTH} levels of arrays and objects \
             allowed; flatten it"
        ));
    }
    Ok(crate::schema::tidy_schema(schema))
}

/// What a plugin's answer means, the one reading hosts and the harness share: the
/// outcome (see `outcome_from_ffi`), or the tool's error, a panic's message with the
/// hint a tokio panic gets (for plugins built before the hint too).
pub fn answer_from_ffi(
    tool: &str,
    answer: Result<(RString, RString), FfiToolError>,
) -> Result<ToolOutput, ToolError> {
    match answer {
        Ok((text, extra)) => crate::outcome::outcome_from_ffi(text.into_string(), &extra)
            .map_err(|e| ToolError::Failed(format!("tool '{tool}': {e}"))),
        Err(FfiToolError { kind, message }) => Err(match kind {
            FfiToolError::INVALID_ARGS => ToolError::InvalidArgs(message.into_string()),
            FfiToolError::PANICKED => ToolError::Failed(format!(
                "tool '{tool}' panicked: {message}{}",
                crate::unwind::panic_hint(&message)
            )),
            _ => ToolError::Failed(message.into_string()),
        }),
    }
}

/// `n` with its thousands grouped by commas (`1,048,576`), as the cap messages show it.
pub(crate) fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
