//! Plugins, by concern: `load` finds, checks, trusts and loads plugin files; `run` turns a
//! loaded library's exports into host tools and runs their calls on plugin threads with
//! the host's services; `catalog` keeps the running set (one generation per file, the
//! registry built from them, its status) and the watcher that triggers rescans;
//! `isolation` runs a plugin in supervised worker processes instead; `settings` holds the
//! config's per-plugin settings tables; `descriptions` checks the description rule (no
//! description names a tool the profile does not show). This is the only part
//! of the host that knows about dlopen, ELF and abi_stable.

pub(crate) mod catalog;
pub(crate) mod descriptions;
pub(crate) mod isolation;
pub(crate) mod load;
pub(crate) mod run;
pub(crate) mod settings;
