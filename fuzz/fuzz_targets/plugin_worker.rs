//! Fuzz target: see `toolhost::fuzzing::plugin_worker`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolhost::fuzzing::plugin_worker(data));
