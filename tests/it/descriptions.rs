//! The description rule: no description (a tool's, or one in its schemas) names a tool
//! the same profile does not show. A fixture whose descriptions name `web_search` and
//! `browser_navigate` is flagged by `toolhost check`, `toolhost list --profile` and the
//! library's rule; every bundled plugin, under every shipped profile and the default
//! profile, is not.

use std::path::Path;
use std::process::Output;

use toolhost::DescriptionRule;

use crate::support::{PluginDir, load, toolhost_command, workspace_root};

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn warnings(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("warning:")).collect()
}

/// A config folder with one profile `name` whose tools are `tools` (TOML array text).
fn config_with_profile(dir: &Path, name: &str, tools: &str) -> std::path::PathBuf {
    let profile = dir.join("profiles").join(name);
    std::fs::create_dir_all(&profile).expect("profile");
    std::fs::write(profile.join("config.toml"), format!("tools = {tools}\n")).expect("profile");
    let config = dir.join("config.toml");
    std::fs::write(&config, "profiles_dir = \"profiles\"\n").expect("config");
    config
}

#[test]
fn the_description_rule_flags_a_fixture_that_names_a_missing_tool() {
    let plugins = PluginDir::with(&["fixture_mentions"]);
    // check: the plugin's own tools are there; web_search and browser_navigate are not.
    let out = toolhost_command()
        .arg("check")
        .arg(plugins.path().join("libfixture_mentions.so"))
        .output()
        .expect("toolhost check");
    let text = stdout(&out);
    let found = warnings(&text);
    assert_eq!(found.len(), 4, "{text}");
    assert!(
        found[0].starts_with(
            "warning: plugin 'fixture_mentions', tool 'fetch_page': its description names \
             'web_search', a tool this plugin does not provide"
        ) && found[0].contains("reword it or add the tool to the profile"),
        "{text}"
    );
    assert!(
        found[1].contains(
            "tool 'fetch_page': its input schema at /properties/url/description names \
             'browser_navigate'"
        ),
        "{text}"
    );
    // Its own name, its argument's name and its sibling (which the plugin provides) are not.
    assert!(!text.contains("names 'fetch_page"), "{text}");
    assert!(!text.contains("names 'url'"), "{text}");
    assert!(text.trim_end().ends_with("ok"), "{text}");

    // list --profile: a profile with only fetch_page does not show its sibling either.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = config_with_profile(dir.path(), "web", "[\"fetch_page\"]");
    let out = toolhost_command()
        .arg("--config")
        .arg(&config)
        .args(["list", "--profile", "web", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("toolhost list");
    let text = stdout(&out);
    let words: Vec<&str> = warnings(&text)
        .iter()
        .filter_map(|l| l.split("names '").nth(1)?.split('\'').next())
        .collect();
    assert_eq!(
        words,
        ["fetch_page_twin", "web_search", "browser_navigate"],
        "{text}"
    );
    assert!(
        warnings(&text)
            .iter()
            .all(|l| l.contains("tool 'fetch_page':") && l.contains("this profile does not show")),
        "{text}"
    );

    // The library's rule over the registry, as the host runs it when it resolves a
    // profile: showing everything, only the absent well-known tools remain.
    let (report, registry, _) = load(&plugins);
    let rule = DescriptionRule::for_plugins(&report.plugins);
    let mentions = rule.check(&registry);
    let mut words: Vec<(&str, &str)> = mentions
        .iter()
        .map(|m| (m.tool.as_str(), m.word.as_str()))
        .collect();
    words.sort_unstable();
    assert_eq!(
        words,
        [
            ("fetch_page", "browser_navigate"),
            ("fetch_page", "web_search"),
            ("fetch_page_twin", "browser_navigate"),
            ("fetch_page_twin", "web_search"),
        ]
    );
}

/// The library names of the bundled plugins (`plugins/*`), from their manifests.
fn bundled_plugins() -> Vec<String> {
    let dir = workspace_root().join("plugins");
    let mut libs: Vec<String> = std::fs::read_dir(&dir)
        .expect("plugins/")
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("Cargo.toml")).ok())
        .filter(|manifest| manifest.contains("cdylib"))
        .filter_map(|manifest| {
            let line = manifest.lines().find(|l| l.starts_with("name = "))?;
            Some(line.split('"').nth(1)?.replace('-', "_"))
        })
        .collect();
    libs.sort();
    assert!(libs.len() >= 6, "{libs:?}");
    libs
}

#[test]
fn no_bundled_tool_description_names_a_tool_its_profile_does_not_show() {
    let libs = bundled_plugins();
    let names: Vec<&str> = libs.iter().map(String::as_str).collect();
    let plugins = PluginDir::with(&names);
    // The default profile: every tool.
    let (report, registry, _) = load(&plugins);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let mentions = DescriptionRule::for_plugins(&report.plugins).check(&registry);
    assert!(mentions.is_empty(), "{mentions:#?}");
    // Each shipped profile, with the example config's toolsets, as the book sets it up.
    let root = workspace_root();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.toml");
    std::fs::copy(root.join("toolhost.example.toml"), &config).expect("example config");
    let shipped: Vec<_> = std::fs::read_dir(root.join("examples/profiles"))
        .expect("examples/profiles")
        .filter_map(|e| e.ok())
        .collect();
    assert!(!shipped.is_empty());
    for entry in shipped {
        let name = entry.file_name().to_string_lossy().into_owned();
        let profile = dir.path().join("profiles").join(&name);
        std::fs::create_dir_all(&profile).expect("profile");
        std::fs::copy(
            entry.path().join("config.toml"),
            profile.join("config.toml"),
        )
        .expect("profile config");
        let out = toolhost_command()
            .arg("--config")
            .arg(&config)
            .args(["list", "--profile", &name, "--plugins"])
            .arg(plugins.path())
            .output()
            .expect("toolhost list");
        let text = stdout(&out);
        assert!(text.contains(&format!("profile '{name}'")), "{text}");
        assert!(warnings(&text).is_empty(), "profile {name}:\n{text}");
    }
}
