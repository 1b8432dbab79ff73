//! The call core of toolhost: what a tool is to the host, the registry of tools, the
//! context a call runs in, the door every call enters by, the approval policy and
//! availability checks that admit a call, the dispatcher that runs it, the output budget
//! and the store of cut outputs, the host's own result details, and the statistics a call
//! leaves behind.
//!
//! Nothing here knows where a tool came from (plugin or native), how the host is
//! configured, or who asked (MCP, control socket, agent): this crate depends on no part of
//! the host, so the compiler keeps that boundary. The `toolhost` library builds on it and
//! re-exports what embedders use; plugins never see it (they build against
//! `toolhost-plugin-api`).

pub mod approvals;
pub mod availability;
pub mod context;
pub mod decision;
pub mod details;
pub mod dispatcher;
pub mod door;
pub mod outputs;
pub mod policy;
pub mod private;
pub mod profile_dirs;
pub mod read_output;
pub mod registry;
pub mod result;
pub mod stats;
pub mod text;
pub mod tool;
