//! The errors of loading a plugin file. Each variant says what went wrong, names the thing (file,
//! plugin, tool) and, where an operator can act, what to do.

use std::io;
use std::path::PathBuf;
use toolhost_plugin_api::ffi::abi_with_crates;

/// A plugin file that could not be loaded. The loader collects one per bad file and goes
/// on with the others.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", file.display())]
pub struct PluginLoadError {
    /// The operator's path of the file.
    pub file: PathBuf,
    /// What went wrong.
    pub kind: LoadErrorKind,
}

/// Why a plugin file did not load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadErrorKind {
    /// Reading the file (or a plugin directory) failed.
    #[error(
        "could not {action}: {source}; check that it exists and is readable (plugin directories come from --plugins or $TOOLHOST_PLUGINS)"
    )]
    Io {
        /// What the loader was doing.
        action: &'static str,
        /// The cause.
        source: io::Error,
    },
    /// Not a regular file: a FIFO, a device, a directory or a socket named like a plugin.
    #[error(
        "not a regular file (it is {kind}); toolhost loads only regular files and did not \
         open it: remove it from the plugin directory"
    )]
    NotARegularFile {
        /// What it is, e.g. "a FIFO".
        kind: &'static str,
    },
    /// Larger than `[plugins] max_file_size`.
    #[error(
        "{size} bytes, more than [plugins] max_file_size ({limit} bytes), so it was not read; \
         if it really is a plugin, raise max_file_size, otherwise remove it"
    )]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Users other than the host's and root could change the file or its directory.
    #[error(transparent)]
    Permissions(Box<crate::sys::permissions::PermissionProblem>),
    /// The trust mode refuses it (not pinned, not signed by a listed publisher).
    #[error(transparent)]
    Untrusted(Box<crate::plugins::load::trust::TrustRefusal>),
    /// The file does not start like a shared library.
    #[error(
        "not a shared library (no ELF header, {size} bytes); if it is still being copied, \
         wait until the copy is finished, otherwise remove it from the plugin directory"
    )]
    NotASharedLibrary {
        /// The file's size.
        size: u64,
    },
    /// A library rustc builds for itself (a proc-macro's, a dylib's): plainly no plugin.
    /// The folder scan and `install` pass it over without a warning.
    #[error(
        "{kind}, not a toolhost plugin (a plugin is a cdylib that calls \
         `toolhost_plugin_api::export_plugin!`)"
    )]
    RustLibrary {
        /// Which kind of Rust library.
        kind: RustLibraryKind,
    },
    /// An ELF file shorter than its headers say: a partial copy.
    #[error(
        "the file is incomplete ({size} bytes, but its ELF headers describe {needed}); if it \
         is still being copied, wait until the copy is finished, otherwise copy it again \
         (install by rename: copy to a temporary name in the same directory, then mv)"
    )]
    Truncated {
        /// The file's size.
        size: u64,
        /// The size its headers need.
        needed: u64,
    },
    /// The file changed while it was being copied for loading: still being written.
    #[error(
        "the file changed while it was being read; it is still being written (install by \
         rename to avoid this); it will be looked at again"
    )]
    ChangedWhileLoading,
    /// The dynamic loader refused the file (truncated, wrong architecture, missing
    /// dependencies).
    #[error(
        "the dynamic loader could not open it: {reason}; if the file is incomplete, copy it \
         again (install by rename: copy to a temporary name in the same directory, then mv)"
    )]
    Open {
        /// The loader's message.
        reason: String,
    },
    /// A shared library without the toolhost root module.
    #[error(
        "not a toolhost plugin: the library exports no root module (a plugin calls \
         `toolhost_plugin_api::export_plugin!` once); remove it from the plugin directory"
    )]
    NoRootModule,
    /// Built against a plugin-api ABI this host cannot load (abi_stable's version check).
    #[error(
        "built against toolhost-plugin-api ABI {plugin_api}, which this host (ABI \
         {host_api}) cannot load; {}",
        which_side(plugin_api, host_api)
    )]
    IncompatibleVersion {
        /// The plugin's ABI version.
        plugin_api: String,
        /// The host's ABI version.
        host_api: String,
    },
    /// The types the plugin was built with do not match the host's.
    #[error(
        "its plugin-api types do not match this host's (plugin built against ABI \
         {plugin_api}, this host has ABI {host_api}); {}. Layout check: {}",
        which_side(plugin_api, host_api),
        details.join("; ")
    )]
    IncompatibleLayout {
        /// The plugin's ABI version.
        plugin_api: String,
        /// The host's ABI version.
        host_api: String,
        /// The `Error:` lines of abi_stable's report.
        details: Vec<String>,
    },
    /// Built against the first, pre-release plugin-api 0.1.0, whose root module no
    /// released host can read.
    #[error(
        "built against the pre-release toolhost-plugin-api 0.1.0 (its root module lacks \
         `table_layouts`, added before 0.1.0 was released under the same number), which no \
         released host loads; this host has ABI {host_api}: the plugin's vendor must rebuild \
         it against any released toolhost-plugin-api 0.1.x (see plugin-api/COMPATIBILITY.md)"
    )]
    PreReleaseApi {
        /// The host's ABI version.
        host_api: String,
    },
    /// Built against a release of another series of the API crate (`0.minor`) whose
    /// layouts abi_stable refuses ("incompatible package versions"), whatever its ABI.
    #[error(
        "built against toolhost-plugin-api {plugin_crate}, another series than this host's \
         {host_crate}: the crate's 0.minor always equals the ABI's, and types from another \
         series are refused even where unchanged; rebuild the plugin against {}",
        abi_with_crates(toolhost_plugin_api::ABI_VERSION)
    )]
    OtherCrateSeries {
        /// The crate version the plugin was built with (from its layouts).
        plugin_crate: String,
        /// This host's crate version.
        host_crate: String,
    },
    /// Built with `panic = "abort"`.
    #[error(
        "built with panic = \"abort\": a panic in it would kill the host, so it is refused \
         in-process; run it in a worker process, where an abort ends only the worker \
         (`--isolate`, or `[isolation.plugins] NAME = \"process\"` in the config), or \
         rebuild it with panic = \"unwind\" (the default: remove `panic = \"abort\"` from \
         its Cargo profile or RUSTFLAGS)"
    )]
    PanicAbort,
    /// The plugin declares a settings schema and the config's settings for it do not fit.
    #[error(
        "its settings do not fit the settings schema it declares: {problems}; fix [plugins.{plugin}.settings] in the host's config{}, then reload",
        config_folder_note(.config_dir.as_deref())
    )]
    Settings {
        /// The plugin's name.
        plugin: String,
        /// What does not fit, each problem with its path.
        problems: String,
        /// The folder of the config file the settings were read from, when there is one.
        config_dir: Option<PathBuf>,
    },
    /// Plugin code panicked or failed while the host read its tools.
    #[error("the plugin failed while its tools were being read: {reason}; fix the plugin")]
    Plugin {
        /// What failed.
        reason: String,
    },
    /// The plugin exports more tools than a plugin may
    /// ([`toolhost_plugin_api::limits::MAX_TOOLS_PER_PLUGIN`]); none of their metadata
    /// was read.
    #[error("{reason}")]
    TooManyTools {
        /// The shared check's message (`check_tool_count`): how many, and the cap.
        reason: String,
    },
    /// One tool of a plugin was left out (its other tools loaded).
    #[error("{reason}; the tool is left out, the plugin's other tools are loaded")]
    Tool {
        /// Which tool and why.
        reason: String,
    },
    /// The plugin's worker process refused or failed to load it (the message is the
    /// worker's, as the in-process loader words it, or how the worker died).
    #[error("{reason}")]
    InWorker {
        /// Why.
        reason: String,
    },
    /// Something else abi_stable reported.
    #[error("{reason}; rebuild the plugin against this host's plugin-api")]
    Other {
        /// abi_stable's message.
        reason: String,
    },
}

impl From<crate::plugins::load::trust::TrustRefusal> for LoadErrorKind {
    fn from(refusal: crate::plugins::load::trust::TrustRefusal) -> Self {
        LoadErrorKind::Untrusted(Box::new(refusal))
    }
}

impl From<crate::sys::permissions::PermissionProblem> for LoadErrorKind {
    fn from(problem: crate::sys::permissions::PermissionProblem) -> Self {
        LoadErrorKind::Permissions(Box::new(problem))
    }
}

impl LoadErrorKind {
    /// Whether the failed load left a library mapped in the process (it got past dlopen),
    /// which counts against the memory old generations keep.
    pub fn left_mapped(&self) -> bool {
        !matches!(
            self,
            LoadErrorKind::Io { .. }
                | LoadErrorKind::NotARegularFile { .. }
                | LoadErrorKind::TooLarge { .. }
                | LoadErrorKind::Permissions(_)
                | LoadErrorKind::Untrusted(_)
                | LoadErrorKind::NotASharedLibrary { .. }
                | LoadErrorKind::RustLibrary { .. }
                | LoadErrorKind::Truncated { .. }
                | LoadErrorKind::ChangedWhileLoading
                | LoadErrorKind::Open { .. }
                | LoadErrorKind::InWorker { .. }
        )
    }

    /// Whether the verdict can change without the file changing (an I/O error, the
    /// permissions of its directory, the trust file): such a failure is looked at again
    /// on every rescan instead of waiting for the file to change.
    pub fn may_pass_later(&self) -> bool {
        matches!(
            self,
            LoadErrorKind::Io { .. } | LoadErrorKind::Permissions(_) | LoadErrorKind::Untrusted(_)
        )
    }

    /// Whether the file is plainly no plugin (a library rustc builds for itself, such as
    /// the `#[tool]` macros' in `target/release`): passed over without a warning.
    pub fn is_not_a_plugin(&self) -> bool {
        matches!(self, LoadErrorKind::RustLibrary { .. })
    }

    /// Whether the file could not be read (EMFILE, EIO, a permission that flaps): worth
    /// retrying soon, with backoff.
    pub fn is_io(&self) -> bool {
        matches!(self, LoadErrorKind::Io { .. })
    }

    /// Whether the file looks like it is still being written.
    pub fn looks_incomplete(&self) -> bool {
        matches!(
            self,
            LoadErrorKind::Truncated { .. }
                | LoadErrorKind::NotASharedLibrary { .. }
                | LoadErrorKind::ChangedWhileLoading
        )
    }
}

/// Which side has to change when a plugin's ABI and the host's do not fit: the plugin is
/// newer (upgrade the host), older (rebuild the plugin), or claims the host's own version
/// with other types (an unreleased or modified build of the API).
fn which_side(plugin_api: &str, host_api: &str) -> String {
    fn parse(v: &str) -> Option<(u64, u64, u64)> {
        let mut parts = v.split(['.', '-', '+']).map(|p| p.parse::<u64>().ok());
        Some((parts.next()??, parts.next()??, parts.next()??))
    }
    match (parse(plugin_api), parse(host_api)) {
        (Some(p), Some(h)) if p > h => format!(
            "the plugin is newer than this host: upgrade toolhost to a release with \
             plugin-api ABI {plugin_api} or later, or ask the plugin's vendor for a build \
             against {}",
            abi_with_crates(host_api)
        ),
        (Some(p), Some(h)) if p < h => format!(
            "the plugin is older than this host: its vendor must rebuild it against {}",
            abi_with_crates(host_api)
        ),
        (Some(_), Some(_)) => format!(
            "the same ABI version with other types means the plugin was built from an \
             unreleased or changed copy of the API, not a release: rebuild it against a \
             release, {}",
            abi_with_crates(host_api)
        ),
        _ => format!("rebuild the plugin against {}", abi_with_crates(host_api)),
    }
}

/// ` (in FOLDER)`, naming where the config file the settings came from is, or nothing
/// when they came from no file.
pub(crate) fn config_folder_note(folder: Option<&std::path::Path>) -> String {
    folder
        .map(|f| format!(" (in {})", f.display()))
        .unwrap_or_default()
}

/// A library rustc builds for its own use, which no plugin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RustLibraryKind {
    /// A proc-macro crate's library (rustc loads it to expand macros while compiling).
    ProcMacro,
    /// A `dylib` crate's library (Rust code links against it).
    Dylib,
}

impl std::fmt::Display for RustLibraryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RustLibraryKind::ProcMacro => {
                "a Rust proc-macro library (rustc loads it to expand macros while compiling)"
            }
            RustLibraryKind::Dylib => "a Rust dylib (Rust code links against it)",
        })
    }
}
