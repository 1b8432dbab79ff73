//! toolhost's bundled workspace plugin: tools that read, list, search, edit and write
//! files, run commands in a sandbox and fetch URLs, every path confined to the profile's
//! `[workspace] roots`.

mod anchors;
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

toolhost_plugin_api::export_plugin! {
    name: "workspace",
    version: env!("CARGO_PKG_VERSION"),
    tools: [
        command::RunCommand,
        fetch::FetchUrl,
    ],
}
