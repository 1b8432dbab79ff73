//! A tool the test borrows to the harness, exported with the plugin glue
//! (`into_ffi_tool`, what `export_plugin!` uses) and read and called through its vtable,
//! as a host does.

use std::future::Future;
use std::marker::PhantomData;

use abi_stable::std_types::{RResult, RStr};
use serde_json::Value;

use super::ToolInfo;
use crate::check::CheckedTool;
use crate::context::ToolContext;
use crate::export::into_ffi_tool;
use crate::ffi::{FfiCallContext, FfiOutcomeResult, FfiTool, FfiToolError};
use crate::outcome::ToolOutput;
use crate::tool::{Requirements, Tool, ToolError};

/// A `&T` the export glue can own: `into_ffi_tool` takes a `'static` tool by value, and
/// the test only lends one. Only [`Exported`] makes these, and it keeps the borrow alive
/// (its lifetime) for as long as the `FfiTool` exists.
struct Lent<T> {
    tool: *const T,
}

// SAFETY: a `Lent<T>` is a shared reference to a `T`, which is `Sync` (every `Tool` is);
// `Exported` keeps the referent alive while the `Lent` exists.
unsafe impl<T: Sync> Send for Lent<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Lent<T> {}

impl<T> Lent<T> {
    fn get(&self) -> &T {
        // SAFETY: `Exported<'t>` borrows the tool for `'t` and drops the `FfiTool` (and
        // with it this `Lent`) before `'t` ends, so the pointer is valid for any use.
        unsafe { &*self.tool }
    }
}

/// Every method forwards, `call_json_output` included, so a `TypedTool` parses its
/// arguments as it does in a plugin.
impl<T: Tool> Tool for Lent<T> {
    fn name(&self) -> &str {
        self.get().name()
    }
    fn description(&self) -> &str {
        self.get().description()
    }
    fn schema(&self) -> Value {
        self.get().schema()
    }
    fn risk(&self) -> crate::Risk {
        self.get().risk()
    }
    fn interactive(&self) -> bool {
        self.get().interactive()
    }
    fn requirements(&self) -> Requirements {
        self.get().requirements()
    }
    fn call(
        &self,
        ctx: &ToolContext<'_>,
        args: Value,
    ) -> impl Future<Output = Result<String, ToolError>> + Send {
        self.get().call(ctx, args)
    }
    fn call_json(
        &self,
        ctx: &ToolContext<'_>,
        args: &str,
    ) -> impl Future<Output = Result<String, ToolError>> + Send {
        self.get().call_json(ctx, args)
    }
    fn output_schema(&self) -> Option<Value> {
        self.get().output_schema()
    }
    fn call_output(
        &self,
        ctx: &ToolContext<'_>,
        args: Value,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        self.get().call_output(ctx, args)
    }
    fn call_json_output(
        &self,
        ctx: &ToolContext<'_>,
        args: &str,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        self.get().call_json_output(ctx, args)
    }
}

/// A borrowed tool as a plugin exports it; dropped through its vtable, as hosts do.
pub(super) struct Exported<'t> {
    ffi: FfiTool,
    _tool: PhantomData<&'t ()>,
}

impl<'t> Exported<'t> {
    pub(super) fn new<T: Tool>(tool: &'t T) -> Exported<'t> {
        Exported {
            ffi: into_ffi_tool(Lent {
                tool: std::ptr::from_ref(tool),
            }),
            _tool: PhantomData,
        }
    }

    /// The metadata, read through the vtable the way a host reads it at load (the
    /// messages are the host's); `Err` when a host would leave the tool out.
    pub(super) fn info(&self) -> Result<(ToolInfo, CheckedTool), String> {
        // SAFETY: `self.ffi` is the object exported with its vtable, alive until `self`
        // drops.
        let meta = unsafe { crate::export::read_tool_metadata(&self.ffi, 0) }?;
        // What a host checks next, with the host's messages; its compiled schemas check
        // the call's structured result, as in the host.
        let checked = crate::check::check_tool(&meta)?;
        Ok((tool_info(meta), checked))
    }

    /// Calls the tool through its vtable with `ctx` and the arguments as JSON text.
    /// Calls the tool through `call_outcome`, as hosts since ABI 0.1.4 do.
    pub(super) async fn call(&self, ctx: &FfiCallContext<'_>, args: &str) -> FfiOutcomeResult {
        let Some(call) = self.ffi.vtable.call_outcome() else {
            // This crate's own glue always has it.
            return RResult::RErr(FfiToolError {
                kind: FfiToolError::FAILED,
                message: "the tool's table has no call_outcome".into(),
            });
        };
        // SAFETY: `this` belongs to this vtable and lives as long as `self`, which the
        // returned future borrows (as it does `ctx` and `args`).
        let future = unsafe { call(self.ffi.this, ctx, RStr::from_str(args)) };
        future.await
    }
}

/// What the harness shows of metadata a host would take.
pub(super) fn tool_info(meta: crate::export::ToolMetadata) -> ToolInfo {
    ToolInfo {
        name: meta.name,
        description: meta.description,
        schema: meta.schema,
        risk: meta.risk,
        interactive: meta.interactive,
        requirements: meta.requirements,
        output_schema: meta.output_schema,
    }
}

impl Drop for Exported<'_> {
    fn drop(&mut self) {
        // SAFETY: called once, with the object exported with this vtable; no call's
        // future outlives `self` (they borrow it). The glue's drop frees the `Lent`, not
        // the borrowed tool.
        unsafe { (self.ffi.vtable.drop())(self.ffi.this) }
    }
}
