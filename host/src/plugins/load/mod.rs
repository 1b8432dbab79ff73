//! Loading plugin files: find them (`loader`), refuse what is not a whole shared library
//! before dlopen (`elf`), decide whether the bytes may load at all (`trust`), load them
//! from a private, hashed copy (`private_copy`), check abi_stable's versions and layouts
//! (`abi_check`), and say per file what went wrong and what to do (`error`); remember
//! what each file exported, so a one-shot command need not load them all (`index`).

mod abi_check;
pub(crate) mod elf;
pub(crate) mod error;
pub(crate) mod index;
pub(crate) mod loader;
pub(crate) mod private_copy;
pub(crate) mod trust;
