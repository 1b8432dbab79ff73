//! Operating-system helpers every door uses: private files and folders (`private`),
//! opening a path without following it into a FIFO or device (`safe_open`), ownership and
//! mode checks (`permissions`) and the open-file limit (`rlimit`).

pub(crate) mod permissions;
pub(crate) mod private;
pub(crate) mod rlimit;
pub(crate) mod safe_open;
pub(crate) mod sandbox;
