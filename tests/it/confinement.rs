//! What toolhost starts is confined like a worker, through the real binary, with the host
//! as root and as a throwaway plain user: a hostile `run_command` program (in process and
//! under `--isolate`) and a hostile crate's `build.rs` under `cargo_check` and its test
//! under `cargo_test` try the descriptors the host inherited, the host's state (kept
//! outputs of this and another profile, lasting approvals, sessions, tokens, the audit
//! log, trust pins) through a workspace root that holds it, memfd, Unix sockets and the
//! network; with Unix sockets
//! allowed, a command (directly, and double-forked with `setsid` and `env -i`) reaches
//! the control socket and is refused by the host, and by a second host it is no
//! descendant of (toolhost's mark).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::support::{
    OtherUser, PluginDir, toolhost_command, wait_exit, wait_for_socket, wait_until,
};

const KEPT: &str = "KEPT OUTPUT OF ANOTHER TOKEN";
const TOKENS: &str = "TOKEN FILE CONTENT";
/// What the other state files hold (approvals, audit log, sessions, trust pins).
const STATE: &str = "HOST STATE CONTENT";
/// The host's state files besides kept outputs and tokens, beneath the work folder.
/// (The approvals folder's file is not `always.json`, which the host itself reads; the
/// audit log starts empty and gets the host's own lines, so it is checked for the
/// command's forged line rather than for being unchanged.)
const STATE_FILES: [&str; 4] = [
    "state/toolhost/profiles/coder/approvals/held.json",
    "state/toolhost/audit.jsonl",
    "state/toolhost/profiles/coder/sessions/sessions.sqlite3",
    "state/toolhost/trust.json",
];
/// The audit log among [`STATE_FILES`].
const AUDIT: &str = "state/toolhost/audit.jsonl";

/// The hostile program: each attempt prints `name: ok ...` or `name: refused ...`.
const HOSTILE: &str = r#"
import os, socket, sys
kept, tokens, control, planted, outside = sys.argv[1:6]
approvals, audit, sessions, trust = sys.argv[6:10]
def attempt(name, f):
    try:
        print(f"{name}: ok {f()!r}")
    except Exception as e:
        print(f"{name}: refused {type(e).__name__}: {e}")
def inherited():
    # By identity (fstat), not by /proc/self/fd, which a worker's command may not list.
    want = os.stat(outside)
    for fd in range(3, 1024):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino):
            os.write(fd, b"escaped through an inherited descriptor\n")
            return f"descriptor {fd}"
    raise OSError(9, "Bad file descriptor: no descriptor reaches the file outside")
attempt("fd7", inherited)
attempt("read_kept", lambda: open(kept).read())
attempt("list_kept", lambda: os.listdir(os.path.dirname(kept)))
attempt("plant_kept", lambda: open(planted, "w").write("planted"))
attempt("read_tokens", lambda: open(tokens).read())
attempt("read_approvals", lambda: open(approvals).read())
attempt("write_approvals", lambda: open(approvals, "a").write('{"planted": true}'))
attempt("read_audit", lambda: open(audit).read())
attempt("write_audit", lambda: open(audit, "a").write("forged line"))
attempt("read_sessions", lambda: open(sessions, "rb").read().decode("latin-1"))
attempt("read_trust", lambda: open(trust).read())
attempt("memfd", lambda: os.memfd_create("hoard"))
attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect(control))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9)))
"#;

/// A work folder whose workspace root holds everything, the host's state included.
struct Work {
    dir: tempfile::TempDir,
    plugins: PluginDir,
}

impl Work {
    fn new(workspace_extra: &str, plugins: &[&str]) -> Work {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::write(root.join("config.toml"), "profiles_dir = \"profiles\"\n").expect("cfg");
        let coder = root.join("profiles").join("coder");
        std::fs::create_dir_all(&coder).expect("profile");
        // The root is the whole work folder: the state folder is beneath it.
        std::fs::write(
            coder.join("config.toml"),
            format!("[workspace]\nroots = [\"../..\"]\n{workspace_extra}"),
        )
        .expect("profile config");
        let outputs = root.join("state/toolhost/profiles/coder/outputs");
        std::fs::create_dir_all(&outputs).expect("outputs");
        std::fs::write(outputs.join("o-secret.json"), KEPT).expect("kept");
        std::fs::write(root.join("state/toolhost/tokens.json"), TOKENS).expect("tokens");
        for file in STATE_FILES {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().expect("a folder")).expect("state folder");
            let content = if file == AUDIT { "" } else { STATE };
            std::fs::write(path, content).expect("state file");
        }
        std::fs::create_dir_all(root.join("proj")).expect("proj");
        std::fs::write(root.join("proj/hostile.py"), HOSTILE).expect("script");
        std::fs::write(root.join("outside-fd7"), "").expect("fd target");
        Work {
            dir,
            plugins: PluginDir::with(plugins),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The file outside the roots the host has open on descriptor 7 (its real path).
    fn outside_fd7(&self) -> PathBuf {
        std::fs::canonicalize(self.path("outside-fd7")).expect("fd 7 target")
    }

    fn kept(&self) -> PathBuf {
        self.path("state/toolhost/profiles/coder/outputs/o-secret.json")
    }

    fn hostile_args(&self, control: &Path) -> Value {
        json!({
            "program": "python3",
            "args": [
                self.path("proj/hostile.py"),
                self.kept(),
                self.path("state/toolhost/tokens.json"),
                control,
                self.path("state/toolhost/profiles/coder/outputs/o-planted.json"),
                self.outside_fd7(),
                self.path(STATE_FILES[0]),
                self.path(STATE_FILES[1]),
                self.path(STATE_FILES[2]),
                self.path(STATE_FILES[3]),
            ],
            "cwd": self.path("proj"),
        })
    }

    /// `toolhost` as the host's user (`as_user`: a plain user), with the work folder's
    /// config and state.
    fn toolhost(&self, as_user: Option<&OtherUser>) -> Command {
        let mut cmd = match as_user {
            Some(user) => {
                let mut cmd = user.command(env!("CARGO_BIN_EXE_toolhost"));
                cmd.env("HOME", self.dir.path());
                cmd
            }
            None => toolhost_command(),
        };
        cmd.arg("--config")
            .arg(self.path("config.toml"))
            .env("XDG_STATE_HOME", self.path("state"))
            .env("XDG_CONFIG_HOME", self.path("config-home"));
        cmd
    }

    /// `toolhost call TOOL ARGS --profile coder --yes EXTRA`, with a file outside the
    /// roots open on descriptor 7 (not close-on-exec), as an inherited descriptor is.
    fn call_with_fd7(
        &self,
        as_user: Option<&OtherUser>,
        tool: &str,
        args: &Value,
        extra: &[&str],
    ) -> Output {
        let target = std::fs::OpenOptions::new()
            .append(true)
            .open(self.path("outside-fd7"))
            .expect("open the fd 7 target");
        let raw = std::os::fd::AsRawFd::as_raw_fd(&target);
        let mut cmd = self.toolhost(as_user);
        cmd.args([
            "call",
            tool,
            &args.to_string(),
            "--profile",
            "coder",
            "--yes",
        ])
        .arg("--plugins")
        .arg(self.plugins.path())
        .args(extra)
        .stdin(Stdio::null());
        // SAFETY: dup2 is async-signal-safe; the new descriptor lacks close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, 7) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().expect("run toolhost call");
        drop(target);
        out
    }

    fn give_to(&self, user: &OtherUser) {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", user.uid, user.gid))
            .arg(self.dir.path())
            .status()
            .expect("chown");
        assert!(status.success());
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The line `name: ...` of the hostile program's output.
fn line<'a>(said: &'a str, name: &str) -> &'a str {
    let prefix = format!("{name}: ");
    said.lines()
        .find_map(|l| l.trim_start_matches(['"', ' ']).strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `{name}` line in:\n{said}"))
}

/// The attempt `name` was refused with an error that holds one of `why` (the kernel's
/// word for the refusal, not a missing file).
fn refused(said: &str, name: &str, why: &[&str], context: &str) {
    let l = line(said, name);
    assert!(
        l.starts_with("refused") && why.iter().any(|w| l.contains(w)),
        "{context}: {name} was not refused as expected ({why:?}): {l}\n{said}"
    );
}

const DENIED: &[&str] = &["Permission", "not permitted"];

/// Runs `check` as the tests' own user (root in CI) and, where one can be made, as a
/// throwaway plain user, with words naming which; nothing without Landlock or python3.
fn as_each_user(test: &str, mut check: impl FnMut(Option<&OtherUser>, &str)) {
    if !sandbox_or_skip(test) {
        return;
    }
    check(None, "the tests' user");
    if let Some(other) = OtherUser::create(test) {
        check(Some(&other), "a plain user");
    }
}

fn sandbox_or_skip(test: &str) -> bool {
    if toolhost::sandbox_abi().is_none() {
        println!("skipped {test}: this kernel has no Landlock");
        return false;
    }
    if Command::new("python3").arg("-c").arg("1").status().is_err() {
        println!("skipped {test}: python3 is not installed");
        return false;
    }
    true
}

/// Every attack of the hostile program is refused, and nothing reached outside.
fn assert_all_refused(work: &Work, out: &Output, context: &str) {
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    refused(&said, "fd7", &["Bad file descriptor"], context);
    for name in [
        "read_kept",
        "plant_kept",
        "read_tokens",
        "read_approvals",
        "write_approvals",
        "read_audit",
        "write_audit",
        "read_sessions",
        "read_trust",
        "memfd",
        "unix",
        "udp",
    ] {
        refused(&said, name, DENIED, context);
    }
    assert!(
        !said.contains(KEPT) && !said.contains(TOKENS) && !said.contains(STATE),
        "{context}: {said}"
    );
    for file in STATE_FILES {
        let now = std::fs::read_to_string(work.path(file)).unwrap_or_default();
        if file == AUDIT {
            assert!(!now.contains("forged line"), "{context}: {now}");
        } else {
            assert_eq!(now, STATE, "{context}: the command changed {file}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(work.path("outside-fd7")).expect("fd 7 target"),
        "",
        "{context}: the command wrote through an inherited descriptor"
    );
    assert!(
        !work
            .path("state/toolhost/profiles/coder/outputs/o-planted.json")
            .exists(),
        "{context}: the command planted a kept output"
    );
}

#[test]
fn a_hostile_command_reaches_no_inherited_descriptor_state_memfd_or_socket() {
    as_each_user(
        "a_hostile_command_reaches_no_inherited_descriptor_state_memfd_or_socket",
        |user, who| {
            let work = Work::new("", &["toolhost_workspace"]);
            if let Some(u) = user {
                work.give_to(u);
            }
            for extra in [&[][..], &["--isolate"][..]] {
                let context = format!("{who} {extra:?}");
                let args = work.hostile_args(&work.path("nothing.sock"));
                let out = work.call_with_fd7(user, "run_command", &args, extra);
                assert!(
                    out.status.success(),
                    "{context}: {}{}",
                    text(&out.stdout),
                    text(&out.stderr)
                );
                assert_all_refused(&work, &out, &context);
            }
        },
    );
}

/// `toolhost serve --control SOCKET --profile coder`, as `user`, started.
fn serve(work: &Work, user: Option<&OtherUser>, socket: &Path) -> std::process::Child {
    let mut cmd = work.toolhost(user);
    cmd.args(["serve", "--no-watch", "--plugins"])
        .arg(work.plugins.path())
        .arg("--control")
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = cmd.spawn().expect("serve");
    wait_for_socket(socket);
    child
}

/// Connects to the control socket and prints the host's first line; the daemon variant
/// double-forks, leaves the session and clears its environment first, and writes what it
/// got to a file.
const KNOCK: &str = r#"
import os, socket, sys
control, out, mode = sys.argv[1:4]
def knock():
    s = socket.socket(socket.AF_UNIX)
    s.connect(control)
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"status","params":{}}\n')
    return s.makefile().readline()
if mode == "direct":
    print("knock: " + knock())
elif mode == "daemon":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, sys.argv[0], control, out, "child"], {})
        os._exit(0)
    os.wait()
    # The command stays until the daemon has knocked (60 s at most): when it ends, what
    # it left that still carries its tag goes with it, and a daemon slow to exec (on a
    # loaded machine) carries it still.
    import time
    for _ in range(600):
        if os.path.exists(out):
            break
        time.sleep(0.1)
else:
    try:
        got = knock()
    except Exception as e:
        got = f"failed to knock: {e}"
    with open(out + ".tmp", "w") as f:
        f.write(got)
    os.rename(out + ".tmp", out)
"#;

#[test]
fn a_command_allowed_unix_sockets_is_refused_by_the_control_socket_however_it_forks() {
    as_each_user(
        "a_command_allowed_unix_sockets_is_refused_by_the_control_socket_however_it_forks",
        |user, context| {
            let work = Work::new("allow_unix_sockets = true\n", &["toolhost_workspace"]);
            std::fs::write(work.path("proj/knock.py"), KNOCK).expect("script");
            // Runs without asking: nobody is there to answer through the control socket.
            std::fs::write(
            work.path("config.toml"),
            "profiles_dir = \"profiles\"\n\n[tools.run_command]\nrisk = \"read\"\nallow_lower = true\n",
        )
        .expect("config");
            if let Some(u) = user {
                work.give_to(u);
            }
            let socket = work.path("control.sock");
            let mut host = serve(&work, user, &socket);
            let control_call = |mode: &str, out: &Path| {
                let args = json!({
                    "program": "python3",
                    "args": [work.path("proj/knock.py"), &socket, out, mode],
                    "cwd": work.path("proj"),
                });
                let mut cmd = work.toolhost(user);
                cmd.args([
                    "call",
                    "run_command",
                    &args.to_string(),
                    "--profile",
                    "coder",
                    "--control",
                ])
                .arg(&socket)
                .stdin(Stdio::null())
                .output()
                .expect("call --control")
            };
            let direct = control_call("direct", &work.path("unused"));
            let said = format!("{}{}", text(&direct.stdout), text(&direct.stderr));
            assert!(
                said.contains("processes toolhost started")
                    && said.contains("may not use the control socket"),
                "{context}: a command reached the control socket:\n{said}"
            );
            let daemon_out = work.path("proj/daemon-knock.txt");
            let forked = control_call("daemon", &daemon_out);
            assert!(
                forked.status.success(),
                "{context}: {}",
                text(&forked.stderr)
            );
            wait_until("the double-forked daemon's knock", || daemon_out.exists());
            let got = std::fs::read_to_string(&daemon_out).expect("daemon's answer");
            assert!(
                got.contains("processes toolhost started"),
                "{context}: a double-forked, setsid, env -i daemon reached the control socket: {got}"
            );
            let _ = Command::new("kill").arg(host.id().to_string()).status();
            wait_exit(&mut host, "the host");
        },
    );
}

/// The words of the refusal of a process another toolhost confined.
const CONFINED: &str = "processes a toolhost confined";

#[test]
fn another_hosts_commands_are_refused_by_the_control_socket_however_they_fork() {
    as_each_user(
        "another_hosts_commands_are_refused_by_the_control_socket_however_they_fork",
        |user, context| {
            let work = Work::new("allow_unix_sockets = true\n", &["toolhost_workspace"]);
            std::fs::write(work.path("proj/knock.py"), KNOCK).expect("script");
            std::fs::write(
                work.path("config.toml"),
                "profiles_dir = \"profiles\"\n\n[tools.run_command]\nrisk = \"read\"\n\
                 allow_lower = true\n\n[isolation]\nunix_sockets = [\"workspace\"]\n",
            )
            .expect("config");
            // The second host keeps its state apart: nothing but the socket joins them.
            std::fs::create_dir_all(work.path("state-other")).expect("other state");
            if let Some(u) = user {
                work.give_to(u);
            }
            let socket = work.path("control.sock");
            let mut host = serve(&work, user, &socket);
            // The user at a terminal is served.
            let status = work
                .toolhost(user)
                .args(["status", "--json", "--control"])
                .arg(&socket)
                .output()
                .expect("status");
            assert!(
                status.status.success(),
                "{context}: the owner was refused: {}",
                text(&status.stderr)
            );
            for isolate in [false, true] {
                let how = if isolate { "--isolate" } else { "in process" };
                // A one-shot host of its own (no --control): its command is no
                // descendant of the serving host.
                let knock = |mode: &str, out: &Path| {
                    let args = json!({
                        "program": "python3",
                        "args": [work.path("proj/knock.py"), &socket, out, mode],
                        "cwd": work.path("proj"),
                    });
                    let mut cmd = work.toolhost(user);
                    cmd.env("XDG_STATE_HOME", work.path("state-other"))
                        .args([
                            "call",
                            "run_command",
                            &args.to_string(),
                            "--profile",
                            "coder",
                        ])
                        .arg("--plugins")
                        .arg(work.plugins.path())
                        .args(if isolate { &["--isolate"][..] } else { &[][..] })
                        .stdin(Stdio::null());
                    cmd.output().expect("toolhost call")
                };
                let direct = knock("direct", &work.path("unused"));
                let said = format!("{}{}", text(&direct.stdout), text(&direct.stderr));
                assert!(
                    said.contains("knock: ") && said.contains(CONFINED),
                    "{context}, {how}: another host's command reached the control socket:\n{said}"
                );
                let daemon_out = work.path(&format!("proj/daemon-knock-{isolate}.txt"));
                let forked = knock("daemon", &daemon_out);
                assert!(
                    forked.status.success(),
                    "{context}, {how}: {}{}",
                    text(&forked.stdout),
                    text(&forked.stderr)
                );
                wait_until("the double-forked daemon's knock", || daemon_out.exists());
                let got = std::fs::read_to_string(&daemon_out).expect("daemon's answer");
                assert!(
                    got.contains(CONFINED),
                    "{context}, {how}: another host's double-forked, setsid, env -i daemon \
                     reached the control socket: {got}"
                );
            }
            let _ = Command::new("kill").arg(host.id().to_string()).status();
            wait_exit(&mut host, "the host");
        },
    );
}

/// A crate whose build script and whose test try the doors a command may not reach,
/// each writing its attempts to `report-build.txt` and `report-test.txt` in the crate.
fn hostile_crate(dir: &Path, kept: &Path, other_kept: &Path, control: &Path, outside: &Path) {
    std::fs::create_dir_all(dir.join("src")).expect("crate");
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"hostile-build\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .expect("manifest");
    let attempts = format!(
        r#"
fn report(file: &str, name: &str, r: Result<String, std::io::Error>) {{
    use std::io::Write;
    let line = match r {{
        Ok(v) => format!("{{name}}: ok {{v}}\n"),
        Err(e) => format!("{{name}}: refused {{e}}\n"),
    }};
    let path = format!("{{}}/{{file}}", env!("CARGO_MANIFEST_DIR"));
    let mut f = std::fs::OpenOptions::new().create(true).append(true)
        .open(path).expect("report");
    f.write_all(line.as_bytes()).expect("report");
}}
unsafe extern "C" {{
    fn memfd_create(name: *const std::ffi::c_char, flags: std::ffi::c_uint) -> std::ffi::c_int;
}}
pub fn attempts(file: &str) {{
    use std::io::Write;
    use std::os::fd::FromRawFd;
    report(file, "fd7", (|| {{
        for entry in std::fs::read_dir("/proc/self/fd")? {{
            let entry = entry?;
            let Ok(target) = std::fs::read_link(entry.path()) else {{ continue }};
            if target == std::path::Path::new({outside:?}) {{
                let fd: i32 = entry.file_name().to_string_lossy().parse().unwrap_or(-1);
                let mut f = unsafe {{ std::fs::File::from_raw_fd(fd) }};
                f.write_all(b"escaped\n")?;
                std::mem::forget(f);
                return Ok(format!("descriptor {{fd}}"));
            }}
        }}
        Err(std::io::Error::from_raw_os_error(9))
    }})());
    report(file, "read_kept", std::fs::read_to_string({kept:?}));
    report(file, "read_other_kept", std::fs::read_to_string({other_kept:?}));
    report(file, "memfd", {{
        let fd = unsafe {{ memfd_create(c"hoard".as_ptr(), 0) }};
        if fd < 0 {{ Err(std::io::Error::last_os_error()) }} else {{ Ok(format!("memfd {{fd}}")) }}
    }});
    report(file, "unix", std::os::unix::net::UnixStream::connect({control:?}).map(|_| String::new()));
    report(file, "tcp", std::net::TcpStream::connect("127.0.0.1:9").map(|_| String::new()));
}}
"#
    );
    std::fs::write(
        dir.join("src/lib.rs"),
        format!(
            "{attempts}\n#[cfg(test)]\nmod tests {{\n    #[test]\n    fn hostile() {{\n        super::attempts(\"report-test.txt\");\n    }}\n}}\n"
        ),
    )
    .expect("lib");
    std::fs::write(
        dir.join("build.rs"),
        format!("{attempts}\nfn main() {{\n    attempts(\"report-build.txt\");\n}}\n"),
    )
    .expect("build.rs");
}

#[test]
fn a_hostile_crates_build_script_and_test_are_confined_like_a_command() {
    if !sandbox_or_skip("a_hostile_crates_build_script_and_test_are_confined_like_a_command") {
        return;
    }
    // cargo and its toolchain live under root's home here, which a plain user cannot
    // reach: this runs as the tests' own user only (the commands test covers both users).
    println!(
        "a_hostile_crates_build_script_and_test_are_confined_like_a_command: as this user \
         only (the toolchain under /root is not a plain user's to run)"
    );
    let work = Work::new("", &["toolhost_rust"]);
    let other_kept = work.path("state/toolhost/profiles/other/outputs/o-other.json");
    std::fs::create_dir_all(other_kept.parent().expect("folder")).expect("other outputs");
    std::fs::write(&other_kept, KEPT).expect("other kept");
    // A live socket for the crate to try (a host's control socket).
    let socket = work.path("control.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let krate = work.path("proj/crate");
    hostile_crate(
        &krate,
        &work.kept(),
        &other_kept,
        &socket,
        &work.outside_fd7(),
    );
    for (tool, report) in [
        ("cargo_check", "report-build.txt"),
        ("cargo_test", "report-test.txt"),
    ] {
        let out = work.call_with_fd7(
            None,
            tool,
            &json!({}),
            &["--workspace", &krate.display().to_string()],
        );
        let report = std::fs::read_to_string(krate.join(report)).unwrap_or_else(|e| {
            panic!(
                "{tool}: the crate wrote no {report} ({e}): {}{}",
                text(&out.stdout),
                text(&out.stderr)
            )
        });
        let said = format!("{report}{}{}", text(&out.stdout), text(&out.stderr));
        refused(&said, "fd7", &["Bad file descriptor"], tool);
        for name in ["read_kept", "read_other_kept", "memfd", "unix", "tcp"] {
            refused(&said, name, DENIED, tool);
        }
        assert!(!said.contains(KEPT), "{tool}: {said}");
        assert_eq!(
            std::fs::read_to_string(work.path("outside-fd7")).expect("fd 7"),
            "",
            "{tool}"
        );
    }
}
