//! [`check_plugin`]: a plugin's whole export list, read and checked the way a host loads
//! it, so one `#[test]` line refuses what `toolhost check` would.

use abi_stable::library::LibHeader;

use super::ToolInfo;
use super::lent::tool_info;
use crate::check::{check_tool, check_tool_count, duplicate_tools};
use crate::export::read_tool_metadata;
use crate::ffi::PluginRoot_Ref;

/// Reads a plugin's root module (what `export_plugin!` exports as
/// `__TOOLHOST_PLUGIN_ROOT`) and checks every tool it exports as a host does at load: the
/// root module, the tool count, each tool's metadata (name, description, schemas,
/// requirements, as [`TestHost::describe`](super::TestHost::describe)) and no two tools
/// of one name. A settings type named in `export_plugin!` is checked with
/// [`check_settings`]. `Ok` lists the tools as a host would serve them; `Err` has one message per
/// problem, each the host's (`tool 'Search Notes': it has an invalid name: ...`).
///
/// One line in the plugin crate's tests (the `#[cfg(test)]` module of the file with
/// `export_plugin!`):
///
/// ```
/// # use serde_json::{json, Value};
/// # use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError};
/// # struct Named(&'static str);
/// # impl Tool for Named {
/// #     fn name(&self) -> &str { self.0 }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn schema(&self) -> Value { json!({"type": "object"}) }
/// #     fn risk(&self) -> Risk { Risk::Read }
/// #     async fn call(&self, _: &ToolContext<'_>, _: Value) -> Result<String, ToolError> {
/// #         Ok(String::new())
/// #     }
/// # }
/// toolhost_plugin_api::export_plugin! {
///     name: "notes",
///     version: "0.1.0",
///     tools: [Named("search_notes"), Named("Add Note"), Named("search_notes")],
/// }
///
/// // #[test] fn a_host_takes_every_tool() {
/// //     toolhost_plugin_api::testing::check_plugin(&__TOOLHOST_PLUGIN_ROOT).unwrap();
/// // }
/// let problems = toolhost_plugin_api::testing::check_plugin(&__TOOLHOST_PLUGIN_ROOT)
///     .expect_err("two tools are refused");
/// assert_eq!(problems, [
///     "tool 'Add Note': it has an invalid name: ' ' is not allowed in it; use 1-64 \
///      characters of A-Z, a-z, 0-9, _ and -",
///     "plugin 'notes' exports two tools named 'search_notes' (#1 and #3); rename one",
/// ]);
/// ```
pub fn check_plugin(root: &LibHeader) -> Result<Vec<ToolInfo>, Vec<String>> {
    let root = root
        .init_root_module::<PluginRoot_Ref>()
        .map_err(|e| vec![format!("a host would not load this plugin: {e}")])?;
    let plugin = root.name().as_str().to_owned();
    let tools = root.tools()()
        .into_result()
        .map_err(|m| vec![m.into_string()])?;
    if let Err(e) = check_tool_count(tools.len()) {
        drop_all(tools);
        return Err(vec![e]);
    }
    let mut problems = Vec::new();
    let mut read: Vec<(usize, ToolInfo)> = Vec::new();
    for (index, ffi) in tools.iter().enumerate() {
        // SAFETY: `ffi` was exported with its vtable by the plugin's `tools` function and
        // is dropped only below, after its last use.
        let checked = unsafe { read_tool_metadata(ffi, index) }
            .and_then(|meta| check_tool(&meta).map(|_| tool_info(meta)));
        match checked {
            Ok(info) => read.push((index, info)),
            Err(e) => problems.push(e),
        }
    }
    drop_all(tools);
    let refused = duplicate_tools(&plugin, read.iter().map(|(i, t)| (*i, t.name.as_str())));
    problems.extend(refused.iter().map(|(_, m)| m.clone()));
    if problems.is_empty() {
        Ok(read.into_iter().map(|(_, info)| info).collect())
    } else {
        Err(problems)
    }
}

/// Drops each exported tool through its vtable, as a host does.
fn drop_all(tools: abi_stable::std_types::RVec<crate::ffi::FfiTool>) {
    for ffi in tools {
        // SAFETY: each object is dropped once, with the vtable it was exported with, and
        // never used again.
        unsafe { (ffi.vtable.drop())(ffi.this) };
    }
}

/// Checks a settings table against the settings type `T` a plugin names in
/// `export_plugin! { settings: T, .. }`, as a host does when it loads the plugin: `Ok`
/// with the host's warning for each key `T` does not have, `Err` with the host's message
/// when the table does not fit (the host then refuses the plugin). Check `{}` too: it is
/// what a host gives when its config has no `[plugins.NAME.settings]` table.
///
/// ```
/// use serde_json::json;
/// use toolhost_plugin_api::testing::check_settings;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema, Default)]
/// #[serde(default)]
/// struct Settings {
///     /// Units for temperatures.
///     units: Option<String>,
/// }
///
/// assert_eq!(check_settings::<Settings>(json!({})), Ok(vec![]));
/// assert_eq!(check_settings::<Settings>(json!({"units": "metric"})), Ok(vec![]));
/// assert!(check_settings::<Settings>(json!({"units": 3})).is_err());
/// assert_eq!(
///     check_settings::<Settings>(json!({"unit": "metric"})).unwrap()[0],
///     "key 'unit' is not a setting of this plugin (it reads: units); it is ignored"
/// );
/// ```
pub fn check_settings<T: schemars::JsonSchema>(
    settings: serde_json::Value,
) -> Result<Vec<String>, String> {
    crate::check::check_settings(&crate::schema::schema_for::<T>(), &settings)
}
