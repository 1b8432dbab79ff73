//! The running host's shared state: the plugin catalog, the profiles, the call door
//! (every call of every frontend enters by it; statistics observe it) and what status
//! shows. Frontends (control socket, MCP) reach tools only through it; it names none of
//! their types (a frontend registers its connected clients as a [`ClientDirectory`]). How a host
//! is started and stopped is in `serve.rs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Profile;
use crate::metrics::{CallMetrics, ScrapeFacts};
use crate::plugins::catalog::watch::WatchConfig;
use crate::plugins::catalog::{CatalogConfig, PluginCatalog};
use crate::plugins::catalog::{CatalogStatus, RescanReport};
use crate::plugins::run::call_pool::StuckCall;
use toolhost_calls::context::{HostRequests, ProfileRequests};
use toolhost_calls::dispatcher::DispatchConfig;
use toolhost_calls::door::{CallDoor, CallSettings, ProfileScope, Profiles, UnknownProfile};
use toolhost_calls::outputs::{OutputSettings, OutputStore};
use toolhost_calls::policy::NobodyToAsk;
use toolhost_calls::profile_dirs::ProfileDirs;
use toolhost_calls::registry::ToolRegistry;
use toolhost_calls::stats::{CallStats, ToolStatsSnapshot};

/// How to run a host.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Plugin directories and generation limits.
    pub catalog: CatalogConfig,
    /// Watch the directories (`None`: only `reload` rescans).
    pub watch: Option<WatchConfig>,
    /// Where the control socket goes.
    pub control_path: PathBuf,
    /// Call timeouts.
    pub dispatch: DispatchConfig,
    /// On shutdown, how long calls in flight get to finish before they are cancelled.
    pub shutdown_grace: Duration,
    /// The profiles to check at start-up and show in status.
    pub profiles: Vec<Profile>,
    /// Whether "approve for this session" answers are remembered.
    pub remember_approvals: bool,
    /// How long availability answers are cached.
    pub availability_ttl: Duration,
    /// The profile control-socket calls use when they name none.
    pub default_profile: String,
    /// The config file, for messages.
    pub config_file: Option<PathBuf>,
    /// The audit log every call is recorded in (`None`: none).
    pub audit: Option<Arc<crate::audit::AuditLog>>,
    /// The MCP servers whose tools it serves (`[[mcp_servers]]`), and the folder their
    /// own folders go in (`None`: `mcp-servers` in the state directory).
    pub mcp_servers: Vec<crate::config::McpServerSettings>,
    /// See `mcp_servers`.
    pub mcp_servers_dir: Option<PathBuf>,
    /// The shared state of many replicas (`[state] backend = "postgres"`): kept outputs
    /// and lasting approvals go there instead of the profiles' folders (`None`: files).
    pub state: Option<Arc<crate::state::SharedState>>,
}

/// A running host's state, shared by its frontends.
pub struct Host {
    catalog: Arc<PluginCatalog>,
    profiles: Arc<HostProfiles>,
    door: CallDoor,
    client_directories: Mutex<Vec<Weak<dyn ClientDirectory>>>,
    stats: Arc<CallStats>,
    metrics: Arc<CallMetrics>,
    /// Control-socket connections open now (the control frontend counts them).
    control_clients: Arc<AtomicUsize>,
    started: Instant,
    control_path: PathBuf,
    watching: bool,
    /// Approval questions waiting for a terminal (MCP clients without elicitation).
    approvals: Arc<crate::approval_relay::ApprovalRelay>,
    /// The MCP servers it serves tools from.
    mcp_servers: Arc<crate::upstream::McpServers>,
    /// The config file, read again on `reload` for its `[[mcp_servers]]`.
    config_file: Option<PathBuf>,
    /// The shared state of many replicas, if it is one.
    state: Option<Arc<crate::state::SharedState>>,
    /// Set when shutdown begins: readiness says no, so a load balancer sends no more.
    draining: std::sync::atomic::AtomicBool,
    /// Set once the first scan of the plugin folders is done.
    loaded: std::sync::atomic::AtomicBool,
    /// HTTP requests in flight (MCP over HTTP), and a wake-up when one ends.
    http_requests: tokio::sync::watch::Sender<usize>,
    /// Readiness checks answered: in all, and "not ready" since draining began.
    ready_checks: std::sync::atomic::AtomicU64,
    drain_seen: tokio::sync::watch::Sender<bool>,
}

/// An HTTP request in flight (see [`Host::drain`]).
pub(crate) struct HttpRequest(Arc<Host>);

impl Drop for HttpRequest {
    fn drop(&mut self) {
        self.0
            .http_requests
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The host's profiles as the door sees them: each one's view of the catalog's current
/// registry (rebuilt when the registry changes) and its state folder.
struct HostProfiles {
    catalog: Arc<PluginCatalog>,
    profiles: Vec<(Profile, Arc<dyn HostRequests>)>,
    /// Each profile's kept outputs, by name (the implicit default's too, if it has a
    /// state folder).
    outputs: HashMap<String, Arc<OutputStore>>,
    /// The implicit default profile's (one the config has no entry for) state requests.
    implicit_default: Option<Arc<dyn HostRequests>>,
    default_profile: String,
    /// Per profile name: the registry its view was made from, and the view.
    views: Mutex<HashMap<String, CachedView>>,
}

/// A profile's view, and the registry it was made from (a view of an older registry is
/// made again).
type CachedView = (Arc<ToolRegistry>, Arc<ToolRegistry>);

impl HostProfiles {
    fn profile(&self, name: &str) -> Option<&(Profile, Arc<dyn HostRequests>)> {
        self.profiles.iter().find(|(p, _)| p.name == name)
    }

    /// `profile`'s view of the current registry (every tool for a default profile the
    /// config has no entry for).
    fn view(&self, name: &str, profile: Option<&Profile>, read_output: bool) -> Arc<ToolRegistry> {
        let full = self.catalog.registry();
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, view)) = views.get(name)
            && Arc::ptr_eq(seen, &full)
        {
            return Arc::clone(view);
        }
        let view = match profile {
            Some(profile) => Arc::new(profile.view(&full).registry),
            None => Arc::clone(&full),
        };
        // The description rule, once per profile and registry: descriptions that name a
        // tool this profile does not show.
        for mention in
            crate::plugins::descriptions::DescriptionRule::for_registry(&full).check(&view)
        {
            tracing::warn!(profile = name, "{mention}");
        }
        // read_output first, so that a plugin tool of that name is the refused one.
        let view = if read_output && self.outputs.contains_key(name) {
            Arc::new(toolhost_calls::read_output::with_read_output(&view))
        } else {
            view
        };
        views.insert(name.to_owned(), (full, Arc::clone(&view)));
        view
    }
}

impl Profiles for HostProfiles {
    fn scope(&self, requested: Option<&str>) -> Result<ProfileScope, UnknownProfile> {
        let name = requested.unwrap_or(&self.default_profile);
        let (profile, requests) = match self.profile(name) {
            Some((profile, requests)) => (Some(profile), Some(Arc::clone(requests))),
            None if name == self.default_profile => (None, self.implicit_default.clone()),
            None => {
                return Err(UnknownProfile {
                    name: name.to_owned(),
                    known: self
                        .profiles
                        .iter()
                        .map(|(p, _)| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        };
        let output = profile.map_or_else(OutputSettings::default, |p| p.output);
        Ok(ProfileScope {
            name: name.to_owned(),
            tools: self.view(name, profile, output.read_output),
            requests,
            outputs: self.outputs.get(name).cloned(),
            output,
        })
    }
}

/// What `toolhost status` shows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostStatus {
    /// The host's process id.
    pub pid: u32,
    /// Seconds since start.
    pub uptime_secs: f64,
    /// The control socket.
    pub control_socket: PathBuf,
    /// Whether the plugin directories are watched.
    pub watching: bool,
    /// Plugins, generations, errors.
    #[serde(flatten)]
    pub catalog: CatalogStatus,
    /// Per-tool call statistics.
    pub tools: Vec<ToolStatsSnapshot>,
    /// Profiles, each with the tools it lists that no loaded plugin provides now.
    pub profiles: Vec<ProfileStatus>,
    /// Tools whose requirements are not met, with the reason.
    pub unavailable: Vec<UnavailableTool>,
    /// Plugin calls given up by their callers whose plugin code has not returned (it
    /// spins or blocks): each holds a plugin thread until it does.
    #[serde(default)]
    pub stuck_calls: Vec<StuckCall>,
    /// Clients connected now through the frontends that register them (MCP).
    #[serde(rename = "mcp_clients")]
    pub clients: Vec<ConnectedClient>,
    /// The MCP servers it serves tools from (`[[mcp_servers]]`).
    #[serde(default)]
    pub mcp_servers: Vec<crate::upstream::McpServerStatus>,
    /// The hash of the plugin set loaded ([`plugin_set_hash`]): replicas that show
    /// different hashes load different plugins.
    #[serde(default)]
    pub plugin_set: String,
    /// This replica's name, when it is one of many (`[state] backend = "postgres"`).
    #[serde(default)]
    pub replica: Option<String>,
}

/// A client connected through a frontend, as `toolhost status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectedClient {
    /// How it is connected (`stdio`, `http`).
    pub transport: String,
    /// The name of the bearer token it authenticated with (HTTP).
    pub token: Option<String>,
    /// The protocol version it speaks.
    pub protocol_version: String,
    /// The name it gave.
    pub client_name: String,
    /// Its version, if it gave one.
    pub client_version: String,
    /// Seconds since it connected.
    pub connected_secs: f64,
}

/// A frontend's table of connected clients, which status lists (see
/// [`Host::register_clients`]).
pub trait ClientDirectory: Send + Sync {
    /// The clients connected now.
    fn connected(&self) -> Vec<ConnectedClient>;
}

/// A profile in status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProfileStatus {
    /// The profile.
    pub name: String,
    /// How many tools its agent sees now (not deny, not unavailable).
    pub tools: usize,
    /// Tools it lists that are missing (a hot reload removed them); calls get
    /// ToolNotFound until they come back.
    pub missing_tools: Vec<String>,
}

/// An unavailable tool in status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnavailableTool {
    /// The tool.
    pub tool: String,
    /// Why.
    pub reason: String,
}

/// A rescan asked for by the operator did not finish (the blocking task running it
/// panicked or was cancelled at shutdown); what was loaded keeps serving.
#[derive(Debug, thiserror::Error)]
#[error("the rescan failed: {0}; what was loaded keeps serving (see the host's log)")]
pub struct ReloadError(String);

impl Host {
    /// A host over `catalog` (not yet scanned).
    pub fn new(catalog: Arc<PluginCatalog>, config: &ServeConfig) -> Host {
        let stats = Arc::new(CallStats::new());
        let metrics = Arc::new(CallMetrics::new());
        let mut outputs = HashMap::new();
        let shared_outputs = config.state.as_ref().map(|state| {
            Arc::new(crate::state::SharedOutputStore::new(Arc::clone(state)))
                as Arc<dyn toolhost_calls::outputs::SharedOutputs>
        });
        let output_store = |name: &str, dirs: &ProfileDirs, settings: &OutputSettings| {
            Arc::new(match &shared_outputs {
                Some(shared) => OutputStore::shared(name, settings, Arc::clone(shared)),
                None => OutputStore::for_profile(dirs, settings),
            })
        };
        for p in &config.profiles {
            outputs.insert(p.name.clone(), output_store(&p.name, &p.dirs, &p.output));
        }
        // A default profile the config has no entry for (a library's ServeConfig) keeps
        // its state in the host's state directory, `profiles/<name>/state`, like every
        // profile (`LoadedConfig::profile_state_root`).
        let implicit_default = (!config
            .profiles
            .iter()
            .any(|p| p.name == config.default_profile))
        .then(|| {
            crate::sys::dirs::state_dir()
                .map(|d| ProfileDirs::under(&d.join("profiles"), &config.default_profile))
        })
        .flatten();
        let implicit_requests = implicit_default.as_ref().map(|dirs| {
            outputs.insert(
                config.default_profile.clone(),
                output_store(&config.default_profile, dirs, &OutputSettings::default()),
            );
            Arc::new(ProfileRequests::new(dirs.state())) as Arc<dyn HostRequests>
        });
        // Outputs past their age or over the size limit go at start (and after writes), on
        // a thread of their own: a folder of many outputs does not hold up the start.
        let stores: Vec<Arc<OutputStore>> = outputs.values().cloned().collect();
        let pruning = std::thread::Builder::new()
            .name("toolhost-prune".to_owned())
            .spawn(move || {
                for store in stores {
                    if let Err(e) = store.prune() {
                        tracing::warn!(error = %e, "could not prune the kept outputs");
                    }
                }
            });
        if let Err(e) = pruning {
            tracing::warn!(error = %e, "could not start pruning the kept outputs; the first write prunes");
        }
        // Lasting approvals are kept per profile, beside its state folder (or in the
        // shared state, for every replica).
        let with_store = config
            .profiles
            .iter()
            .map(|p| (p.name.clone(), p.dirs.clone()))
            .chain(
                implicit_default
                    .iter()
                    .map(|dirs| (config.default_profile.clone(), dirs.clone())),
            );
        let lasting: Arc<dyn toolhost_calls::policy::LastingApprovals> = match &config.state {
            Some(state) => Arc::new(crate::state::SharedApprovals::new(
                Arc::clone(state),
                with_store.map(|(name, _)| name),
            )),
            None => Arc::new(toolhost_calls::approvals::ApprovalFiles::new(with_store)),
        };
        let profiles = Arc::new(HostProfiles {
            catalog: Arc::clone(&catalog),
            profiles: config
                .profiles
                .iter()
                .map(|p| {
                    let requests: Arc<dyn HostRequests> = Arc::new(p.requests());
                    (p.clone(), requests)
                })
                .collect(),
            outputs,
            implicit_default: implicit_requests,
            default_profile: config.default_profile.clone(),
            views: Mutex::new(HashMap::new()),
        });
        // Control-socket clients cannot be asked: calls that need approval are refused
        // unless a frontend's request brings an approver (an MCP client's).
        let door = CallDoor::new(
            &CallSettings {
                dispatch: config.dispatch,
                availability_ttl: config.availability_ttl,
                remember_approvals: config.remember_approvals,
            },
            Arc::clone(&profiles) as Arc<dyn Profiles>,
            Arc::new(NobodyToAsk {
                hint: "this caller cannot be asked; run `toolhost call --control` from a \
                       terminal to be asked there, or lower the tool's risk in the config \
                       (with allow_lower)"
                    .to_owned(),
            }),
        )
        .with_observer(Arc::clone(&stats) as Arc<dyn crate::CallObserver>)
        .with_observer(Arc::clone(&metrics) as Arc<dyn crate::CallObserver>)
        .with_lasting_approvals(lasting);
        let door = match &config.audit {
            Some(audit) => door.with_observer(Arc::clone(audit) as Arc<dyn crate::CallObserver>),
            None => door,
        };
        let mcp_catalog = Arc::clone(&catalog);
        Host {
            door,
            profiles,
            client_directories: Mutex::new(Vec::new()),
            catalog,
            stats,
            metrics,
            control_clients: Arc::new(AtomicUsize::new(0)),
            started: Instant::now(),
            control_path: config.control_path.clone(),
            watching: config.watch.is_some(),
            approvals: Arc::new(crate::approval_relay::ApprovalRelay::new()),
            mcp_servers: crate::upstream::McpServers::new(
                Arc::clone(&mcp_catalog),
                config.mcp_servers_dir.clone().unwrap_or_else(|| {
                    crate::sys::dirs::state_dir()
                        .unwrap_or_else(std::env::temp_dir)
                        .join("mcp-servers")
                }),
                &config.catalog.loading.isolation,
            ),
            config_file: config.config_file.clone(),
            state: config.state.clone(),
            draining: std::sync::atomic::AtomicBool::new(false),
            loaded: std::sync::atomic::AtomicBool::new(false),
            http_requests: tokio::sync::watch::Sender::new(0),
            ready_checks: std::sync::atomic::AtomicU64::new(0),
            drain_seen: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Counts an HTTP request in flight until the guard drops.
    pub(crate) fn http_request(host: &Arc<Host>) -> HttpRequest {
        host.http_requests.send_modify(|n| *n += 1);
        HttpRequest(Arc::clone(host))
    }

    /// Drains before shutdown: readiness says no at once; if a load balancer checks
    /// readiness, waits (at most `limit`) until it has been told, so it sends no more;
    /// then waits (at most `limit` again) for the HTTP requests in flight to end. The
    /// control socket's calls are drained after this, by [`RunningHost::run`].
    ///
    /// [`RunningHost::run`]: crate::RunningHost::run
    pub async fn drain(&self, limit: Duration) {
        self.start_draining();
        tracing::info!("draining: readiness now says no; calls in flight finish");
        if self.ready_checks.load(Ordering::Acquire) > 0 {
            let mut seen = self.drain_seen.subscribe();
            if tokio::time::timeout(limit, seen.wait_for(|seen| *seen))
                .await
                .is_err()
            {
                tracing::warn!(
                    "draining: no readiness check came within {} s; going on",
                    limit.as_secs()
                );
            }
        }
        let mut requests = self.http_requests.subscribe();
        if tokio::time::timeout(limit, requests.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!(
                "draining: {} HTTP requests still in flight after {} s; they are cut",
                *self.http_requests.borrow(),
                limit.as_secs()
            );
        }
    }

    /// The shared state of many replicas, if this host is one.
    pub fn shared_state(&self) -> Option<&Arc<crate::state::SharedState>> {
        self.state.as_ref()
    }

    /// This replica's name, if it is one of many.
    pub fn replica(&self) -> Option<&str> {
        self.state.as_ref().map(|s| s.replica())
    }

    /// Says the plugin folders were scanned (readiness waits for it).
    pub(crate) fn mark_loaded(&self) {
        self.loaded
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Shutdown began: readiness says no from now on.
    pub fn start_draining(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether shutdown began.
    pub fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Acquire)
    }

    /// What a load balancer's health check is told: ready once the plugins are loaded,
    /// not while draining. The shared state database being away does not make a replica
    /// unready: it is away for every replica alike, and calls that do not need it (read
    /// tools without kept outputs) still work; `shared_state` says whether it is heard.
    /// `expected_plugins`: the plugin set's hash the asker expects; another one is a
    /// reason not to be ready.
    pub async fn readiness(&self, expected_plugins: Option<&str>) -> Readiness {
        let mut answer = self.readiness_now();
        if let Some(expected) = expected_plugins
            && expected != answer.plugin_set
        {
            answer.ready = false;
            answer.reasons.push(format!(
                "this replica loads plugin set {}, not the {expected} asked for",
                answer.plugin_set
            ));
        }
        self.ready_checks.fetch_add(1, Ordering::AcqRel);
        if self.draining() {
            self.drain_seen.send_replace(true);
        }
        answer
    }

    fn readiness_now(&self) -> Readiness {
        let mut reasons = Vec::new();
        if !self.loaded.load(std::sync::atomic::Ordering::Acquire) {
            reasons.push("the plugins are still loading".to_owned());
        }
        if self.draining() {
            reasons.push("shutting down: calls in flight finish, no new ones".to_owned());
        }
        let status = self.catalog.status();
        Readiness {
            ready: reasons.is_empty(),
            reasons,
            replica: self.replica().map(str::to_owned),
            plugin_set: plugin_set_hash(&status),
            plugins: status.plugins.len(),
            shared_state: self.state.as_ref().map(|s| s.listening()),
            in_flight: *self.http_requests.borrow(),
        }
    }

    /// The MCP servers it serves tools from.
    pub fn mcp_servers(&self) -> &Arc<crate::upstream::McpServers> {
        &self.mcp_servers
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<PluginCatalog> {
        &self.catalog
    }

    /// The door every frontend's calls enter by (statistics observe it).
    pub fn door(&self) -> &CallDoor {
        &self.door
    }

    /// Rescans the plugin directories now, as `toolhost reload` and SIGHUP ask: lets
    /// quarantined plugins start their workers again, then a full rescan off the runtime's
    /// threads. A service manager hears `RELOADING=1` before and `READY=1` after (nothing
    /// outside systemd).
    pub async fn reload(&self) -> Result<RescanReport, ReloadError> {
        crate::sys::service_manager::reloading();
        let catalog = Arc::clone(&self.catalog);
        let done = tokio::task::spawn_blocking(move || {
            let lifted = catalog.lift_quarantines();
            let mut report = catalog.rescan();
            report.quarantine_lifted = lifted;
            report
        })
        .await;
        let mut report = done.map_err(|e| ReloadError(e.to_string()))?;
        report.quarantine_lifted.extend(
            self.mcp_servers
                .lift_quarantines()
                .into_iter()
                .map(|n| format!("mcp:{n}")),
        );
        // Servers added to or removed from the config take effect now.
        if let Some(file) = &self.config_file {
            match crate::config::LoadedConfig::load(Some(file)) {
                Ok(config) => {
                    let (started, stopped) = self.mcp_servers.apply(config.mcp_servers()).await;
                    for name in started {
                        tracing::info!("reload: MCP server '{name}' started");
                    }
                    for name in stopped {
                        tracing::info!("reload: MCP server '{name}' stopped");
                    }
                }
                Err(e) => tracing::warn!(
                    "reload: could not read {} again, so its [[mcp_servers]] stay as they \
                     were: {e}",
                    file.display()
                ),
            }
        }
        crate::sys::service_manager::ready(&self.serving_line());
        Ok(report)
    }

    /// One line on what the host serves, for a service manager's status.
    pub(crate) fn serving_line(&self) -> String {
        let status = self.catalog.status();
        format!(
            "serving {} tools from {} plugins ({} files did not load)",
            self.catalog.registry().len(),
            status.plugins.len(),
            status.load_errors.len()
        )
    }

    /// Cancels every call whose request the door made (at the end of shutdown).
    pub(crate) fn cancel_calls(&self) {
        self.door.cancel_all();
    }

    /// The profile calls use when they name none.
    pub fn default_profile(&self) -> &str {
        &self.profiles.default_profile
    }

    /// Shows the clients in `directory` in status for as long as it lives (a frontend
    /// registers its table of connected clients here).
    pub fn register_clients(&self, directory: Weak<dyn ClientDirectory>) {
        let mut directories = self
            .client_directories
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        directories.retain(|d| d.strong_count() > 0);
        directories.push(directory);
    }

    fn connected_clients(&self) -> Vec<ConnectedClient> {
        let directories = self
            .client_directories
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        directories
            .iter()
            .filter_map(Weak::upgrade)
            .flat_map(|d| d.connected())
            .collect()
    }

    /// The approval questions waiting for a terminal: MCP frontends ask there, the
    /// control socket lists and answers them.
    pub fn approval_relay(&self) -> &Arc<crate::approval_relay::ApprovalRelay> {
        &self.approvals
    }

    /// The count of open control-socket connections, which the control frontend keeps.
    pub fn control_clients(&self) -> &Arc<AtomicUsize> {
        &self.control_clients
    }

    /// The Prometheus metrics as text in `format` (its content type is
    /// [`MetricsFormat::content_type`](crate::MetricsFormat::content_type)): the door's
    /// call counters and what status knows now.
    pub fn metrics_text(&self, format: crate::MetricsFormat) -> String {
        let catalog = self.catalog.status();
        let facts = ScrapeFacts {
            reloads: catalog.reloads,
            plugins: catalog.plugins.len() as u64,
            generations_mapped: catalog.generations_mapped,
            retained_bytes: catalog.retained_bytes_estimate,
            mcp_sessions: self
                .connected_clients()
                .into_iter()
                .map(|c| c.protocol_version)
                .collect(),
            control_clients: self.control_clients.load(Ordering::Relaxed) as u64,
            workers: catalog
                .plugins
                .iter()
                .filter_map(|p| {
                    let w = p.worker.as_ref()?;
                    let running = if w.profiles.is_empty() {
                        u64::from(w.pid.is_some())
                    } else {
                        w.profiles.len() as u64
                    };
                    Some((p.name.clone(), running, w.restarts, w.quarantined.is_some()))
                })
                .collect(),
            mcp_servers: self
                .mcp_servers
                .status()
                .into_iter()
                .map(|s| {
                    (
                        s.name,
                        matches!(s.state, crate::upstream::ServerState::Running { .. }),
                        s.restarts,
                        matches!(s.state, crate::upstream::ServerState::Quarantined { .. }),
                    )
                })
                .collect(),
        };
        self.metrics.render_as(&facts, format)
    }

    /// The status snapshot.
    pub fn status(&self) -> HostStatus {
        let registry = self.catalog.registry();
        let catalog = self.catalog.status();
        HostStatus {
            plugin_set: plugin_set_hash(&catalog),
            pid: std::process::id(),
            uptime_secs: self.started.elapsed().as_secs_f64(),
            control_socket: self.control_path.clone(),
            watching: self.watching,
            catalog,
            tools: self.stats.snapshot(),
            profiles: self
                .profiles
                .profiles
                .iter()
                .map(|(p, _)| {
                    let view = p.view(&registry);
                    ProfileStatus {
                        name: p.name.clone(),
                        tools: self.door.visible(&view.registry).len(),
                        missing_tools: view.missing,
                    }
                })
                .collect(),
            unavailable: {
                let down = self.mcp_servers.down_servers();
                registry
                    .iter()
                    .filter_map(|t| {
                        if let Some(server) = t.tool().origin().mcp_server()
                            && let Some((_, why)) = down.iter().find(|(name, _)| name == server)
                        {
                            return Some(UnavailableTool {
                                tool: t.spec().name.clone(),
                                reason: why.clone(),
                            });
                        }
                        self.door
                            .availability()
                            .check(t.spec())
                            .err()
                            .map(|reason| UnavailableTool {
                                tool: t.spec().name.clone(),
                                reason: reason.to_string(),
                            })
                    })
                    .collect()
            },
            stuck_calls: crate::plugins::run::call_pool::stuck_calls(),
            clients: self.connected_clients(),
            mcp_servers: self.mcp_servers.status(),
            replica: self.replica().map(str::to_owned),
        }
    }
}

/// The hash of the set of plugins loaded: sha256 over each plugin's name and file sha256,
/// sorted, so replicas that load the same files show the same hash whatever their folder
/// or load order.
pub fn plugin_set_hash(status: &CatalogStatus) -> String {
    use sha2::Digest as _;
    let mut lines: Vec<String> = status
        .plugins
        .iter()
        .map(|p| format!("{} {}\n", p.name, p.sha256))
        .collect();
    lines.sort();
    let digest = sha2::Sha256::digest(lines.concat().as_bytes());
    toolhost_calls::policy::hex(&digest)
}

/// A host's answer to a readiness check (`GET /ready`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Readiness {
    /// Whether it takes calls.
    pub ready: bool,
    /// Why not (empty when ready).
    pub reasons: Vec<String>,
    /// This replica's name, if it is one of many.
    pub replica: Option<String>,
    /// [`plugin_set_hash`] of what it loaded.
    pub plugin_set: String,
    /// Plugins loaded.
    pub plugins: usize,
    /// For a replica: whether its shared state database is connected and its changes
    /// heard now (`None`: files).
    pub shared_state: Option<bool>,
    /// MCP requests over HTTP in flight now (a draining replica exits once none are).
    pub in_flight: usize,
}
