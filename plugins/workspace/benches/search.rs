//! `grep`, `find_files` and a recursive `list_dir` over a large real source tree (the crate
//! sources cargo downloaded, `$CARGO_HOME/registry/src`), side by side with ripgrep run
//! with the same options: median wall times over several rounds, their ratio, and both
//! tools' counts, which must agree. The tools are called through the plugin API's test
//! host, as a host calls them (arguments parsed, output encoded).
//!
//! Run: `cargo bench -p toolhost-workspace --bench search` (`BENCH_ROUNDS=N` for more
//! rounds, `BENCH_TREE=DIR` for another tree). If `rg` is missing, it is installed from
//! Debian when running as root (`apt-get install -y ripgrep`); otherwise the benchmark
//! says how and stops. The target is within 1.5x of ripgrep's time.

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark: a failure should stop it loudly"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost_plugin_api::WorkspaceAnswer;
use toolhost_plugin_api::testing::TestHost;
use toolhost_workspace::{find_files, grep, list_dir};

/// ripgrep's options that match the tools' defaults: .gitignore honoured without a git
/// repository, no ignore files above the searched folder.
const RG_COMMON: [&str; 3] = ["--no-require-git", "--no-ignore-parent", "--no-messages"];

/// The depth the recursive `list_dir` is asked for (its maximum).
const LIST_DEPTH: usize = 10;

fn main() {
    let tree = match std::env::var_os("BENCH_TREE") {
        Some(dir) => PathBuf::from(dir),
        None => cargo_home().join("registry").join("src"),
    };
    if !tree.is_dir() {
        println!(
            "no source tree at {} (set BENCH_TREE=DIR); skipped",
            tree.display()
        );
        return;
    }
    if !ensure_rg() {
        return;
    }
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
        .max(1);
    let rg_version = run_rg(&["--version"]);
    println!(
        "tree: {} | rounds: {rounds} | {}",
        tree.display(),
        rg_version.lines().next().unwrap_or("rg")
    );
    let host = TestHost::new().workspace(WorkspaceAnswer::with_roots([tree.display().to_string()]));
    let root = tree.display().to_string();
    let depth = LIST_DEPTH.to_string();

    let mut cases: Vec<Case> = Vec::new();
    // A literal.
    cases.push(Case {
        name: "grep literal 'unwrap()'",
        ours: Box::new(|h| grep_count(h, json!({"pattern": "unwrap()", "literal": true}))),
        rg: [&["-c", "-F", "unwrap()"][..], &RG_COMMON, &[root.as_str()]].concat(),
        rg_count: sum_counts,
    });
    // A regular expression.
    cases.push(Case {
        name: r"grep regex 'fn \w+\(&mut self'",
        ours: Box::new(|h| grep_count(h, json!({"pattern": r"fn \w+\(&mut self"}))),
        rg: [
            &["-c", r"fn \w+\(&mut self"][..],
            &RG_COMMON,
            &[root.as_str()],
        ]
        .concat(),
        rg_count: sum_counts,
    });
    // A case-insensitive regular expression with a type.
    cases.push(Case {
        name: r"grep -i -t rust 'todo|fixme'",
        ours: Box::new(|h| {
            grep_count(
                h,
                json!({"pattern": "todo|fixme", "case_insensitive": true, "type": "rust"}),
            )
        }),
        rg: [
            &["-c", "-i", "-t", "rust", "todo|fixme"][..],
            &RG_COMMON,
            &[root.as_str()],
        ]
        .concat(),
        rg_count: sum_counts,
    });
    // Every file.
    cases.push(Case {
        name: "find_files '**/*'",
        ours: Box::new(|h| {
            let text = call_text(h, &find_files, json!({"patterns": ["**/*"]}));
            leading_number(&text)
        }),
        rg: [&["--files"][..], &RG_COMMON, &[root.as_str()]].concat(),
        rg_count: count_lines,
    });
    // Every entry, as a listing (its file count compared).
    cases.push(Case {
        name: "list_dir depth 10 (files)",
        ours: Box::new(|h| {
            let text = call_text(h, &list_dir, json!({"depth": LIST_DEPTH}));
            listed_files(&text)
        }),
        rg: [
            &["--files", "--max-depth", depth.as_str()][..],
            &RG_COMMON,
            &[root.as_str()],
        ]
        .concat(),
        rg_count: count_lines,
    });

    // Warm the page cache (and both programs) once.
    for case in &cases {
        let _ = (case.ours)(&host);
        let _ = run_rg(&case.rg);
    }
    println!(
        "{:<34} {:>11} {:>11} {:>7} {:>10} {:>10}",
        "case", "tool (ms)", "rg (ms)", "ratio", "tool n", "rg n"
    );
    let mut worst: f64 = 0.0;
    let mut disagreements = 0;
    for case in &cases {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        let (mut our_n, mut rg_n) = (0, 0);
        // Alternate, so a change of load on the machine falls on both.
        for _ in 0..rounds {
            let start = Instant::now();
            our_n = (case.ours)(&host);
            ours.push(start.elapsed());
            let start = Instant::now();
            let out = run_rg(&case.rg);
            theirs.push(start.elapsed());
            rg_n = (case.rg_count)(&out);
        }
        let (a, b) = (median(&mut ours), median(&mut theirs));
        let ratio = a.as_secs_f64() / b.as_secs_f64().max(1e-9);
        worst = worst.max(ratio);
        println!(
            "{:<34} {:>11.1} {:>11.1} {:>6.2}x {:>10} {:>10}",
            case.name,
            a.as_secs_f64() * 1e3,
            b.as_secs_f64() * 1e3,
            ratio,
            our_n,
            rg_n
        );
        if our_n != rg_n {
            disagreements += 1;
            println!("  COUNTS DISAGREE: the tool found {our_n}, rg found {rg_n}");
        }
    }
    println!(
        "worst ratio {worst:.2}x (target: within 1.50x of rg){}; {}",
        if worst <= 1.5 { "" } else { " -- OVER TARGET" },
        if disagreements == 0 {
            "all counts agree".to_owned()
        } else {
            format!("{disagreements} cases where the counts DISAGREE")
        }
    );
}

/// One side-by-side measurement.
struct Case<'a> {
    name: &'static str,
    /// Runs the tool once; returns its count.
    ours: Box<dyn Fn(&TestHost) -> usize + 'a>,
    /// ripgrep's arguments.
    rg: Vec<&'a str>,
    /// ripgrep's count from its output.
    rg_count: fn(&str) -> usize,
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from(".cargo"))
}

/// Whether `rg` can run, installing it from Debian as root if needed.
fn ensure_rg() -> bool {
    let works = || {
        Command::new("rg")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works() {
        return true;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        println!(
            "ripgrep (rg) is not installed; install it (`sudo apt-get install -y ripgrep`) \
             and run the benchmark again. Skipped."
        );
        return false;
    }
    // The installation's words go to stderr: stdout is the benchmark's result (the book's
    // benchmarks page is made of it).
    eprintln!("ripgrep (rg) is not installed; installing it: apt-get install -y ripgrep");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "ripgrep"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::io::stderr())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get")
            .arg("update")
            .stdout(std::io::stderr())
            .status();
        install();
    }
    if works() {
        true
    } else {
        println!("could not install ripgrep; install it and run the benchmark again. Skipped.");
        false
    }
}

fn run_rg(args: &[&str]) -> String {
    let out = Command::new("rg").args(args).output().unwrap();
    // 1: no match; 2: some files could not be read (also the tool counts those as errors).
    assert!(
        out.status.code().is_some_and(|c| c <= 2),
        "rg {args:?} failed: {out:?}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn call_text<T: toolhost_plugin_api::Tool>(host: &TestHost, tool: &T, args: Value) -> String {
    host.call(tool, args).unwrap()
}

/// `grep`'s total of matching lines, from its structured result.
fn grep_count(host: &TestHost, args: Value) -> usize {
    let out = host.call_output(&grep, args).unwrap();
    let total = &out.structured.unwrap()["total_matches"];
    usize::try_from(total.as_u64().unwrap()).unwrap()
}

/// The sum of `rg -c`'s `path:count` lines.
fn sum_counts(out: &str) -> usize {
    out.lines()
        .filter_map(|l| l.rsplit_once(':'))
        .filter_map(|(_, n)| n.parse::<usize>().ok())
        .sum()
}

fn count_lines(out: &str) -> usize {
    out.lines().count()
}

/// The number a text starts with (`find_files`' `N files beneath ...`).
fn leading_number(text: &str) -> usize {
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// The files count of `list_dir`'s header (`(D folders, F files, ...`).
fn listed_files(text: &str) -> usize {
    let header = text.lines().next().unwrap();
    let (before, _) = header.split_once(" files,").unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap()
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}
