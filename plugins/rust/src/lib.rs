//! toolhost's bundled Rust toolchain plugin: `cargo check`, `cargo clippy`, `cargo test`
//! and `cargo fix` with structured diagnostics and results, `rustc --explain`, the
//! standard library's local documentation and crate registry lookups. Every cargo and
//! rustc run goes through the command sandbox `run_command` uses
//! (`toolhost_sandbox::runner`): writes only beneath the profile's workspace root, the
//! crate's target folder and cargo's caches, the network only for registry lookups (or
//! where `[workspace] allow_network` says), a time limit and cancellation that kill the
//! whole process tree.
//!
//! The tools are public so the crate's integration tests can call them through
//! `toolhost-plugin-api`'s test host, as a host does; the plugin itself is what
//! `export_plugin!` exports.

mod check;
mod crates;
mod diagnostics;
mod exec;
mod explain;
mod fix;
mod libtest;
mod project;
mod rustdoc;
mod test_run;

pub use check::{CheckArgs, CheckReport, cargo_check, cargo_clippy};
pub use crates::{CrateInfo, CratesArgs, CratesReport, Feature, SearchHit, crates_io_lookup};
pub use diagnostics::{Child, CompilerDiagnostic, Span};
pub use explain::{ExplainArgs, rustc_explain};
pub use fix::{ChangedFile, FixArgs, FixReport, cargo_fix};
pub use libtest::{Suite, TestCase, Totals};
pub use rustdoc::{DocEntry, LookupArgs, docs_folder, lookup, rustdoc_lookup};
pub use test_run::{TestArgs, TestReport, cargo_test};

toolhost_plugin_api::export_plugin! {
    name: "rust",
    version: env!("CARGO_PKG_VERSION"),
    tools: [
        check::cargo_check,
        check::cargo_clippy,
        test_run::cargo_test,
        fix::cargo_fix,
        explain::rustc_explain,
        rustdoc::rustdoc_lookup,
        crates::crates_io_lookup,
    ],
}
