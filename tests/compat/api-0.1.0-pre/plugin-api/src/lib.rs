//! The interface toolhost plugins are built against: the [`Tool`] trait, the call
//! context, risk levels and the [`export_plugin!`] macro, over a stable ABI.
//!
//! A plugin is a `cdylib` crate that implements [`Tool`] (or [`TypedTool`], for arguments
//! deserialized into a Rust type with a derived schema) and exports its tools once:
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
//! # Rules a plugin lives by
//! - Build it with `panic = "unwind"` (the default). Hosts refuse plugins built with
//!   `panic = "abort"`, because their panics would kill the host. Panics in tool code
//!   (metadata methods, `call`, inside the future) are caught in the plugin and reach the
//!   model as a tool error; the plugin stays usable.
//! - Don't start a runtime. A plugin's own copy of tokio has no reactor: `tokio::time` and
//!   `tokio::spawn` panic inside a plugin. Use the context's services
//!   ([`ToolContext::sleep`], [`ToolContext::cancelled`], [`ToolContext::log`],
//!   [`ToolContext::child_turn`]) and [`ToolContext::blocking`] for blocking work.
//! - Watch [`ToolContext::is_cancelled`] or [`ToolContext::until_cancelled`] in anything
//!   long: the host cancels calls when a turn is stopped or a call times out.
//!
//! This crate does no I/O and depends on none of the host's runtime crates (tokio, notify,
//! toml, jsonschema, ...); the workspace's CI checks that with `cargo tree`. One
//! exception cannot be avoided: abi_stable itself links libloading 0.7 (for hosts that
//! load libraries); plugins never call it, and this crate adds no dependency on it.
//!
//! # Binary compatibility
//! Every plugin exports one root module ([`ffi::PluginRoot`]). When the host loads it,
//! abi_stable checks the API version and the layout of every type that crosses (the root
//! module, the tool and host vtables, the context and the results) before any plugin code
//! runs. What that means for changes to this crate:
//!
//! **Keep already-built plugins loading** (release as a patch version before 1.0, a minor
//! version after):
//! - appending a field after the last one of a prefix type: [`ffi::ToolVTable`] (new tool
//!   methods, e.g. an availability check) or [`ffi::HostVTable`] (new host services).
//!   Hosts read such fields as `Option` and fall back to a default for older plugins;
//!   plugins calling a newer service on an older host get
//!   [`ServiceError::Unavailable`], never a crash;
//! - adding a risk level, error kind or log level: they cross as one-byte codes, and an
//!   unknown risk code is read as [`Risk::Deny`], an unknown error kind as a failure;
//! - new keys in JSON that crosses as text (schemas, child-turn requests);
//! - anything in the Rust-side API that does not change the `ffi` types.
//!
//! **Break them** (release as a new minor version before 1.0, a new major after, so hosts
//! refuse the old plugins with a message naming both versions instead of misreading them):
//! - removing, reordering or retyping any field of an `ffi` type, or changing a field
//!   that is part of a prefix (before its `last_prefix_field`);
//! - changing [`ffi::FfiCallContext`], [`ffi::FfiTool`] or [`ffi::FfiToolError`], which
//!   cross by value;
//! - changing a function signature in a vtable.
//!
//! The version check (abi_stable's, before the layout check): a host refuses a plugin of a
//! different major version and, before 1.0, a plugin built against an *older* minor
//! version than its own (0.1.x plugins on a 0.2 host). A plugin built against a newer
//! patch or minor version passes the version check and is then judged by the layout
//! check, which accepts fields appended to prefix types and refuses anything else.

mod blocking;
mod context;
mod export;
#[allow(
    non_camel_case_types,
    reason = "abi_stable names prefix references `Type_Ref`"
)]
pub mod ffi;
mod risk;
mod tool;
mod unwind;

pub use blocking::{CancelFlag, blocking};
pub use context::{Cancelled, ChildTurnRequest, ServiceError, ToolContext};
pub use ffi::{API_VERSION, LogLevel};
pub use risk::{Risk, RiskCode};
pub use tool::{Tool, ToolError, TypedTool, schema_for};
pub use unwind::{CatchUnwind, panic_message};

/// Used by the host and by `export_plugin!`; not part of the stable interface.
#[doc(hidden)]
pub mod __private {
    pub use crate::context::UNAVAILABLE_PREFIX;
    pub use crate::export::{
        ToolsResult, call_root_module_loader, export_tools, into_ffi_tool, lib_header, root_module,
    };
    pub use crate::ffi::PluginRoot_Ref;
    pub use abi_stable::library::{LibHeader, RootModuleResult};
}

#[cfg(test)]
mod tests {
    #[test]
    fn exported_symbol_is_the_one_abi_stable_looks_up() {
        assert_eq!(
            crate::__root_module_symbol!(),
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
    }
}
