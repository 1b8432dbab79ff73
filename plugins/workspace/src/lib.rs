//! toolhost's bundled workspace plugin: tools that read, list, search, edit and write
//! files, run commands in a sandbox and fetch URLs, every path confined to the profile's
//! `[workspace] roots`.
//!
//! The tools are public so the crate's integration tests and benchmarks can call them
//! through `toolhost-plugin-api`'s test host, as a host does; the plugin itself is what
//! `export_plugin!` exports.

mod anchors;
mod command;
mod command_policy;
mod edit;
mod fetch;
mod fetch_guard;
mod grep;
mod listing;
mod read;
mod reads;
mod roots;
mod syntax;
mod write;

pub use anchors::{format_line, line_hash};
pub use command::RunCommand;
pub use edit::{AnchoredEdit, EditFile, EditFileArgs};
pub use fetch::FetchUrl;
pub use grep::{FileMatches, Grep, GrepArgs, GrepOutput, Line};
pub use listing::{FindFiles, FindFilesArgs, ListDir, ListDirArgs};
pub use read::{BatchRead, BatchReadArgs, ReadFile, ReadFileArgs};
pub use write::{WriteFile, WriteFileArgs, WriteMode};

toolhost_plugin_api::export_plugin! {
    name: "workspace",
    version: env!("CARGO_PKG_VERSION"),
    tools: [
        read::ReadFile,
        read::BatchRead,
        listing::ListDir,
        listing::FindFiles,
        grep::Grep,
        edit::EditFile,
        write::WriteFile,
        command::RunCommand,
        fetch::FetchUrl,
    ],
}
