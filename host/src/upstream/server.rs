//! One MCP server's supervisor: connects, lists its tools and hands them to the catalog,
//! follows its `tools/list_changed` (a notification under 2025-11-25, a `subscriptions/
//! listen` stream under 2026-07-28) by listing again, and when the connection ends (the
//! process crashed, the HTTP endpoint went away) restarts it with the plugin workers'
//! backoff and quarantine. Its tools stay listed meanwhile; a call gets an error saying
//! the server is down and why.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::SubscriptionFilter;
use rmcp::service::{Peer, RoleClient};
use tokio_util::sync::CancellationToken;
use toolhost_calls::tool::{DynTool, McpSource, ToolOrigin};

use crate::config::McpServerSettings;
use crate::plugins::isolation::lifecycle::{Admission, AfterCrash, CrashLimits, Lifecycle};

use super::client::Handler;
use super::connect::{Connection, ServerDirs, ServerLimits, ServerProcess};
use super::convert;
use super::link::{Link, ServerState};
use super::tool::ServerTool;

/// Takes a server's tools (by the server's name) each time they are listed.
pub(crate) type Publish = Arc<dyn Fn(&str, Vec<Arc<dyn DynTool>>) + Send + Sync>;

/// What a supervisor needs besides its server's settings.
#[derive(Clone)]
pub(crate) struct Supervision {
    /// Where servers keep their folders.
    pub(crate) dirs_root: std::path::PathBuf,
    /// What a stdio server gets unless its entry says otherwise.
    pub(crate) server: ServerLimits,
    /// When crashes quarantine a server.
    pub(crate) limits: CrashLimits,
    /// Takes the server's tools (by server name) each time they are listed.
    pub(crate) publish: Publish,
}

/// What the server calls itself: `name version` (empty if it did not say).
fn server_name(peer: &Peer<RoleClient>) -> String {
    peer.peer_info()
        .and_then(|i| {
            i.server_info
                .as_ref()
                .map(|s| format!("{} {}", s.name, s.version))
        })
        .unwrap_or_default()
}

/// The most pages of `tools/list` read from one server: a cursor that never ends is a
/// server in a loop, not a catalogue.
const MAX_PAGES: usize = 100;

/// Why a server's tools could not be listed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListError {
    /// The request failed.
    #[error(transparent)]
    Service(#[from] rmcp::service::ServiceError),
    /// More tools than its `max_tools`.
    #[error(
        "it lists more than {max} tools (its max_tools); if that many are meant, raise \
         max_tools in its [[mcp_servers]] entry"
    )]
    TooMany {
        /// The entry's `max_tools`.
        max: usize,
    },
    /// A listing that does not end.
    #[error("its tool list had not ended after {MAX_PAGES} pages (a cursor that loops?)")]
    Endless,
}

/// Every page of the server's `tools/list`, bounded by its `max_tools` and [`MAX_PAGES`].
async fn list_pages(
    settings: &McpServerSettings,
    peer: &Peer<RoleClient>,
) -> Result<Vec<rmcp::model::Tool>, ListError> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
        let page = peer.list_tools(Some(params)).await?;
        tools.extend(page.tools);
        if tools.len() > settings.max_tools {
            return Err(ListError::TooMany {
                max: settings.max_tools,
            });
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
    Err(ListError::Endless)
}

/// Lists the server's tools as the registry holds them.
async fn list_tools(
    settings: &McpServerSettings,
    link: &Arc<Link>,
    peer: &Peer<RoleClient>,
    listed: &mut Vec<Arc<ServerTool>>,
) -> Result<Vec<Arc<dyn DynTool>>, ListError> {
    let tools = list_pages(settings, peer).await?;
    let version = server_name(peer);
    let endpoint = settings.endpoint();
    let mut taken = BTreeSet::new();
    let fresh: Vec<Arc<ServerTool>> = tools
        .iter()
        .map(|tool| {
            let name = convert::local_name(&settings.prefix, &tool.name, &mut taken);
            let new = ServerTool {
                spec: convert::spec(name, tool, settings.trust_annotations),
                origin: ToolOrigin::McpServer {
                    source: Arc::new(McpSource {
                        server: link.name.to_string(),
                        endpoint: endpoint.clone(),
                        identity: convert::identity(&link.name, &version, tool),
                    }),
                },
                remote: tool.name.to_string(),
                link: Arc::clone(link),
            };
            // A tool listed as before stays the same tool: the registry sees no change.
            match listed.iter().find(|old| {
                old.spec == new.spec && old.origin == new.origin && old.remote == new.remote
            }) {
                Some(old) => Arc::clone(old),
                None => Arc::new(new),
            }
        })
        .collect();
    *listed = fresh.clone();
    Ok(fresh.into_iter().map(|t| t as Arc<dyn DynTool>).collect())
}

/// Runs one server until `stop`: connect, serve, restart.
pub(crate) async fn supervise(
    settings: McpServerSettings,
    link: Arc<Link>,
    how: Supervision,
    stop: CancellationToken,
) {
    let mut life = Lifecycle::for_server(how.limits);
    let mut started_once = false;
    // Its tools as last listed: a tool listed again unchanged stays the same tool.
    let mut listed: Vec<Arc<ServerTool>> = Vec::new();
    loop {
        match life.admit(Instant::now()) {
            Admission::Start => {}
            Admission::Wait(delay) => {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(delay) => continue,
                }
            }
            Admission::Quarantined(reason) => {
                link.set_state(ServerState::Quarantined { reason });
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = link.lift.notified() => {
                        life.lift();
                        continue;
                    }
                }
            }
        }
        if stop.is_cancelled() {
            break;
        }
        let failure = serve_once(
            &settings,
            &link,
            &how,
            &stop,
            &mut started_once,
            &mut life,
            &mut listed,
        )
        .await;
        let Some(reason) = failure else {
            break;
        };
        // The host is on its way out and ended the server itself: no crash.
        if crate::sys::workers::ending() {
            break;
        }
        let after = life.crashed(Instant::now(), &reason);
        tracing::warn!(
            server = &*link.name,
            "MCP server '{}' is down: {}{}",
            link.name,
            crate::text::for_log(&reason),
            match after {
                AfterCrash::Restart { delay } if delay.is_zero() =>
                    "; it starts again now".to_owned(),
                AfterCrash::Restart { delay } =>
                    format!("; it starts again in {} ms", delay.as_millis()),
                AfterCrash::Quarantined { failures, window } => format!(
                    "; it failed {failures} times within {} s and is now quarantined: its tools \
                     are refused until `toolhost reload`",
                    window.as_secs()
                ),
            }
        );
        link.set_state(ServerState::Restarting { reason });
    }
    link.set_peer(None);
    link.set_state(ServerState::Stopped);
}

/// One connection, served until it ends (`Some(why)`) or `stop` (`None`).
async fn serve_once(
    settings: &McpServerSettings,
    link: &Arc<Link>,
    how: &Supervision,
    stop: &CancellationToken,
    started_once: &mut bool,
    life: &mut Lifecycle,
    listed: &mut Vec<Arc<ServerTool>>,
) -> Option<String> {
    link.set_state(ServerState::Starting);
    let handler = Handler {
        server: Arc::clone(&link.name),
        flights: Arc::clone(&link.flights),
        list_changed: Arc::new(tokio::sync::Notify::new()),
    };
    let dirs = match ServerDirs::make(&how.dirs_root, &settings.name) {
        Ok(dirs) => dirs,
        Err(e) => return Some(e.to_string()),
    };
    let connecting = super::connect::connect(settings, handler.clone(), &dirs, &how.server);
    let conn: Connection = tokio::select! {
        () = stop.cancelled() => return None,
        made = connecting => match made {
            Ok(conn) => conn,
            Err(e) => return Some(e.to_string()),
        },
    };
    let peer = conn.service.peer().clone();
    link.set_containment(conn.process.as_ref().map(ServerProcess::containment));
    let tools = match list_tools(settings, link, &peer, listed).await {
        Ok(tools) => tools,
        Err(e) => {
            let words = conn.last_words.said();
            conn.close().await;
            return Some(format!("could not list its tools: {e}{words}"));
        }
    };
    life.started(*started_once);
    if *started_once {
        *link.restarts.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }
    *started_once = true;
    let protocol = peer
        .peer_info()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    let server = server_name(&peer);
    tracing::info!(
        server = &*link.name,
        tools = tools.len(),
        protocol = %protocol,
        "MCP server '{}' connected ({})",
        link.name,
        settings.endpoint()
    );
    (how.publish)(&link.name, tools);
    link.set_peer(Some(peer.clone()));
    link.set_state(ServerState::Running {
        pid: conn.process.as_ref().and_then(ServerProcess::pid),
        protocol: protocol.clone(),
        server,
    });
    // A 2026-07-28 server sends list changes on a stream asked for them.
    let mut subscription = if protocol.as_str() >= "2026-07-28" {
        peer.listen(SubscriptionFilter::builder().tools_list_changed().build())
            .await
            .ok()
    } else {
        None
    };
    let last_words = conn.last_words.clone();
    let cancel = conn.service.cancellation_token();
    let Connection {
        service, process, ..
    } = conn;
    let mut ended = tokio::spawn(service.waiting());
    let reason = loop {
        tokio::select! {
            () = stop.cancelled() => {
                link.set_peer(None);
                cancel.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(2), &mut ended).await;
                finish(process).await;
                return None;
            }
            () = handler.list_changed.notified() => {
                relist(settings, link, &peer, how, listed).await;
            }
            changed = next_change(subscription.as_mut()) => {
                if changed {
                    relist(settings, link, &peer, how, listed).await;
                } else {
                    subscription = None;
                }
            }
            quit = &mut ended => {
                break match quit {
                    Ok(Ok(rmcp::service::QuitReason::Cancelled)) => "its session was cancelled".to_owned(),
                    Ok(_) => "its connection closed".to_owned(),
                    Err(e) => format!("its connection failed: {e}"),
                };
            }
        }
    };
    link.set_peer(None);
    link.set_state(ServerState::Restarting {
        reason: reason.clone(),
    });
    let status = finish(process).await;
    *link
        .last_words
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = last_words.said();
    Some(format!("{reason}{status}{}", last_words.said()))
}

/// The next list change on a 2026-07-28 subscription: `true` for one, `false` when the
/// stream ended (never resolves without a subscription).
async fn next_change(subscription: Option<&mut rmcp::service::Subscription>) -> bool {
    let Some(subscription) = subscription else {
        return std::future::pending().await;
    };
    matches!(subscription.next().await, Ok(Some(_)))
}

/// Lists the tools again after a change, and hands them on.
async fn relist(
    settings: &McpServerSettings,
    link: &Arc<Link>,
    peer: &Peer<RoleClient>,
    how: &Supervision,
    listed: &mut Vec<Arc<ServerTool>>,
) {
    match list_tools(settings, link, peer, listed).await {
        Ok(tools) => {
            tracing::info!(
                server = &*link.name,
                tools = tools.len(),
                "MCP server's tools changed"
            );
            (how.publish)(&link.name, tools);
        }
        Err(e) => tracing::warn!(
            server = &*link.name,
            "could not list the tools of MCP server '{}' after it said they changed: {e}",
            link.name
        ),
    }
}

/// Ends a stdio server's processes and reaps it; says how it ended.
async fn finish(process: Option<ServerProcess>) -> String {
    let Some(ServerProcess { mut child, hold }) = process else {
        return String::new();
    };
    // Whatever ended first: the process (a crash), or the session (then it is killed).
    let status = match tokio::time::timeout(Duration::from_millis(500), child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => None,
    };
    let _ = tokio::task::spawn_blocking(move || hold.end()).await;
    let status = match status {
        Some(status) => Some(status),
        None => child.wait().await.ok(),
    };
    match status {
        Some(status) => format!(" (its process {})", describe(status)),
        None => String::new(),
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        _ => "ended".to_owned(),
    }
}
