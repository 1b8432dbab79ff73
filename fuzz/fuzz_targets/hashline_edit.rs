//! Fuzz target: see `toolhost_workspace::fuzzing::hashline_edit`.
#![no_main]

libfuzzer_sys::fuzz_target!(|request: toolhost_workspace::fuzzing::FuzzEditRequest| {
    toolhost_workspace::fuzzing::hashline_edit(&request)
});
