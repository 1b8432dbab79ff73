//! The types that cross the plugin boundary: the root module a plugin exports, the tool
//! vtable, the call context and the host-services vtable. Everything here is `#[repr(C)]`
//! and checked by abi_stable's layout check when a plugin loads.
//!
//! Plugin authors never touch these; they implement [`crate::Tool`] and call
//! [`crate::export_plugin!`]. The host reads them through its loader. Growable parts are
//! prefix types (see the crate docs on binary compatibility).

use std::ffi::c_void;
use std::marker::PhantomData;

use abi_stable::StableAbi;
use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RResult, RStr, RString, RVec};
use async_ffi::{BorrowingFfiFuture, FfiFuture};

use crate::risk::RiskCode;

/// The root module every plugin exports, built by [`crate::export_plugin!`].
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
    /// Creates the plugin's tools. `Err` carries the message of a panic.
    #[sabi(last_prefix_field)]
    pub tools: extern "C" fn() -> RResult<RVec<FfiTool>, RString>,
}

impl RootModule for PluginRoot_Ref {
    abi_stable::declare_root_module_statics! {PluginRoot_Ref}
    const BASE_NAME: &'static str = "toolhost_plugin";
    const NAME: &'static str = "toolhost plugin";
    const VERSION_STRINGS: VersionStrings = API_VERSION_STRINGS;
}

/// The version of this crate, as the root-module version check reads it.
pub const API_VERSION_STRINGS: VersionStrings = abi_stable::package_version_strings!();

/// The version of this crate as text, e.g. `"0.1.0"`.
pub const API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// One tool exported by a plugin: an opaque object and the plugin's vtable for it.
///
/// Invariant (what makes the `Send`/`Sync` impls below sound): `this` is a `Box<T>` leaked
/// by the plugin for a `T: Tool` (so `Send + Sync`), and `vtable` is the one generated for
/// that `T`. Only `export_plugin!` builds these. The host owns it and calls `drop` once.
#[repr(C)]
#[derive(StableAbi)]
pub struct FfiTool {
    /// The plugin's object (a leaked `Box<T>` for the tool type `T`).
    pub this: *const c_void,
    /// The functions that operate on `this`.
    pub vtable: ToolVTable_Ref,
}

// SAFETY: per the invariant above, `this` is a `T: Tool`, which is `Send + Sync`; the vtable
// is static.
unsafe impl Send for FfiTool {}
// SAFETY: as above.
unsafe impl Sync for FfiTool {}

/// What one call of a plugin tool returns.
pub type FfiCallResult = RResult<RString, FfiToolError>;

/// The metadata getters return the value, or `Err` with the message of a panic.
pub type FfiMeta<T> = RResult<T, RString>;

/// The functions a plugin provides for each of its tools.
///
/// Fields after `call` (none yet) are optional: a host reads them as `Option` and falls
/// back to a default for plugins built before they existed.
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
}

/// A tool error as it crosses the boundary: a growable kind code and a message.
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
#[repr(C)]
#[derive(StableAbi)]
pub struct FfiCallContext<'a> {
    /// The host's call state, passed back to every service.
    pub data: *const c_void,
    /// The host's services.
    pub host: HostVTable_Ref,
    /// Ties the context to the call it belongs to.
    pub _marker: PhantomData<&'a ()>,
}

// SAFETY: `data` points at the host's call state, which the host guarantees is `Sync` (its
// own code checks that at compile time) and outlives `'a`.
unsafe impl Send for FfiCallContext<'_> {}
// SAFETY: as above.
unsafe impl Sync for FfiCallContext<'_> {}

/// Log levels a plugin can log at through [`HostVTable::log`].
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLevel(pub u8);

impl LogLevel {
    /// Errors.
    pub const ERROR: LogLevel = LogLevel(0);
    /// Warnings.
    pub const WARN: LogLevel = LogLevel(1);
    /// Information (the default level a host shows).
    pub const INFO: LogLevel = LogLevel(2);
    /// Debugging detail.
    pub const DEBUG: LogLevel = LogLevel(3);
}

/// The services a host gives each call. Every function takes the call's context (whose
/// `data` is the host's call state); strings it returns live as long as the context.
///
/// Services added by later API versions go after `child_turn`; a plugin calling one on a
/// host that predates it gets a "not available in this host" error, never a crash.
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
}
