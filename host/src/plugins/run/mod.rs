//! Running plugin code in this process: a loaded library's tools as host tools
//! (`plugin_tool`), the plugin threads their calls are polled on (`call_pool`), the host
//! services each call receives through the stable ABI (`host_services`) and plugin sleeps
//! that end even when the plugin blocks its thread (`timers`). A worker process runs its
//! plugin with the same code.

pub(crate) mod call_pool;
pub(crate) mod host_services;
pub(crate) mod plugin_tool;
mod timers;
