//! Fuzz target: see `toolhost::fuzzing::output_range`.
#![no_main]

libfuzzer_sys::fuzz_target!(|range: toolhost::fuzzing::OutputRange| {
    toolhost::fuzzing::output_range(&range)
});
