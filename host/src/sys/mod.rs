//! Operating-system helpers every door uses: private files and folders (`private`),
//! opening a path without following it into a FIFO or device (`safe_open`), ownership and
//! mode checks (`permissions`), resource limits (`rlimit`), descriptors and processes for
//! plugin workers (`process`) and the Landlock sandbox (`sandbox`).

pub(crate) mod permissions;
pub(crate) mod private;
pub(crate) mod process;
pub(crate) mod rlimit;
pub(crate) mod safe_open;
pub(crate) mod sandbox;
