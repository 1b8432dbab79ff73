//! Calls: what a tool is to the host, the registry of tools, the context a call runs in,
//! the door every call enters by, the approval policy and availability checks that admit
//! a call, the dispatcher that runs it, and the statistics it leaves behind. Nothing here knows where a tool came from
//! (plugin or native) or who asked (MCP, control socket, agent).

pub(crate) mod approvals;
pub(crate) mod availability;
pub(crate) mod context;
pub(crate) mod decision;
pub(crate) mod details;
pub(crate) mod dispatcher;
pub(crate) mod door;
pub(crate) mod outputs;
pub(crate) mod policy;
pub(crate) mod read_output;
pub(crate) mod registry;
pub(crate) mod result;
pub(crate) mod stats;
pub(crate) mod tool;
