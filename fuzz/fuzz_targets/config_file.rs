//! Fuzz target: see `toolhost::fuzzing::config_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolhost::fuzzing::config_file(data));
