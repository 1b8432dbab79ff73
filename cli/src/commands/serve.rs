//! `toolhost serve`: runs a long-lived host (plugins loaded and watched, the control
//! socket answering), optionally serving its tools over MCP on stdio or HTTP.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolhost::{
    CatalogConfig, ClientStdio, ControlError, DispatchConfig, Host, HttpAuth, HttpOptions,
    LoadedConfig, McpOptions, McpServeError, McpServer, ServeConfig, ServeError, TlsFiles,
    TokenAuthenticator,
};

use super::{PluginDirs, control_socket, runtime, usage};

/// `toolhost serve`.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) plugins: PluginDirs,
    #[command(flatten)]
    pub(crate) workspace: super::WorkspaceRoots,
    /// Don't watch the plugin directories; rescan only on `toolhost reload`.
    #[arg(long)]
    no_watch: bool,
    /// The control socket (default: $XDG_RUNTIME_DIR/toolhost/control.sock, else
    /// $TMPDIR/toolhost-$UID/control.sock).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Past this many reloads, status and the log recommend a restart (each reload
    /// keeps the old library mapped). Default: the config's, else 64.
    #[arg(long)]
    max_generations: Option<u64>,
    /// Seconds one call may run before it is cancelled. Default: the config's, else 60.
    #[arg(long, value_parser = super::seconds)]
    timeout: Option<Duration>,
    /// Also serve the tools over MCP: `stdio` (for clients that start toolhost
    /// themselves) or `http` (streamable HTTP at http://ADDR/mcp, see --listen).
    #[arg(long, value_enum, value_name = "TRANSPORT")]
    mcp: Option<McpTransportArg>,
    /// With --mcp http: the address to listen on (port 0 picks a free port; the log
    /// says which).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    listen: std::net::SocketAddr,
    /// With --mcp: the profile whose tools MCP clients see. Default: the config's
    /// default_profile ("default": every tool, unless a profile of that name lists some).
    /// Over HTTP, a token made for a profile is served that profile instead.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (default: the config's `[metrics]
    /// listen`, else none). On loopback no token is asked (unless `[metrics]
    /// require_token`); any other address needs a token from `toolhost token add` and
    /// --tls-cert/--tls-key (or --insecure-http).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// With --mcp http: serve without bearer tokens. Only for loopback addresses, and
    /// then every user and program on this machine can call the tools.
    #[arg(long)]
    no_auth: bool,
    /// With --mcp http (or --metrics) on an address other machines can reach: serve
    /// plain HTTP anyway (tokens, arguments and results cross the network unencrypted).
    #[arg(long)]
    insecure_http: bool,
    /// With --mcp http (and --metrics): serve HTTPS with this certificate chain (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// With --mcp http: the private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// `--mcp`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum McpTransportArg {
    /// One client on stdin/stdout.
    Stdio,
    /// Streamable HTTP on --listen.
    Http,
}

/// `serve --mcp`, with the HTTP door's options.
#[derive(Debug, Clone)]
enum McpMode {
    Stdio,
    Http(HttpArgs),
}

/// The MCP door: over stdio (`S`: `()` until the client's stdin and stdout are taken,
/// then [`ClientStdio`]), or over HTTP with its checked options.
enum McpDoor<S> {
    Stdio(S),
    Http(Box<HttpOptions>),
}

/// Why `toolhost serve` could not start, or stopped.
#[derive(Debug, thiserror::Error)]
enum ServeFailure {
    /// SIGINT, SIGTERM and SIGHUP could not be caught.
    #[error("could not install the SIGINT/SIGTERM/SIGHUP handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// MCP over stdio could not take the process's stdin and stdout.
    #[error("could not set up stdin/stdout for MCP: {0}")]
    Stdio(#[source] std::io::Error),
    /// The host: its plugins or its control socket.
    #[error(transparent)]
    Host(#[from] ServeError),
    /// The MCP frontend.
    #[error(transparent)]
    Mcp(#[from] McpServeError),
}

/// `serve --mcp http` and its door options.
#[derive(Debug, Clone)]
struct HttpArgs {
    listen: std::net::SocketAddr,
    no_auth: bool,
    insecure_http: bool,
    tls: Option<(PathBuf, PathBuf)>,
}

impl HttpArgs {
    /// The door's options: auth, TLS and the config's limits (the door lowers the
    /// connection limit to what the open-file limit leaves room for).
    fn options(&self, config: &LoadedConfig) -> anyhow::Result<HttpOptions> {
        let m = config.mcp();
        let auth = if self.no_auth {
            HttpAuth::NoAuth
        } else {
            token_auth(config)?
        };
        Ok(HttpOptions {
            addr: self.listen,
            auth,
            tls: self.tls.clone().map(|(cert, key)| TlsFiles { cert, key }),
            insecure_http: self.insecure_http,
            allowed_hosts: m.allowed_hosts.clone(),
            allowed_origins: m.allowed_origins.clone(),
            limits: m.limits.clone(),
            oauth: m.oauth.clone(),
        })
    }
}

/// Registers SIGINT and SIGTERM handlers now (so a signal during start-up is not lost)
/// and returns a future that resolves on either.
#[cfg(unix)]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, std::io::Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("shutdown requested");
    })
}

/// Registers the SIGHUP handler now (SIGHUP's default action would end the process) and
/// returns its stream: each SIGHUP is a rescan, as `toolhost reload` asks (`systemctl
/// reload` sends it through the unit's `ExecReload=`).
fn hangup_signal() -> Result<tokio::signal::unix::Signal, std::io::Error> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
}

/// Rescans on every SIGHUP until the host stops, logging what changed.
async fn reload_on_hangup(mut hangups: tokio::signal::unix::Signal, host: Arc<Host>) {
    while hangups.recv().await.is_some() {
        tracing::info!("SIGHUP: rescanning the plugin directories");
        match host.reload().await {
            Ok(report) => tracing::info!(
                added = report.plugins_added.len(),
                updated = report.plugins_updated.len(),
                removed = report.plugins_removed.len(),
                errors = report.errors.len(),
                "rescan after SIGHUP done"
            ),
            Err(e) => tracing::error!("{e}"),
        }
    }
}

#[cfg(not(unix))]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, std::io::Error> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

impl ServeArgs {
    pub(crate) fn run(self, config: &LoadedConfig) -> anyhow::Result<ExitCode> {
        let control_explicit = self.control.is_some();
        // A replica connects its shared state before anything opens a store (and listens
        // for the other replicas' changes).
        super::shared_state(config, true)?;
        let metrics = metrics_options(
            config,
            self.metrics,
            self.no_auth,
            self.insecure_http,
            self.tls_cert.clone().zip(self.tls_key.clone()),
        )?;
        let mcp = self.mcp.map(|m| match m {
            McpTransportArg::Stdio => McpMode::Stdio,
            McpTransportArg::Http => McpMode::Http(HttpArgs {
                listen: self.listen,
                no_auth: self.no_auth,
                insecure_http: self.insecure_http,
                tls: self.tls_cert.zip(self.tls_key),
            }),
        });
        let dirs = self.plugins.resolve(config);
        // The default plugin folder is toolhost's own to make (a first start): a watching
        // host needs it to exist. Folders an operator named are theirs; a missing one is
        // reported. The system one is root's: the service cannot (and must not) make it.
        let default = toolhost::default_plugin_dir();
        if dirs == [default.clone()] && !default.exists() && toolhost::system_layout().is_some() {
            anyhow::bail!(
                "the system plugin folder {dir} does not exist; it is root's, and the service \
                 must not be able to write it: make it as root (`sudo install -d -m 0755 \
                 {dir}`, or `sudo toolhost --system install FILE`, which makes it), or name \
                 another with --plugins",
                dir = default.display()
            );
        }
        if dirs == [default.clone()] && !default.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .create(&default)
                .map_err(|e| {
                    anyhow::anyhow!(
                        "could not create the plugin directory {}: {e}; create it, or name \
                         another with --plugins",
                        default.display()
                    )
                })?;
            tracing::info!(dir = %default.display(), "created the plugin directory");
        }
        serve(
            config,
            Serve {
                dirs,
                isolate: self.plugins.isolate,
                watch: !self.no_watch && config.reload().watch,
                control: control_socket(config, self.control),
                control_explicit,
                max_generations: self
                    .max_generations
                    .unwrap_or(config.reload().max_generations),
                timeout: self.timeout,
                mcp,
                profile: self.profile,
                metrics,
            },
        )
    }
}

/// How long a draining HTTP door waits for a load balancer's check, and then for the
/// calls in flight (each).
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Bearer tokens from the config's token file (MCP over HTTP and metrics share it).
fn token_auth(config: &LoadedConfig) -> anyhow::Result<HttpAuth> {
    let auth = Arc::new(TokenAuthenticator::new(super::token::token_store(config)?));
    auth.follow_changes();
    Ok(HttpAuth::Tokens(auth))
}

/// The metrics endpoint's options, checked: `--metrics`, else `[metrics] listen`. A
/// token is asked off loopback always and on loopback with `[metrics] require_token`
/// (`--no-auth`, refused off loopback, turns it off).
fn metrics_options(
    config: &LoadedConfig,
    flag: Option<std::net::SocketAddr>,
    no_auth: bool,
    insecure_http: bool,
    tls: Option<(PathBuf, PathBuf)>,
) -> anyhow::Result<Option<HttpOptions>> {
    let settings = config.metrics();
    let Some(addr) = flag.or(settings.listen) else {
        return Ok(None);
    };
    let wants_token = !addr.ip().is_loopback() || settings.require_token;
    let auth = if no_auth || !wants_token {
        HttpAuth::NoAuth
    } else {
        token_auth(config)?
    };
    let options = HttpOptions {
        addr,
        auth,
        tls: tls.map(|(cert, key)| TlsFiles { cert, key }),
        insecure_http,
        allowed_hosts: config.mcp().allowed_hosts.clone(),
        allowed_origins: config.mcp().allowed_origins.clone(),
        limits: config.mcp().limits.clone(),
        // Metrics are read with the host's own tokens.
        oauth: None,
    };
    toolhost::check_http_options(&options).map_err(|e| usage(format!("--metrics {addr}: {e}")))?;
    Ok(Some(options))
}

/// What `toolhost serve` was asked for, with the config's defaults filled in.
struct Serve {
    dirs: Vec<PathBuf>,
    /// `--isolate`: every plugin in a worker.
    isolate: bool,
    watch: bool,
    control: PathBuf,
    /// Whether `--control` was given (else a busy default socket may be replaced by a
    /// per-process one for MCP over stdio).
    control_explicit: bool,
    max_generations: u64,
    timeout: Option<Duration>,
    mcp: Option<McpMode>,
    profile: Option<String>,
    /// `--metrics`: the endpoint's checked options.
    metrics: Option<HttpOptions>,
}

fn serve(host_config: &LoadedConfig, args: Serve) -> anyhow::Result<ExitCode> {
    // Connected by `run`, listening (every store opened below uses it).
    let state = super::shared_state(host_config, true)?;
    if let Some(state) = &state {
        tracing::info!(
            replica = state.replica(),
            database = %state.settings().redacted_url(),
            "shared state: PostgreSQL"
        );
    }
    let limits = host_config.dispatch();
    let timeout = args.timeout.unwrap_or(limits.timeout);
    let profiles = host_config.profiles()?;
    let door = match &args.mcp {
        None => None,
        Some(McpMode::Stdio) => Some(McpDoor::Stdio(())),
        Some(McpMode::Http(http)) => {
            let options = http.options(host_config)?;
            toolhost::check_http_options(&options).map_err(|e| usage(e.to_string()))?;
            Some(McpDoor::Http(Box::new(options)))
        }
    };
    if door.is_none() && args.profile.is_some() {
        return Err(usage(
            "--profile goes with --mcp (the control socket names its profile per call)",
        ));
    }
    let loading = super::load_policy(host_config, args.isolate)?;
    let calls = host_config.call_settings();
    let mut config = ServeConfig {
        catalog: CatalogConfig {
            dirs: args.dirs,
            max_generations: args.max_generations,
            risk_overrides: host_config.risk_overrides(),
            loading,
            ..CatalogConfig::default()
        },
        watch: args.watch.then(|| host_config.watch()),
        control_path: args.control,
        dispatch: DispatchConfig { timeout, ..limits },
        shutdown_grace: Duration::from_secs(5),
        profiles,
        remember_approvals: calls.remember_approvals,
        default_profile: host_config.default_profile().to_owned(),
        config_file: host_config.file.clone(),
        availability_ttl: calls.availability_ttl,
        audit: super::audit_log(host_config)?,
        mcp_servers: host_config.mcp_servers().to_vec(),
        mcp_servers_dir: host_config.state_dir().map(|d| d.join("mcp-servers")),
        state,
    };
    let runtime = runtime()?;
    let mcp_options = McpOptions {
        profile: args.profile,
        without_elicitation: host_config.mcp().without_elicitation,
        terminal_approval: host_config.mcp().terminal_approval,
        client_answer: host_config.mcp().client_answer,
    };
    let outcome = runtime.block_on(async {
        let signals = shutdown_signal().map_err(ServeFailure::Signals)?;
        let hangups = hangup_signal().map_err(ServeFailure::Signals)?;
        let door = match door {
            None => None,
            // Before any plugin loads: only the protocol may reach the client's stdout.
            Some(McpDoor::Stdio(())) => Some(McpDoor::Stdio(
                ClientStdio::take().map_err(ServeFailure::Stdio)?,
            )),
            Some(McpDoor::Http(options)) => Some(McpDoor::Http(options)),
        };
        let is_stdio = matches!(door, Some(McpDoor::Stdio(_)));
        let running = match Host::start(config.clone()).await {
            // Clients start one stdio server per window: a second one gets its own socket.
            Err(ServeError::Control(ControlError::InUse { .. }))
                if is_stdio && !args.control_explicit =>
            {
                let held = config.control_path.clone();
                config.control_path =
                    held.with_file_name(format!("control-{}.sock", std::process::id()));
                let own = config.control_path.clone();
                let started = Host::start(config).await;
                // Said once the socket answers, so whoever reads the line can use it.
                if started.is_ok() {
                    tracing::warn!(
                        "another toolhost holds {}; this one's control socket is {}",
                        held.display(),
                        own.display()
                    );
                }
                started
            }
            other => other,
        }?;
        tokio::spawn(reload_on_hangup(hangups, Arc::clone(running.host())));
        let stop = CancellationToken::new();
        let metrics = match args.metrics {
            Some(options) => {
                let (_, serving) =
                    toolhost::bind_metrics(Arc::clone(running.host()), options, stop.clone())
                        .await?;
                Some(tokio::spawn(serving))
            }
            None => None,
        };
        let server = match door {
            Some(_) => Some(McpServer::new(Arc::clone(running.host()), mcp_options)?),
            None => None,
        };
        match door.zip(server) {
            None => {
                running.run(signals).await;
                stop.cancel();
            }
            Some((McpDoor::Stdio(stdio), server)) => {
                let session = server.serve_stdio(stdio, stop.clone());
                let until = async move {
                    tokio::select! {
                        () = signals => {}
                        result = session => {
                            if let Err(e) = result {
                                tracing::error!("{e}");
                            }
                            tracing::info!("the MCP client closed stdin; shutting down");
                        }
                    }
                };
                running.run(until).await;
                stop.cancel();
            }
            Some((McpDoor::Http(options), server)) => {
                let scheme = if options.tls.is_some() {
                    "https"
                } else {
                    "http"
                };
                let (bound, serving) = toolhost::bind_http(&server, *options, stop.clone()).await?;
                tracing::info!("serving MCP over streamable HTTP at {scheme}://{bound}/mcp");
                let serving = tokio::spawn(serving);
                // SIGTERM drains: readiness says no, the load balancer is told by its next
                // check, the calls in flight finish; only then does the door close.
                let host = Arc::clone(running.host());
                let until = async move {
                    signals.await;
                    host.drain(DRAIN_LIMIT).await;
                };
                running.run(until).await;
                stop.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(2), serving).await;
            }
        }
        if let Some(serving) = metrics {
            let _ = tokio::time::timeout(Duration::from_secs(2), serving).await;
        }
        Ok::<(), ServeFailure>(())
    });
    // A rescan still running on a blocking thread must not hold the exit up for long.
    runtime.shutdown_timeout(Duration::from_secs(2));
    outcome?;
    Ok(ExitCode::SUCCESS)
}
