//! Fuzz target: see `toolhost::fuzzing::profile_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolhost::fuzzing::profile_file(data));
