//! What abi_stable's checks say, made short and actionable: the growable tables compared
//! in whichever direction fits, and layout mismatches reduced to their `Error:` lines.

use abi_stable::abi_stability::abi_checking::check_layout_compatibility;
use abi_stable::library::LibraryError;
use abi_stable::type_layout::TypeLayout;
use toolhost_plugin_api::ABI_VERSION;
use toolhost_plugin_api::ffi::TableLayouts;

use crate::plugins::load::error::LoadErrorKind;

/// Checks the growable tables (opaque to the root-module check) in whichever direction
/// fits: a plugin built against a newer API may have appended fields (abi_stable's own
/// rule), and one built against an older API may lack fields this host appended since.
/// Either way the fields both know must match exactly.
pub(super) fn check_tables(theirs: TableLayouts, plugin_api: &str) -> Result<(), LoadErrorKind> {
    let ours = TableLayouts::CURRENT;
    for (ours, theirs) in [
        (ours.tool_vtable, theirs.tool_vtable),
        (ours.host_vtable, theirs.host_vtable),
    ] {
        let Err(newer_plugin) = check_layout_compatibility(ours, theirs) else {
            continue;
        };
        if check_layout_compatibility(theirs, ours).is_ok() {
            continue; // The plugin's table is a prefix of ours: built before fields were added.
        }
        let report = newer_plugin.to_string();
        tracing::debug!(%report, "full layout-check report of a plugin table");
        return Err(LoadErrorKind::IncompatibleLayout {
            plugin_api: plugin_api.to_owned(),
            host_api: ABI_VERSION.to_owned(),
            details: error_lines(&report),
        });
    }
    Ok(())
}

/// The fields of the root module of the first, pre-release plugin-api 0.1.0: it lacked
/// `table_layouts`, which was inserted before `tools` while the version stayed 0.1.0.
const PRE_RELEASE_ROOT_FIELDS: [&str; 5] =
    ["name", "version", "api_version", "panic_unwind", "tools"];

/// Maps the failure of the root-module check. A plugin built against the pre-release
/// 0.1.0 (found by its version and the fields of its root module, `layout`, which the
/// library describes itself) gets a message of its own; everything else goes through
/// [`library_error`].
pub(super) fn root_error(
    e: LibraryError,
    plugin_api: &str,
    layout: Option<&'static TypeLayout>,
) -> LoadErrorKind {
    if matches!(e, LibraryError::AbiInstability(_))
        && plugin_api == "0.1.0"
        && layout.is_some_and(is_pre_release_root)
    {
        return LoadErrorKind::PreReleaseApi {
            host_api: ABI_VERSION.to_owned(),
        };
    }
    if let LibraryError::AbiInstability(report) = &e
        && let Some(refused) = other_crate_series(&report.to_string(), layout)
    {
        return refused;
    }
    library_error(e, Some(plugin_api))
}

/// abi_stable's refusal of layouts from another series of the API crate ("incompatible
/// package versions", from the crate version every derived layout carries), named as
/// such with both crate versions: the plugin's is read from its root module's layout.
fn other_crate_series(report: &str, layout: Option<&'static TypeLayout>) -> Option<LoadErrorKind> {
    if !report.contains("incompatible package versions") {
        return None;
    }
    // The prefix reference's own layout is abi_stable's; the struct it points to is
    // the plugin-api crate's, and carries its version.
    let plugin_crate = layout
        .and_then(|l| {
            l.shared_vars()
                .type_layouts()
                .iter()
                .map(|get| get())
                .find(|t| t.name() == "PluginRoot")
        })
        .map_or_else(
            || "of another series".to_owned(),
            |root| root.package_and_version().1.to_string(),
        );
    Some(LoadErrorKind::OtherCrateSeries {
        plugin_crate,
        host_crate: toolhost_plugin_api::API_VERSION.to_owned(),
    })
}

/// The root module's layout is that of its prefix reference (`PluginRoot_Ref`, no fields
/// of its own); the struct it points to is among the layouts it shares.
fn is_pre_release_root(layout: &'static TypeLayout) -> bool {
    layout.shared_vars().type_layouts().iter().any(|get| {
        let root = get();
        root.name() == "PluginRoot"
            && root.get_fields().is_some_and(|fields| {
                fields
                    .iter()
                    .map(|f| f.name())
                    .eq(PRE_RELEASE_ROOT_FIELDS.iter().copied())
            })
    })
}

/// Maps abi_stable's errors to short, actionable ones. For a layout mismatch only the
/// `Error:` lines of its long report are kept.
pub(super) fn library_error(e: LibraryError, plugin_api: Option<&str>) -> LoadErrorKind {
    let plugin_api = plugin_api.unwrap_or("unknown").to_owned();
    match e {
        LibraryError::OpenError { err, .. } => LoadErrorKind::Open {
            reason: err.to_string(),
        },
        LibraryError::GetSymbolError { .. } => LoadErrorKind::NoRootModule,
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
            LoadErrorKind::IncompatibleVersion {
                plugin_api: actual_version.to_string(),
                host_api: ABI_VERSION.to_owned(),
            }
        }
        LibraryError::ParseVersionError(e) => LoadErrorKind::Other {
            reason: format!("its plugin-api version string is malformed: {e}"),
        },
        LibraryError::AbiInstability(report) => {
            let report = report.to_string();
            tracing::debug!(%report, "full layout-check report");
            LoadErrorKind::IncompatibleLayout {
                plugin_api,
                host_api: ABI_VERSION.to_owned(),
                details: error_lines(&report),
            }
        }
        LibraryError::InvalidAbiHeader(_) | LibraryError::InvalidCAbi { .. } => {
            LoadErrorKind::IncompatibleLayout {
                plugin_api,
                host_api: ABI_VERSION.to_owned(),
                details: vec!["built with an incompatible abi_stable or Rust C ABI".to_owned()],
            }
        }
        LibraryError::RootModule { err, .. } => LoadErrorKind::Plugin {
            reason: format!("its root module failed to initialize: {err}"),
        },
        other => LoadErrorKind::Other {
            reason: first_lines(&other.to_string(), 3),
        },
    }
}

/// The `Error:` lines of abi_stable's layout report (at most 8), each with the first line
/// of its `Expected:` and `Found:` parts, e.g. `unexpected field (expected
/// field_name:tools, found field_name:priority)`.
fn error_lines(report: &str) -> Vec<String> {
    struct Entry {
        what: String,
        expected: Option<String>,
        found: Option<String>,
    }
    let mut entries: Vec<Entry> = Vec::new();
    let mut lines = report.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if let Some(what) = line.strip_prefix("Error:") {
            entries.push(Entry {
                what: what.trim().to_owned(),
                expected: None,
                found: None,
            });
        } else if let Some(entry) = entries.last_mut() {
            let slot = match line {
                "Expected:" => &mut entry.expected,
                "Found:" => &mut entry.found,
                _ => continue,
            };
            if slot.is_none() {
                *slot = lines.next().map(str::to_owned);
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let text = match (e.expected, e.found) {
            (Some(x), Some(f)) => format!("{} (expected {x}, found {f})", e.what),
            _ => e.what,
        };
        if !text.is_empty() && !out.contains(&text) {
            out.push(text);
        }
    }
    if out.is_empty() {
        out.push(first_lines(report, 3));
    }
    out.truncate(8);
    out
}

fn first_lines(text: &str, n: usize) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(n)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(
        non_camel_case_types,
        reason = "abi_stable names prefix references `Type_Ref`"
    )]

    use super::*;
    use abi_stable::StableAbi;

    /// A crate bumped to another series (0.2.0) with its layouts unchanged is refused by
    /// abi_stable as "incompatible package versions"; the host says so, naming both crate
    /// versions and what to rebuild against, instead of a layout diff.
    #[test]
    fn a_plugin_of_another_crate_series_is_refused_naming_both_versions() {
        let report = "Error:incompatible package versions\nExpected:0.1.4\nFound:0.2.0";
        let layout = <toolhost_plugin_api::ffi::PluginRoot_Ref as StableAbi>::LAYOUT;
        let refused = other_crate_series(report, Some(layout)).expect("recognised");
        let LoadErrorKind::OtherCrateSeries {
            plugin_crate,
            host_crate,
        } = &refused
        else {
            panic!("{refused:?}");
        };
        // The layout here is this build's, so its crate version is this host's.
        assert_eq!(plugin_crate, toolhost_plugin_api::API_VERSION);
        assert_eq!(host_crate, toolhost_plugin_api::API_VERSION);
        let message = refused.to_string();
        assert!(
            message.contains("another series")
                && message.contains(&format!(
                    "rebuild the plugin against {}",
                    toolhost_plugin_api::ffi::abi_with_crates(ABI_VERSION)
                )),
            "{message}"
        );
        assert!(other_crate_series("Error:unexpected field", Some(layout)).is_none());
    }

    #[test]
    fn tables_as_compiled_pass_and_a_changed_table_is_refused() {
        assert!(check_tables(TableLayouts::CURRENT, ABI_VERSION).is_ok());
        let changed = TableLayouts {
            tool_vtable: <Changed_Ref as StableAbi>::LAYOUT,
            ..TableLayouts::CURRENT
        };
        let table: Changed_Ref =
            abi_stable::prefix_type::PrefixTypeTrait::leak_into_prefix(Changed {
                drop: 1,
                name: 2,
            });
        assert_eq!((table.drop(), table.name()), (1, 2));
        match check_tables(changed, "0.1.0") {
            Err(LoadErrorKind::IncompatibleLayout { details, .. }) => assert!(!details.is_empty()),
            other => panic!("expected a layout error, got {other:?}"),
        }
    }

    #[test]
    fn todays_root_module_is_not_taken_for_the_pre_release_one() {
        let ours = <toolhost_plugin_api::ffi::PluginRoot_Ref as StableAbi>::LAYOUT;
        assert!(!is_pre_release_root(ours));
    }

    #[test]
    fn error_lines_keep_the_short_lines_with_expected_and_found() {
        let report = "header\nError:too many fields\nExpected:\n    8\nFound:\n    7\n\nmore\n";
        assert_eq!(
            error_lines(report),
            ["too many fields (expected 8, found 7)"]
        );
    }

    /// A table whose first fields differ from the real tool vtable's.
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = Changed_Ref)))]
    struct Changed {
        drop: u8,
        #[sabi(last_prefix_field)]
        name: u16,
    }
}
