//! Running a host: [`Host::start`] loads the plugins, checks the profiles and overrides
//! against them, starts the watcher and binds the control socket; [`RunningHost::run`]
//! serves until shutdown, then drains and cancels the calls in flight. This is the
//! composition root of the library: the one module that wires the core (catalog, watcher,
//! dispatcher) to a frontend (the control socket). MCP attaches from the binary.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::ConfigError;
use crate::frontends::control::{ControlError, ControlSocket};
use crate::host::{Host, ServeConfig};
use crate::plugins::catalog::PluginCatalog;
use crate::plugins::catalog::watch::{PluginWatcher, WatchError};

/// Why a host could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A profile lists a tool no plugin provides, or another configuration problem.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The private directory for plugin copies could not be made.
    #[error(
        "could not create the private directory plugins are loaded from (under $TMPDIR): {0}; \
         set TMPDIR to a writable directory"
    )]
    Loader(std::io::Error),
    /// The control socket could not be set up.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Watching could not start.
    #[error(transparent)]
    Watch(#[from] WatchError),
}

/// A started host: plugins loaded, directories watched, control socket bound. Frontends
/// attach to [`RunningHost::host`] (its catalog's registry and events) before or while
/// [`RunningHost::run`] serves.
pub struct RunningHost {
    host: Arc<Host>,
    socket: ControlSocket,
    _watcher: Option<PluginWatcher>,
    shutdown_grace: Duration,
    cancel_grace: Duration,
}

impl Host {
    /// Binds the control socket, loads the plugins and starts watching (unless
    /// `config.watch` is `None`).
    pub async fn start(config: ServeConfig) -> Result<RunningHost, ServeError> {
        // As servers do: a desktop's soft limit of 1,024 descriptors is no limit for a
        // host that keeps plugin files, workers and client connections open.
        if let Err(e) = crate::sys::rlimit::raise_open_file_limit() {
            tracing::warn!("could not read or raise the open-file limit: {e}");
        }
        let catalog =
            Arc::new(PluginCatalog::new(config.catalog.clone()).map_err(ServeError::Loader)?);
        let host = Arc::new(Host::new(Arc::clone(&catalog), &config));
        let socket = ControlSocket::bind(&config.control_path).await?;
        // Watching starts before the first scan: a plugin dropped in while the scan runs
        // is seen (an event during the scan is at worst one more rescan).
        let watcher = match config.watch {
            Some(watch) => Some(PluginWatcher::start(Arc::clone(&catalog), watch)?),
            None => None,
        };
        let first = Arc::clone(&catalog);
        let scanned = match tokio::task::spawn_blocking(move || first.rescan()).await {
            Ok(report) => Some((report.plugins_added.len(), report.errors.len())),
            Err(e) => {
                tracing::error!(
                    "the first scan of the plugin directories failed: {e}; serving no tools \
                     until `toolhost reload` or a file change"
                );
                None
            }
        };
        // The MCP servers' tools join the registry before the profiles are checked
        // against it (each server's first connection is waited for, bounded).
        host.mcp_servers().apply(&config.mcp_servers).await;
        // An override that would lower a tool without `allow_lower` stops start-up.
        let registry = catalog.registry();
        let refused =
            toolhost_calls::policy::apply_risk_overrides(&registry, &config.catalog.risk_overrides)
                .refused;
        if let Some(problem) = refused.into_iter().next() {
            return Err(ServeError::Config(ConfigError::Invalid {
                path: config
                    .config_file
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("the host config")),
                message: problem,
            }));
        }
        // A profile that lists a tool no plugin or server provides stops start-up, naming
        // both; one under the prefix of a server that could not be reached is a warning
        // (the server may come back).
        let down = host.mcp_servers().down_prefixes();
        for profile in &config.profiles {
            let view = profile.view(&registry);
            for tool in &view.missing {
                match down
                    .iter()
                    .find(|(prefix, _)| tool.starts_with(prefix.as_str()))
                {
                    Some((_, why)) => tracing::warn!(
                        "profile '{}' lists tool '{tool}', which is not served now: {why}",
                        profile.name
                    ),
                    None => {
                        return Err(ServeError::Config(ConfigError::MissingTool {
                            profile: profile.name.clone(),
                            tool: tool.clone(),
                            file: profile.file.clone(),
                        }));
                    }
                }
            }
        }
        // A settings table no plugin reads is most likely a misspelt plugin name (each
        // plugin's own unread keys were logged as it loaded).
        let loaded: Vec<String> = catalog
            .status()
            .plugins
            .into_iter()
            .map(|p| p.name)
            .collect();
        let none: &[String] = &[];
        for warning in config
            .catalog
            .loading
            .settings
            .warnings(loaded.iter().map(|n| (n.as_str(), none)))
        {
            tracing::warn!("config: {warning}");
        }
        // Only now, with nothing left that could stop start-up, is it serving.
        if let Some((plugins, errors)) = scanned {
            tracing::info!(
                plugins,
                tools = registry.len(),
                errors,
                control = %socket.path().display(),
                "toolhost is serving"
            );
        }
        host.mark_loaded();
        Ok(RunningHost {
            host,
            socket,
            _watcher: watcher,
            shutdown_grace: config.shutdown_grace,
            cancel_grace: config.dispatch.cancel_grace,
        })
    }
}

impl RunningHost {
    /// The host, for frontends in the same process.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// Serves the control socket until `shutdown` resolves; then stops accepting, removes
    /// the socket file, gives calls in flight `shutdown_grace` to finish and cancels the
    /// rest (bounded by the dispatcher's cancel grace). A service manager hears
    /// `READY=1` when serving begins and `STOPPING=1` when shutdown does (systemd's
    /// notification protocol; nothing without `NOTIFY_SOCKET`): attach frontends before
    /// calling it.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let stop = CancellationToken::new();
        let trigger = stop.clone();
        crate::sys::service_manager::ready(&self.host.serving_line());
        let watch_shutdown = async move {
            shutdown.await;
            crate::sys::service_manager::stopping();
            trigger.cancel();
        };
        let serving = self.socket.serve(Arc::clone(&self.host), stop);
        let (mut connections, ()) = tokio::join!(serving, watch_shutdown);
        drop(self.socket);
        tracing::info!("shutting down: waiting for calls in flight");
        let servers = Arc::clone(self.host.mcp_servers());
        let drain = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(self.shutdown_grace, drain)
            .await
            .is_err()
        {
            tracing::warn!("cancelling the calls still running");
            self.host.cancel_calls();
            let cancelled = async { while connections.join_next().await.is_some() {} };
            let limit = self.cancel_grace + Duration::from_secs(1);
            if tokio::time::timeout(limit, cancelled).await.is_err() {
                connections.abort_all();
            }
        }
        servers.stop_all().await;
    }
}

/// Runs a host until `shutdown` resolves: [`Host::start`], then [`RunningHost::run`].
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    Host::start(config).await?.run(shutdown).await;
    Ok(())
}
