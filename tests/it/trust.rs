//! The plugin door: strict permissions, trust modes (pinned, signed), a loader that looks
//! before it copies, careful config reads, and rescans that never unload on an I/O error.
//! Through the real binary, with a second real user where it matters. Every child
//! process is waited for with a bound (killed and failed past it), never a fixed sleep.

use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{OtherUser, PluginDir, echo_build, eventually, so, toolhost_command};

const BOUND: Duration = Duration::from_secs(10);

/// A sandbox for one test: a state home and a `TMPDIR` of its own, and a config file.
struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        Sandbox {
            root: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    fn tmpdir(&self) -> PathBuf {
        let t = self.path("tmp");
        fs::create_dir_all(&t).expect("tmp");
        t
    }

    fn trust_file(&self) -> PathBuf {
        self.path("state").join("trust.json")
    }

    /// Writes the config with `body` and the trust file's place.
    fn config(&self, body: &str) -> PathBuf {
        let file = self.path("config.toml");
        let text = format!(
            "{body}\n[trust]\nfile = \"{}\"\n",
            self.trust_file().display()
        );
        // `[trust]` keys in `body` go in the same table: put them first.
        let text = if body.contains("[trust]") {
            format!(
                "{}\nfile = \"{}\"\n",
                body.trim_end(),
                self.trust_file().display()
            )
        } else {
            text
        };
        fs::write(&file, text).expect("write config");
        file
    }

    /// `toolhost --config CONFIG ARGS`, with this sandbox's state home and TMPDIR.
    fn command(&self, config: &Path, args: &[&str]) -> Command {
        let mut cmd = toolhost_command();
        cmd.arg("--config")
            .arg(config)
            .args(args)
            .env("XDG_STATE_HOME", self.path("state-home"))
            .env("TMPDIR", self.tmpdir());
        cmd
    }

    /// Runs `args`, bounded.
    fn run(&self, config: &Path, args: &[&str]) -> Output {
        run_bounded(self.command(config, args))
    }

    /// What is left in this sandbox's TMPDIR (recursively).
    fn leftovers(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.tmpdir()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).expect("list tmp") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p.clone());
                }
                out.push(p);
            }
        }
        out
    }
}

/// Runs a command to its end, killing it and failing the test past [`BOUND`].
fn run_bounded(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolhost");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{cmd:?} did not finish within {BOUND:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The plugin files `toolhost list --json` listed tools from.
fn listed_files(out: &Output) -> Vec<String> {
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "list --json: {e}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut files: Vec<String> = tools
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|t| t["file"].as_str())
        .filter_map(|f| Path::new(f).file_name()?.to_str().map(str::to_owned))
        .collect();
    files.sort();
    files.dedup();
    files
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A line of `stderr` that names `file` (a path's last part), or a failure.
fn line_naming<'a>(stderr: &'a str, file: &str) -> &'a str {
    stderr
        .lines()
        .find(|l| l.contains(file))
        .unwrap_or_else(|| panic!("no message names {file}: {stderr}"))
}

#[test]
fn files_others_can_change_are_refused_with_owner_mode_and_fix_while_good_plugins_load() {
    let sandbox = Sandbox::new();
    // A world-writable folder: everything in it is refused.
    let open_folder = PluginDir::with(&["hello_tools"]);
    chmod(open_folder.dir.path(), 0o777);
    // A private folder with a good plugin, a group-writable file, a file owned by
    // another user and a symlink into a world-writable folder (like /tmp).
    let dir = PluginDir::with(&["toolhost_utils", "fixture_echo"]);
    chmod(&dir.path().join("libfixture_echo.so"), 0o775);
    let shared = tempfile::tempdir().expect("temp dir");
    chmod(shared.path(), 0o1777);
    let planted = shared.path().join("libplanted.so");
    fs::copy(so("toolhost_clarify"), &planted).expect("copy");
    std::os::unix::fs::symlink(&planted, dir.path().join("libtoolhost_clarify.so"))
        .expect("symlink");
    let other = OtherUser::create("files_others_can_change_are_refused");
    if let Some(user) = &other {
        let theirs = dir.install("toolhost_memory");
        user.chown(&theirs);
        // What the world-writable folder invites: another user plants a plugin in it.
        let bait = shared.path().join("libsearch.so");
        fs::copy(so("toolhost_session_search"), &bait).expect("copy");
        let planted = user
            .command("cp")
            .arg(&bait)
            .arg(open_folder.path().join("libsearch.so"))
            .status()
            .expect("run cp as the other user");
        assert!(planted.success(), "the other user could not plant the file");
    }

    let config = sandbox.config("");
    let args = |cfg: &Path| {
        let mut a = vec!["list".to_owned(), "--json".to_owned()];
        for d in [open_folder.path(), dir.path()] {
            a.push("--plugins".to_owned());
            a.push(d.display().to_string());
        }
        sandbox.run(cfg, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = args(&config);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(listed_files(&out), ["libtoolhost_utils.so"], "{stderr}");

    let folder = line_naming(&stderr, "libhello_tools.so");
    let shown = open_folder.path().display().to_string();
    assert!(
        folder.contains(&format!("its directory {shown}")),
        "{folder}"
    );
    assert!(folder.contains("writable by group and others"), "{folder}");
    assert!(
        folder.contains("mode 0777") && folder.contains("owner root"),
        "{folder}"
    );
    assert!(
        folder.contains(&format!("`chmod go-w {shown}`")),
        "{folder}"
    );

    let group = line_naming(&stderr, "libfixture_echo.so");
    assert!(group.contains("writable by its group"), "{group}");
    assert!(group.contains("mode 0775"), "{group}");
    assert!(group.contains("`chmod go-w "), "{group}");

    let link = line_naming(&stderr, "libtoolhost_clarify.so");
    assert!(link.contains("the target's directory"), "{link}");
    assert!(link.contains("mode 1777"), "{link}");

    if let Some(user) = &other {
        let theirs = line_naming(&stderr, "libtoolhost_memory.so");
        assert!(
            theirs.contains("owned by a user other than root"),
            "{theirs}"
        );
        assert!(
            theirs.contains(&format!("owner {} (uid {})", user.name, user.uid)),
            "{theirs}"
        );
        assert!(theirs.contains("`chown root "), "{theirs}");
        let planted = line_naming(&stderr, "libsearch.so");
        assert!(
            planted.contains("writable by group and others"),
            "{planted}"
        );
    }

    // Development: everything loads, with a warning.
    let relaxed = sandbox.config("[plugins]\nstrict_permissions = false\n");
    let out = args(&relaxed);
    let (_, stderr) = text(&out);
    let mut expected = vec![
        "libfixture_echo.so",
        "libhello_tools.so",
        "libtoolhost_clarify.so",
        "libtoolhost_utils.so",
    ];
    if other.is_some() {
        expected.push("libtoolhost_memory.so");
        expected.push("libsearch.so");
        expected.sort();
    }
    assert_eq!(listed_files(&out), expected, "{stderr}");
    assert!(stderr.contains("strict_permissions = false"), "{stderr}");
}

#[test]
fn pinned_mode_refuses_an_unpinned_file_and_loads_it_after_toolhost_trust() {
    let sandbox = Sandbox::new();
    let dir = PluginDir::with(&["hello_tools"]);
    let file = dir.path().join("libhello_tools.so");
    let config = sandbox.config("[trust]\nmode = \"pinned\"\n");
    let list = |cfg: &Path| {
        sandbox.run(
            cfg,
            &[
                "list",
                "--json",
                "--plugins",
                &dir.path().display().to_string(),
            ],
        )
    };
    let out = list(&config);
    let (_, stderr) = text(&out);
    assert!(listed_files(&out).is_empty(), "{stderr}");
    let refused = line_naming(&stderr, "libhello_tools.so");
    assert!(
        refused.contains(&format!(
            "not trusted: check it, then run `toolhost trust {}`",
            file.display()
        )),
        "{refused}"
    );
    // `check` refuses it before loading, with the same reason.
    let check = sandbox.run(&config, &["check", &file.display().to_string()]);
    let (stdout, stderr) = text(&check);
    assert!(!check.status.success());
    assert!(stderr.contains("not trusted"), "{stderr}");
    assert!(!stdout.contains("loading it"), "not loaded: {stdout}");

    let pin = sandbox.run(&config, &["trust", &file.display().to_string()]);
    let (stdout, stderr) = text(&pin);
    assert!(pin.status.success(), "{stderr}");
    assert!(stdout.contains("plugin hello"), "{stdout}");
    let mode = fs::metadata(sandbox.trust_file())
        .expect("trust file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let pins: Value =
        serde_json::from_slice(&fs::read(sandbox.trust_file()).expect("read")).expect("JSON");
    assert_eq!(pins["pins"][0]["plugin"], "hello");
    assert_eq!(pins["pins"][0]["sha256"].as_str().map(str::len), Some(64));

    let out = list(&config);
    assert_eq!(
        listed_files(&out),
        ["libhello_tools.so"],
        "{}",
        text(&out).1
    );
    let shown = sandbox.run(&config, &["trust", "--list"]);
    assert!(text(&shown).0.contains("hello"), "{}", text(&shown).0);

    // A changed file is not the pinned one.
    let mut bytes = fs::read(&file).expect("read");
    bytes.extend_from_slice(b"appended");
    let tmp = dir.path().join(".tmp");
    fs::write(&tmp, &bytes).expect("write");
    fs::rename(&tmp, &file).expect("rename");
    let out = list(&config);
    assert!(listed_files(&out).is_empty(), "{}", text(&out).1);

    let removed = sandbox.run(
        &config,
        &[
            "trust",
            "--remove",
            pins["pins"][0]["sha256"].as_str().expect("sha"),
        ],
    );
    assert!(removed.status.success(), "{}", text(&removed).1);
    let shown = sandbox.run(&config, &["trust", "--list"]);
    assert!(
        text(&shown).0.contains("no pinned files"),
        "{}",
        text(&shown).0
    );
}

/// A minisign key pair made for the test, and signatures by it.
struct Publisher {
    pk: minisign::PublicKey,
    sk: minisign::SecretKey,
}

impl Publisher {
    fn new() -> Publisher {
        let minisign::KeyPair { pk, sk } =
            minisign::KeyPair::generate_unencrypted_keypair().expect("key pair");
        Publisher { pk, sk }
    }

    fn sign(&self, bytes: &[u8], signature: &Path) {
        let sig = minisign::sign(Some(&self.pk), &self.sk, bytes, None, None).expect("sign");
        fs::write(signature, sig.to_string()).expect("write signature");
    }
}

fn minisig(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".minisig");
    PathBuf::from(s)
}

#[test]
fn signed_mode_accepts_a_listed_publishers_signature_and_refuses_wrong_or_missing_ones() {
    let sandbox = Sandbox::new();
    let (listed, stranger) = (Publisher::new(), Publisher::new());
    let dir = PluginDir::with(&[
        "hello_tools",
        "toolhost_utils",
        "fixture_echo",
        "toolhost_clarify",
    ]);
    let path = |lib: &str| dir.path().join(format!("lib{lib}.so"));
    let read = |p: &Path| fs::read(p).expect("read");
    listed.sign(&read(&path("hello_tools")), &minisig(&path("hello_tools")));
    stranger.sign(
        &read(&path("toolhost_utils")),
        &minisig(&path("toolhost_utils")),
    );
    // A listed key, but the signature is of other bytes.
    listed.sign(&read(&path("hello_tools")), &minisig(&path("fixture_echo")));
    // toolhost_clarify has no signature.
    let config = sandbox.config(&format!(
        "[trust]\nmode = \"signed\"\npublishers = [{{ name = \"acme\", key = \"{}\" }}]\n",
        listed.pk.to_base64()
    ));
    let list = || {
        sandbox.run(
            &config,
            &[
                "list",
                "--json",
                "--plugins",
                &dir.path().display().to_string(),
            ],
        )
    };
    let out = list();
    let (_, stderr) = text(&out);
    assert_eq!(listed_files(&out), ["libhello_tools.so"], "{stderr}");
    let wrong_key = line_naming(&stderr, "libtoolhost_utils.so");
    assert!(
        wrong_key.contains("not in [trust] publishers"),
        "{wrong_key}"
    );
    let other_bytes = line_naming(&stderr, "libfixture_echo.so");
    assert!(
        other_bytes.contains("does not match the file's bytes") && other_bytes.contains("acme"),
        "{other_bytes}"
    );
    let missing = line_naming(&stderr, "libtoolhost_clarify.so");
    assert!(missing.contains("there is no signature"), "{missing}");
    assert!(missing.contains("toolhost trust"), "{missing}");

    // A pinned hash is accepted in signed mode too.
    let pin = sandbox.run(
        &config,
        &[
            "trust",
            "--no-load",
            &path("toolhost_clarify").display().to_string(),
        ],
    );
    assert!(pin.status.success(), "{}", text(&pin).1);
    let out = list();
    assert_eq!(
        listed_files(&out),
        ["libhello_tools.so", "libtoolhost_clarify.so"],
        "{}",
        text(&out).1
    );
}

#[test]
fn fifo_dev_zero_directory_and_sparse_files_are_refused_at_once_leaving_nothing_in_tmpdir() {
    let sandbox = Sandbox::new();
    let dir = PluginDir::with(&["hello_tools"]);
    let fifo = dir.path().join("x.so");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.so")).expect("symlink");
    fs::create_dir(dir.path().join("folder.so")).expect("mkdir");
    let sparse = dir.path().join("sparse.so");
    let header = fs::read(so("hello_tools")).expect("read");
    fs::write(&sparse, &header[..4096]).expect("write");
    fs::OpenOptions::new()
        .write(true)
        .open(&sparse)
        .expect("open")
        .set_len(2 << 30)
        .expect("2 GiB sparse");
    let config = sandbox.config("[plugins]\nmax_file_size = 67108864\n");

    for (name, reason) in [
        ("x.so", "not a regular file (it is a FIFO)"),
        ("zero.so", "not a regular file (it is a character device)"),
        ("folder.so", "not a regular file (it is a directory)"),
        (
            "sparse.so",
            "more than [plugins] max_file_size (67108864 bytes)",
        ),
    ] {
        let out = sandbox.run(
            &config,
            &["check", &dir.path().join(name).display().to_string()],
        );
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{name}");
        assert!(stderr.contains(reason), "{name}: {stderr}");
    }
    let out = sandbox.run(
        &config,
        &[
            "list",
            "--json",
            "--plugins",
            &dir.path().display().to_string(),
        ],
    );
    let (_, stderr) = text(&out);
    assert_eq!(listed_files(&out), ["libhello_tools.so"], "{stderr}");
    assert_eq!(stderr.matches("not a regular file").count(), 3, "{stderr}");
    assert!(sandbox.leftovers().is_empty(), "{:?}", sandbox.leftovers());

    // A running host: `reload` comes back at once, and nothing lands in its private dir.
    let socket = sandbox.path("control.sock");
    let mut serve = sandbox.command(&config, &["serve", "--no-watch", "--plugins"]);
    serve
        .arg(dir.path())
        .arg("--control")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = KillOnDrop(serve.spawn().expect("start serve"));
    crate::support::wait_for_socket(&socket);
    let reload = sandbox.run(
        &config,
        &[
            "reload",
            "--json",
            "--control",
            &socket.display().to_string(),
        ],
    );
    let report: Value = serde_json::from_slice(&reload.stdout).expect("reload JSON");
    assert_eq!(
        report["errors"].as_array().map(Vec::len),
        Some(4),
        "{report}"
    );
    let private: Vec<PathBuf> = sandbox
        .leftovers()
        .into_iter()
        .filter(|p| p.is_file())
        .collect();
    assert!(
        private.is_empty(),
        "files in the private copy directory: {private:?}"
    );
    child.stop();
}

/// Kills the child when dropped (a failed assertion must not leave a host running).
struct KillOnDrop(std::process::Child);

impl KillOnDrop {
    fn stop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        eventually(BOUND, "serve stopping on SIGTERM", || {
            self.0.try_wait().expect("wait")
        });
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One control-socket connection, kept open (so it needs no new descriptor in the host).
struct Control {
    stream: BufReader<UnixStream>,
    next: u64,
    /// The host's log, shown when a wait times out.
    log: Option<PathBuf>,
}

impl Control {
    fn from_stream(stream: UnixStream) -> Control {
        stream.set_read_timeout(Some(BOUND)).expect("timeout");
        Control {
            stream: BufReader::new(stream),
            next: 1,
            log: None,
        }
    }

    fn ask(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let line = json!({"id": self.next, "method": method, "params": params}).to_string();
        self.stream
            .get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .expect("send");
        let mut answer = String::new();
        self.stream
            .read_line(&mut answer)
            .expect("answer within the bound");
        let answer: Value = serde_json::from_str(&answer).expect("one JSON line");
        answer["result"].clone()
    }

    fn poll(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let status = self.ask("status", json!({}));
            if done(&status) {
                return status;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let log = self.log.as_ref().and_then(|l| fs::read_to_string(l).ok());
                panic!("timed out waiting for {what}: {status}\nlog: {log:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The lowest descriptor number `pid` has free: with the soft limit there, every new
/// descriptor fails with EMFILE.
fn lowest_free_fd(pid: u32) -> u64 {
    let used: std::collections::BTreeSet<u64> = fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("list fds")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|n| !used.contains(n)).unwrap_or(0)
}

fn set_nofile(pid: u32, soft: u64, hard: u64) {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: `limit` is a valid rlimit; a null old-limit pointer is allowed.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn a_rescan_that_hits_emfile_keeps_every_plugin_serving_and_retries_until_it_reads() {
    let sandbox = Sandbox::new();
    let dir = PluginDir::with(&["hello_tools"]);
    let echo = dir.path().join("libecho.so");
    fs::copy(echo_build("v1"), &echo).expect("install");
    let config = sandbox.config("");
    let socket = sandbox.path("control.sock");
    let log = sandbox.path("serve.log");
    let mut serve = sandbox.command(&config, &["serve", "--plugins"]);
    serve
        .arg(dir.path())
        .arg("--control")
        .arg(&socket)
        .env("TOOLHOST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).expect("log"));
    let mut child = KillOnDrop(serve.spawn().expect("start serve"));
    let pid = child.0.id();
    // The only connection: a probe that came and went could leave a descriptor gap below
    // the limit set further down, which the rescan would then get.
    let mut control = Control::from_stream(eventually(BOUND, "serve answering", || {
        UnixStream::connect(&socket).ok()
    }));
    control.log = Some(log.clone());
    let status = control.poll("two plugins", |s| {
        s["plugins"].as_array().is_some_and(|p| p.len() == 2)
    });
    assert!(
        status["load_errors"].as_array().is_some_and(Vec::is_empty),
        "{status}"
    );

    // Out of descriptors: the next one the host opens fails with EMFILE.
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `old` is valid for writes; a null new-limit pointer only reads.
    assert_eq!(
        unsafe {
            libc::prlimit(
                pid as libc::pid_t,
                libc::RLIMIT_NOFILE,
                std::ptr::null(),
                &mut old,
            )
        },
        0
    );
    // Until the lowest free descriptor is at or above the limit (a descriptor the host
    // was closing just then would leave a gap below it).
    let mut free = lowest_free_fd(pid);
    loop {
        set_nofile(pid, free, old.rlim_max);
        let now = lowest_free_fd(pid);
        if now >= free {
            break;
        }
        free = now;
    }
    // A file event makes the watcher rescan; the directory cannot be read now.
    fs::File::options()
        .write(true)
        .open(&echo)
        .expect("open")
        .set_modified(std::time::SystemTime::now())
        .expect("touch");
    let dir_name = dir.path().display().to_string();
    let status = control.poll("the directory error in status", |s| {
        s["load_errors"].as_array().is_some_and(|errors| {
            errors.iter().any(|e| {
                e["file"] == dir_name.as_str()
                    && e["error"]
                        .as_str()
                        .is_some_and(|m| m.contains("os error 24"))
            })
        })
    });
    let plugins = status["plugins"].as_array().expect("plugins");
    assert_eq!(plugins.len(), 2, "nothing was unloaded: {status}");
    assert!(
        plugins.iter().all(|p| p["last_error"]
            .as_str()
            .is_some_and(|m| m.contains("keep serving"))),
        "{status}"
    );
    let call = control.ask("call", json!({"tool": "build_version", "arguments": {}}));
    assert_eq!(call["output"], "v1", "{call}");

    // Descriptors again: the backoff retry reads the directory without another event.
    set_nofile(pid, old.rlim_cur, old.rlim_max);
    let status = control.poll("the error to clear", |s| {
        s["load_errors"].as_array().is_some_and(Vec::is_empty)
    });
    assert_eq!(
        status["plugins"].as_array().map(Vec::len),
        Some(2),
        "{status}"
    );
    let out = run_bounded({
        let mut c = sandbox.command(
            &config,
            &[
                "call",
                "build_version",
                "{}",
                "--control",
                &socket.display().to_string(),
            ],
        );
        c.env_remove("TOOLHOST_LOG");
        c
    });
    assert_eq!(text(&out).0.trim(), "v1", "{}", text(&out).1);
    child.stop();
    let logged = fs::read_to_string(&log).expect("log");
    assert!(
        logged.contains("could not read the plugin directory"),
        "{logged}"
    );
    assert!(!logged.contains("plugin removed"), "{logged}");
}

#[test]
fn a_config_file_that_is_dev_zero_or_a_fifo_fails_at_once_naming_it() {
    let sandbox = Sandbox::new();
    let fifo = sandbox.path("config.toml");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (config, kind) in [
        (Path::new("/dev/zero"), "a character device"),
        (fifo.as_path(), "a FIFO"),
    ] {
        let out = sandbox.run(config, &["list"]);
        let (_, stderr) = text(&out);
        assert!(!out.status.success());
        assert!(
            stderr.contains(&format!("config file {}", config.display()))
                && stderr.contains(kind)
                && stderr.contains("regular file of at most 1 MiB"),
            "{stderr}"
        );
    }
    // A profile's config.toml is read the same way.
    let real = sandbox.path("host.toml");
    fs::create_dir_all(sandbox.path("profiles/default")).expect("mkdir");
    fs::write(&real, "profiles_dir = \"profiles\"\n").expect("write");
    let profile = sandbox.path("profiles/default/config.toml");
    std::os::unix::fs::symlink("/dev/zero", &profile).expect("symlink");
    let empty = sandbox.path("empty");
    fs::create_dir_all(&empty).expect("mkdir");
    let out = sandbox.run(&real, &["list", "--plugins", &empty.display().to_string()]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains(&profile.display().to_string()), "{stderr}");
}
