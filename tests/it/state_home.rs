//! State where XDG puts it: state made in the old layout (beside each profile's config)
//! by the binary, notes through the memory plugin and sessions through `toolhost run`
//! with the scripted model server, is moved once to `$XDG_STATE_HOME/toolhost/profiles/`
//! by the next run, with nothing lost, the old place left empty, and a second run moving
//! nothing; the session database made before schema versions is adopted.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::model::{ModelServer, text};
use crate::support::{PluginDir, profile_state, toolhost_command};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `toolhost --config CONFIG ARGS` with the memory and echo plugins and the model at `url`.
fn toolhost(config: &Path, plugins: &PluginDir, url: &str, args: &[&str]) -> Command {
    let mut cmd = toolhost_command();
    cmd.arg("--config")
        .arg(config)
        .args(args)
        .arg("--plugins")
        .arg(plugins.path())
        .env("TOOLHOST_MODEL_BASE_URL", url)
        .env("TOOLHOST_MODEL", "scripted")
        .env_remove("TOOLHOST_API_KEY")
        .env_remove("OPENAI_API_KEY");
    cmd
}

async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("run toolhost"))
        .await
        .expect("joined")
}

/// (sessions, messages, schema version) of the session database at `db`.
fn sessions(db: &Path) -> (i64, i64, i64) {
    let conn = rusqlite::Connection::open(db).expect("open the session database");
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get(0)).expect(sql);
    (
        count("SELECT count(*) FROM sessions"),
        count("SELECT count(*) FROM messages"),
        count("PRAGMA user_version"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_beside_the_config_moves_once_to_the_state_home_with_every_session_and_note() {
    let server = ModelServer::scripted(vec![
        text("first answer"),
        text("second answer"),
        text("after the move"),
    ])
    .await;
    let plugins = PluginDir::with(&["toolhost_memory", "fixture_echo"]);
    let work = tempfile::tempdir().expect("temp dir");
    let profiles = work.path().join("profiles");
    std::fs::create_dir_all(profiles.join("p")).expect("profile");
    std::fs::write(profiles.join("p/config.toml"), "").expect("profile config");
    // The old layout: state under the profiles folder, as releases before this one kept
    // it (`state_dir` pointed at the config's folder gives exactly those paths).
    let old_config = work.path().join("old.toml");
    std::fs::write(
        &old_config,
        format!(
            "profiles_dir = {:?}\nstate_dir = {:?}\n",
            profiles.display().to_string(),
            work.path().display().to_string()
        ),
    )
    .expect("config");
    for note in ["the door code is 4711", "plants need water"] {
        let args = format!(r#"{{"action": "add", "text": "{note}"}}"#);
        let out = output(toolhost(
            &old_config,
            &plugins,
            &server.url,
            &["call", "memory", &args, "--profile", "p"],
        ))
        .await;
        assert!(out.status.success(), "{}", stderr(&out));
    }
    for (profile, prompt) in [("default", "hello"), ("p", "hi p")] {
        let out = output(toolhost(
            &old_config,
            &plugins,
            &server.url,
            &["run", prompt, "--profile", profile],
        ))
        .await;
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let old_p = profiles.join("p/state");
    let old_default = profiles.join("default/state");
    // Releases before this one kept the session database in the plugins' state folder:
    // put it back there, as they left it.
    for profile in ["p", "default"] {
        let db = profiles.join(profile).join("sessions/sessions.sqlite3");
        assert!(
            db.is_file(),
            "this release keeps sessions beside the state folder"
        );
        for suffix in ["-wal", "-shm", ""] {
            let from = format!("{}{suffix}", db.display());
            let to = format!(
                "{}{suffix}",
                profiles
                    .join(profile)
                    .join("state/sessions.sqlite3")
                    .display()
            );
            if std::path::Path::new(&from).exists() {
                std::fs::rename(&from, &to).expect("the old place");
            }
        }
        std::fs::remove_dir(profiles.join(profile).join("sessions")).expect("emptied");
    }
    assert!(old_p.join("memory.json").is_file() && old_p.join("sessions.sqlite3").is_file());
    assert!(old_default.join("sessions.sqlite3").is_file());
    let before_p = sessions(&old_p.join("sessions.sqlite3"));
    let before_default = sessions(&old_default.join("sessions.sqlite3"));
    assert!(before_p.0 == 1 && before_p.1 >= 2, "{before_p:?}");
    // What releases before schema versions made: the same tables, no user_version.
    for db in [
        old_p.join("sessions.sqlite3"),
        old_default.join("sessions.sqlite3"),
    ] {
        let conn = rusqlite::Connection::open(&db).expect("open");
        conn.pragma_update(None, "user_version", 0)
            .expect("unversioned");
    }

    // The upgrade: the same profiles, state where XDG puts it.
    let config = work.path().join("config.toml");
    std::fs::write(
        &config,
        format!("profiles_dir = {:?}\n", profiles.display().to_string()),
    )
    .expect("config");
    let out = output(toolhost(
        &config,
        &plugins,
        &server.url,
        &["call", "memory", r#"{"action": "list"}"#, "--profile", "p"],
    ))
    .await;
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("4711") && listed.contains("plants"),
        "{listed}"
    );
    let new_p = profile_state("p");
    let new_default = profile_state("default");
    for (old, new) in [(&old_p, &new_p), (&old_default, &new_default)] {
        assert!(
            log.contains(&format!(
                "moved state from {} to {}",
                old.display(),
                new.display()
            )),
            "{log}"
        );
        assert!(!old.exists(), "{} is left", old.display());
    }
    assert!(
        !profiles.join("default").exists()
            || std::fs::read_dir(profiles.join("default"))
                .expect("list")
                .next()
                .is_none()
    );
    assert!(profiles.join("p/config.toml").is_file(), "the config stays");
    assert_eq!(
        sessions(&new_p.join("sessions.sqlite3")),
        (before_p.0, before_p.1, 0)
    );
    // The next run adopts the unversioned database and adds its session; nothing moves.
    let out = output(toolhost(
        &config,
        &plugins,
        &server.url,
        &["run", "again", "--profile", "p"],
    ))
    .await;
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(!log.contains("moved state"), "{log}");
    // ... and moves the database out of the folder plugins may read.
    let moved_p = new_p.with_file_name("sessions").join("sessions.sqlite3");
    assert!(!new_p.join("sessions.sqlite3").exists(), "{log}");
    let after = sessions(&moved_p);
    assert_eq!(after.0, before_p.0 + 1);
    assert!(after.1 > before_p.1);
    assert_eq!(after.2, 4, "the schema version is set (the last one)");
    assert_eq!(
        sessions(&new_default.join("sessions.sqlite3")).0,
        before_default.0,
        "a profile that did not run keeps its database until it does"
    );
}
