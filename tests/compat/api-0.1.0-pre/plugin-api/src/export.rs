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
    FfiCallContext, FfiCallResult, FfiMeta, FfiTool, FfiToolError, PluginRoot, PluginRoot_Ref,
    ToolVTable, ToolVTable_Ref,
};
use crate::risk::RiskCode;
use crate::tool::{Tool, ToolError};
use crate::unwind::{CatchUnwind, panic_message};

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
/// are created when the host loads the plugin; a panic there fails the load with the panic
/// message instead of crashing the host.
#[macro_export]
macro_rules! export_plugin {
    (name: $name:expr, version: $version:expr, tools: [$($tool:expr),* $(,)?] $(,)?) => {
        #[doc(hidden)]
        #[unsafe(export_name = $crate::__root_module_symbol!())]
        pub static __TOOLHOST_PLUGIN_ROOT: $crate::__private::LibHeader = {
            fn __toolhost_tools() -> ::std::vec::Vec<$crate::ffi::FfiTool> {
                ::std::vec![$($crate::__private::into_ffi_tool($tool)),*]
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
        tools,
    }
    .leak_into_prefix()
}

/// Creates the tools, catching a panic in their constructors.
#[doc(hidden)]
pub fn export_tools(make: fn() -> Vec<FfiTool>) -> ToolsResult {
    match catch_unwind(make) {
        Ok(tools) => RResult::ROk(tools.into_iter().collect()),
        Err(payload) => RResult::RErr(RString::from(format!(
            "creating the tools panicked: {}",
            panic_message(payload.as_ref())
        ))),
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
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => RResult::ROk(v),
        Err(payload) => RResult::RErr(RString::from(panic_message(payload.as_ref()))),
    }
}

unsafe extern "C" fn drop_tool<T>(this: *const c_void) {
    // A panic in a tool's destructor is swallowed: it must not unwind into the host.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the host calls drop exactly once, on a pointer from `into_ffi_tool`.
        drop(unsafe { Box::from_raw(this.cast_mut().cast::<T>()) });
    }));
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

unsafe extern "C" fn tool_interactive<T: Tool>(this: *const c_void) -> FfiMeta<bool> {
    // SAFETY: as above.
    guarded(|| unsafe { tool_ref::<T>(this) }.interactive())
}

unsafe extern "C" fn call_tool<'a, T: Tool>(
    this: *const c_void,
    ctx: &'a FfiCallContext<'a>,
    args: RStr<'a>,
) -> BorrowingFfiFuture<'a, FfiCallResult> {
    // SAFETY: as above; the tool outlives every call (the host drops it last).
    let tool = unsafe { tool_ref::<T>(this) };
    BorrowingFfiFuture::new(async move {
        let outcome = CatchUnwind::new(async move {
            let ctx = ToolContext::from_ffi(ctx);
            tool.call_json(&ctx, args.as_str()).await
        })
        .await;
        match outcome {
            Ok(Ok(output)) => RResult::ROk(RString::from(output)),
            Ok(Err(ToolError::InvalidArgs(m))) => RResult::RErr(FfiToolError {
                kind: FfiToolError::INVALID_ARGS,
                message: m.into(),
            }),
            Ok(Err(ToolError::Failed(m))) => RResult::RErr(FfiToolError {
                kind: FfiToolError::FAILED,
                message: m.into(),
            }),
            Err(panic) => RResult::RErr(FfiToolError {
                kind: FfiToolError::PANICKED,
                message: panic.into(),
            }),
        }
    })
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
