//! The Landlock sandbox a plugin worker puts itself in before it loads a plugin: the
//! rules, modes, ABI probe and ruleset live in the `toolhost-sandbox` crate (the workspace
//! plugin's `run_command` uses the same code for commands); this module names them for
//! the rest of the host, with the seccomp filter (`seccomp`, shared with commands too) and
//! the hiding of the host's state from every sandbox (`protected`).

pub(crate) use toolhost_sandbox::process_tree::{self, TaggedProcess, find_tagged, signal_tagged};
pub(crate) use toolhost_sandbox::{
    PreparedSandbox, SCOPE_ABI, SandboxError, SandboxMode, SandboxOutcome, SandboxRules, apply,
    kernel_abi, prepare, system_read_paths,
};
pub(crate) use toolhost_sandbox::{caps, mark, protected, seccomp};
