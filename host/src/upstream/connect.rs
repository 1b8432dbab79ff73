//! Reaching one MCP server: a stdio server is started as a confined child (the same
//! prepared sandbox a command of the workspace tools enters between fork and exec:
//! Landlock with the entry's read and write paths, its own state and temporary folders
//! and nothing of the host's state, the seccomp filter, network off unless the entry
//! allows it, no capabilities, no new privileges; a session and process group of its own,
//! killed with the host), an HTTP one through rmcp's streamable HTTP client; then the MCP
//! handshake, bounded in time.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
use rmcp::service::{RoleClient, RunningService};
use tokio::io::AsyncBufReadExt as _;

use crate::config::{McpProtocol, McpServerSettings, McpTransport};
use crate::sys::containment::Containment;
use crate::sys::sandbox::{SandboxMode, SandboxRules};

use super::client::Handler;

/// How long a server has to start and answer the handshake.
pub(crate) const HANDSHAKE: Duration = Duration::from_secs(20);

/// Lines of a stdio server's standard error kept for its error messages.
const LAST_WORDS: usize = 12;

/// Why a server could not be reached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The program is not found.
    #[error("could not find the program {0:?} on PATH; write its full path as `command`")]
    NoProgram(String),
    /// The sandbox could not be built.
    #[error("could not build its sandbox: {0}")]
    Sandbox(String),
    /// Its folders could not be made.
    #[error("could not create its folder {path}: {source}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The program would not start.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The handshake failed.
    #[error("the MCP handshake failed: {0}{1}")]
    Handshake(String, String),
    /// The handshake did not finish in time.
    #[error("it did not finish the MCP handshake within {0} s{1}")]
    Slow(u64, String),
    /// A header is not valid HTTP.
    #[error("header {0:?} is not a valid HTTP header")]
    Header(String),
}

/// What a stdio server wrote on its standard error last.
#[derive(Clone, Default)]
pub(crate) struct LastWords(Arc<Mutex<VecDeque<String>>>);

impl LastWords {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == LAST_WORDS {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// `; it said: ...` with its last lines, or nothing.
    pub(crate) fn said(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.is_empty() {
            return String::new();
        }
        let text: Vec<&str> = lines.iter().map(String::as_str).collect();
        format!("; it said: {}", crate::text::for_log(&text.join(" | ")))
    }
}

/// A live connection.
pub(crate) struct Connection {
    /// The rmcp client service.
    pub(crate) service: RunningService<RoleClient, Handler>,
    /// What it wrote on standard error.
    pub(crate) last_words: LastWords,
    /// A stdio server's process and what holds it.
    pub(crate) process: Option<ServerProcess>,
}

/// A stdio server's process and what holds it.
pub(crate) struct ServerProcess {
    /// The child, killed when dropped.
    pub(crate) child: tokio::process::Child,
    /// Its process id, tag and containment.
    pub(crate) hold: ProcessHold,
}

/// What holds a stdio server's processes: its id, the tag in its environment
/// (`TOOLHOST_MCP_SERVER`) that finds what it started out of its process group, and its
/// containment (a cgroup with its memory and process limits, where the host can make
/// one; else a PID namespace, where user namespaces are allowed; else its process
/// group).
pub(crate) struct ProcessHold {
    /// Its process id.
    pub(crate) pid: Option<u32>,
    tag: String,
    containment: Containment,
    /// Whether it runs in a PID namespace of its own (beside a cgroup, or alone).
    in_namespace: bool,
}

impl ServerProcess {
    /// Its process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.hold.pid
    }

    /// What holds it, for status: `cgroup v1 PATH` (`, PID namespace` when it is in one
    /// too), `PID namespace`, `process group`.
    pub(crate) fn containment(&self) -> String {
        let held = self.hold.containment.describe();
        if self.hold.in_namespace && !matches!(self.hold.containment, Containment::PidNamespace) {
            format!("{held}, PID namespace")
        } else {
            held
        }
    }
}

impl ProcessHold {
    /// Ends everything of it: its cgroup and process group, then whatever still carries
    /// its tag (a daemon it double-forked). Blocking for up to a short grace.
    pub(crate) fn end(self) {
        if let Some(pid) = self.pid {
            self.containment.kill_all(pid);
            crate::sys::workers::unregister(pid);
        }
        let ended = crate::sys::tagged::end_tagged_except(
            crate::sys::workers::MCP_SERVER_TAG,
            &self.tag,
            Duration::from_millis(200),
            &|_| false,
        );
        crate::sys::workers::unregister_tag(&self.tag);
        if !ended.is_empty() {
            tracing::info!(
                "ended what an MCP server left running: {}",
                crate::sys::tagged::describe(&ended)
            );
        }
        // Dropping the containment removes its cgroup folders.
    }
}

impl Connection {
    /// Ends it: the session, then (stdio) everything of the server's process.
    pub(crate) async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.service.close()).await;
        if let Some(ServerProcess { mut child, hold }) = self.process.take() {
            let _ = tokio::task::spawn_blocking(move || hold.end()).await;
            let _ = child.wait().await;
        }
    }
}

/// What every stdio server gets unless its entry says otherwise: the plugin workers'
/// sandbox mode, memory and process limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerLimits {
    /// How hard its sandbox insists.
    pub(crate) sandbox: SandboxMode,
    /// Its memory, bytes (its cgroup's limit).
    pub(crate) memory_bytes: u64,
    /// Its processes and threads.
    pub(crate) max_processes: u64,
}

/// Where a server keeps what it writes: `<root>/<name>/` (its home and starting folder)
/// and `<root>/<name>/tmp`.
pub(crate) struct ServerDirs {
    /// Its folder.
    pub(crate) home: PathBuf,
    /// Its temporary folder.
    pub(crate) tmp: PathBuf,
}

impl ServerDirs {
    /// The folders of server `name` under `root`, made private if missing.
    pub(crate) fn make(root: &Path, name: &str) -> Result<ServerDirs, ConnectError> {
        let home = root.join(name);
        let tmp = home.join("tmp");
        for dir in [root, &home, &tmp] {
            toolhost_calls::private::ensure_private_dir(dir).map_err(|source| {
                ConnectError::Folder {
                    path: dir.to_path_buf(),
                    source,
                }
            })?;
        }
        Ok(ServerDirs { home, tmp })
    }
}

/// Connects to `server` with `handler`. `dirs` is where a stdio server may write;
/// `mode` how hard its sandbox insists.
pub(crate) async fn connect(
    server: &McpServerSettings,
    handler: Handler,
    dirs: &ServerDirs,
    limits: &ServerLimits,
) -> Result<Connection, ConnectError> {
    match &server.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            stdio(
                server,
                command,
                args,
                env,
                cwd.as_deref(),
                handler,
                dirs,
                limits,
            )
            .await
        }
        McpTransport::Http {
            url,
            headers,
            token,
        } => http(server, url, headers, token.as_deref(), handler).await,
    }
}

/// How the handshake goes for `protocol`.
fn lifecycle(protocol: McpProtocol) -> ClientLifecycleMode {
    let modern = vec![ProtocolVersion::V_2026_07_28];
    match protocol {
        McpProtocol::Auto => ClientLifecycleMode::Auto {
            preferred_versions: modern,
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        },
        McpProtocol::Modern => ClientLifecycleMode::Discover {
            preferred_versions: modern,
        },
        McpProtocol::Legacy => ClientLifecycleMode::Initialize,
    }
}

/// The program `command` names: a path as written, else the first match on `PATH`.
fn find_program(command: &str) -> Result<PathBuf, ConnectError> {
    if command.contains('/') {
        let path = PathBuf::from(command);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(ConnectError::NoProgram(command.to_owned()))
        };
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(command))
        .find(|p| p.is_file())
        .ok_or_else(|| ConnectError::NoProgram(command.to_owned()))
}

/// What a stdio server may touch.
pub(crate) fn rules(
    server: &McpServerSettings,
    program: &Path,
    cwd: Option<&Path>,
    dirs: &ServerDirs,
) -> SandboxRules {
    let mut read = crate::sys::sandbox::system_read_paths();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for path in [
        Some(program),
        std::fs::canonicalize(program).ok().as_deref(),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(folder) = path.parent() {
            read.push(program_prefix(folder, home.as_deref()));
        }
    }
    if let Some(name) = program.file_name().and_then(|n| n.to_str())
        && !program.is_absolute()
    {
        read.extend(crate::plugins::isolation::spawn::program_paths(&[name]));
    }
    read.extend(server.sandbox.read_paths.iter().cloned());
    read.extend(cwd.map(Path::to_path_buf));
    read.push(dirs.home.clone());
    let mut write = vec![PathBuf::from("/dev/null"), dirs.home.clone()];
    write.extend(server.sandbox.write_paths.iter().cloned());
    SandboxRules {
        read,
        write,
        network: server.sandbox.network,
        unix_sockets: server.sandbox.unix_sockets,
        // Its own folder is inside the host's state, which every sandbox hides.
        private: vec![dirs.home.clone()],
        ..SandboxRules::default()
    }
}

/// The folder a program's own files are in: its folder, or for one in a `bin` folder
/// (an interpreter: Python, Node) the folder above, where its libraries are, unless that
/// is the root or holds the user's home.
fn program_prefix(folder: &Path, home: Option<&Path>) -> PathBuf {
    if folder.file_name().is_some_and(|n| n == "bin")
        && let Some(prefix) = folder.parent()
        && prefix.parent().is_some()
        && !home.is_some_and(|h| h.starts_with(prefix))
    {
        return prefix.to_path_buf();
    }
    folder.to_path_buf()
}

/// Why a stdio server gets no PID namespace of its own.
#[derive(Debug, thiserror::Error)]
enum NoNamespace {
    /// A root server would lose its capabilities to the user namespace.
    #[error("the sandbox is off")]
    SandboxOff,
    /// The child that makes one must write its own `uid_map` before it runs the
    /// program, which a child of a host that is not root could do only by making itself
    /// dumpable, and so its copy of the host's memory (API keys) readable to every
    /// process of the user.
    #[error("the host is not root")]
    NotRoot,
    /// The kernel refuses them.
    #[error(transparent)]
    Kernel(&'static crate::sys::containment::NoPidNamespaces),
}

/// Whether a stdio server started with `sandbox` runs in a PID namespace of its own.
fn namespaces_for(sandbox: SandboxMode) -> Result<(), NoNamespace> {
    if sandbox == SandboxMode::Off {
        return Err(NoNamespace::SandboxOff);
    }
    if toolhost_calls::private::effective_uid() != 0 {
        return Err(NoNamespace::NotRoot);
    }
    crate::sys::containment::pid_namespaces().map_err(NoNamespace::Kernel)
}

#[allow(clippy::too_many_arguments)]
async fn stdio(
    server: &McpServerSettings,
    command: &str,
    args: &[String],
    env: &[(String, String)],
    cwd: Option<&Path>,
    handler: Handler,
    dirs: &ServerDirs,
    limits: &ServerLimits,
) -> Result<Connection, ConnectError> {
    let program = find_program(command)?;
    let prepared =
        crate::sys::sandbox::prepare(limits.sandbox, &rules(server, &program, cwd, dirs))
            .map_err(|e| ConnectError::Sandbox(e.to_string()))?;
    let namespaces = namespaces_for(limits.sandbox);
    // A cgroup of its own where the host can make one (its memory and processes
    // bounded, and every process in it ended with it); else a PID namespace of its own
    // (every process in it ends with it, even if the host is killed); else its process
    // group.
    let containment = match crate::sys::containment::make(
        crate::sys::containment::ContainmentMode::Cgroup,
        server.sandbox.memory_bytes.unwrap_or(limits.memory_bytes),
        server.sandbox.max_processes.unwrap_or(limits.max_processes),
    ) {
        Ok(containment) => containment,
        Err(e) => match &namespaces {
            Ok(()) => {
                tracing::debug!(
                    server = &*server.name,
                    "no cgroup for the MCP server, a PID namespace holds it: {e}"
                );
                Containment::PidNamespace
            }
            Err(why) => {
                tracing::debug!(
                    server = &*server.name,
                    "no cgroup for the MCP server ({e}) and no PID namespace ({why}): its \
                     process group holds it"
                );
                Containment::ProcessGroup
            }
        },
    };
    // In a cgroup too: a cgroup holds what the server starts only while the host lives,
    // a PID namespace also when the host is killed.
    let namespace = namespaces
        .is_ok()
        .then(crate::sys::pid_namespace::ChildMaps::of_this_process);
    let in_namespace = namespace.is_some();
    let tag = crate::sys::sandbox::process_tree::new_tag();
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(args)
        .env_clear()
        .env(crate::sys::workers::MCP_SERVER_TAG, &tag)
        .env("HOME", &dirs.home)
        .env("TMPDIR", &dirs.tmp)
        .env(
            "LANG",
            std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".to_owned()),
        )
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
        )
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(cwd.unwrap_or(&dirs.home))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    crate::sys::process::confine_child(
        &mut cmd,
        Arc::new(prepared),
        containment.procs_fds(),
        namespace,
    );
    let mut child = cmd.spawn().map_err(|source| ConnectError::Spawn {
        program: program.display().to_string(),
        source,
    })?;
    let pid = child.id();
    if let Some(pid) = pid {
        crate::sys::workers::register(pid, containment.cgroup_paths());
    }
    crate::sys::workers::register_tag(&tag);
    let last_words = LastWords::default();
    let name = Arc::clone(&handler.server);
    if let Some(stderr) = child.stderr.take() {
        let words = last_words.clone();
        let name = Arc::clone(&name);
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(server = &*name, "{}", crate::text::for_log(&line));
                words.push(line);
            }
        });
    }
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(ConnectError::Handshake(
            "its standard streams could not be opened".to_owned(),
            String::new(),
        ));
    };
    let process = ServerProcess {
        child,
        hold: ProcessHold {
            pid,
            tag,
            containment,
            in_namespace,
        },
    };
    let fail = |ServerProcess { mut child, hold }: ServerProcess| async move {
        let _ = child.start_kill();
        let _ = child.wait().await;
        let _ = tokio::task::spawn_blocking(move || hold.end()).await;
    };
    match tokio::time::timeout(
        HANDSHAKE,
        handler.serve_with_lifecycle(
            super::lines::Lines::new(stdout, stdin, Arc::clone(&name)),
            lifecycle(server.protocol),
        ),
    )
    .await
    {
        Ok(Ok(service)) => Ok(Connection {
            service,
            last_words,
            process: Some(process),
        }),
        Ok(Err(e)) => {
            fail(process).await;
            Err(ConnectError::Handshake(e.to_string(), last_words.said()))
        }
        Err(_) => {
            fail(process).await;
            Err(ConnectError::Slow(HANDSHAKE.as_secs(), last_words.said()))
        }
    }
}

async fn http(
    server: &McpServerSettings,
    url: &str,
    headers: &[(String, String)],
    token: Option<&str>,
    handler: Handler,
) -> Result<Connection, ConnectError> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    for (key, value) in headers {
        let name = reqwest::header::HeaderName::try_from(key.as_str())
            .map_err(|_| ConnectError::Header(key.clone()))?;
        let value = reqwest::header::HeaderValue::try_from(value.as_str())
            .map_err(|_| ConnectError::Header(key.clone()))?;
        config.custom_headers.insert(name, value);
    }
    config.auth_header = token.map(str::to_owned);
    // reqwest is built without a crypto provider of its own: ring, as rustls already has.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().build().map_err(|e| {
        ConnectError::Handshake(format!("could not make an HTTP client: {e}"), String::new())
    })?;
    let transport = StreamableHttpClientTransport::with_client(client, config);
    match tokio::time::timeout(
        HANDSHAKE,
        handler.serve_with_lifecycle(transport, lifecycle(server.protocol)),
    )
    .await
    {
        Ok(Ok(service)) => Ok(Connection {
            service,
            last_words: LastWords::default(),
            process: None,
        }),
        Ok(Err(e)) => Err(ConnectError::Handshake(e.to_string(), String::new())),
        Err(_) => Err(ConnectError::Slow(HANDSHAKE.as_secs(), String::new())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interpreters_prefix_is_readable_but_never_the_home_or_the_root() {
        let home = Path::new("/home/ada");
        assert_eq!(
            program_prefix(Path::new("/opt/py/3.11/bin"), Some(home)),
            Path::new("/opt/py/3.11")
        );
        assert_eq!(
            program_prefix(Path::new("/home/ada/bin"), Some(home)),
            Path::new("/home/ada/bin")
        );
        assert_eq!(
            program_prefix(Path::new("/bin"), Some(home)),
            Path::new("/bin")
        );
        assert_eq!(
            program_prefix(Path::new("/opt/tool"), Some(home)),
            Path::new("/opt/tool")
        );
    }
}
