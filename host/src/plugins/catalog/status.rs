//! What the catalog reports: the registry change of a rescan ([`RegistryEvent`]), what a
//! rescan did ([`RescanReport`]) and the snapshot status shows ([`CatalogStatus`]). Plain
//! data, serialized by the control socket and read back by the CLI.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use toolhost_calls::registry::ToolRegistry;

/// What changed in the registry: tool names added, removed, changed (same name, another
/// definition: description, schema, risk, ...) and rebuilt (the same definition from a
/// new generation of its plugin, or from another plugin).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryEvent {
    /// Tools that appeared.
    pub added: Vec<String>,
    /// Tools that disappeared.
    pub removed: Vec<String>,
    /// Tools whose definition changed (what a client lists: description, schemas, risk,
    /// requirements).
    pub changed: Vec<String>,
    /// Tools served by a new implementation with the same definition (a rebuilt plugin
    /// whose other tools changed, say): the calls reach the new code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rebuilt: Vec<String>,
}

impl RegistryEvent {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.rebuilt.is_empty()
    }

    /// Tool names added, removed, changed (another definition) and rebuilt (another
    /// implementation object, the same definition) between two registries.
    pub(crate) fn between(old: &ToolRegistry, new: &ToolRegistry) -> RegistryEvent {
        let mut event = RegistryEvent::default();
        for name in new.names() {
            match old.get(name) {
                None => event.added.push(name.to_owned()),
                Some(before) => {
                    let Some(after) = new.get(name) else { continue };
                    if after.spec() != before.spec() {
                        event.changed.push(name.to_owned());
                    } else if !Arc::ptr_eq(after.tool(), before.tool()) {
                        event.rebuilt.push(name.to_owned());
                    }
                }
            }
        }
        for name in old.names() {
            if new.get(name).is_none() {
                event.removed.push(name.to_owned());
            }
        }
        event
    }
}

/// What one rescan did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RescanReport {
    /// Plugin files loaded for the first time.
    pub plugins_added: Vec<PathBuf>,
    /// Plugin files loaded again because they changed (a new generation).
    pub plugins_updated: Vec<PathBuf>,
    /// Plugin files that are gone.
    pub plugins_removed: Vec<PathBuf>,
    /// The registry change.
    pub tools: RegistryEvent,
    /// Files (or directories) that failed, with the reason; a failed update keeps the
    /// previous generation serving.
    pub errors: Vec<LoadErrorStatus>,
    /// Files that look half-written; they are looked at again later.
    pub pending: Vec<PathBuf>,
    /// Directories and files that could not be read (an I/O error such as EMFILE or
    /// EIO): what was loaded from them keeps serving, and the watcher rescans again
    /// with backoff.
    pub unreadable: Vec<PathBuf>,
    /// Plugins whose quarantine this reload lifted (their workers start on the next call).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quarantine_lifted: Vec<String>,
}

/// One loaded plugin file, as status shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginStatus {
    /// The operator's path.
    pub file: PathBuf,
    /// sha256 of the file as loaded.
    pub sha256: String,
    /// Plugin name.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// The release of toolhost-plugin-api it was built with.
    pub api_version: String,
    /// The plugin-api ABI version it was built against (what loaders check).
    pub abi_version: String,
    /// Generation now serving: how many times this path has been loaded (removal and
    /// re-adding included).
    pub generation: u64,
    /// Earlier generations of this path (and failed loads that got as far as mapping the
    /// library) still mapped, and the bytes they keep (estimate: their file sizes).
    pub old_generations: u64,
    /// Estimate of the memory every mapped load of this path keeps, in bytes.
    pub retained_bytes: u64,
    /// When that generation was loaded (RFC 3339).
    pub loaded_at: String,
    /// Its tools.
    pub tools: Vec<String>,
    /// The last failure for this file (e.g. a bad replacement; the generation above
    /// keeps serving), if any.
    pub last_error: Option<String>,
    /// Where its code runs.
    #[serde(default)]
    pub mode: crate::plugins::isolation::IsolationMode,
    /// Its worker, in process mode.
    #[serde(default)]
    pub worker: Option<crate::plugins::isolation::supervisor::WorkerStatus>,
    /// What its load warned about without refusing it (settings keys it does not read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A file (or directory) that did not load: in status, one with no generation serving;
/// in a rescan report, every failure of that rescan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadErrorStatus {
    /// The file or directory.
    pub file: PathBuf,
    /// Why.
    pub error: String,
}

/// A snapshot of the catalog for status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CatalogStatus {
    /// Plugin directories.
    pub plugin_dirs: Vec<PathBuf>,
    /// Loaded plugins, in load order.
    pub plugins: Vec<PluginStatus>,
    /// Files that did not load.
    pub load_errors: Vec<LoadErrorStatus>,
    /// Tools the registry refused (duplicate names, bad schemas).
    pub registry_errors: Vec<String>,
    /// Files left pending because they look half-written.
    pub pending: Vec<PathBuf>,
    /// Reloads since start (loads of a path that had been loaded before).
    pub reloads: u64,
    /// Rescans since start: full ones (start-up, the watcher's debounced ones, `reload`,
    /// SIGHUP) and the watcher's immediate ones for a file that arrived complete.
    #[serde(default)]
    pub rescans: u64,
    /// Rescans that changed the registry (tools added, changed or removed): one per
    /// install or removal, however many file events it made.
    #[serde(default)]
    pub registry_changes: u64,
    /// Libraries mapped in this process (never unloaded): every generation, plus failed
    /// loads that got as far as mapping.
    pub generations_mapped: u64,
    /// Estimate of the memory all mapped libraries keep, in bytes (their file sizes).
    pub retained_bytes_estimate: u64,
    /// The reload count past which a restart is recommended.
    pub max_generations: u64,
    /// Set past `max_generations`: what to do about the memory.
    pub warning: Option<String>,
    /// The config's plugin settings warnings: keys a loaded plugin does not read, tables
    /// that name no loaded plugin ([`PluginSettings::warnings`](crate::PluginSettings::warnings)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings_warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use toolhost_calls::context::CallContext;
    use toolhost_calls::registry::ToolRegistry;
    use toolhost_calls::tool::{
        Arguments, DynTool, Requirements, Risk, ToolError, ToolOrigin, ToolOutput, ToolSpec,
    };

    use super::RegistryEvent;

    struct Fake(ToolSpec);

    #[async_trait::async_trait]
    impl DynTool for Fake {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn origin(&self) -> &ToolOrigin {
            &ToolOrigin::Native
        }
        async fn call(&self, _: &CallContext, _: Arguments) -> Result<ToolOutput, ToolError> {
            Ok(String::new().into())
        }
    }

    fn tool(name: &str, description: &str) -> Arc<dyn DynTool> {
        Arc::new(Fake(ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            schema: json!({"type": "object"}),
            risk: Risk::Read,
            interactive: false,
            requirements: Requirements::default(),
            output_schema: None,
        }))
    }

    /// A plugin rebuilt with one description edited: that tool changed, the others were
    /// rebuilt, and one kept object is neither.
    #[test]
    fn a_changed_description_changes_only_its_tool() {
        let kept = tool("kept", "The same object in both.");
        let (old, _) = ToolRegistry::from_tools([
            tool("a", "Does a."),
            tool("b", "Does b."),
            tool("gone", "Leaves."),
            Arc::clone(&kept),
        ]);
        let (new, _) = ToolRegistry::from_tools([
            tool("a", "Does a."),
            tool("b", "Does b, better."),
            tool("new", "Arrives."),
            kept,
        ]);
        let event = RegistryEvent::between(&old, &new);
        assert_eq!(
            event,
            RegistryEvent {
                added: vec!["new".into()],
                removed: vec!["gone".into()],
                changed: vec!["b".into()],
                rebuilt: vec!["a".into()],
            }
        );
        assert!(RegistryEvent::between(&new, &new).is_empty());
    }
}
