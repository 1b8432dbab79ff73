//! The registry's operations, with tools from real plugins.

use toolhost::RegistryError;

use crate::support::{PluginDir, load};

#[test]
fn names_and_specs_are_sorted_and_only_and_without_filter() {
    let dir = PluginDir::with(&["toolhost_utils", "hello_tools"]);
    let (_, registry, problems) = load(&dir);
    assert!(problems.is_empty(), "{problems:?}");
    let names = registry.names();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    let spec_names: Vec<_> = registry.specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(spec_names, names);

    let only = registry.only(&["time_now", "greet"]).expect("both exist");
    assert_eq!(only.names(), ["greet", "time_now"]);

    match registry.only(&["greet", "no_such_tool", "also_missing"]) {
        Err(RegistryError::Missing { tool }) => assert_eq!(tool, "no_such_tool"),
        other => panic!("expected the first missing name, got {other:?}"),
    }

    let without = registry.without(&["greet", "not_there"]);
    assert!(without.get("greet").is_none());
    assert_eq!(without.len(), registry.len() - 1);
}

#[test]
fn duplicate_tool_name_keeps_the_first_in_load_order_and_names_both_files() {
    let dir = PluginDir::with(&["fixture_duplicate", "fixture_basic"]);
    let (report, registry, problems) = load(&dir);
    // Sorted file names: libfixture_basic.so loads before libfixture_duplicate.so.
    let order: Vec<_> = report.plugins.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(order, ["basic", "duplicate"]);
    assert_eq!(
        registry
            .get("echo")
            .expect("echo")
            .tool()
            .origin()
            .plugin_name(),
        "basic"
    );
    assert!(
        registry.get("dup_only").is_some(),
        "the duplicate plugin's other tool registers"
    );
    assert_eq!(problems.len(), 1);
    let text = problems[0].to_string();
    assert!(text.contains("'echo'"), "{text}");
    assert!(
        text.contains("libfixture_basic.so") && text.contains("libfixture_duplicate.so"),
        "{text}"
    );
}
