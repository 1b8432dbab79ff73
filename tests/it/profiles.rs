//! The config file and profiles: checked keys, toolsets, what a profile's agent sees,
//! start-up stopping on a missing tool, and a profile's tools across hot reloads.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::{
    CatalogConfig, ConfigError, ControlClient, DispatchConfig, Host, LoadedConfig, PluginCatalog,
    Profile, ServeConfig,
};

use crate::support::{PluginDir, echo_build, load};

/// A config directory: `config.toml` plus `profiles/<name>/config.toml` files.
struct ConfigDir {
    dir: tempfile::TempDir,
}

impl ConfigDir {
    fn new(config: &str, profiles: &[(&str, &str)]) -> ConfigDir {
        let dir = tempfile::tempdir().expect("temp dir");
        // Profiles loaded in this process keep their state here, not in the home folder.
        let config = if config.is_empty() {
            "state_dir = \"state\"\n"
        } else {
            config
        };
        std::fs::write(dir.path().join("config.toml"), config).expect("config");
        for (name, text) in profiles {
            let p = dir.path().join("profiles").join(name);
            std::fs::create_dir_all(&p).expect("profile dir");
            std::fs::write(p.join("config.toml"), text).expect("profile");
        }
        ConfigDir { dir }
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    fn load(&self) -> LoadedConfig {
        LoadedConfig::load(Some(&self.file())).expect("config loads")
    }
}

fn toolhost(config: &Path, args: &[&str]) -> Output {
    crate::support::toolhost_command()
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("TOOLHOST_PLUGINS")
        .env_remove("TOOLHOST_FIXTURE_TOKEN")
        .output()
        .expect("run toolhost")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn an_unknown_key_or_a_wrong_type_names_the_file_the_line_and_the_key() {
    let typo = ConfigDir::new(
        "profiles_dir = \"profiles\"\n\nplugin_dir = [\"plugins\"]\n",
        &[],
    );
    let err = LoadedConfig::load(Some(&typo.file())).expect_err("unknown key");
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::Parse { .. }));
    assert!(msg.contains(&typo.file().display().to_string()), "{msg}");
    assert!(msg.contains("line 3"), "{msg}");
    assert!(msg.contains("plugin_dir"), "{msg}");

    let wrong = ConfigDir::new("[calls]\ntimeout_secs = \"fast\"\n", &[]);
    let msg = LoadedConfig::load(Some(&wrong.file()))
        .expect_err("wrong type")
        .to_string();
    assert!(
        msg.contains("line 2") && msg.contains("timeout_secs"),
        "{msg}"
    );

    let risk = ConfigDir::new("[tools.echo]\nrisk = \"scary\"\n", &[]);
    let msg = LoadedConfig::load(Some(&risk.file()))
        .expect_err("bad risk")
        .to_string();
    assert!(
        msg.contains("unknown risk 'scary'") && msg.contains("line 2"),
        "{msg}"
    );

    // The binary stops at start-up with the same message.
    let out = toolhost(&typo.file(), &["list", "--plugins", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("plugin_dir"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn toolsets_expand_and_a_profile_without_a_list_gets_every_tool() {
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let (_, registry, _) = load(&plugins);
    let cfg = ConfigDir::new(
        "state_dir = \"state\"\n[toolsets]\ntext = [\"json_query\", \"text_stats\"]\n",
        &[
            ("writer", "tools = [\"@text\", \"time_now\"]\n"),
            ("all", "description = \"everything\"\n"),
        ],
    );
    let config = cfg.load();
    let writer = Profile::load(&config, "writer").expect("profile");
    assert_eq!(
        writer.tools.as_deref(),
        Some(
            &[
                "json_query".to_owned(),
                "text_stats".to_owned(),
                "time_now".to_owned()
            ][..]
        )
    );
    assert!(
        writer.dirs.state().is_dir(),
        "each profile has its own state folder"
    );
    let sees = writer.check(&registry).expect("all listed tools exist");
    assert_eq!(sees.names(), ["json_query", "text_stats", "time_now"]);

    let all = Profile::load(&config, "all")
        .expect("profile")
        .check(&registry)
        .expect("ok");
    assert_eq!(all.names(), registry.names());

    // A child agent draws from its parent's registry: it can never reach more.
    let child = sees.without(&["time_now"]);
    assert_eq!(child.names(), ["json_query", "text_stats"]);
    assert!(child.get("write_file").is_none());

    let unknown = ConfigDir::new("", &[("bad", "tools = [\"@nope\"]\n")]);
    let msg = Profile::load(&unknown.load(), "bad")
        .expect_err("unknown toolset")
        .to_string();
    assert!(msg.contains("@nope"), "{msg}");
    let none = Profile::load(&unknown.load(), "ghost")
        .expect_err("no such profile")
        .to_string();
    assert!(none.contains("no profile 'ghost'"), "{none}");
}

#[test]
fn a_profile_listing_a_missing_tool_stops_start_up_naming_the_profile_and_the_tool() {
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let cfg = ConfigDir::new("", &[("ops", "tools = [\"time_now\", \"deploy\"]\n")]);
    let p = plugins.path();
    let out = toolhost(
        &cfg.file(),
        &[
            "list",
            "--profile",
            "ops",
            "--plugins",
            p.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("profile 'ops'") && err.contains("'deploy'"),
        "{err}"
    );

    let socket = cfg.dir.path().join("control.sock");
    let out = crate::support::toolhost_command()
        .arg("--config")
        .arg(cfg.file())
        .args(["serve", "--no-watch", "--plugins"])
        .arg(&p)
        .arg("--control")
        .arg(&socket)
        .env("TOOLHOST_LOG", "info")
        .output()
        .expect("run serve");
    assert_eq!(out.status.code(), Some(1), "serve stops at start-up");
    let err = text(&out.stderr);
    assert!(
        err.contains("profile 'ops'") && err.contains("'deploy'"),
        "{err}"
    );
    assert!(
        !err.contains("toolhost is serving"),
        "a host that stops at start-up never says it serves: {err}"
    );
    assert!(!socket.exists());
}

#[test]
fn list_profile_shows_exactly_what_the_agent_sees_and_how_big_it_is() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let cfg = ConfigDir::new(
        "[tools.echo]\nrisk = \"deny\"\n",
        &[(
            "p",
            "tools = [\"echo\", \"slow\", \"risky_deny\", \"needs_env\"]\n",
        )],
    );
    let p = plugins.path();
    let args = [
        "list",
        "--profile",
        "p",
        "--plugins",
        p.to_str().expect("utf-8"),
    ];
    let out = toolhost(&cfg.file(), &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    let names: Vec<&str> = listing
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with("unavailable"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        names,
        ["read_output", "slow"],
        "deny tools (declared or overridden) and unavailable ones are not shown; the host's \
         own read_output is, as the agent gets it:\n{listing}"
    );
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("read_output") && l.contains("(host)")),
        "the host's tool is marked as the host's:\n{listing}"
    );
    assert!(
        listing.contains("unavailable: tool 'needs_env' is unavailable"),
        "{listing}"
    );
    let summary = listing.lines().last().unwrap_or_default();
    assert!(summary.contains("its agent sees 2 tools"), "{summary}");
    assert!(
        summary.contains("characters") && summary.contains("tokens"),
        "{summary}"
    );

    // With the variable set, the tool becomes available and the specs grow.
    let out = crate::support::toolhost_command()
        .arg("--config")
        .arg(cfg.file())
        .args(args)
        .env("TOOLHOST_FIXTURE_TOKEN", "x")
        .output()
        .expect("run");
    let listing = text(&out.stdout);
    assert!(!listing.contains("unavailable"), "{listing}");
    assert!(
        listing
            .lines()
            .last()
            .unwrap_or_default()
            .contains("sees 3 tools"),
        "{listing}"
    );
}

#[test]
fn call_approves_with_yes_and_refuses_without_a_terminal() {
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let cfg = ConfigDir::new("", &[]);
    let target = cfg.dir.path().join("written.txt");
    let args_json = json!({"path": target, "content": "approved"}).to_string();
    let p = plugins.path();
    let p = p.to_str().expect("utf-8");
    let refused = toolhost(
        &cfg.file(),
        &["call", "write_file", &args_json, "--plugins", p],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("was not approved by the user"),
        "{}",
        text(&refused.stderr)
    );
    assert!(text(&refused.stderr).contains("--yes"));
    assert!(!target.exists(), "the write tool never ran");

    let approved = toolhost(
        &cfg.file(),
        &["call", "write_file", &args_json, "--plugins", p, "--yes"],
    );
    assert!(approved.status.success(), "{}", text(&approved.stderr));
    assert_eq!(
        std::fs::read_to_string(&target).expect("written"),
        "approved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_removed_by_a_reload_shows_as_missing_and_comes_back() {
    let plugins = PluginDir::with(&[]);
    let file = plugins.path().join("libecho.so");
    std::fs::copy(echo_build("v1"), &file).expect("install");
    let cfg = ConfigDir::new("", &[("p", "tools = [\"echo\"]\n")]);
    let config = cfg.load();
    let socket = cfg.dir.path().join("control.sock");
    let running = Host::start(ServeConfig {
        catalog: CatalogConfig {
            dirs: vec![plugins.path()],
            ..CatalogConfig::default()
        },
        watch: None,
        control_path: socket.clone(),
        dispatch: DispatchConfig::default(),
        shutdown_grace: Duration::from_millis(100),
        profiles: config.profiles().expect("profiles"),
        remember_approvals: true,
        availability_ttl: Duration::from_secs(30),
        default_profile: "default".to_owned(),
        config_file: None,
        audit: None,
        mcp_servers: Vec::new(),
        mcp_servers_dir: None,
        state: None,
    })
    .await
    .expect("starts");
    let catalog: Arc<PluginCatalog> = Arc::clone(running.host().catalog());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(running.run(async {
        let _ = stopped.await;
    }));
    let mut client = ControlClient::connect(&socket).await.expect("client");
    let missing = |status: &Value| -> Vec<Value> {
        status["profiles"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "p"))
            .and_then(|p| p["missing_tools"].as_array().cloned())
            .unwrap_or_default()
    };
    let status = client.request("status", json!({})).await.expect("status");
    assert!(missing(&status).is_empty(), "{status}");

    std::fs::remove_file(&file).expect("remove");
    client.request("reload", json!({})).await.expect("reload");
    let status = client.request("status", json!({})).await.expect("status");
    assert_eq!(
        missing(&status),
        [json!("echo")],
        "the host keeps running and shows it"
    );
    let gone = client
        .request("call", json!({"tool": "echo", "arguments": {"text": "x"}}))
        .await
        .expect("answered");
    assert_eq!(gone["error"], "tool_not_found");
    // A call made as profile "p" only reaches p's tools; an unknown profile is refused.
    let outside = client
        .request("call", json!({"tool": "build_version", "profile": "p"}))
        .await
        .expect("answered");
    assert_eq!(outside["error"], "tool_not_found", "{outside}");
    let unknown = client
        .request(
            "call",
            json!({"tool": "build_version", "profile": "nobody"}),
        )
        .await
        .expect_err("no such profile");
    assert!(
        unknown.to_string().contains("no profile 'nobody'"),
        "{unknown}"
    );

    std::fs::copy(echo_build("v1"), &file).expect("reinstall");
    client.request("reload", json!({})).await.expect("reload");
    let status = client.request("status", json!({})).await.expect("status");
    assert!(missing(&status).is_empty(), "it is back: {status}");
    assert!(catalog.registry().get("echo").is_some());
    drop(client);
    let _ = stop.send(());
    serving.await.expect("stops");
}

#[test]
fn every_section_is_checked_at_load_and_read_resolved() {
    // A bad metrics address stops every command at load, naming the file and the key,
    // not only the command that would serve metrics.
    let bad = ConfigDir::new("state_dir = \"state\"\n[metrics]\nlisten = \"nine\"\n", &[]);
    let e = LoadedConfig::load(Some(&bad.file()))
        .expect_err("a bad address is refused")
        .to_string();
    assert!(
        e.contains("[metrics] listen = \"nine\" is not an address") && e.contains("config.toml"),
        "{e}"
    );
    let out = toolhost(&bad.file(), &["list", "--plugins", "/nonexistent"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is not an address"),
        "{}",
        text(&out.stderr)
    );

    let good = ConfigDir::new(
        "state_dir = \"state\"\ndefault_profile = \"dev\"\n[metrics]\nlisten = \"127.0.0.1:9464\"\n\
         require_token = true\n[reload]\nwatch = false\nmax_generations = 3\n",
        &[],
    );
    let loaded = good.load();
    assert_eq!(
        loaded.metrics(),
        toolhost::MetricsSettings {
            listen: Some("127.0.0.1:9464".parse().expect("address")),
            require_token: true,
        }
    );
    assert_eq!(
        loaded.reload(),
        toolhost::ReloadSettings {
            watch: false,
            max_generations: 3,
        }
    );
    assert_eq!(loaded.default_profile(), "dev");
}

#[test]
fn a_file_that_sets_nothing_resolves_to_the_settings_own_defaults() {
    // Each section's defaults live in its resolved type; the file's schema says them
    // from there, so the two cannot drift.
    let loaded = ConfigDir::new("", &[]).load();
    assert_eq!(loaded.call_settings(), toolhost::CallSettings::default());
    assert_eq!(loaded.output(), toolhost::OutputSettings::default());
    assert_eq!(loaded.mcp().limits, toolhost::HttpLimits::default());
    assert_eq!(loaded.watch(), toolhost::WatchConfig::default());
    assert_eq!(loaded.reload(), toolhost::ReloadSettings::default());
    let (isolation, defaults) = (
        loaded.isolation_policy(),
        toolhost::IsolationPolicy::default(),
    );
    assert_eq!(
        (
            isolation.memory_limit_bytes,
            isolation.max_processes,
            isolation.open_files,
            isolation.max_crashes,
            isolation.crash_window,
            isolation.kill_after_cancel,
            isolation.start_timeout,
            isolation.allow_network,
        ),
        (
            defaults.memory_limit_bytes,
            defaults.max_processes,
            defaults.open_files,
            defaults.max_crashes,
            defaults.crash_window,
            defaults.kill_after_cancel,
            defaults.start_timeout,
            defaults.allow_network,
        )
    );
}

#[test]
fn the_shipped_example_config_is_valid() {
    let example = crate::support::workspace_root().join("toolhost.example.toml");
    let loaded = LoadedConfig::load(Some(&example)).expect("the example config loads");
    assert_eq!(loaded.toolsets()["text"], ["json_query", "text_stats"]);
    assert!(loaded.toolsets()["workspace"].contains(&"edit_file".to_owned()));
    assert_eq!(
        loaded.risk_overrides()["edit_text"].risk,
        toolhost::Risk::Deny
    );
}

/// Runs `toolhost ARGS` on a pseudo-terminal (util-linux `script`) with `input` typed.
fn on_a_terminal(args: &str, input: &str) -> Output {
    let command = format!(
        "env XDG_CONFIG_HOME={} {} {args}",
        crate::support::empty_config_home().display(),
        env!("CARGO_BIN_EXE_toolhost")
    );
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux `script` runs the command on a pseudo-terminal");
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin.write_all(input.as_bytes()).expect("type the answer");
    }
    child.wait_with_output().expect("wait")
}

#[test]
fn call_asks_the_person_at_the_terminal() {
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let yes = dir.path().join("yes.txt");
    let no = dir.path().join("no.txt");
    let args = |target: &Path| {
        format!(
            "call write_file '{}' --plugins {}",
            json!({"path": target, "content": "typed"}),
            plugins.path().display()
        )
    };
    let approved = on_a_terminal(&args(&yes), "y\n");
    let screen = text(&approved.stdout);
    assert!(
        screen.contains("Allow tool 'write_file' (write"),
        "{screen}"
    );
    assert!(approved.status.success(), "{screen}");
    assert_eq!(std::fs::read_to_string(&yes).expect("written"), "typed");

    let declined = on_a_terminal(&args(&no), "n\n");
    let screen = text(&declined.stdout);
    assert!(!declined.status.success());
    assert!(
        screen.contains("was not approved by the user: the user answered no"),
        "{screen}"
    );
    assert!(!no.exists());
}

#[test]
fn config_overrides_apply_on_the_real_call_path_and_lowering_must_be_explicit() {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let p = plugins.path();
    let p = p.to_str().expect("utf-8");
    let raised = ConfigDir::new("[tools.echo]\nrisk = \"write\"\n", &[]);
    let out = toolhost(
        &raised.file(),
        &["call", "echo", r#"{"text": "hi"}"#, "--plugins", p],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "echo raised to write asks, nobody to ask"
    );
    assert!(
        text(&out.stderr).contains("(risk write) was not approved"),
        "{}",
        text(&out.stderr)
    );

    let lowered = "[tools.risky_write]\nrisk = \"read\"\n";
    let no = ConfigDir::new(lowered, &[]);
    let out = toolhost(&no.file(), &["list", "--plugins", p]);
    assert_eq!(out.status.code(), Some(1), "start-up stops");
    let err = text(&out.stderr);
    assert!(
        err.contains("'risky_write'") && err.contains("allow_lower = true"),
        "{err}"
    );

    let yes = ConfigDir::new(&format!("{lowered}allow_lower = true\n"), &[]);
    let marker = yes.dir.path().join("ran");
    let args = json!({"marker": marker}).to_string();
    let out = toolhost(&yes.file(), &["call", "risky_write", &args, "--plugins", p]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("lowered by the config from write to read"),
        "logged"
    );
    assert!(marker.exists(), "lowered to read, it ran without asking");

    let typo = ConfigDir::new("[tools.ecko]\nrisk = \"deny\"\n", &[]);
    let out = toolhost(&typo.file(), &["list", "--plugins", p]);
    assert!(
        text(&out.stderr).contains("'ecko', which no loaded plugin provides"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_profile_file_with_an_unknown_key_names_the_file_the_line_and_the_key() {
    let cfg = ConfigDir::new("", &[("p", "tools = [\"echo\"]\nmodle = \"x\"\n")]);
    let msg = Profile::load(&cfg.load(), "p")
        .expect_err("unknown key")
        .to_string();
    assert!(msg.contains("profiles/p/config.toml"), "{msg}");
    assert!(msg.contains("line 2") && msg.contains("modle"), "{msg}");
}

#[tokio::test]
async fn availability_answers_are_cached_for_their_ttl() {
    let (_dir, registry) = {
        let dir = PluginDir::with(&["fixture_basic"]);
        let (_, registry, _) = load(&dir);
        (dir, registry)
    };
    let mut spec = registry.get("needs_program").expect("tool").spec().clone();
    // Long enough that the cached answer outlives a slow step on a busy machine.
    let availability = toolhost::Availability::new(Duration::from_secs(1));
    assert!(availability.check(&spec).is_err());
    // A changed requirement is evaluated afresh: an absolute path to a program that exists.
    let bin = tempfile::tempdir().expect("temp dir");
    let program = bin.path().join("toolhost-no-such-program");
    std::fs::write(&program, "#!/bin/sh\n").expect("program");
    let mut perms = std::fs::metadata(&program).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&program, perms).expect("chmod");
    spec.requirements.programs = vec![program.display().to_string()];
    assert!(availability.check(&spec).is_ok());
    // The answer is kept for the TTL even though the program is gone...
    std::fs::remove_file(&program).expect("remove");
    assert!(availability.check(&spec).is_ok(), "cached within the TTL");
    // ...and looked at again once the TTL has passed (waited for, bounded).
    crate::support::eventually_async(
        Duration::from_secs(10),
        "looked at again after the TTL",
        || availability.check(&spec).is_err(),
    )
    .await;
    assert!(
        availability.check(&spec).is_err(),
        "looked at again after the TTL"
    );
}

#[tokio::test]
async fn without_remember_for_session_every_call_asks() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Counting(AtomicUsize);
    #[async_trait::async_trait]
    impl toolhost::Approver for Counting {
        async fn ask(&self, _r: &toolhost::ApprovalRequest) -> toolhost::ApprovalAnswer {
            self.0.fetch_add(1, Ordering::SeqCst);
            toolhost::ApprovalAnswer::ApproveForSession
        }
    }
    let dir = PluginDir::with(&["fixture_basic"]);
    let (_, registry, _) = load(&dir);
    let approver = Arc::new(Counting(AtomicUsize::new(0)));
    let policy = toolhost::ApprovalPolicy::new(
        approver.clone(),
        Arc::new(toolhost::Availability::default()),
        false,
    );
    let d = toolhost::Plan::new(DispatchConfig::default(), Arc::new(policy));
    let turn = toolhost::CallContext::new(toolhost::TurnIdentity::default());
    let (_m, path) = crate::support::marker();
    for _ in 0..2 {
        let r = d
            .call(
                &registry,
                &turn,
                crate::support::call("1", "risky_write", json!({"marker": path})),
            )
            .await;
        assert!(!r.is_error, "{r:?}");
    }
    assert_eq!(approver.0.load(Ordering::SeqCst), 2);
}
