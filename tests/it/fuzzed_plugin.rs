//! The fuzzed plugin (`tests/fixtures/fuzzed`): a real library whose tool names,
//! descriptions, schemas, output schemas, risks and answers are bytes written into its
//! file, loaded in process and in a worker. Every input of the `plugin_worker` fuzz
//! target's corpus and regressions, and inputs made here for the edges (empty, oversized
//! texts, deep schemas, names the host refuses, a panicking call, malformed content
//! blocks), are refused with a message naming the file or tool, or load and answer; and
//! the host goes on serving a well-behaved plugin afterwards.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use toolhost::{IsolationPolicy, LoadPolicy};

use crate::support::{PluginDir, call, dispatcher, process_policy, so};

/// Bytes the fixture reads as three tools (see its `Bytes`): a flags byte, texts with a
/// length byte (255: a 2-byte length and a 2-byte repeat count), JSON with a kind byte.
fn edges() -> Vec<Vec<u8>> {
    fn text(s: &str) -> Vec<u8> {
        let mut out = vec![u8::try_from(s.len()).expect("short")];
        out.extend_from_slice(s.as_bytes());
        out
    }
    fn tool(flags: u8, name: &str, rest: &[u8]) -> Vec<u8> {
        let mut out = vec![flags];
        out.extend(text(name));
        out.extend_from_slice(rest);
        out
    }
    let huge = [255u8, 0x00, 0x04, 0xff, 0x0f]; // 1,024 bytes repeated 4,095 times
    let mut cases = vec![Vec::new()];
    // A valid tool answering a 4 MB text, beside one named by bytes that are no name.
    let mut big = tool(0, "big_answer", &[4, b'd', b'e', b's', b'c', 0]);
    big.extend_from_slice(&huge);
    big.extend(vec![b'x'; 1024]);
    big.push(0);
    big.extend(tool(0, "bad name!", &[0, 0, 0, 0]));
    cases.push(big);
    // A schema nested 400 deep (the fixture's most); an output schema that is a string.
    let mut deep = tool(1 | 2, "deep", &[0]);
    deep.extend_from_slice(&[7, 199, 0]);
    deep.extend_from_slice(&[1]);
    deep.extend(text("\"not a schema\""));
    deep.extend_from_slice(&[0, 0, 0]);
    cases.push(deep);
    // A call that panics; content blocks that are not blocks; a structured value that
    // breaks its output schema; a detail; marked as an error.
    let mut odd = tool(0, "panics", &[0, 0]);
    odd.extend(text("boom"));
    odd.push(3);
    odd.extend(tool(2 | 16 | 32 | 64 | 128, "odd_answer", &[0, 1]));
    odd.extend(text(r#"{"type":"object","required":["n"]}"#));
    odd.push(0);
    odd.extend(text("text"));
    odd.push(1);
    odd.extend(text(r#"{"m":1}"#));
    odd.push(1);
    odd.extend(text(r#"[{"type":"image","data":"***","mimeType":"x"}]"#));
    odd.extend(text("kind"));
    odd.push(0);
    odd.push(0);
    cases.push(odd);
    // The same name three times; a description of 64 KB.
    let mut same = Vec::new();
    for _ in 0..3 {
        same.extend(tool(0, "twice", &[255, 0x00, 0x01, 0x00, 0x01]));
        same.extend(vec![b'd'; 256]);
        same.extend_from_slice(&[0, 0, 0]);
    }
    cases.push(same);
    cases
}

/// The corpus and regression inputs of the `plugin_worker` target, at most `max`.
fn kept(max: usize) -> Vec<Vec<u8>> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for kind in ["corpus", "regressions"] {
        if let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join("plugin_worker")) {
            files.extend(entries.filter_map(Result::ok).map(|e| e.path()));
        }
    }
    files.sort();
    files.truncate(max);
    files
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect()
}

/// Loads every input with `policy`, then shows a well-behaved plugin still loads and
/// answers beside what was loaded.
fn every_input_is_refused_or_answers(policy: impl Fn() -> LoadPolicy, max_kept: usize) {
    let fixture = std::fs::read(so("fixture_fuzzed")).expect("the fuzzed fixture");
    let inputs: Vec<Vec<u8>> = edges().into_iter().chain(kept(max_kept)).collect();
    assert!(
        inputs.len() > edges().len(),
        "fuzz/corpus/plugin_worker holds no input"
    );
    for data in &inputs {
        let dir = tempfile::tempdir().expect("temp dir");
        toolhost::fuzzing::load_fuzzed_plugin(&fixture, data, dir.path(), policy());
    }
    let echo = PluginDir::with(&["fixture_echo"]);
    let loader = toolhost::PluginLoader::with_policy(policy()).expect("loader");
    let report = loader.load_dirs(&[echo.path()]);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let (registry, _) = toolhost::LoadedPlugin::registry(&report.plugins);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let result = runtime.block_on(dispatcher(toolhost::DispatchConfig::default()).call(
        &registry,
        &toolhost::CallContext::new(toolhost::TurnIdentity::default()),
        call("1", "echo", json!({"text": "still here"})),
    ));
    assert!(!result.is_error, "{result:?}");
    assert_eq!(result.output, "still here");
}

#[test]
fn a_fuzzed_plugin_in_process_is_refused_with_a_message_or_answers() {
    // In process a library is never unloaded: a bounded number of loads.
    every_input_is_refused_or_answers(LoadPolicy::default, 16);
}

#[test]
fn a_fuzzed_plugin_in_a_worker_is_refused_with_a_message_or_answers() {
    every_input_is_refused_or_answers(
        || LoadPolicy {
            isolation: Arc::new(IsolationPolicy {
                max_crashes: 1000,
                ..process_policy()
            }),
            ..LoadPolicy::default()
        },
        24,
    );
}
