//! Fuzz target: see `toolhost::fuzzing::mcp_http`.
#![no_main]

libfuzzer_sys::fuzz_target!(init: toolhost::fuzzing::init_mcp(), |data: &[u8]| {
    toolhost::fuzzing::mcp_http(data)
});
