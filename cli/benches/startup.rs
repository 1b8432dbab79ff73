//! Benchmark: what a one-shot command costs as a whole process, with one plugin in the
//! folder and with many (the bundled plugins and the test fixtures that load, about 60
//! MB): `toolhost call time_now` and `toolhost list`, with the plugin index cold (removed
//! before every run: every plugin loads) and warm (answered from the index: only the
//! called plugin loads). `TOOLHOST_BENCH_BASELINE=/path/to/toolhost` adds another build
//! (main before a change, say), run the same way, interleaved. Prints figures; asserts
//! nothing about speed.
//!
//! Run: `cargo bench -p toolhost-cli --bench startup`

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use common::median;

const RUNS: usize = 15;

/// The plugins of the large folder: everything bundled, and the fixtures that load
/// without harm in the host's process.
const PACKAGES: &[&str] = &[
    "toolhost-utils",
    "toolhost-memory",
    "toolhost-session-search",
    "toolhost-delegate-task",
    "toolhost-clarify",
    "toolhost-workspace",
    "toolhost-rust",
    "hello-tools",
    "fixture-echo",
    "fixture-outcomes",
    "fixture-many-tools",
    "fixture-conformance",
    "fixture-ffi-edges",
    "fixture-stumbles",
    "fixture-mentions",
    "fixture-duplicate",
    "fixture-newer",
    "fixture-leftover",
    "fixture-blocking",
    "fixture-oversized",
    "fixture-bad-payload",
    "fixture-basic",
];

struct Setup {
    _tmp: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
    home: PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("temp dir");
    let state = tmp.path().join("state");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let config = tmp.path().join("config.toml");
    std::fs::write(
        &config,
        format!("state_dir = {:?}\n", state.display().to_string()),
    )
    .expect("config");
    Setup {
        _tmp: tmp,
        config,
        state,
        home,
    }
}

/// Seconds for one run of `toolhost ARGS --plugins DIR`.
fn run(bin: &Path, s: &Setup, args: &[&str], dir: &Path, cold: bool) -> f64 {
    if cold {
        let _ = std::fs::remove_file(s.state.join("plugin-index.json"));
    }
    let start = Instant::now();
    let status = Command::new(bin)
        .arg("--config")
        .arg(&s.config)
        .args(args)
        .arg("--plugins")
        .arg(dir)
        .env("HOME", &s.home)
        .env("XDG_CONFIG_HOME", s.home.join(".config"))
        .env("XDG_STATE_HOME", s.home.join(".state"))
        .env_remove("TOOLHOST_PLUGINS")
        .env_remove("TOOLHOST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run toolhost");
    let took = start.elapsed().as_secs_f64();
    assert!(status.success(), "{} {args:?} failed", bin.display());
    took
}

fn main() {
    let release = common::build_release(PACKAGES, "v1");
    let root = tempfile::tempdir().expect("temp dir");
    let one = root.path().join("one");
    let many = root.path().join("many");
    for d in [&one, &many] {
        std::fs::create_dir_all(d).expect("folder");
    }
    std::fs::copy(
        release.join("libtoolhost_utils.so"),
        one.join("libtoolhost_utils.so"),
    )
    .expect("copy");
    let (mut files, mut bytes) = (0, 0);
    for entry in std::fs::read_dir(&release).expect("release folder") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let wanted = PACKAGES
            .iter()
            .any(|p| name == format!("lib{}.so", p.replace('-', "_")));
        if wanted {
            bytes += std::fs::copy(&path, many.join(name)).expect("copy");
            files += 1;
        }
    }
    let mut bins = vec![(
        "this build".to_owned(),
        PathBuf::from(env!("CARGO_BIN_EXE_toolhost")),
    )];
    if let Some(base) = std::env::var_os("TOOLHOST_BENCH_BASELINE") {
        bins.push(("baseline".to_owned(), PathBuf::from(base)));
    }
    println!(
        "one-shot commands as whole processes, {RUNS} runs each, interleaved, median (p90) ms;\n\
         the large folder: {files} plugin files, {:.0} MB",
        bytes as f64 / 1e6
    );
    let cases: [(&str, &[&str]); 2] = [
        ("call time_now", &["call", "time_now", "{}"]),
        ("list", &["list"]),
    ];
    for (label, args) in cases {
        for (folder, dir) in [("1 plugin", &one), (&*format!("{files} plugins"), &many)] {
            for cold in [true, false] {
                let setups: Vec<Setup> = bins.iter().map(|_| setup()).collect();
                let mut times: Vec<Vec<f64>> = bins.iter().map(|_| Vec::new()).collect();
                // Warm: one run first to write the index.
                for ((_, bin), s) in bins.iter().zip(&setups) {
                    run(bin, s, args, dir, cold);
                }
                for _ in 0..RUNS {
                    for (i, ((_, bin), s)) in bins.iter().zip(&setups).enumerate() {
                        times[i].push(run(bin, s, args, dir, cold));
                    }
                }
                for ((name, _), t) in bins.iter().zip(times) {
                    let mut sorted = t.clone();
                    sorted.sort_by(f64::total_cmp);
                    let p90 = sorted[(sorted.len() * 9 / 10).min(sorted.len() - 1)];
                    println!(
                        "  {label:<14} {folder:<12} {:<11} {name:<11} {:>8.1} ({:.1})",
                        if cold { "cold index" } else { "warm index" },
                        median(t) * 1e3,
                        p90 * 1e3
                    );
                }
            }
        }
    }
}
