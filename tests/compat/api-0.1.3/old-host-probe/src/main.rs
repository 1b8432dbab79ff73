//! Loads a plugin and calls its tools the way a host released with plugin-api ABI 0.1.3
//! does: abi_stable's version and root-module checks against the 0.1.3 types, the two
//! tables checked in whichever direction fits (the fields both sides know must match),
//! the tool table's `call` (the only call entry point 0.1.3 knows), a host table of the
//! 0.1.3 layout. Services answer as a host without them would (the probe's tools need
//! none).
//!
//! `old-host-probe PLUGIN.so TOOL=ARGS...` prints one JSON object:
//! `{"abi": "...", "tools": [...], "calls": {"TOOL": {"ok": "text"} | {"err": "message"}}}`,
//! or an error and exit status 1 when the plugin does not load.

use std::ffi::c_void;
use std::future::Future;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use abi_stable::abi_stability::abi_checking::check_layout_compatibility;
use abi_stable::library::{RawLibrary, lib_header_from_raw_library};
use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::std_types::{RResult, RStr, RString};
use async_ffi::{FfiFuture, FutureExt};
use serde_json::{Map, Value, json};
use toolhost_plugin_api::LogLevel;
use toolhost_plugin_api::ffi::{
    FfiCallContext, HostVTable, HostVTable_Ref, PluginRoot_Ref, TableLayouts,
};

fn main() {
    match run() {
        Ok(out) => println!("{out}"),
        Err(e) => {
            eprintln!("old-host-probe: {e}");
            std::process::exit(1);
        }
    }
}

fn run() -> Result<Value, String> {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().ok_or("usage: old-host-probe PLUGIN.so TOOL=ARGS...")?);
    let library = RawLibrary::load_at(&path).map_err(|e| e.to_string())?;
    // The library stays loaded for the life of the process, as a host keeps it.
    let library: &'static RawLibrary = Box::leak(Box::new(library));
    // SAFETY: the file is a plugin built for this test; its header is read as hosts do.
    let header = unsafe { lib_header_from_raw_library(library) }.map_err(|e| e.to_string())?;
    let root = header
        .init_root_module::<PluginRoot_Ref>()
        .map_err(|e| e.to_string())?;
    let theirs = root.table_layouts()();
    let ours = TableLayouts::CURRENT;
    for (ours, theirs) in [
        (ours.tool_vtable, theirs.tool_vtable),
        (ours.host_vtable, theirs.host_vtable),
    ] {
        if check_layout_compatibility(ours, theirs).is_err()
            && check_layout_compatibility(theirs, ours).is_err()
        {
            return Err(format!("the tables differ: {}", theirs.full_type()));
        }
    }
    let tools = root.tools()().into_result().map_err(RString::into_string)?;
    let host = host_table();
    let ctx = FfiCallContext {
        data: std::ptr::null::<c_void>(),
        host,
        _marker: PhantomData,
    };
    let wanted: Vec<(String, String)> = args
        .map(|a| match a.split_once('=') {
            Some((tool, json)) => (tool.to_owned(), json.to_owned()),
            None => (a, "{}".to_owned()),
        })
        .collect();
    let mut names = Vec::new();
    let mut calls = Map::new();
    for tool in &tools {
        // SAFETY (every vtable call): `this` is the live object exported with `vtable`.
        let name = unsafe { (tool.vtable.name())(tool.this) }
            .into_result()
            .map_err(RString::into_string)?
            .into_string();
        for (_, args) in wanted.iter().filter(|(t, _)| *t == name) {
            // SAFETY: as above; the future is awaited before `ctx` and `args` drop.
            let future = unsafe { (tool.vtable.call())(tool.this, &ctx, RStr::from_str(args)) };
            let answer = match block_on(future) {
                RResult::ROk(text) => json!({"ok": text.as_str()}),
                RResult::RErr(e) => json!({"err": e.message.as_str(), "kind": e.kind}),
            };
            calls.insert(name.clone(), answer);
        }
        names.push(name);
    }
    for tool in tools {
        // SAFETY: dropped once, after the last use.
        unsafe { (tool.vtable.drop())(tool.this) };
    }
    Ok(json!({
        "abi": root.api_version().as_str(),
        "tools": names,
        "calls": calls,
    }))
}

/// The host table of ABI 0.1.3, with the answers of a host that has no such service.
fn host_table() -> HostVTable_Ref {
    HostVTable {
        profile_id,
        session_id,
        model,
        is_cancelled,
        cancelled,
        log,
        sleep,
        child_turn,
        progress,
        ask_user,
        sample,
        host_request,
    }
    .leak_into_prefix()
}

unsafe extern "C" fn profile_id<'a>(_: &'a FfiCallContext<'a>) -> RStr<'a> {
    RStr::from_str("probe")
}

unsafe extern "C" fn session_id<'a>(_: &'a FfiCallContext<'a>) -> RStr<'a> {
    RStr::from_str("probe-session")
}

unsafe extern "C" fn model<'a>(_: &'a FfiCallContext<'a>) -> RStr<'a> {
    RStr::from_str("")
}

unsafe extern "C" fn is_cancelled(_: &FfiCallContext<'_>) -> bool {
    false
}

unsafe extern "C" fn cancelled(_: &FfiCallContext<'_>) -> FfiFuture<()> {
    std::future::pending::<()>().into_ffi()
}

unsafe extern "C" fn log(_: &FfiCallContext<'_>, level: LogLevel, message: RStr<'_>) {
    eprintln!("plugin log ({}): {message}", level.0);
}

unsafe extern "C" fn sleep(_: &FfiCallContext<'_>, nanos: u64) -> FfiFuture<bool> {
    async move {
        std::thread::sleep(std::time::Duration::from_nanos(nanos));
        true
    }
    .into_ffi()
}

fn unavailable() -> FfiFuture<RResult<RString, RString>> {
    std::future::ready(RResult::RErr(RString::from(
        "this host does not offer that service",
    )))
    .into_ffi()
}

unsafe extern "C" fn child_turn(
    _: &FfiCallContext<'_>,
    _: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    unavailable()
}

unsafe extern "C" fn progress(_: &FfiCallContext<'_>, _: f64, _: f64, _: RStr<'_>) {}

unsafe extern "C" fn ask_user(
    _: &FfiCallContext<'_>,
    _: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    unavailable()
}

unsafe extern "C" fn sample(
    _: &FfiCallContext<'_>,
    _: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    unavailable()
}

unsafe extern "C" fn host_request(
    _: &FfiCallContext<'_>,
    _: RStr<'_>,
    _: RStr<'_>,
) -> FfiFuture<RResult<RString, RString>> {
    unavailable()
}

/// Polls `future` to completion on this thread.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
