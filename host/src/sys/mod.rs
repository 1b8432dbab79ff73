//! Operating-system helpers every door uses: where the platform puts config and state
//! (`dirs`) (private files and folders are the call core's `toolhost_calls::private`),
//! opening a path without following it into a FIFO or device (`safe_open`), ownership and
//! mode checks (`permissions`), resource limits (`rlimit`), descriptors and processes for
//! plugin workers (`process`), the Landlock sandbox (`sandbox`), the seccomp filter
//! (`sandbox::seccomp`, in `toolhost-sandbox`), telling systemd what the host is doing (`service_manager`), dropping
//! capabilities (`caps`), keeping a worker's processes together
//! (`containment`, `pid_namespace`), what confines a worker (`confinement`), the live
//! workers the control socket refuses (`workers`), the host's own environment written
//! while it has one thread (`process_env`), and ending the processes tagged with a
//! session (`tagged`).

pub(crate) mod confinement;
pub(crate) mod containment;
pub(crate) mod dirs;
pub(crate) mod permissions;
pub(crate) mod pid_namespace;
pub(crate) mod process;
pub(crate) mod process_env;
pub(crate) mod rlimit;
pub(crate) mod safe_open;
pub(crate) mod sandbox;
pub(crate) mod service_manager;
pub(crate) mod tagged;
pub(crate) mod workers;
