//! toolhost's bundled workspace plugin: tools that read, list, search, edit and write
//! files, run commands in a sandbox and fetch URLs, every path confined to the profile's
//! `[workspace] roots`.

mod anchors;
mod edit;
mod roots;
mod syntax;
mod write;

pub use anchors::{format_line, line_hash};
pub use edit::{AnchoredEdit, EditFile, EditFileArgs};
pub use write::{WriteFile, WriteFileArgs, WriteMode};

toolhost_plugin_api::export_plugin! {
    name: "workspace",
    version: env!("CARGO_PKG_VERSION"),
    tools: [
        edit::EditFile,
        write::WriteFile,
    ],
}
