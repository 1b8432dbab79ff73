//! Fuzz target: see `toolhost::fuzzing::plugin_answer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|answer: toolhost::fuzzing::FuzzAnswer| {
    toolhost::fuzzing::plugin_answer(answer)
});
