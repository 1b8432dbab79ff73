//! toolhost's bundled workspace plugin: tools that read, list, search, edit and write
//! files, run commands in a sandbox and fetch URLs, every path confined to the profile's
//! `[workspace] roots`.
//!
//! The tools are public so the crate's integration tests and benchmarks can call them
//! through `toolhost-plugin-api`'s test host, as a host does; the plugin itself is what
//! `export_plugin!` exports.

mod anchors;
mod grep;
mod listing;
mod read;
mod command;
mod command_policy;
mod fetch;
mod fetch_guard;
mod process_tree;
mod roots;
mod runner;

// The tools, for the integration tests (and hosts that link the crate).
pub use command::RunCommand;
pub use fetch::FetchUrl;

pub use grep::FileMatches;
pub use grep::Grep;
pub use grep::GrepArgs;
pub use grep::GrepOutput;
pub use grep::Line;
pub use listing::FindFiles;
pub use listing::FindFilesArgs;
pub use listing::ListDir;
pub use listing::ListDirArgs;
pub use read::BatchRead;
pub use read::BatchReadArgs;
pub use read::ReadFile;
pub use read::ReadFileArgs;

toolhost_plugin_api::export_plugin! {
    name: "workspace",
    version: env!("CARGO_PKG_VERSION"),
    tools: [
        read::ReadFile,
        read::BatchRead,
        listing::ListDir,
        listing::FindFiles,
        grep::Grep,
        command::RunCommand,
        fetch::FetchUrl,
    ],
}
