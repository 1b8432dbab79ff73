//! Fuzz target: see `toolhost::fuzzing::elf_check`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolhost::fuzzing::elf_check(data));
