//! Where an operator's steps meet, through the real binary with HOME and XDG folders of
//! their own: the README's install command on an empty machine, an install that is all
//! or nothing, the system service's layout shared by `serve` and the admin commands (run
//! as root against a service running as another user; root's plugin folder, which the
//! service reads and cannot write), `call --control` on the default
//! socket with `--yes`, the manual pages, and settings tables no plugin reads.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{
    OtherUser, PluginDir, built, so, spawn_http_server, toolhost_command, wait_exit,
    wait_for_socket, workspace_root,
};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Starts `serve` (its control socket at `socket`), stops it with SIGTERM once the socket
/// answers, as systemctl stop would, and returns what it logged.
fn serve_log(mut serve: Command, socket: &Path) -> String {
    let mut child = serve
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    wait_for_socket(socket);
    let _ = terminate(&mut child);
    let mut log = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut log)
        .expect("log");
    log
}

/// SIGTERM to `child`, then waits (bounded) for it to exit; how it did.
fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe {
        libc::kill(
            libc::pid_t::try_from(child.id()).expect("pid"),
            libc::SIGTERM,
        )
    };
    wait_exit(child, "serve")
}

/// A machine nobody has used toolhost on: a HOME of its own, and no XDG variable, plugin
/// folder or runtime folder from the environment.
struct FreshHome {
    home: tempfile::TempDir,
}

impl FreshHome {
    fn new() -> FreshHome {
        FreshHome {
            home: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn path(&self) -> &Path {
        self.home.path()
    }

    /// `toolhost ARGS` as a new user runs it, in `cwd`.
    fn toolhost(&self, args: &[&str], cwd: &Path) -> Output {
        Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .args(args)
            .current_dir(cwd)
            .env("HOME", self.path())
            .env("TMPDIR", self.path())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("TOOLHOST_PLUGINS")
            .env_remove("TOOLHOST_FIXTURE_TOKEN")
            .stdin(Stdio::null())
            .output()
            .expect("run toolhost")
    }
}

/// The README's install line, `toolhost install target/release/libtoolhost_*.so`, with
/// its pattern expanded as a shell would in `dir` (the test build's plugins stand in for
/// the release build's: the same crates, the same file names).
fn readme_install_files(dir: &Path) -> Vec<PathBuf> {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    assert!(
        readme
            .lines()
            .any(|l| l
                == "cargo build --release && toolhost install target/release/libtoolhost_*.so"),
        "the README's install line is as this test runs it"
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the build folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libtoolhost_") && n.ends_with(".so"))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_readme_install_command_installs_the_bundled_set_on_an_empty_machine() {
    let machine = FreshHome::new();
    let build = built().join("debug");
    let files = readme_install_files(&build);
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for bundled in ["libtoolhost_utils.so", "libtoolhost_workspace.so"] {
        assert!(names.contains(&bundled.to_owned()), "{names:?}");
    }
    let mut args = vec!["install"];
    args.extend(files.iter().map(|f| f.to_str().expect("utf-8 path")));
    let out = machine.toolhost(&args, &build);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    // The deprecated write_file gives way, as the loader's rule says: no clash.
    assert!(
        stdout.contains("note: tool 'write_file' of plugin 'utils'")
            && stdout.contains("is deprecated and left out"),
        "{stdout}"
    );
    assert!(stdout.contains("no host is running"), "{stdout}");
    let installed = machine.path().join(".local/share/toolhost/plugins");
    for name in &names {
        assert!(installed.join(name).is_file(), "{name} in {installed:?}");
    }
    // A host on that folder serves them all, workspace's write_file among them.
    let listed = machine.toolhost(&["list"], machine.path());
    let table = text(&listed.stdout);
    assert!(listed.status.success(), "{table}{}", text(&listed.stderr));
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some("write_file"))
        .unwrap_or_else(|| panic!("write_file listed:\n{table}"));
    assert!(
        row.split_whitespace().any(|w| w == "workspace"),
        "the workspace plugin's write_file keeps the name: {row}"
    );
}

#[test]
fn a_multi_file_install_is_all_or_nothing() {
    let machine = FreshHome::new();
    let target = PluginDir::with(&[]);
    let dir = target.path();
    let broken = PluginDir::with(&[]);
    let bad = broken.write("libbroken.so", b"not an ELF file at all");
    let hello = so("hello_tools");
    let out = machine.toolhost(
        &[
            "install",
            "--dir",
            dir.to_str().expect("utf-8"),
            hello.to_str().expect("utf-8"),
            bad.to_str().expect("utf-8"),
        ],
        machine.path(),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("libbroken.so") && err.contains("nothing was installed (none of the 2 files)"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "nothing installed, nothing left: {left:?}");

    // Two files that clash with each other (both export `echo`): refused even with
    // --replace.
    let (echo, duplicate) = (crate::support::echo_build("v1"), so("fixture_duplicate"));
    let out = machine.toolhost(
        &[
            "install",
            "--replace",
            "--dir",
            dir.to_str().expect("utf-8"),
            hello.to_str().expect("utf-8"),
            echo.to_str().expect("utf-8"),
            duplicate.to_str().expect("utf-8"),
        ],
        machine.path(),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("'echo'") && err.contains("clash with each other"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&dir).expect("read dir").count(), 0);

    // And a set that fits goes in whole.
    let out = machine.toolhost(
        &[
            "install",
            "--dir",
            dir.to_str().expect("utf-8"),
            hello.to_str().expect("utf-8"),
            echo.to_str().expect("utf-8"),
        ],
        machine.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.join("libhello_tools.so").is_file() && dir.join("libfixture_echo.so").is_file());
}

/// The system service's folders in a temporary root, as systemd makes them for the unit:
/// config (root's), state and runtime (the service user's, 0700); the plugin folder,
/// root's, is made by [`SystemFolders::make_plugin_folder`] or by root's install.
struct SystemFolders {
    root: tempfile::TempDir,
}

impl SystemFolders {
    fn new(user: &OtherUser) -> SystemFolders {
        let root = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let folders = SystemFolders { root };
        std::fs::create_dir_all(folders.config()).expect("config");
        std::fs::write(folders.config().join("config.toml"), "").expect("config.toml");
        for dir in [folders.state(), folders.runtime()] {
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
            user.chown(&dir);
        }
        folders
    }

    fn config(&self) -> PathBuf {
        self.root.path().join("etc/toolhost")
    }

    fn state(&self) -> PathBuf {
        self.root.path().join("var/lib/toolhost")
    }

    fn runtime(&self) -> PathBuf {
        self.root.path().join("run/toolhost")
    }

    fn plugins(&self) -> PathBuf {
        self.root.path().join("usr/local/lib/toolhost/plugins")
    }

    /// The plugin folder as the unit's install steps make it: root's, 0755.
    fn make_plugin_folder(&self) {
        for dir in [
            "usr",
            "usr/local",
            "usr/local/lib",
            "usr/local/lib/toolhost",
        ] {
            let _ = std::fs::create_dir(self.root.path().join(dir));
        }
        std::fs::create_dir(self.plugins()).expect("mkdir plugins");
        for dir in self.plugins().ancestors().take(5) {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }

    /// Files and folders under the state folder that are not `user`'s.
    fn state_not_owned_by(&self, user: &OtherUser) -> Vec<PathBuf> {
        let mut foreign = Vec::new();
        let mut todo = vec![self.state()];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir)
                .expect("read state")
                .filter_map(Result::ok)
            {
                let path = entry.path();
                let meta = std::fs::symlink_metadata(&path).expect("stat");
                if meta.uid() != user.uid {
                    foreign.push(path.clone());
                }
                if meta.is_dir() {
                    todo.push(path);
                }
            }
        }
        foreign
    }

    /// The unit's environment: only what systemd sets for it.
    fn environment(&self, cmd: &mut Command) {
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("CONFIGURATION_DIRECTORY", self.config())
            .env("STATE_DIRECTORY", self.state())
            .env("RUNTIME_DIRECTORY", self.runtime())
            .env("TOOLHOST_SYSTEM_PLUGIN_DIR", self.plugins())
            .env("TOOLHOST_LOG", "info,rmcp=warn");
    }

    /// `toolhost --system ARGS` as root, with systemd's variables as the unit sets them
    /// (an operator's shell would not have them: the defaults, /etc/toolhost and so on,
    /// are what it finds; here they point into the temporary root, and
    /// $TOOLHOST_SYSTEM_PLUGIN_DIR moves the plugin folder there too).
    fn admin(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        self.environment(&mut cmd);
        cmd.env("HOME", "/root")
            .arg("--system")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run toolhost --system")
    }
}

/// A raw MCP `initialize` over HTTP with `token`: the status code.
fn initialize_status(port: u16, token: Option<&str>) -> u16 {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"seams","version":"1"}}}"#;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Content-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response:?}"))
}

#[test]
fn admin_commands_run_by_root_act_on_the_running_services_state() {
    let Some(user) =
        OtherUser::create("admin_commands_run_by_root_act_on_the_running_services_state")
    else {
        return;
    };
    let folders = SystemFolders::new(&user);
    folders.make_plugin_folder();
    let (_shelf, hello) = shelved_hello();

    // The service: the unit's command line, as its user, in its environment.
    let mut service = user.command(env!("CARGO_BIN_EXE_toolhost"));
    folders.environment(&mut service);
    service.args([
        "--system",
        "serve",
        "--mcp",
        "http",
        "--listen",
        "127.0.0.1:0",
    ]);
    let (mut child, port) = spawn_http_server(service);
    let socket = folders.runtime().join("control.sock");
    wait_for_socket(&socket);

    // Root adds a token with --system: the running service accepts it at once.
    assert_eq!(initialize_status(port, None), 401);
    let added = folders.admin(&["token", "add", "laptop"]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    let token = text(&added.stdout).trim().to_owned();
    assert!(!token.is_empty());
    let tokens: Vec<PathBuf> = std::fs::read_dir(folders.state())
        .expect("state")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("token"))
        .collect();
    assert!(
        !tokens.is_empty(),
        "the token file is in the service's state"
    );
    for file in &tokens {
        assert_eq!(
            std::fs::metadata(file).expect("stat").uid(),
            user.uid,
            "{file:?} is the service user's"
        );
    }
    assert_eq!(initialize_status(port, Some(&token)), 200);

    // Root installs a plugin: into root's plugin folder, as root, and the running
    // service reports loading it (root's install trusts the service user's socket).
    let installed = folders.admin(&["install", hello.to_str().expect("utf-8")]);
    let out = text(&installed.stdout);
    assert!(
        installed.status.success(),
        "{out}{}",
        text(&installed.stderr)
    );
    assert!(
        out.contains("loaded hello") && !out.contains("no host is running"),
        "{out}"
    );
    let placed = folders.plugins().join("libhello_tools.so");
    assert_eq!(std::fs::metadata(&placed).expect("installed").uid(), 0);
    assert!(!folders.state().join("plugins").exists());
    // What root wrote is the plugin folder's; the service's state stays its user's.
    assert_eq!(folders.state_not_owned_by(&user), Vec::<PathBuf>::new());

    // status and call find the service's socket with no --control.
    let status = folders.admin(&["status", "--json"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(text(&status.stdout).contains("libhello_tools.so"));
    let called = folders.admin(&["call", "greet", r#"{"name": "ops"}"#, "--control"]);
    assert!(called.status.success(), "{}", text(&called.stderr));

    // SIGTERM, as systemctl stop sends it.
    let status = terminate(&mut child);
    assert!(status.success(), "{status}");
}

/// hello_tools copied where anyone may read it (root's, 0644 in a 0755 folder): the
/// folder (keep it) and the file.
fn shelved_hello() -> (tempfile::TempDir, PathBuf) {
    let shelf = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(shelf.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let hello = shelf.path().join("libhello_tools.so");
    std::fs::copy(so("hello_tools"), &hello).expect("copy");
    std::fs::set_permissions(&hello, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    (shelf, hello)
}

#[test]
fn a_system_install_is_roots_and_the_service_reads_it_but_cannot_write_it() {
    let Some(user) =
        OtherUser::create("a_system_install_is_roots_and_the_service_reads_it_but_cannot_write_it")
    else {
        return;
    };
    let folders = SystemFolders::new(&user);
    let (_shelf, hello) = shelved_hello();
    let serve = |folders: &SystemFolders| {
        let mut service = user.command(env!("CARGO_BIN_EXE_toolhost"));
        folders.environment(&mut service);
        service.args([
            "--system",
            "serve",
            "--mcp",
            "http",
            "--listen",
            "127.0.0.1:0",
        ]);
        service
    };

    // No plugin folder yet: the service may not make it, and says how root does.
    let refused = serve(&folders)
        .stdin(Stdio::null())
        .output()
        .expect("run serve");
    assert!(!refused.status.success());
    let said = text(&refused.stderr);
    assert!(
        said.contains("does not exist") && said.contains("install -d -m 0755"),
        "{said}"
    );
    assert!(!folders.plugins().exists());

    // Root's install makes the folder (0755, root's, whatever root's umask) and the file
    // (0644, root's).
    let installed = folders.admin(&["install", hello.to_str().expect("utf-8")]);
    assert!(
        installed.status.success(),
        "{}{}",
        text(&installed.stdout),
        text(&installed.stderr)
    );
    for dir in folders.plugins().ancestors().take(4) {
        let meta = std::fs::metadata(dir).expect("stat");
        assert_eq!(
            (meta.uid(), meta.mode() & 0o7777),
            (0, 0o755),
            "{dir:?} is root's, 0755"
        );
    }
    let placed = folders.plugins().join("libhello_tools.so");
    let meta = std::fs::metadata(&placed).expect("installed");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o644));
    assert_eq!(folders.state_not_owned_by(&user), Vec::<PathBuf>::new());

    // The service's user cannot write the folder: not by hand, not with toolhost.
    let planted = folders.plugins().join("libplanted.so");
    let touched = user
        .command("touch")
        .arg(&planted)
        .output()
        .expect("run touch");
    assert!(!touched.status.success() && !planted.exists());
    let mut theirs = user.command(env!("CARGO_BIN_EXE_toolhost"));
    folders.environment(&mut theirs);
    let theirs = theirs
        .args(["--system", "install", "--replace"])
        .arg(&hello)
        .stdin(Stdio::null())
        .output()
        .expect("run install as the service user");
    assert!(!theirs.status.success(), "{}", text(&theirs.stdout));
    assert!(
        std::fs::read_dir(folders.plugins())
            .expect("read plugins")
            .filter_map(Result::ok)
            .all(|e| e.file_name() == "libhello_tools.so"),
        "the service user's install left nothing"
    );

    // The service, as its user, loads root's plugin (the strict permission check passes).
    let (mut child, _port) = spawn_http_server(serve(&folders));
    let socket = folders.runtime().join("control.sock");
    wait_for_socket(&socket);
    let status = folders.admin(&["status", "--json"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    let status = text(&status.stdout);
    assert!(
        status.contains("libhello_tools.so") && status.contains("greet"),
        "{status}"
    );
    let called = folders.admin(&["call", "greet", r#"{"name": "ops"}"#, "--control"]);
    assert!(called.status.success(), "{}", text(&called.stderr));

    // Root's remove takes it out, and the running service reports dropping it.
    let removed = folders.admin(&["remove", "hello"]);
    let out = text(&removed.stdout);
    assert!(removed.status.success(), "{out}{}", text(&removed.stderr));
    assert!(out.contains("dropped hello"), "{out}");
    assert!(!placed.exists());

    let status = terminate(&mut child);
    assert!(status.success(), "{status}");
}

#[test]
fn call_control_uses_the_default_socket_and_yes_approves_as_the_hosts_own_user() {
    let runtime = tempfile::tempdir().expect("temp dir");
    let plugins = PluginDir::with(&["toolhost_utils"]);
    let mut serve = toolhost_command();
    serve
        .env("XDG_RUNTIME_DIR", runtime.path())
        .args(["serve", "--no-watch", "--plugins"])
        .arg(plugins.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = serve.spawn().expect("start serve");
    wait_for_socket(&runtime.path().join("toolhost/control.sock"));
    let call = |args: &[&str]| {
        toolhost_command()
            .env("XDG_RUNTIME_DIR", runtime.path())
            .arg("call")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("toolhost call")
    };
    let read = call(&["time_now", r#"{"timezone": "UTC"}"#, "--control"]);
    assert!(read.status.success(), "{}", text(&read.stderr));

    // A write tool: refused with no terminal to ask, run with --yes.
    let out_dir = tempfile::tempdir().expect("temp dir");
    let target = out_dir.path().join("written.txt");
    let args = serde_json::json!({"path": target, "content": "by --yes"}).to_string();
    let refused = call(&["write_file", &args, "--control"]);
    assert!(!refused.status.success());
    assert!(!target.exists());
    let approved = call(&["write_file", &args, "--control", "--yes"]);
    assert!(approved.status.success(), "{}", text(&approved.stderr));
    assert_eq!(
        std::fs::read_to_string(&target).expect("written"),
        "by --yes"
    );

    // `--control TOOL ARGS`: the tool's name taken for the path is said plainly.
    let mistaken = call(&["--control", "time_now", "{}"]);
    assert_eq!(mistaken.status.code(), Some(2));
    assert!(
        text(&mistaken.stderr).contains("put --control after the tool"),
        "{}",
        text(&mistaken.stderr)
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn every_command_has_a_manual_page_with_files_environment_and_exit_status() {
    let pages = tempfile::tempdir().expect("temp dir");
    let out = toolhost_command()
        .args(["man", "--dir"])
        .arg(pages.path())
        .output()
        .expect("toolhost man --dir");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let main = std::fs::read_to_string(pages.path().join("toolhost.1")).expect("toolhost.1");
    // Every page the main page points to exists, and every page has the sections.
    let mut referenced = 0;
    for word in main.split(|c: char| c.is_whitespace() || c == ',') {
        let word = word
            .replace("\\fB", "")
            .replace("\\fR", "")
            .replace("\\-", "-");
        if let Some(name) = word.strip_suffix("(1)")
            && name.starts_with("toolhost-")
        {
            referenced += 1;
            let page = pages.path().join(format!("{name}.1"));
            assert!(
                page.is_file(),
                "toolhost(1) names {name}(1), which was not written"
            );
        }
    }
    assert!(referenced >= 10, "{referenced} pages referenced:\n{main}");
    for entry in std::fs::read_dir(pages.path()).expect("pages") {
        let page = std::fs::read_to_string(entry.expect("entry").path()).expect("page");
        for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH FILES"] {
            assert!(page.contains(section), "{section} missing:\n{page}");
        }
    }
    let call = toolhost_command()
        .args(["man", "call"])
        .output()
        .expect("toolhost man call");
    assert!(call.status.success());
    let page = text(&call.stdout);
    assert!(page.contains(".TH toolhost-call 1"), "{page}");
    assert!(page.contains("\\-\\-control"), "{page}");
}

#[test]
fn a_settings_table_no_plugin_reads_is_warned_with_the_nearest_name() {
    let config = tempfile::tempdir().expect("temp dir");
    let file = config.path().join("config.toml");
    std::fs::write(
        &file,
        "[plugins.helo.settings]\ngreeting = \"hi\"\n\n[plugins.nothing_like_it.settings]\nx = 1\n",
    )
    .expect("config");
    let plugins = PluginDir::with(&["hello_tools"]);
    let socket = config.path().join("control.sock");
    let mut serve = toolhost_command();
    serve
        .arg("--config")
        .arg(&file)
        .args(["serve", "--no-watch", "--plugins"])
        .arg(plugins.path())
        .arg("--control")
        .arg(&socket)
        .env("TOOLHOST_LOG", "info");
    let log = serve_log(serve, &socket);
    assert!(
        log.contains("[plugins.helo.settings] names no loaded plugin")
            && log.contains("did you mean [plugins.hello.settings]?"),
        "{log}"
    );
    assert!(
        log.contains("[plugins.nothing_like_it.settings] names no loaded plugin")
            && log.contains("loaded plugins: hello"),
        "{log}"
    );
    let warned = log.find("names no loaded plugin").expect("warned");
    let serving = log.find("toolhost is serving").expect("serving logged");
    assert!(warned < serving, "warned before serving:\n{log}");
}

/// A misspelt settings table and a misspelt settings key are said by every command that
/// loads plugins (list, call, check) and by plain `status`, as serve logs them; a profile
/// config serve refuses, check refuses too.
#[test]
fn settings_warnings_are_said_by_list_call_check_and_status_and_check_refuses_what_serve_does() {
    let config = tempfile::tempdir().expect("temp dir");
    let file = config.path().join("config.toml");
    std::fs::write(
        &file,
        "[plugins.helo.settings]\ngreeting = \"hi\"\n\n[plugins.hello.settings]\nlanguag = \"de\"\n",
    )
    .expect("config");
    let plugins = PluginDir::with(&["hello_tools"]);
    let dir = plugins.path().to_str().expect("utf-8").to_owned();
    let library = plugins.path().join("libhello_tools.so");
    let run = |args: &[&str]| {
        let out = toolhost_command()
            .arg("--config")
            .arg(&file)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run toolhost");
        (
            out.status,
            format!("{}{}", text(&out.stdout), text(&out.stderr)),
        )
    };
    let said_both = |said: &str| {
        said.contains("[plugins.helo.settings] names no loaded plugin")
            && said.contains("did you mean [plugins.hello.settings]?")
            && said.contains("key 'languag' is not a setting of this plugin")
    };
    for args in [
        vec!["list", "--plugins", dir.as_str()],
        vec![
            "call",
            "greet",
            r#"{"name": "Ada"}"#,
            "--plugins",
            dir.as_str(),
        ],
        vec!["check", library.to_str().expect("utf-8")],
    ] {
        let (status, said) = run(&args);
        assert!(status.success(), "{args:?}: {said}");
        assert!(said_both(&said), "{args:?} says both warnings:\n{said}");
    }
    // Plain status of a running host.
    let socket = config.path().join("control.sock");
    let mut child = toolhost_command()
        .arg("--config")
        .arg(&file)
        .args([
            "serve",
            "--no-watch",
            "--plugins",
            dir.as_str(),
            "--control",
        ])
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    wait_for_socket(&socket);
    let (status, said) = run(&["status", "--control", socket.to_str().expect("utf-8")]);
    let _ = terminate(&mut child);
    assert!(status.success(), "{said}");
    assert!(said_both(&said), "plain status says both warnings:\n{said}");

    // A profile config with a misspelt key: serve refuses it, and so does check.
    let profile = config.path().join("profiles/work");
    std::fs::create_dir_all(&profile).expect("profile dir");
    std::fs::write(profile.join("config.toml"), "toolz = [\"greet\"]\n").expect("profile");
    let (status, said) = run(&["check", library.to_str().expect("utf-8")]);
    assert!(
        !status.success(),
        "check refuses the profile config:\n{said}"
    );
    assert!(
        said.contains("toolz") && said.contains("serve refuses"),
        "{said}"
    );
}

/// An MCP client without elicitation (over stdio) on a host whose config relays its
/// approval questions to a terminal, and the host's control socket.
fn relaying_host(
    limit_secs: u32,
) -> (crate::mcp::RawClient, PathBuf, tempfile::TempDir, PluginDir) {
    let plugins = PluginDir::with(&["fixture_basic"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp]\nwithout_elicitation = \"terminal\"\nterminal_approval_secs = {limit_secs}\n"
        ),
    )
    .expect("config");
    let socket = dir.path().join("c.sock");
    let mut cmd = toolhost_command();
    cmd.arg("--config")
        .arg(&config)
        .args(["serve", "--no-watch", "--mcp", "stdio", "--plugins"])
        .arg(plugins.path())
        .arg("--control")
        .arg(&socket);
    let client = crate::mcp::RawClient::start(cmd);
    (client, socket, dir, plugins)
}

/// `toolhost approvals ARGS --control SOCKET`.
fn approvals(socket: &Path, args: &[&str]) -> Output {
    toolhost_command()
        .arg("approvals")
        .args(args)
        .arg("--control")
        .arg(socket)
        .output()
        .expect("toolhost approvals")
}

/// Waits for the one question about `tool` in `approvals pending --json`; its id.
fn waiting_question(socket: &Path, tool: &str) -> u64 {
    let mut id = None;
    crate::support::wait_until(&format!("a question about {tool} waiting"), || {
        let out = approvals(socket, &["pending", "--json"]);
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        id = listed
            .as_array()
            .and_then(|qs| qs.iter().find(|q| q["tool"] == tool))
            .and_then(|q| q["id"].as_u64());
        id.is_some()
    });
    id.unwrap_or_default()
}

#[test]
fn a_terminal_answers_the_calls_of_an_mcp_client_that_cannot_ask() {
    let (client, socket, _dir, _plugins) = relaying_host(600);
    let (_markers, marker) = crate::support::marker();
    let call = |mut client: crate::mcp::RawClient, marker: PathBuf| {
        std::thread::spawn(move || {
            let reply = client.request(
                "tools/call",
                serde_json::json!({"name": "risky_write", "arguments": {"marker": marker}}),
            );
            (client, reply)
        })
    };
    // Yes: the call runs.
    let calling = call(client, marker.clone());
    let id = waiting_question(&socket, "risky_write");
    let listed = text(&approvals(&socket, &["pending"]).stdout);
    assert!(
        listed.contains("risky_write") && listed.contains("raw-test-client"),
        "{listed}"
    );
    let answered = approvals(&socket, &["answer", &id.to_string(), "yes"]);
    assert!(answered.status.success(), "{}", text(&answered.stderr));
    let (client, reply) = calling.join().expect("the call returned");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert!(marker.exists(), "the approved call ran");
    // The question is gone; answering it again says so.
    let again = approvals(&socket, &["answer", &id.to_string(), "yes"]);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("no approval question"),
        "{}",
        text(&again.stderr)
    );

    // No, with a reason: the call is refused with it.
    let refused_marker = marker.with_file_name("refused");
    let calling = call(client, refused_marker.clone());
    let id = waiting_question(&socket, "risky_write");
    let answered = approvals(
        &socket,
        &[
            "answer",
            &id.to_string(),
            "no",
            "--reason",
            "not on a Friday",
        ],
    );
    assert!(answered.status.success(), "{}", text(&answered.stderr));
    let (_client, reply) = calling.join().expect("the call returned");
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert!(reply.to_string().contains("not on a Friday"), "{reply}");
    assert!(!refused_marker.exists(), "the refused call did not run");
}

#[test]
fn a_relayed_question_nobody_answers_is_refused_at_its_time_limit() {
    let (mut client, socket, _dir, _plugins) = relaying_host(1);
    let (_markers, marker) = crate::support::marker();
    let reply = client.request(
        "tools/call",
        serde_json::json!({"name": "risky_write", "arguments": {"marker": marker}}),
    );
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert!(
        reply
            .to_string()
            .contains("nobody answered at a terminal within 1 s"),
        "{reply}"
    );
    assert!(!marker.exists());
    let listed = text(&approvals(&socket, &["pending"]).stdout);
    assert!(listed.contains("no call waits"), "{listed}");
}

#[test]
fn isolate_keeps_the_plugins_the_config_keeps_in_process_and_says_so() {
    let config = tempfile::tempdir().expect("temp dir");
    let file = config.path().join("config.toml");
    std::fs::write(&file, "[isolation.plugins]\nhello = \"in-process\"\n").expect("config");
    let plugins = PluginDir::with(&["fixture_echo", "hello_tools"]);
    let out = toolhost_command()
        .arg("--config")
        .arg(&file)
        .args(["list", "--isolate", "--json", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("toolhost list --isolate");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mode = |tool: &str| {
        listing
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["name"] == tool))
            .map(|t| t["mode"].clone())
    };
    assert_eq!(
        mode("greet"),
        Some(serde_json::json!("in-process")),
        "{listing}"
    );
    assert_eq!(
        mode("echo"),
        Some(serde_json::json!("process")),
        "{listing}"
    );
    let warned = text(&out.stderr);
    assert!(
        warned.contains("--isolate: every plugin runs in a sandboxed worker except hello"),
        "{warned}"
    );
}

#[test]
fn a_refusal_by_the_worker_sandbox_names_the_path_and_the_key_that_allows_it() {
    let outside = tempfile::tempdir().expect("temp dir");
    let secret = outside.path().join("notes.txt");
    std::fs::write(&secret, "kept out").expect("write");
    let plugins = PluginDir::with(&["fixture_hostile"]);
    let args = serde_json::json!({"action": "read_or_fail", "path": secret}).to_string();
    let out = toolhost_command()
        .args(["call", "attempt", &args, "--isolate", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("toolhost call --isolate");
    if out.status.success() {
        eprintln!(
            "skipped: the worker read {} (no Landlock sandbox here): {}",
            secret.display(),
            text(&out.stdout)
        );
        return;
    }
    let err = text(&out.stderr);
    assert!(err.contains("Permission denied"), "{err}");
    assert!(
        err.contains(&format!(
            "toolhost: plugin 'hostile' runs in a sandboxed worker, which may not read {}",
            secret.display()
        )) && err.contains("[isolation] read_paths")
            && err.contains("[isolation.plugins] hostile = \"in-process\""),
        "{err}"
    );
    // With the key the note names, the same call reads the file.
    let config = tempfile::tempdir().expect("temp dir");
    let file = config.path().join("config.toml");
    std::fs::write(
        &file,
        format!("[isolation]\nread_paths = [{:?}]\n", outside.path()),
    )
    .expect("config");
    let out = toolhost_command()
        .arg("--config")
        .arg(&file)
        .args(["call", "attempt", &args, "--isolate", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("toolhost call --isolate");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("ok kept out"),
        "{}",
        text(&out.stdout)
    );
}

/// `--workspace DIR` opens the folder to the workers of plugins whose tools declare that
/// they work there (`Requirements::workspace`), not to every plugin's worker.
#[test]
fn workspace_roots_reach_only_the_workers_of_plugins_that_declare_them() {
    let proj = tempfile::tempdir().expect("temp dir");
    let secret = proj.path().join("notes.txt");
    std::fs::write(&secret, "the project's notes").expect("write");
    let plugins = PluginDir::with(&["fixture_hostile", "toolhost_workspace"]);
    let call = |tool: &str, args: serde_json::Value| {
        toolhost_command()
            .args(["call", tool, &args.to_string(), "--isolate", "--json"])
            .arg("--workspace")
            .arg(proj.path())
            .arg("--plugins")
            .arg(plugins.path())
            .output()
            .expect("toolhost call --isolate")
    };
    let hostile = call(
        "attempt",
        serde_json::json!({"action": "read_or_fail", "path": secret}),
    );
    if hostile.status.success() {
        eprintln!(
            "skipped: the worker read {} (no Landlock sandbox here): {}",
            secret.display(),
            text(&hostile.stdout)
        );
        return;
    }
    let said = format!("{}{}", text(&hostile.stdout), text(&hostile.stderr));
    assert!(
        said.contains("Permission denied")
            && said.contains("none of the plugin's tools declares")
            && said.contains("Requirements::workspace()"),
        "{said}"
    );
    assert!(!said.contains("the project's notes"), "{said}");
    // The workspace plugin's tools declare it: its worker reads the same file.
    let read = call("read_file", serde_json::json!({"path": "notes.txt"}));
    assert!(read.status.success(), "{}", text(&read.stderr));
    assert!(
        text(&read.stdout).contains("the project's notes"),
        "{}",
        text(&read.stdout)
    );
}

#[test]
fn json_logs_carry_json_values_and_the_commands_own_warnings() {
    let plugins = PluginDir::with(&["hello_tools"]);
    plugins.write("libbroken.so", b"not a plugin");
    let out = toolhost_command()
        .env("TOOLHOST_LOG_FORMAT", "json")
        .args(["list", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("toolhost list");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} in\n{stderr}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["level"] == "WARN"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("libbroken.so"))),
        "the broken file's warning is a JSON line: {stderr}"
    );

    // A serving host's tool changes: the list of tools is a JSON array.
    let socket_dir = tempfile::tempdir().expect("temp dir");
    let socket = socket_dir.path().join("c.sock");
    let mut serve = toolhost_command();
    serve
        .env("TOOLHOST_LOG_FORMAT", "json")
        .env("TOOLHOST_LOG", "info")
        .args(["serve", "--no-watch", "--plugins"])
        .arg(plugins.path())
        .arg("--control")
        .arg(&socket);
    let log = serve_log(serve, &socket);
    let changed = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["fields"]["message"] == "tools changed")
        .unwrap_or_else(|| panic!("a tools-changed line:\n{log}"));
    assert!(
        changed["fields"]["added"]
            .as_array()
            .is_some_and(|a| a.iter().any(|t| t == "greet")),
        "{changed}"
    );
}
