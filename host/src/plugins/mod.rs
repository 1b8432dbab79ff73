//! Plugins: finding, checking, trusting and loading plugin files (`loader`, `trust`), the
//! tools a loaded library exports (`plugin_tool`), the catalog of plugin generations that
//! a rescan updates (`catalog`) and the watcher that triggers rescans (`watch`). This is
//! the only part of the host that knows about dlopen, ELF and abi_stable.

mod abi_check;
pub(crate) mod call_pool;
pub(crate) mod catalog;
mod elf;
pub(crate) mod error;
mod host_services;
pub(crate) mod isolation;
pub(crate) mod loader;
pub(crate) mod plugin_tool;
pub(crate) mod private_copy;
pub(crate) mod status;
mod timers;
pub(crate) mod trust;
pub(crate) mod watch;
