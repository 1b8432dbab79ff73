//! The running host's shared state: the plugin catalog, the profiles, the call pipeline
//! (availability, approval policy, dispatcher with statistics) and what status shows.
//! Frontends (control socket, MCP) reach tools only through it; it names none of their
//! types (a frontend registers its connected clients as a [`ClientDirectory`]). How a host
//! is started and stopped is in `serve.rs`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::calls::availability::Availability;
use crate::calls::dispatcher::{DispatchConfig, Dispatcher};
use crate::calls::pipeline::{CallPipeline, CallSettings};
use crate::calls::policy::{ApprovalPolicy, NobodyToAsk};
use crate::calls::stats::{CallStats, ToolStatsSnapshot};
use crate::config::Profile;
use crate::plugins::call_pool::StuckCall;
use crate::plugins::catalog::{CatalogConfig, PluginCatalog};
use crate::plugins::status::CatalogStatus;
use crate::plugins::watch::WatchConfig;

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
}

/// A call or frontend asked for a profile the host does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this host has no profile '{name}'; its profiles are: {known}")]
pub struct UnknownProfile {
    /// The profile asked for.
    pub name: String,
    /// The profiles there are, comma-separated.
    pub known: String,
}

/// A running host's state, shared by its frontends.
pub struct Host {
    catalog: Arc<PluginCatalog>,
    profiles: Vec<Profile>,
    default_profile: String,
    availability: Arc<Availability>,
    policy: Arc<ApprovalPolicy>,
    dispatcher: Dispatcher,
    client_directories: Mutex<Vec<Weak<dyn ClientDirectory>>>,
    stats: Arc<CallStats>,
    started: Instant,
    control_path: PathBuf,
    watching: bool,
    calls: CancellationToken,
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

impl Host {
    /// A host over `catalog` (not yet scanned).
    pub fn new(catalog: Arc<PluginCatalog>, config: &ServeConfig) -> Host {
        let stats = Arc::new(CallStats::new());
        // Control-socket clients cannot be asked yet: calls that need approval are refused.
        let pipeline = CallPipeline::new(
            &CallSettings {
                dispatch: config.dispatch,
                availability_ttl: config.availability_ttl,
                remember_approvals: config.remember_approvals,
            },
            Arc::new(NobodyToAsk {
                hint: "the control socket cannot ask a person; run it with `toolhost call --yes` \
                       or lower the tool's risk in the config (with allow_lower)"
                    .to_owned(),
            }),
        );
        Host {
            dispatcher: pipeline
                .dispatcher
                .with_observer(Arc::clone(&stats) as Arc<dyn crate::CallObserver>),
            profiles: config.profiles.clone(),
            default_profile: config.default_profile.clone(),
            availability: pipeline.availability,
            policy: pipeline.policy,
            client_directories: Mutex::new(Vec::new()),
            catalog,
            stats,
            started: Instant::now(),
            control_path: config.control_path.clone(),
            watching: config.watch.is_some(),
            calls: CancellationToken::new(),
        }
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<PluginCatalog> {
        &self.catalog
    }

    /// The dispatcher (with per-tool statistics) every frontend calls through.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// The approval policy; frontends that can ask their user derive theirs from it
    /// ([`ApprovalPolicy::with_approver`]) so session approvals are shared.
    pub fn policy(&self) -> &ApprovalPolicy {
        &self.policy
    }

    /// A cancel token for a frontend's call: cancelled when the host shuts down (after
    /// its grace period), so tools see their cancel signal instead of being dropped.
    pub fn call_token(&self) -> CancellationToken {
        self.calls.child_token()
    }

    /// Cancels every call made with a [`Host::call_token`] (at the end of shutdown).
    pub(crate) fn cancel_calls(&self) {
        self.calls.cancel();
    }

    /// The availability checks (cached).
    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// The profile calls use when they name none.
    pub fn default_profile(&self) -> &str {
        &self.default_profile
    }

    /// A profile by name.
    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// The profiles' names.
    pub fn profile_names(&self) -> Vec<&str> {
        self.profiles.iter().map(|p| p.name.as_str()).collect()
    }

    /// The profile a call runs as: `requested`, else the default profile. `None` when it
    /// is the default profile and the host has no entry for it (it then sees every tool);
    /// an error naming the host's profiles when `requested` is one it does not have.
    pub fn resolve_profile(
        &self,
        requested: Option<&str>,
    ) -> Result<Option<&Profile>, UnknownProfile> {
        let name = requested.unwrap_or(&self.default_profile);
        match self.profile(name) {
            Some(profile) => Ok(Some(profile)),
            None if requested.is_none() || name == self.default_profile => Ok(None),
            None => Err(UnknownProfile {
                name: name.to_owned(),
                known: self.profile_names().join(", "),
            }),
        }
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

    /// The status snapshot.
    pub fn status(&self) -> HostStatus {
        let registry = self.catalog.registry();
        HostStatus {
            pid: std::process::id(),
            uptime_secs: self.started.elapsed().as_secs_f64(),
            control_socket: self.control_path.clone(),
            watching: self.watching,
            catalog: self.catalog.status(),
            tools: self.stats.snapshot(),
            profiles: self
                .profiles
                .iter()
                .map(|p| {
                    let view = p.view(&registry);
                    ProfileStatus {
                        name: p.name.clone(),
                        tools: self.availability.visible_specs(&view.registry).len(),
                        missing_tools: view.missing,
                    }
                })
                .collect(),
            unavailable: registry
                .iter()
                .filter_map(|t| {
                    self.availability
                        .check(t.spec())
                        .err()
                        .map(|reason| UnavailableTool {
                            tool: t.spec().name.clone(),
                            reason: reason.to_string(),
                        })
                })
                .collect(),
            stuck_calls: crate::plugins::call_pool::stuck_calls(),
            clients: self.connected_clients(),
        }
    }
}
