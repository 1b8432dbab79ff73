//! Fuzz target: see `toolhost::fuzzing::worker_frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolhost::fuzzing::worker_frames(data));
