//! Fuzz target: see `toolhost::fuzzing::sse_stream`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolhost::fuzzing::sse_stream(data));
