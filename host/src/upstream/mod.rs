//! MCP servers as tool sources (`[[mcp_servers]]`): the host is an MCP client (rmcp's,
//! over stdio or streamable HTTP) of each server the config names, and serves its tools
//! beside the plugins' in the one registry, under the server's prefix, so every rule of a
//! plugin's tool holds for them: profiles and toolsets, the approval policy (risk from the
//! server's annotations, per-tool overrides), argument and result validation, the output
//! budget, the audit log and metrics.
//!
//! `convert` maps the protocol's types to the host's, `client` is the client side of a
//! connection (what it declares; progress, questions and sampling relayed to the caller of
//! the call in flight), `connect` starts a confined stdio server (`lines` is its transport) or opens an HTTP
//! session,
//! `link` is what the host shares with a server's supervisor, `server` supervises one server (restart with backoff, quarantine, list changes), and
//! `tool` is a server's tool in the registry.

// Sampling (SEP-2577) and `ClientInfo` are deprecated in rmcp, and still what servers of
// both generations send and expect: relayed until servers stop asking.
#[allow(deprecated)]
mod client;
mod connect;
#[allow(deprecated)]
mod convert;
mod lines;
mod link;
mod server;
mod tool;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use toolhost_calls::tool::DynTool;

use crate::config::{McpServerSettings, McpTransport};
use crate::plugins::catalog::PluginCatalog;
use crate::plugins::isolation::IsolationPolicy;
use crate::plugins::isolation::lifecycle::CrashLimits;

use connect::ServerLimits;
use link::Link;
pub use link::ServerState;
use server::Supervision;

/// How long start-up (and a reload) waits for a new server's first connection before it
/// goes on without its tools.
const FIRST_CONNECT: Duration = Duration::from_secs(25);

/// What `toolhost status` shows of one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    /// Its name in the config.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Its command line or URL.
    pub endpoint: String,
    /// What its tools' names start with.
    pub prefix: String,
    /// Where it is.
    #[serde(flatten)]
    pub state: ServerState,
    /// Its tools as the registry lists them.
    pub tools: Vec<String>,
    /// Restarts since the host started it.
    pub restarts: u64,
    /// Calls in flight.
    pub in_flight: usize,
    /// A stdio server's network: allowed or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// What holds a stdio server's processes (`cgroup v1 PATH` with its memory and
    /// process limits, or `process group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
}

/// Why a command could not reach its MCP servers, or one of them.
#[derive(Debug, thiserror::Error)]
pub enum McpServersError {
    /// The runtime the servers are reached on could not start.
    #[error(
        "could not start the runtime MCP servers are reached on (the system refused a thread \
         or an epoll instance; check the process and open-file limits)"
    )]
    Runtime,
    /// A server could not be reached; the reason names it and says what to do.
    #[error("{reason}")]
    Down {
        /// The server.
        server: String,
        /// Why, as `toolhost status` says it.
        reason: String,
    },
}

struct Running {
    settings: McpServerSettings,
    link: Arc<Link>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// The tools each server listed last, by server name.
type Published = Arc<Mutex<BTreeMap<String, Vec<Arc<dyn DynTool>>>>>;

/// The MCP servers a host serves tools from.
pub struct McpServers {
    /// The catalog their tools join (`None`: a command's own servers, whose tools it
    /// takes once, [`McpServers::start_for_command`]).
    catalog: Option<Arc<PluginCatalog>>,
    how: Supervision,
    published: Published,
    running: Mutex<BTreeMap<String, Running>>,
}

impl McpServers {
    /// No servers yet: [`McpServers::apply`] starts them, and their tools join
    /// `catalog`'s registry. Their folders go under `dirs_root`; the sandbox mode, memory
    /// and process limits and the crash limits are the plugin workers' (`policy`), unless
    /// an entry says otherwise.
    pub fn new(
        catalog: Arc<PluginCatalog>,
        dirs_root: PathBuf,
        policy: &IsolationPolicy,
    ) -> Arc<McpServers> {
        McpServers::make(Some(catalog), dirs_root, policy)
    }

    fn make(
        catalog: Option<Arc<PluginCatalog>>,
        dirs_root: PathBuf,
        policy: &IsolationPolicy,
    ) -> Arc<McpServers> {
        let published: Published = Arc::default();
        let sink = Arc::clone(&published);
        let publisher = catalog.as_ref().map(Arc::downgrade);
        Arc::new(McpServers {
            catalog,
            how: Supervision {
                dirs_root,
                server: ServerLimits {
                    sandbox: policy.sandbox,
                    memory_bytes: policy.memory_limit_bytes,
                    max_processes: policy.max_processes,
                },
                limits: CrashLimits {
                    max_crashes: policy.max_crashes,
                    window: policy.crash_window,
                },
                publish: Arc::new(move |name, tools| {
                    sink.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(name.to_owned(), tools.clone());
                    if let Some(catalog) = publisher.as_ref().and_then(std::sync::Weak::upgrade) {
                        catalog.set_source_tools(&format!("mcp:{name}"), Some(tools));
                    }
                }),
            },
            published,
            running: Mutex::new(BTreeMap::new()),
        })
    }

    /// For a command that runs calls itself (`toolhost list`, `call`, `run`, `chat`):
    /// starts `servers` on a runtime of their own that lives as long as the process
    /// (so their tools keep working while the command runs), waits for each one's first
    /// connection, and returns their tools, and for each server that could not be
    /// reached, why.
    pub fn start_for_command(
        servers: &[McpServerSettings],
        dirs_root: PathBuf,
        policy: &IsolationPolicy,
    ) -> (Vec<Arc<dyn DynTool>>, Vec<McpServersError>) {
        if servers.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let me = match McpServers::on_own_runtime(servers, dirs_root, policy) {
            Ok(me) => me,
            Err(e) => return (Vec::new(), vec![e]),
        };
        let tools = me.published_tools();
        let errors = me
            .down_servers()
            .into_iter()
            .map(|(server, reason)| McpServersError::Down { server, reason })
            .collect();
        // The servers run until the process ends.
        std::mem::forget(me);
        (tools, errors)
    }

    /// `toolhost check --mcp-server NAME`: connects to `server` once (confined as a host
    /// would start it) and says what it found: its status (the protocol agreed and what
    /// it calls itself, or why it could not be reached) and its tools as the registry
    /// would list them.
    pub fn check_for_command(
        server: &McpServerSettings,
        dirs_root: PathBuf,
        policy: &IsolationPolicy,
    ) -> Result<(McpServerStatus, Vec<Arc<dyn DynTool>>), McpServersError> {
        let me = McpServers::on_own_runtime(std::slice::from_ref(server), dirs_root, policy)?;
        // `apply` started it, so status has its entry.
        let status = me
            .status()
            .into_iter()
            .next()
            .ok_or(McpServersError::Down {
                server: server.name.clone(),
                reason: format!("the MCP server '{}' was not started", server.name),
            })?;
        let tools = me.published_tools();
        std::mem::forget(me);
        Ok((status, tools))
    }

    /// Every server's tools as last listed.
    fn published_tools(&self) -> Vec<Arc<dyn DynTool>> {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// `servers` started on the MCP client runtime, each one's first connection made or
    /// failed.
    fn on_own_runtime(
        servers: &[McpServerSettings],
        dirs_root: PathBuf,
        policy: &IsolationPolicy,
    ) -> Result<Arc<McpServers>, McpServersError> {
        let runtime = client_runtime()?;
        let me = McpServers::make(None, dirs_root, policy);
        let applied = Arc::clone(&me);
        let servers = servers.to_vec();
        let _ = futures_block_on(&runtime, async move { applied.apply(&servers).await });
        Ok(me)
    }

    /// Makes the running servers those of `servers`: starts the new ones, stops the ones
    /// gone (their tools leave the registry) and restarts those whose entry changed; then
    /// waits (bounded) for each new one's first connection, so its tools are listed when
    /// this returns if it could be reached. Returns the names started and stopped.
    pub async fn apply(&self, servers: &[McpServerSettings]) -> (Vec<String>, Vec<String>) {
        let mut stopped = Vec::new();
        let mut gone = Vec::new();
        let mut started = Vec::new();
        {
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            let names: Vec<String> = running.keys().cloned().collect();
            for name in names {
                let keep = servers.iter().any(|s| {
                    s.name == name && running.get(&name).is_some_and(|r| r.settings == *s)
                });
                if !keep && let Some(r) = running.remove(&name) {
                    r.stop.cancel();
                    gone.push(r);
                    stopped.push(name);
                }
            }
            for settings in servers {
                if running.contains_key(&settings.name) {
                    continue;
                }
                let link = Link::new(
                    &settings.name,
                    matches!(settings.transport, crate::config::McpTransport::Http { .. }),
                );
                let stop = CancellationToken::new();
                // On the runtime `apply` runs on (a host's own: measured, a call's hops
                // cost less there than across to a runtime of the client's own).
                let supervisor = tokio::spawn(server::supervise(
                    settings.clone(),
                    Arc::clone(&link),
                    self.how.clone(),
                    stop.clone(),
                ));
                // A supervisor that panics leaves its server failed, saying so, not
                // starting for ever.
                let watched = Arc::clone(&link);
                let task = tokio::spawn(async move {
                    if let Err(e) = supervisor.await
                        && e.is_panic()
                    {
                        watched.failed(format!(
                            "toolhost's MCP client for it failed ({}); `toolhost reload` after \
                             fixing the entry, and report it",
                            panic_text(e.into_panic())
                        ));
                    }
                });
                running.insert(
                    settings.name.clone(),
                    Running {
                        settings: settings.clone(),
                        link: Arc::clone(&link),
                        stop,
                        task,
                    },
                );
                started.push(link);
            }
        }
        for r in gone {
            let _ = tokio::time::timeout(Duration::from_secs(5), r.task).await;
            if !started.iter().any(|l| *l.name == *r.settings.name) {
                self.published
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&r.settings.name);
                if let Some(catalog) = &self.catalog {
                    catalog.set_source_tools(&format!("mcp:{}", r.settings.name), None);
                }
            }
        }
        for link in &started {
            link.settled(FIRST_CONNECT).await;
        }
        (
            started.iter().map(|l| l.name.to_string()).collect(),
            stopped,
        )
    }

    /// Lets every quarantined server start again (`toolhost reload`); returns their names.
    pub fn lift_quarantines(&self) -> Vec<String> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running
            .values()
            .filter(|r| matches!(r.link.state(), ServerState::Quarantined { .. }))
            .map(|r| {
                r.link.lift.notify_one();
                r.settings.name.clone()
            })
            .collect()
    }

    /// The servers not serving now (by name), with why.
    pub fn down_servers(&self) -> Vec<(String, String)> {
        self.down(|s| s.name.clone())
    }

    /// The prefixes of the servers not serving now, with why: a profile that lists a
    /// tool under one is not wrong, its server is down.
    pub fn down_prefixes(&self) -> Vec<(String, String)> {
        self.down(|s| s.prefix.clone())
    }

    fn down(&self, key: impl Fn(&McpServerSettings) -> String) -> Vec<(String, String)> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running
            .values()
            .filter(|r| !matches!(r.link.state(), ServerState::Running { .. }))
            .map(|r| (key(&r.settings), r.link.unavailable()))
            .collect()
    }

    /// What status shows of each server.
    pub fn status(&self) -> Vec<McpServerStatus> {
        let published = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running
            .values()
            .map(|r| McpServerStatus {
                name: r.settings.name.clone(),
                transport: match r.settings.transport {
                    McpTransport::Stdio { .. } => "stdio",
                    McpTransport::Http { .. } => "http",
                }
                .to_owned(),
                endpoint: r.settings.endpoint(),
                prefix: r.settings.prefix.clone(),
                state: r.link.state(),
                tools: published
                    .get(&r.settings.name)
                    .map(|tools| tools.iter().map(|t| t.spec().name.clone()).collect())
                    .unwrap_or_default(),
                restarts: r.link.restarts(),
                in_flight: r.link.flights.len(),
                network: matches!(r.settings.transport, McpTransport::Stdio { .. })
                    .then_some(r.settings.sandbox.network),
                containment: r.link.containment(),
            })
            .collect()
    }

    /// Stops every server (the host is stopping).
    pub async fn stop_all(&self) {
        let all: Vec<Running> = {
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            std::mem::take(&mut *running).into_values().collect()
        };
        for r in &all {
            r.stop.cancel();
        }
        for r in all {
            let _ = tokio::time::timeout(Duration::from_secs(5), r.task).await;
        }
    }
}

/// What a panic said.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// The runtime a command's MCP servers run on (a command has no runtime that lives as long
/// as it does): one worker thread, which lives as long as the process, as the thread that
/// starts a stdio server must (its parent-death signal follows that thread).
fn client_runtime() -> Result<tokio::runtime::Handle, McpServersError> {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("toolhost-mcp-client")
                .enable_all()
                .build()
                .ok()
        })
        .as_ref()
        .map(|r| r.handle().clone())
        .ok_or(McpServersError::Runtime)
}

/// Runs `future` on `runtime` from outside any runtime (a command's thread) and waits.
fn futures_block_on<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    runtime.block_on(runtime.spawn(future)).ok()
}
