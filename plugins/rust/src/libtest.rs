//! Reading libtest's human output (what `cargo test` prints on stable; the JSON format
//! needs a nightly toolchain's `-Z unstable-options`): each `test NAME ... RESULT` line,
//! each failure's captured output (`---- NAME stdout ----` up to the next section), and
//! each suite's `test result:` totals. Lines it does not know are skipped, so a test
//! that prints (with `--nocapture`) or a libtest that words things a little differently
//! costs those lines, not the whole report.

use schemars::JsonSchema;
use serde::Serialize;

/// One test and how it ended.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub struct TestCase {
    /// The test's path (`tests::parses`, or a doc test's `src/lib.rs - f (line 3)`).
    pub name: String,
    /// `passed`, `failed`, `ignored` or `bench`.
    pub outcome: String,
    /// Why it is ignored (`#[ignore = "..."]`), if it says.
    pub reason: Option<String>,
    /// A failed test's captured output (its panic message included).
    pub output: Option<String>,
}

/// One test binary's run (`running N tests` to `test result:`).
#[derive(Debug, Clone, Default, Serialize, JsonSchema, PartialEq, Eq)]
pub struct Suite {
    /// Which binary, as cargo named it (`unittests src/lib.rs`, `tests/api.rs`, `Doc-tests
    /// name`), when known.
    pub name: Option<String>,
    /// Its tests in the order they finished.
    pub tests: Vec<TestCase>,
    /// Its totals line, as libtest counted.
    pub totals: Option<Totals>,
}

/// A `test result:` line's counts.
#[derive(Debug, Clone, Copy, Default, Serialize, JsonSchema, PartialEq, Eq)]
pub struct Totals {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests ignored.
    pub ignored: u64,
    /// Benchmarks measured.
    pub measured: u64,
    /// Tests the filter left out.
    pub filtered_out: u64,
}

impl Totals {
    /// The sum of two counts.
    pub(crate) fn add(&mut self, other: &Totals) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.measured += other.measured;
        self.filtered_out += other.filtered_out;
    }
}

/// The most of one failure's output kept (the end, where the panic usually is, too).
const FAILURE_OUTPUT_CAP: usize = 8 * 1024;

/// Reads the suites from libtest's output (`lines`: cargo test's standard output without
/// its JSON messages) and names them from cargo's `Running ...` / `Doc-tests ...` lines
/// on standard error, in order.
pub(crate) fn parse(lines: &[String], stderr: &str) -> Vec<Suite> {
    let mut names = stderr.lines().filter_map(|l| {
        let l = l.trim();
        l.strip_prefix("Running ")
            .map(|rest| rest.split(" (").next().unwrap_or(rest).to_owned())
            .or_else(|| l.starts_with("Doc-tests ").then(|| l.to_owned()))
    });
    let mut suites: Vec<Suite> = Vec::new();
    let mut section: Option<(String, String)> = None; // (test name, output so far)
    for line in lines {
        if let Some(rest) = line.strip_prefix("running ")
            && (rest.ends_with(" tests") || rest.ends_with(" test"))
        {
            close_section(&mut suites, &mut section);
            suites.push(Suite {
                name: names.next(),
                ..Suite::default()
            });
            continue;
        }
        if suites.is_empty() {
            continue;
        }
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|rest| rest.strip_suffix(" stdout ----"))
        {
            close_section(&mut suites, &mut section);
            section = Some((name.to_owned(), String::new()));
            continue;
        }
        if let Some((_, output)) = &mut section {
            // A failure's output ends where the next section or the summary starts.
            if line == "failures:" || line == "successes:" || line.starts_with("test result: ") {
                close_section(&mut suites, &mut section);
            } else {
                output.push_str(line);
                output.push('\n');
                continue;
            }
        }
        let Some(suite) = suites.last_mut() else {
            continue;
        };
        if let Some(rest) = line.strip_prefix("test result: ") {
            suite.totals = parse_totals(rest);
        } else if let Some(case) = parse_case(line) {
            suite.tests.push(case);
        }
    }
    close_section(&mut suites, &mut section);
    suites
}

/// Attaches a finished failure section's output to its test.
fn close_section(suites: &mut [Suite], section: &mut Option<(String, String)>) {
    let Some((name, output)) = section.take() else {
        return;
    };
    let Some(suite) = suites.last_mut() else {
        return;
    };
    let output = cap(output.trim_end());
    if let Some(case) = suite
        .tests
        .iter_mut()
        .rev()
        .find(|c| c.name == name && c.outcome == "failed")
    {
        case.output = Some(output);
    }
}

/// `output`, its middle left out past [`FAILURE_OUTPUT_CAP`].
fn cap(output: &str) -> String {
    if output.len() <= FAILURE_OUTPUT_CAP {
        return output.to_owned();
    }
    let half = FAILURE_OUTPUT_CAP / 2;
    let mut head = half;
    while !output.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = output.len() - half;
    while !output.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes left out ...]\n{}",
        &output[..head],
        tail - head,
        &output[tail..]
    )
}

/// A `test NAME ... RESULT` line.
fn parse_case(line: &str) -> Option<TestCase> {
    let rest = line.strip_prefix("test ")?;
    let (name, result) = rest.rsplit_once(" ... ")?;
    let result = result.trim();
    let (outcome, reason) = match result {
        "ok" => ("passed", None),
        "FAILED" => ("failed", None),
        "ignored" => ("ignored", None),
        r if r.starts_with("ignored, ") => ("ignored", r.strip_prefix("ignored, ")),
        r if r.starts_with("bench:") => ("bench", None),
        _ => return None,
    };
    Some(TestCase {
        name: name.to_owned(),
        outcome: outcome.to_owned(),
        reason: reason.map(str::to_owned),
        output: None,
    })
}

/// `ok. 3 passed; 1 failed; 0 ignored; 0 measured; 2 filtered out; finished in 0.01s`.
fn parse_totals(rest: &str) -> Option<Totals> {
    let (_, counts) = rest.split_once(". ")?;
    let mut totals = Totals::default();
    for part in counts.split(';') {
        let part = part.trim();
        let Some((number, what)) = part.split_once(' ') else {
            continue;
        };
        let Ok(n) = number.parse::<u64>() else {
            continue;
        };
        match what {
            "passed" => totals.passed = n,
            "failed" => totals.failed = n,
            "ignored" => totals.ignored = n,
            "measured" => totals.measured = n,
            "filtered out" => totals.filtered_out = n,
            _ => {}
        }
    }
    Some(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "
running 4 tests
test tests::adds ... ok
test tests::ignored_one ... ignored, needs a database
test tests::plain_ignored ... ignored
test tests::fails ... FAILED

failures:

---- tests::fails stdout ----
about to check

thread 'tests::fails' panicked at src/lib.rs:12:9:
assertion `left == right` failed
  left: 3
 right: 4
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    tests::fails

test result: FAILED. 1 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.00s

running 1 test
test src/lib.rs - add (line 3) ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s
";

    #[test]
    fn libtests_output_gives_each_test_its_failures_output_and_the_totals() {
        let lines: Vec<String> = OUTPUT.lines().map(str::to_owned).collect();
        let stderr = "   Compiling f v0.1.0\n     Running unittests src/lib.rs (target/debug/deps/f-1)\n   Doc-tests f\n";
        let suites = parse(&lines, stderr);
        assert_eq!(suites.len(), 2);
        assert_eq!(suites[0].name.as_deref(), Some("unittests src/lib.rs"));
        assert_eq!(suites[1].name.as_deref(), Some("Doc-tests f"));
        let unit = &suites[0];
        assert_eq!(unit.tests.len(), 4);
        assert_eq!(unit.tests[1].reason.as_deref(), Some("needs a database"));
        let failed = &unit.tests[3];
        assert_eq!(failed.outcome, "failed");
        let output = failed.output.as_deref().expect("output");
        assert!(output.starts_with("about to check"), "{output}");
        assert!(output.contains("left: 3"), "{output}");
        assert!(!output.contains("failures:"), "{output}");
        assert_eq!(
            unit.totals,
            Some(Totals {
                passed: 1,
                failed: 1,
                ignored: 2,
                ..Totals::default()
            })
        );
        assert_eq!(suites[1].tests[0].name, "src/lib.rs - add (line 3)");
    }

    #[test]
    fn a_long_failure_output_keeps_both_ends() {
        let long = format!("start\n{}\nend", "x".repeat(3 * FAILURE_OUTPUT_CAP));
        let kept = cap(&long);
        assert!(kept.len() < FAILURE_OUTPUT_CAP + 100);
        assert!(kept.starts_with("start") && kept.ends_with("end"), "{kept}");
    }
}
