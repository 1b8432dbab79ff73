//! Fuzz target: see `toolhost::fuzzing::control_line`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolhost::fuzzing::control_line(data));
