//! Fuzz target: see `toolhost_workspace::fuzzing::grep_pattern`.
#![no_main]

libfuzzer_sys::fuzz_target!(|request: toolhost_workspace::fuzzing::FuzzGrep| {
    toolhost_workspace::fuzzing::grep_pattern(&request)
});
