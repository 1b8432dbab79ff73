//! Benchmark: the same trivial echo tool dispatched through the full registry +
//! dispatcher path, (a) from a plugin .so and (b) compiled in as a native tool, side by
//! side in one run; and the time to load one plugin file. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p toolhost-cli --bench dispatch`

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use toolhost::{
    Arguments, CallContext, DispatchConfig, DynTool, Plan, PluginLoader, ReadOnlyPolicy, Risk,
    ToolCall, ToolError, ToolOrigin, ToolOutput, ToolRegistry, ToolSpec, TurnIdentity,
};

const WARMUP: u32 = 20_000;
const ROUNDS: usize = 7;
const LOADS: usize = 50;

/// Calls per round; `BENCH_CALLS` lowers it for runs under callgrind.
fn calls_per_round() -> u32 {
    std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000)
}

struct NativeEcho {
    spec: ToolSpec,
}

#[async_trait]
impl DynTool for NativeEcho {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn origin(&self) -> &ToolOrigin {
        &ToolOrigin::Native
    }
    async fn call(&self, _ctx: &CallContext, args: Arguments) -> Result<ToolOutput, ToolError> {
        match args.value().get("text").and_then(Value::as_str) {
            Some(t) => Ok(t.to_owned().into()),
            None => Err(ToolError::InvalidArgs("`text` must be a string".to_owned())),
        }
    }
}

/// Builds the echo plugins in release mode; returns their directory.
fn build_plugins() -> PathBuf {
    common::build_release(&["fixture-echo", "fixture-basic"], "v1")
}

use common::median;

// Separate, never-inlined entry points so a profiler (callgrind) can tell the paths apart.
#[inline(never)]
fn measure_native(rt: &tokio::runtime::Runtime, d: &Plan, registry: &ToolRegistry) -> f64 {
    measure(rt, d, registry)
}

#[inline(never)]
fn measure_plugin_untyped(rt: &tokio::runtime::Runtime, d: &Plan, registry: &ToolRegistry) -> f64 {
    measure(rt, d, registry)
}

#[inline(never)]
fn measure_plugin(rt: &tokio::runtime::Runtime, d: &Plan, registry: &ToolRegistry) -> f64 {
    measure(rt, d, registry)
}

/// Median over rounds of the mean ns per call.
fn measure(rt: &tokio::runtime::Runtime, d: &Plan, registry: &ToolRegistry) -> f64 {
    let calls = calls_per_round();
    let turn = CallContext::new(TurnIdentity::default());
    // As a model or the command line sends them: JSON text, parsed once by the host.
    let call = ToolCall::new(
        "1",
        "echo",
        Arguments::parse(r#"{"text": "hello"}"#).expect("valid JSON"),
    );
    rt.block_on(async {
        for _ in 0..WARMUP {
            let r = d.call(registry, &turn, call.clone()).await;
            assert_eq!(r.output, "hello");
        }
        let mut rounds = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let start = Instant::now();
            for _ in 0..calls {
                std::hint::black_box(d.call(registry, &turn, call.clone()).await);
            }
            rounds.push(start.elapsed().as_nanos() as f64 / f64::from(calls));
        }
        median(rounds)
    })
}

fn main() {
    let built = build_plugins();
    let dir = tempfile::tempdir().expect("temp dir");
    let installed = dir.path().join("libfixture_echo.so");
    std::fs::copy(built.join("libfixture_echo.so"), &installed).expect("install plugin");
    let untyped_file = dir.path().join("libfixture_basic.so");
    std::fs::copy(built.join("libfixture_basic.so"), &untyped_file).expect("install plugin");
    let loader = PluginLoader::new().expect("loader");

    let mut load_times = Vec::with_capacity(LOADS);
    let mut plugin = None;
    for _ in 0..LOADS {
        let start = Instant::now();
        let p = loader.load_file(&installed).expect("load");
        load_times.push(start.elapsed().as_secs_f64() * 1e3);
        plugin = Some(p);
    }
    let plugin = plugin.expect("loaded");
    let size = std::fs::metadata(&installed).map(|m| m.len()).unwrap_or(0);

    let mut from_so = ToolRegistry::new();
    let echo = plugin
        .tools
        .iter()
        .find(|t| t.spec().name == "echo")
        .expect("echo");
    from_so.register(Arc::clone(echo)).expect("register");
    let mut native = ToolRegistry::new();
    native
        .register(Arc::new(NativeEcho {
            spec: echo.spec().clone(),
        }))
        .expect("register");
    assert_eq!(echo.spec().risk, Risk::Read);
    // fixture-basic's echo takes its arguments as a `Value` (the plain `DynTool` trait).
    let basic = loader.load_file(&untyped_file).expect("load");
    let mut untyped = ToolRegistry::new();
    let basic_echo = basic
        .tools
        .iter()
        .find(|t| t.spec().name == "echo")
        .expect("echo");
    untyped.register(Arc::clone(basic_echo)).expect("register");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let d = Plan::new(
        DispatchConfig {
            timeout: Duration::from_secs(60),
            ..DispatchConfig::default()
        },
        Arc::new(ReadOnlyPolicy),
    );
    // Interleave so drift on a noisy machine hits both paths alike.
    let mut so_ns = Vec::new();
    let mut native_ns = Vec::new();
    let mut untyped_ns = Vec::new();
    for _ in 0..3 {
        native_ns.push(measure_native(&rt, &d, &native));
        so_ns.push(measure_plugin(&rt, &d, &from_so));
        untyped_ns.push(measure_plugin_untyped(&rt, &d, &untyped));
    }
    let (so_ns, native_ns, untyped_ns) = (median(so_ns), median(native_ns), median(untyped_ns));

    println!("dispatch of one echo call through registry + dispatcher (current-thread runtime,");
    println!(
        "{} calls x {ROUNDS} rounds x 3 runs, median):",
        calls_per_round()
    );
    println!("  native tool                        {native_ns:8.1} ns/call");
    println!("  plugin .so tool (TypedTool)        {so_ns:8.1} ns/call");
    println!(
        "  ratio .so/native                   {:8.2}",
        so_ns / native_ns
    );
    println!("  plugin .so tool (DynTool, Value args) {untyped_ns:8.1} ns/call");
    println!(
        "  ratio .so/native                   {:8.2}",
        untyped_ns / native_ns
    );
    println!(
        "plugin load (copy + dlopen + version/layout checks + tool metadata), {} KiB file, {LOADS} loads:",
        size / 1024
    );
    println!(
        "  median                             {:8.3} ms",
        median(load_times.clone())
    );
    println!(
        "  max                                {:8.3} ms",
        load_times.iter().copied().fold(0.0, f64::max)
    );
}
