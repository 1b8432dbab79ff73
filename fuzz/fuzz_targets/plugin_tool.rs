//! Fuzz target: see `toolhost::fuzzing::plugin_tool`.
#![no_main]

libfuzzer_sys::fuzz_target!(
    |tool: toolhost::fuzzing::FuzzTool| toolhost::fuzzing::plugin_tool(tool)
);
