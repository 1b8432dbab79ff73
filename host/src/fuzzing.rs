//! The fuzz targets' entry points (`fuzz/`, feature `fuzzing`): each takes the fuzzer's
//! input and runs the production parser that reads such bytes from an untrusted party,
//! panicking only where that code breaks a promise (a refusal with no message, a hang,
//! events that depend on how the bytes were split). The normal test suite replays every
//! kept corpus and regression input through the same functions (`tests/it/fuzz_corpus.rs`).
//!
//! Not part of the host's API: a fuzz build turns it on, nothing else should.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arbitrary::Arbitrary;
use serde_json::Value;

use crate::plugins::isolation::protocol::{FrameReader, FromWorker};

/// How long a whole input may take to be answered before it counts as a hang.
const HANG: Duration = Duration::from_secs(20);

/// A JSON value the fuzzer builds (bounded by its input's length).
#[derive(Debug, Clone, Arbitrary)]
pub enum FuzzJson {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (NaN and infinities become `null`, as in JSON).
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<FuzzJson>),
    /// An object.
    Object(Vec<(String, FuzzJson)>),
}

impl FuzzJson {
    /// As a `serde_json` value.
    pub fn value(&self) -> Value {
        match self {
            FuzzJson::Null => Value::Null,
            FuzzJson::Bool(b) => Value::Bool(*b),
            FuzzJson::Int(n) => Value::from(*n),
            FuzzJson::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
            }
            FuzzJson::Str(s) => Value::String(s.clone()),
            FuzzJson::Array(items) => Value::Array(items.iter().map(FuzzJson::value).collect()),
            FuzzJson::Object(pairs) => {
                Value::Object(pairs.iter().map(|(k, v)| (k.clone(), v.value())).collect())
            }
        }
    }
}

/// A runtime for the targets that need one (one per process, as a host has).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the fuzz harness could not start a runtime: {e}"))
    })
}

/// A folder of this process's, removed never (the fuzzer's process ends instead).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("toolhost-fuzz-")
            .tempdir()
            .unwrap_or_else(|e| panic!("the fuzz harness could not make a folder: {e}"));
        dir.keep()
    })
}

fn refused_with_a_message(what: &str, message: &str) {
    assert!(
        !message.trim().is_empty(),
        "{what} was refused with an empty message"
    );
}

// ---------------------------------------------------------------------------------------
// Worker frames

/// What a worker writes to descriptor 3: the bytes go through a real socket into the
/// host's frame reader, and every message it decodes is handled as the host handles a
/// worker's: a hello's tools go through the registry's checks, a reply becomes an output
/// and is finished against its (absent) schema, a log line is escaped for the log.
pub fn worker_frames(data: &[u8]) {
    let (mut worker, host) = match std::os::unix::net::UnixStream::pair() {
        Ok(pair) => pair,
        Err(e) => panic!("socketpair failed: {e}"),
    };
    // Written whole before reading, on this thread (a thread per input would make each
    // thread's exit look like a leak): a socket holds over 200 KB, inputs are at most 64 KB.
    let data = &data[..data.len().min(128 << 10)];
    if let Err(e) = worker.write_all(data) {
        panic!("could not write {} bytes to the socket: {e}", data.len());
    }
    drop(worker);
    let mut reader = FrameReader::new(host);
    let mut seen = 0usize;
    loop {
        match reader.next::<FromWorker>(Some(HANG)) {
            Ok(Some(message)) => {
                seen += 1;
                handle_worker_message(message);
            }
            Ok(None) => break,
            Err(e) => {
                refused_with_a_message("a worker's frame", &e.to_string());
                break;
            }
        }
    }
    // Each message is at least a 4-byte length: at most one per 4 bytes.
    assert!(
        seen <= data.len() / 4,
        "{seen} messages from {} bytes",
        data.len()
    );
}

fn handle_worker_message(message: FromWorker) {
    match message {
        FromWorker::Hello(hello) => {
            let mut registry = toolhost_calls::registry::ToolRegistry::new();
            for spec in hello.tools {
                let tool: Arc<dyn toolhost_calls::tool::DynTool> = Arc::new(SpecOnly {
                    spec,
                    origin: toolhost_calls::tool::ToolOrigin::Native,
                });
                if let Err(e) = registry.register(tool) {
                    refused_with_a_message("a worker's tool", &e.to_string());
                }
            }
            if let Some(schema) = &hello.settings_schema {
                let settings = crate::plugins::settings::PluginSettings::default();
                if let Err(e) = settings.check_declared(&hello.name, Some(schema)) {
                    refused_with_a_message("a worker's settings schema", &e.to_string());
                }
            }
            let _ = crate::text::for_log(&hello.name);
        }
        FromWorker::Reply { result, .. } => match result {
            Ok(outcome) => {
                let mut output = toolhost_calls::tool::ToolOutput::from(outcome);
                if let Err(e) = toolhost_plugin_api::check::finish_output(None, &mut output) {
                    refused_with_a_message("a worker's outcome", &e);
                }
                let _ = output.degraded_text();
            }
            Err(e) => {
                let _ = toolhost_calls::tool::ToolError::from(e).to_string();
            }
        },
        FromWorker::Log { message, .. } | FromWorker::LoadFailed { message, .. } => {
            let _ = crate::text::for_log(&message);
        }
        FromWorker::Progress { message, .. } => {
            let _ = message.as_deref().map(crate::text::for_log);
        }
        FromWorker::Service { .. } => {}
    }
}

/// A tool that is only its spec, as a worker's hello gives the host one.
struct SpecOnly {
    spec: toolhost_calls::tool::ToolSpec,
    origin: toolhost_calls::tool::ToolOrigin,
}

#[async_trait::async_trait]
impl toolhost_calls::tool::DynTool for SpecOnly {
    fn spec(&self) -> &toolhost_calls::tool::ToolSpec {
        &self.spec
    }

    fn origin(&self) -> &toolhost_calls::tool::ToolOrigin {
        &self.origin
    }

    async fn call(
        &self,
        _: &toolhost_calls::context::CallContext,
        _: toolhost_calls::tool::Arguments,
    ) -> Result<toolhost_calls::tool::ToolOutput, toolhost_calls::tool::ToolError> {
        Err(toolhost_calls::tool::ToolError::Failed(
            "a fuzzed worker tool is never called".to_owned(),
        ))
    }
}

// ---------------------------------------------------------------------------------------
// ELF checks

/// A plugin file before loading: the bytes as a file, through the ELF and size check
/// the loader runs before the dynamic loader sees a file.
pub fn elf_check(data: &[u8]) {
    let mut file =
        tempfile::tempfile_in(scratch()).unwrap_or_else(|e| panic!("no temporary file: {e}"));
    file.write_all(data)
        .unwrap_or_else(|e| panic!("could not write the temporary file: {e}"));
    let verdict = crate::plugins::load::elf::check_plugin_elf(&file, data.len() as u64);
    if !data.starts_with(b"\x7fELF") {
        assert!(
            verdict.is_err(),
            "a file that is no ELF file passed the check"
        );
    }
    if let Err(e) = verdict {
        refused_with_a_message("a plugin file", &e.to_string());
    }
}

// ---------------------------------------------------------------------------------------
// Control lines

/// A line from a control-socket client, through the host's decoder; a refusal is
/// answered with a JSON-RPC error line that must itself be one line of JSON.
pub fn control_line(data: &[u8]) {
    use crate::frontends::control::{ControlOutcome, ControlResponse};
    match crate::frontends::control::decode(data) {
        Ok((id, _request)) => {
            let _ = id;
        }
        Err((id, fault)) => {
            refused_with_a_message("a control line", &fault.message);
            let line = ControlResponse::new(id, ControlOutcome::Error(fault)).to_line();
            assert!(
                !line.contains('\n'),
                "an answer line holds a newline: {line}"
            );
            if let Err(e) = serde_json::from_str::<Value>(&line) {
                panic!("an answer line is not JSON ({e}): {line}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Config and profile files

/// Reads a config file with these bytes, and everything the host derives from it at
/// start-up.
pub fn config_file(data: &[u8]) {
    let dir = scratch().join("config");
    let path = write_in(&dir, "toolhost.toml", data);
    read_config(&path);
}

/// Reads a profile file with these bytes (a config file naming the profile folder).
pub fn profile_file(data: &[u8]) {
    let dir = scratch().join("profiles");
    let path = write_in(&dir, "toolhost.toml", b"profiles_dir = \"profiles\"\n");
    write_in(&dir.join("profiles").join("fuzzed"), "config.toml", data);
    read_config(&path);
}

fn write_in(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("no folder {}: {e}", dir.display()));
    let path = dir.join(name);
    std::fs::write(&path, data)
        .unwrap_or_else(|e| panic!("could not write {}: {e}", path.display()));
    path
}

fn read_config(path: &Path) {
    let config = match crate::LoadedConfig::load(Some(path)) {
        Ok(config) => config,
        Err(e) => return refused_with_a_message("a config file", &e.to_string()),
    };
    let mut problems = Vec::new();
    if let Err(e) = config.workspace() {
        problems.push(e.to_string());
    }
    if let Err(e) = config.audit() {
        problems.push(e.to_string());
    }
    if let Err(e) = config.trust_policy() {
        problems.push(e.to_string());
    }
    if let Err(e) = config.load_policy() {
        problems.push(e.to_string());
    }
    let _ = config.isolation_policy();
    let _ = config.risk_overrides();
    let _ = (config.dispatch(), config.call_settings(), config.output());
    let _ = (config.metrics(), config.reload(), config.watch());
    match config.profiles() {
        Ok(profiles) => {
            let registry = toolhost_calls::registry::ToolRegistry::new();
            for profile in &profiles {
                let _ = config.agent(profile);
                let _ = profile.view(&registry);
                if let Err(e) = profile.check(&registry) {
                    problems.push(e.to_string());
                }
            }
        }
        Err(e) => problems.push(e.to_string()),
    }
    for problem in problems {
        refused_with_a_message("a config or profile file", &problem);
    }
}

// ---------------------------------------------------------------------------------------
// Kept-output ranges and the output budget

/// A reader's range of a kept output, and the output itself.
#[derive(Debug, Arbitrary)]
pub struct OutputRange {
    /// The query of an MCP resource URI (`lines=2:9&grep=x&context=1`).
    pub query: String,
    /// A range as `toolhost output --lines` and `read_output` take it.
    pub lines: String,
    /// A pattern as `--grep` takes it.
    pub grep: String,
    /// Context lines around a grep match.
    pub context: u8,
    /// The kept output.
    pub text: String,
    /// The budget a result is cut to.
    pub max_chars: u16,
    /// The budget's lines.
    pub max_lines: u16,
}

/// Every way a reader names part of a kept output, applied to the output, and the
/// budget's cut of it.
pub fn output_range(input: &OutputRange) {
    use toolhost_calls::outputs::{ReadRange, Size};
    let size = Size::of(&input.text);
    let mut ranges = Vec::new();
    match crate::frontends::mcp::outputs::range(&input.query) {
        Ok(range) => ranges.push(range),
        Err(e) => refused_with_a_message("an output resource's query", &e.to_string()),
    }
    match ReadRange::lines(&input.lines) {
        Ok(range) => ranges.push(range),
        Err(e) => refused_with_a_message("a range of lines", &e.to_string()),
    }
    match ReadRange::grep(&input.grep, usize::from(input.context)) {
        Ok(range) => ranges.push(range),
        Err(e) => refused_with_a_message("a grep pattern", &e.to_string()),
    }
    for range in ranges {
        match range.apply(input.text.clone(), size) {
            Ok(excerpt) => {
                if matches!(range, ReadRange::All | ReadRange::Lines { .. }) {
                    assert!(
                        input.text.contains(&excerpt.text),
                        "a range of lines returned text the output does not hold"
                    );
                }
            }
            Err(e) => refused_with_a_message("a range", &e.to_string()),
        }
    }
    let rest = toolhost_calls::outputs::Rest::NotKept;
    if let Some(cut) = toolhost_calls::outputs::cut(
        &input.text,
        usize::from(input.max_chars),
        usize::from(input.max_lines),
        rest,
    ) {
        let _ = cut;
    }
}

// ---------------------------------------------------------------------------------------
// The model server's stream

/// A streamed model answer: the bytes are cut into events twice, whole and in pieces of
/// the first byte's size (a line, even a character, split anywhere), which must give the
/// same events; each event is then assembled into the message.
pub fn sse_stream(data: &[u8]) {
    use crate::agent::stream::{Assembly, SseDecoder};
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let piece = usize::from(first % 64) + 1;
    let mut whole = SseDecoder::default();
    let mut expected = whole.feed(body);
    expected.extend(whole.finish());
    let mut split = SseDecoder::default();
    let mut events = Vec::new();
    for chunk in body.chunks(piece) {
        events.extend(split.feed(chunk));
    }
    events.extend(split.finish());
    assert_eq!(
        events, expected,
        "the events depend on how the bytes were split (pieces of {piece})"
    );
    let mut assembly = Assembly::default();
    for event in &events {
        if let Err(e) = assembly.event(event) {
            return refused_with_a_message("a stream's event", &e.to_string());
        }
        if assembly.is_done() {
            break;
        }
    }
    if let Err(e) = assembly.finish() {
        refused_with_a_message("a stream", &e.to_string());
    }
}

// ---------------------------------------------------------------------------------------
// The ABI: a plugin's tool metadata and its answers

/// A plugin tool as a hostile or careless author could write it: every getter answers
/// what the fuzzer chose, and so does its call.
#[derive(Debug, Arbitrary)]
pub struct FuzzTool {
    /// `name()`.
    pub name: String,
    /// `description()`.
    pub description: String,
    /// `schema()`.
    pub schema: FuzzJson,
    /// `output_schema()`.
    pub output_schema: Option<FuzzJson>,
    /// `risk()`: read, write, network, destructive, deny.
    pub risk: u8,
    /// `interactive()`.
    pub interactive: bool,
    /// `requirements()`: variables and programs.
    pub env: Vec<String>,
    /// See `env`.
    pub programs: Vec<String>,
    /// The arguments the call is made with.
    pub args: FuzzJson,
    /// The call's text.
    pub text: String,
    /// Its structured value.
    pub structured: Option<FuzzJson>,
    /// Its content blocks, as JSON (most are refused by their type).
    pub content: Option<FuzzJson>,
    /// Its details, by kind.
    pub details: Vec<(String, FuzzJson)>,
    /// Whether it failed.
    pub is_error: bool,
    /// Or it fails with an error instead: 0 none, 1 invalid arguments, 2 failed.
    pub error: u8,
    /// How many characters the caller's budget allows (0: the default).
    pub budget: u16,
}

impl toolhost_plugin_api::Tool for FuzzTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn schema(&self) -> Value {
        self.schema.value()
    }

    fn risk(&self) -> toolhost_plugin_api::Risk {
        use toolhost_plugin_api::Risk;
        match self.risk % 5 {
            0 => Risk::Read,
            1 => Risk::Write,
            2 => Risk::Network,
            3 => Risk::Destructive,
            _ => Risk::Deny,
        }
    }

    fn interactive(&self) -> bool {
        self.interactive
    }

    fn requirements(&self) -> toolhost_plugin_api::Requirements {
        toolhost_plugin_api::Requirements {
            env: self.env.clone(),
            programs: self.programs.clone(),
            ..Default::default()
        }
    }

    fn output_schema(&self) -> Option<Value> {
        self.output_schema.as_ref().map(FuzzJson::value)
    }

    async fn call(
        &self,
        _: &toolhost_plugin_api::ToolContext<'_>,
        _: Value,
    ) -> Result<String, toolhost_plugin_api::ToolError> {
        Ok(self.text.clone())
    }

    async fn call_output(
        &self,
        _: &toolhost_plugin_api::ToolContext<'_>,
        _: Value,
    ) -> Result<toolhost_plugin_api::ToolOutput, toolhost_plugin_api::ToolError> {
        use toolhost_plugin_api::ToolError;
        match self.error % 3 {
            1 => return Err(ToolError::InvalidArgs(self.text.clone())),
            2 => return Err(ToolError::Failed(self.text.clone())),
            _ => {}
        }
        let mut output = toolhost_plugin_api::ToolOutput::text(self.text.clone());
        if let Some(value) = &self.structured {
            output = output.with_structured(value.value());
        }
        for (kind, value) in &self.details {
            output = output.with_detail(kind.clone(), value.value());
        }
        if let Some(content) = &self.content
            && let Ok(blocks) = serde_json::from_value(content.value())
        {
            output = output.with_content(blocks);
        }
        if self.is_error {
            output = output.failed();
        }
        Ok(output)
    }
}

/// A tool with fuzzed metadata and answers, exported through the plugin side of the ABI
/// (`into_ffi_tool`, as `export_plugin!` does) and read back by the host as a loaded
/// plugin's tool is (its metadata checked, then registered); if it is accepted, it is
/// called through a call door and its result rendered for MCP.
pub fn plugin_tool(tool: FuzzTool) {
    let budget = tool.budget;
    let args = tool.args.value();
    let ffi = toolhost_plugin_api::__private::into_ffi_tool(tool);
    let origin = toolhost_calls::tool::ToolOrigin::Native;
    let tool = match crate::plugins::run::plugin_tool::PluginTool::new(ffi, origin, 0, None) {
        Ok(tool) => tool,
        Err(e) => return refused_with_a_message("a plugin tool's metadata", &e.to_string()),
    };
    let tool: Arc<dyn toolhost_calls::tool::DynTool> = Arc::new(tool);
    call_once(tool, args, budget);
}

/// A plugin's answer as it crosses the ABI: its text and the JSON beside it (`extra`,
/// the outcome's structured value, details and content blocks), read as the host reads
/// every plugin's answer, then handed back through a call door and rendered for MCP.
#[derive(Debug, Arbitrary)]
pub struct FuzzAnswer {
    /// The answer's text.
    pub text: String,
    /// The JSON beside it: raw, or built from a value.
    pub extra: Result<String, FuzzJson>,
    /// The tool's output schema.
    pub output_schema: Option<FuzzJson>,
    /// How many characters the caller's budget allows (0: the default).
    pub budget: u16,
}

/// See [`FuzzAnswer`].
pub fn plugin_answer(answer: FuzzAnswer) {
    let extra = match &answer.extra {
        Ok(raw) => raw.clone(),
        Err(value) => value.value().to_string(),
    };
    let output = toolhost_plugin_api::host::answer_from_ffi(
        "fuzzed",
        Ok((answer.text.as_str().into(), extra.as_str().into())),
    );
    if let Err(e) = &output {
        refused_with_a_message("a plugin's answer", &e.to_string());
    }
    let spec = toolhost_calls::tool::ToolSpec {
        name: "fuzzed".to_owned(),
        description: "Answers what the fuzzer chose.".to_owned(),
        schema: serde_json::json!({"type": "object"}),
        risk: toolhost_plugin_api::Risk::Read,
        interactive: false,
        requirements: toolhost_plugin_api::Requirements::default(),
        output_schema: answer.output_schema.as_ref().map(FuzzJson::value),
    };
    let tool: Arc<dyn toolhost_calls::tool::DynTool> = Arc::new(Answers {
        spec,
        output: std::sync::Mutex::new(Some(output)),
    });
    call_once(tool, serde_json::json!({}), answer.budget);
}

/// A tool that answers one prepared answer.
struct Answers {
    spec: toolhost_calls::tool::ToolSpec,
    output: std::sync::Mutex<
        Option<Result<toolhost_calls::tool::ToolOutput, toolhost_calls::tool::ToolError>>,
    >,
}

#[async_trait::async_trait]
impl toolhost_calls::tool::DynTool for Answers {
    fn spec(&self) -> &toolhost_calls::tool::ToolSpec {
        &self.spec
    }

    fn origin(&self) -> &toolhost_calls::tool::ToolOrigin {
        &toolhost_calls::tool::ToolOrigin::Native
    }

    async fn call(
        &self,
        _: &toolhost_calls::context::CallContext,
        _: toolhost_calls::tool::Arguments,
    ) -> Result<toolhost_calls::tool::ToolOutput, toolhost_calls::tool::ToolError> {
        self.output
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| {
                Err(toolhost_calls::tool::ToolError::Failed(
                    "called twice".to_owned(),
                ))
            })
    }
}

/// Registers `tool` (the registry's checks) and, if it is accepted, calls it once
/// through a call door with every call allowed, then renders the result for MCP.
fn call_once(tool: Arc<dyn toolhost_calls::tool::DynTool>, args: Value, budget: u16) {
    let name = tool.spec().name.clone();
    let mut registry = toolhost_calls::registry::ToolRegistry::new();
    if let Err(e) = registry.register(tool) {
        return refused_with_a_message("a tool", &e.to_string());
    }
    let tools = crate::fixed_profile("default", Arc::new(registry), None);
    let door = crate::CallDoor::new(
        &crate::CallSettings::default(),
        tools,
        Arc::new(crate::AutoApprove),
    );
    let mut request = door.request(crate::Caller::new(crate::Frontend::Library));
    if budget > 0 {
        request.max_chars = Some(usize::from(budget));
    }
    let call = crate::ToolCall::new("1", name.as_str(), args);
    let result =
        runtime().block_on(async { tokio::time::timeout(HANG, door.call(&request, call)).await });
    let Ok(result) = result else {
        panic!("a call of a tool that answers at once took over {HANG:?}");
    };
    if result.is_error {
        refused_with_a_message("a call", &result.output);
    }
    let rendered = crate::frontends::mcp::outputs::complete(result, &name);
    if let Err(e) = serde_json::to_string(&rendered) {
        panic!("an MCP result could not be written as JSON: {e}");
    }
}

// ---------------------------------------------------------------------------------------
// The fuzzed plugin: a real library whose metadata and answers are the fuzzer's bytes

/// What starts the input region of the fuzzed plugin fixture (`tests/fixtures/fuzzed`).
pub const FUZZED_MARKER: &[u8; 16] = b"TOOLHOST-FUZZED\0";
/// The size of that region.
const FUZZED_REGION: usize = 1 << 16;

/// A copy of the fuzzed plugin `fixture` at `out` with `data` (cut to fit) written into
/// its input region; the copy is private to this user.
pub fn write_fuzzed_plugin(fixture: &[u8], data: &[u8], out: &Path) {
    let at = fixture
        .windows(FUZZED_MARKER.len())
        .enumerate()
        .filter(|(_, w)| *w == FUZZED_MARKER)
        .map(|(i, _)| i)
        .find(|&i| {
            fixture
                .get(i..i + FUZZED_REGION)
                .is_some_and(|region| region[FUZZED_MARKER.len()..].iter().all(|&b| b == 0))
        })
        .unwrap_or_else(|| panic!("the fuzzed plugin fixture has no empty input region"));
    let data = &data[..data.len().min(FUZZED_REGION - FUZZED_MARKER.len() - 4)];
    let mut file = fixture.to_vec();
    let start = at + FUZZED_MARKER.len();
    let len = u32::try_from(data.len()).unwrap_or(0);
    file[start..start + 4].copy_from_slice(&len.to_le_bytes());
    file[start + 4..start + 4 + data.len()].copy_from_slice(data);
    std::fs::write(out, file).unwrap_or_else(|e| panic!("could not write {}: {e}", out.display()));
}

/// Loads the fuzzed plugin made of `data` (see [`write_fuzzed_plugin`]) with `policy`
/// (in process, or in a worker): the host either refuses the file or a tool with a
/// message naming it, or registers the tools and calls each; every call answers (a
/// result, or an error that says why) and is rendered for MCP. `dir` is a folder of the
/// caller's for the file.
pub fn load_fuzzed_plugin(fixture: &[u8], data: &[u8], dir: &Path, policy: crate::LoadPolicy) {
    let file = dir.join("libfuzzed.so");
    write_fuzzed_plugin(fixture, data, &file);
    let loader = crate::PluginLoader::with_policy(policy)
        .unwrap_or_else(|e| panic!("no plugin loader: {e}"));
    let plugin = match loader.load_file(&file) {
        Ok(plugin) => plugin,
        Err(e) => {
            let message = e.to_string();
            refused_with_a_message("the fuzzed plugin", &message);
            assert!(
                message.contains("libfuzzed.so"),
                "a refusal that does not name the file: {message}"
            );
            return;
        }
    };
    for skipped in &plugin.skipped_tools {
        refused_with_a_message("a fuzzed plugin's tool", skipped);
    }
    let plugins = [plugin];
    let (registry, problems) = crate::LoadedPlugin::registry(&plugins);
    for problem in &problems {
        refused_with_a_message("a fuzzed plugin's tool", &problem.to_string());
    }
    let names: Vec<String> = registry.names().into_iter().map(str::to_owned).collect();
    let tools = crate::fixed_profile("default", Arc::new(registry), None);
    let door = crate::CallDoor::new(
        &crate::CallSettings::default(),
        tools,
        Arc::new(crate::AutoApprove),
    );
    let request = door.request(crate::Caller::new(crate::Frontend::Library));
    for name in names {
        let call = crate::ToolCall::new("1", name.as_str(), serde_json::json!({}));
        let result = runtime()
            .block_on(async { tokio::time::timeout(HANG, door.call(&request, call)).await });
        let Ok(result) = result else {
            panic!("a call of the fuzzed plugin's tool '{name}' took over {HANG:?}");
        };
        if result.is_error {
            refused_with_a_message("a fuzzed plugin's call", &result.output);
        }
        let rendered = crate::frontends::mcp::outputs::complete(result, &name);
        if let Err(e) = serde_json::to_string(&rendered) {
            panic!("an MCP result could not be written as JSON: {e}");
        }
    }
}

/// The fuzz target's form of [`load_fuzzed_plugin`]: in a worker, the fixture from
/// `TOOLHOST_FUZZ_FIXTURE` and the worker program from `TOOLHOST_FUZZ_WORKER` (the
/// `toolhost` binary; `fuzz/run.sh` builds both). In a worker because a library loaded
/// in process is never unloaded: millions of loads would be millions of mappings.
pub fn plugin_worker(data: &[u8]) {
    static FIXTURE: OnceLock<(Vec<u8>, PathBuf)> = OnceLock::new();
    let (fixture, worker) = FIXTURE.get_or_init(|| {
        let var = |name: &str| {
            std::env::var_os(name)
                .map(PathBuf::from)
                .unwrap_or_else(|| panic!("{name} is not set (fuzz/run.sh sets it)"))
        };
        let fixture = var("TOOLHOST_FUZZ_FIXTURE");
        let bytes =
            std::fs::read(&fixture).unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
        (bytes, var("TOOLHOST_FUZZ_WORKER"))
    });
    let dir = scratch().join("plugin-worker");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let policy = crate::LoadPolicy {
        isolation: Arc::new(crate::IsolationPolicy {
            default: crate::IsolationMode::Process,
            worker_exe: worker.clone(),
            ..crate::IsolationPolicy::default()
        }),
        ..crate::LoadPolicy::default()
    };
    load_fuzzed_plugin(fixture, data, &dir, policy);
}

// ---------------------------------------------------------------------------------------
// MCP over stdio and HTTP

/// One host for the process, serving MCP: plugins from `TOOLHOST_FUZZ_PLUGINS` (a
/// folder) if set, else none.
fn mcp_server() -> &'static crate::McpServer {
    static SERVER: OnceLock<(crate::RunningHost, crate::McpServer)> = OnceLock::new();
    let (_, server) = SERVER.get_or_init(|| {
        let dir = scratch().join("mcp");
        let plugins = std::env::var_os("TOOLHOST_FUZZ_PLUGINS")
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.join("plugins"));
        std::fs::create_dir_all(&plugins)
            .unwrap_or_else(|e| panic!("no folder {}: {e}", plugins.display()));
        let config = crate::ServeConfig {
            catalog: crate::CatalogConfig {
                dirs: vec![plugins],
                ..crate::CatalogConfig::default()
            },
            watch: None,
            control_path: dir.join("control.sock"),
            dispatch: crate::DispatchConfig::default(),
            shutdown_grace: Duration::from_secs(1),
            profiles: Vec::new(),
            remember_approvals: true,
            availability_ttl: Duration::from_secs(5),
            default_profile: "default".to_owned(),
            config_file: None,
            audit: None,
            mcp_servers: Vec::new(),
            mcp_servers_dir: None,
            state: None,
        };
        let running = runtime()
            .block_on(crate::Host::start(config))
            .unwrap_or_else(|e| panic!("the fuzz harness's host did not start: {e}"));
        let server = crate::McpServer::new(
            Arc::clone(running.host()),
            crate::McpOptions {
                profile: None,
                without_elicitation: crate::WithoutElicitation::default(),
                terminal_approval: Duration::from_secs(1),
                client_answer: Duration::from_secs(1),
            },
        )
        .unwrap_or_else(|e| panic!("the fuzz harness's MCP server did not start: {e}"));
        (running, server)
    });
    server
}

/// The server's end of an in-memory pipe, which says when it is dropped (every task of
/// the session that held it is done).
struct Watched {
    pipe: tokio::io::DuplexStream,
    _dropped: tokio::sync::oneshot::Sender<()>,
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.pipe).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.pipe).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.pipe).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.pipe).poll_shutdown(cx)
    }
}

/// A client's bytes on an MCP stdio session: served by the host's MCP server over an
/// in-memory pipe until the input ends; the session must end and let its pipe go (so an
/// input's memory is freed within the input: a pipe a finished task still held, its buffer
/// read to the end, looked leaked to the leak checker), and every line it writes must be
/// JSON.
pub fn mcp_stdio(data: &[u8]) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = mcp_server();
    let answered = runtime().block_on(async {
        let (client, pipe) = tokio::io::duplex(1 << 16);
        let (dropped_tx, dropped) = tokio::sync::oneshot::channel::<()>();
        let server_end = Watched {
            pipe,
            _dropped: dropped_tx,
        };
        let (server_read, server_write) = tokio::io::split(server_end);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let stop = tokio_util::sync::CancellationToken::new();
        let serving = tokio::spawn({
            let stop = stop.clone();
            async move {
                // A client that does not begin with `initialize` is refused: an error here.
                let _ = server.serve_pipes(server_read, server_write, stop).await;
            }
        });
        let writing = async move {
            let _ = client_write.write_all(data).await;
            let _ = client_write.shutdown().await;
            drop(client_write);
        };
        let mut out = Vec::new();
        let reading = client_read.read_to_end(&mut out);
        let both = async {
            let ((), read) = tokio::join!(writing, reading);
            let _ = read;
            let _ = serving.await;
        };
        let ended = tokio::time::timeout(HANG, both).await.is_ok();
        stop.cancel();
        let released = tokio::time::timeout(HANG, dropped).await.is_ok();
        (ended, released, out)
    });
    let (ended, released, out) = answered;
    assert!(
        ended,
        "an MCP stdio session did not end within {HANG:?} of its input's end"
    );
    assert!(
        released,
        "an MCP stdio session's tasks held its pipe {HANG:?} after the session ended"
    );
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if let Err(e) = serde_json::from_slice::<Value>(line) {
            panic!(
                "the server wrote a line that is not JSON ({e}): {}",
                String::from_utf8_lossy(line)
            );
        }
    }
}

/// Starts the MCP targets' host and HTTP door before the first input (their one-time
/// allocations are not the first input's).
pub fn init_mcp() {
    let _ = http_door();
}

/// The host's MCP HTTP door on loopback, bound once for the process.
fn http_door() -> std::net::SocketAddr {
    static ADDR: OnceLock<std::net::SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let server = mcp_server();
        let options = crate::HttpOptions {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            auth: crate::HttpAuth::NoAuth,
            tls: None,
            insecure_http: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            limits: crate::HttpLimits::default(),
            oauth: None,
        };
        let (addr, serving) = runtime()
            .block_on(crate::bind_http(
                server,
                options,
                tokio_util::sync::CancellationToken::new(),
            ))
            .unwrap_or_else(|e| panic!("the fuzz harness's HTTP door did not bind: {e}"));
        runtime().spawn(serving);
        addr
    })
}

/// A client's bytes on a TCP connection to the MCP HTTP door: whatever they are, the
/// door answers (or closes) within the hang limit and keeps serving the next connection.
pub fn mcp_http(data: &[u8]) {
    let addr = http_door();
    let mut stream = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("the HTTP door at {addr} refused a connection: {e}"));
    let _ = stream.set_read_timeout(Some(HANG));
    let _ = stream.set_write_timeout(Some(HANG));
    let _ = stream.write_all(data);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut answer = Vec::new();
    if let Err(e) = stream.read_to_end(&mut answer) {
        assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "the HTTP door neither answered nor closed within {HANG:?}"
        );
    }
    if !answer.is_empty() {
        assert!(
            answer.starts_with(b"HTTP/1."),
            "the HTTP door answered something that is not HTTP: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        );
    }
}

// ---------------------------------------------------------------------------------------
// One way in, for the fuzz targets' corpora replayed as tests

/// The host's targets, by the name of their `fuzz/fuzz_targets/*.rs` file.
pub const TARGETS: &[&str] = &[
    "worker_frames",
    "plugin_tool",
    "plugin_answer",
    "elf_check",
    "control_line",
    "mcp_stdio",
    "mcp_http",
    "config_file",
    "profile_file",
    "output_range",
    "sse_stream",
];

/// Runs `target` on `data` as its fuzz target does (a structured target reads its input
/// with `arbitrary` and skips bytes that make none); `false` for no such target.
pub fn run(target: &str, data: &[u8]) -> bool {
    fn structured<T: for<'a> Arbitrary<'a>>(data: &[u8], f: impl FnOnce(T)) {
        if let Ok(input) = T::arbitrary_take_rest(arbitrary::Unstructured::new(data)) {
            f(input);
        }
    }
    match target {
        "worker_frames" => worker_frames(data),
        "plugin_tool" => structured(data, plugin_tool),
        "plugin_answer" => structured(data, plugin_answer),
        "elf_check" => elf_check(data),
        "control_line" => control_line(data),
        "mcp_stdio" => mcp_stdio(data),
        "mcp_http" => mcp_http(data),
        "config_file" => config_file(data),
        "profile_file" => profile_file(data),
        "output_range" => structured(data, |r: OutputRange| output_range(&r)),
        "sse_stream" => sse_stream(data),
        _ => return false,
    }
    true
}

/// Seeds for the worker-frame target, written by the host's own encoder: a hello, a
/// reply, a log line, progress, a service request and a load failure, each a frame.
pub fn worker_frame_seeds() -> Vec<Vec<u8>> {
    use crate::plugins::isolation::protocol::{Hello, WireOutcome, encode};
    let hello = FromWorker::Hello(Box::new(Hello {
        protocol: crate::plugins::isolation::protocol::PROTOCOL_VERSION,
        name: "fuzzed".to_owned(),
        version: "0.1.0".to_owned(),
        api_version: toolhost_plugin_api::API_VERSION.to_string(),
        abi_version: toolhost_plugin_api::ABI_VERSION.to_string(),
        tools: vec![toolhost_calls::tool::ToolSpec {
            name: "echo".to_owned(),
            description: "Returns `text`.".to_owned(),
            schema: serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            risk: toolhost_plugin_api::Risk::Read,
            interactive: false,
            requirements: toolhost_plugin_api::Requirements::default(),
            output_schema: Some(serde_json::json!({"type": "object"})),
        }],
        skipped_tools: vec!["tool #2: its name is empty".to_owned()],
        settings_schema: Some(
            serde_json::json!({"type": "object", "properties": {"units": {"type": "string"}}}),
        ),
        confinement: crate::Confinement::default(),
        pid: 42,
    }));
    let reply = FromWorker::Reply {
        id: 1,
        result: Ok(WireOutcome::from(
            toolhost_calls::tool::ToolOutput::text("hello")
                .with_structured(serde_json::json!({"n": 1}))
                .with_detail("note", serde_json::json!("x")),
        )),
    };
    let failed = FromWorker::Reply {
        id: 2,
        result: Err(toolhost_calls::tool::ToolError::InvalidArgs("no `text`".to_owned()).into()),
    };
    let log = FromWorker::Log {
        call: 1,
        level: 2,
        message: "line\u{1b}[31m".to_owned(),
    };
    let progress = FromWorker::Progress {
        call: 1,
        progress: 0.5,
        total: Some(1.0),
        message: Some("half".to_owned()),
    };
    let load_failed = FromWorker::LoadFailed {
        protocol: 3,
        message: "no root module".to_owned(),
        may_pass_later: false,
    };
    let mut seeds = Vec::new();
    let mut all = Vec::new();
    for message in [hello, reply, failed, log, progress, load_failed] {
        let frame = encode(&message).unwrap_or_else(|e| panic!("a seed did not encode: {e}"));
        all.extend_from_slice(&frame);
        seeds.push(frame);
    }
    seeds.push(all);
    seeds
}

#[cfg(test)]
mod tests {
    //! Every input kept for a target (its corpus and the regressions its findings left)
    //! replays here, in the normal test suite.

    use std::path::{Path, PathBuf};

    fn inputs(target: &str) -> Vec<PathBuf> {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let mut files = Vec::new();
        for kind in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join(target)) else {
                continue;
            };
            files.extend(
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.is_file()),
            );
        }
        files.sort();
        files
    }

    #[test]
    fn every_kept_input_of_every_host_target_replays_without_a_finding() {
        let mut replayed = 0;
        for target in super::TARGETS {
            let files = inputs(target);
            assert!(!files.is_empty(), "fuzz/corpus/{target} holds no input");
            for file in files {
                let data =
                    std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                eprintln!("{target}: {}", file.display());
                assert!(super::run(target, &data));
                replayed += 1;
            }
        }
        eprintln!("replayed {replayed} inputs");
    }

    #[test]
    fn every_host_target_has_a_fuzz_target_file_and_back() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/fuzz_targets");
        for target in super::TARGETS {
            let file = dir.join(format!("{target}.rs"));
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert!(
                text.contains(&format!("toolhost::fuzzing::{target}")),
                "{}",
                file.display()
            );
        }
        assert!(!super::run("no_such_target", b""));
    }

    #[test]
    fn the_worker_frame_seeds_decode_as_the_host_reads_them() {
        for seed in super::worker_frame_seeds() {
            super::worker_frames(&seed);
        }
    }

    /// `WRITE_FUZZ_SEEDS=1 cargo test -p toolhost --lib fuzzing::tests::write_seeds`
    /// writes the seeds the host's encoder makes into the corpus.
    #[test]
    fn write_seeds() {
        if std::env::var_os("WRITE_FUZZ_SEEDS").is_none() {
            return;
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/worker_frames");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        for (i, seed) in super::worker_frame_seeds().into_iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), seed).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
