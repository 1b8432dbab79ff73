//! toolhost's bundled utility plugin: read tools for the current time in a time zone, JSON
//! queries and text statistics; an interactive tool that lets the person edit a text in
//! their editor; a write tool that writes files (deprecated: the workspace plugin's
//! `write_file`, confined to the workspace roots, replaces it).

mod edit;
mod files;
mod json;
mod text;
mod time;

toolhost_plugin_api::export_plugin! {
    name: "utils",
    version: env!("CARGO_PKG_VERSION"),
    tools: [
        time::time_now,
        json::json_query,
        text::text_stats,
        edit::EditText::default(),
        files::write_file,
    ],
}
