//! Outputs: the budget every result is held to ([`budget`]: the cut and its marker;
//! [`budgeting`]: applying a request's budget to a whole result), the store where a cut result's full text is
//! kept ([`store`]: one `keep` for every cut, readable only by the profile and token that
//! made it), and reading a kept output back ([`read`]: ranges of lines and grep). A
//! tool's text longer than the budget goes on as its head and its tail with one marker
//! line between them that says how much was left out and how to read it. The call door
//! applies the budget to every result; `read_output`, `toolhost output` and MCP
//! `resources/read` read kept outputs back through [`OutputStore::read`].

pub mod budget;
pub mod budgeting;
pub mod read;
pub mod store;

pub use budget::{Budget, Cut, DEFAULT_READ_LINES, MIN_MAX_CHARS, OutputSettings, Rest, Size, cut};
pub use budgeting::Budgeting;
pub use read::{DEFAULT_CONTEXT, Excerpt, RangeError, ReadRange};
pub use store::{
    OutputError, OutputMeta, OutputStore, Owner, PruneReport, SharedOutputs, SharedOutputsError,
    is_id,
};

/// The name of the native tool that reads kept outputs back.
pub const READ_OUTPUT_TOOL: &str = "read_output";
