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
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod listing;
mod read;
mod reads;
mod roots;
mod search;
mod syntax;
mod write;

pub use anchors::{format_line, line_hash};
pub use command::run_command;
pub use edit::{AnchoredEdit, EditFileArgs, edit_file};
pub use fetch::fetch_url;
pub use listing::{FindFilesArgs, ListDirArgs, find_files, list_dir};
pub use read::{BatchReadArgs, ReadFileArgs, batch_read, read_file};
pub use search::{FileMatches, GrepArgs, GrepOutput, Line, grep};
pub use write::{WriteFileArgs, WriteMode, write_file};

toolhost_plugin_api::export_plugin! {
    name: "workspace",
    version: env!("CARGO_PKG_VERSION"),
    tools: [
        read::read_file,
        read::batch_read,
        listing::list_dir,
        listing::find_files,
        search::grep,
        edit::edit_file,
        write::write_file,
        command::run_command,
        fetch::fetch_url,
    ],
}
