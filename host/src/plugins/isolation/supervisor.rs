//! The host's side of plugin workers. A [`WorkerPlugin`] is one plugin file at one
//! generation run in worker processes, one per profile that calls it: it starts the first
//! worker when the plugin loads, a fresh one for the next call after a worker died, and
//! reports status. Which start is allowed when (backoff, quarantine, lift) is decided by
//! its [`Lifecycle`], a state machine this module feeds with what happened; the processes
//! are `spawn.rs`'s, each one's messages and calls in flight `connection.rs`'s, and calls
//! come in through `worker_tool.rs`. Dropping the last reference (a reload replaced the
//! generation and its calls finished) ends the workers, which returns all of their memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::IsolationPolicy;
use super::connection::{Connection, WorkerOwner};
use super::error::{WorkerStartError, WorkerUnavailable};
use super::lifecycle::{Admission, AfterCrash, CrashLimits, Lifecycle};
use super::spawn::{Launch, Started, WorkerFile, spawn};
use crate::sys::confinement::Confinement;
use toolhost_calls::tool::ToolSpec;

/// What a worker looks like in status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// The worker's process id, while one runs.
    pub pid: Option<u32>,
    /// `running`, `stopped` (restarts on the next call) or `quarantined`.
    pub state: String,
    /// Workers started after the first.
    pub restarts: u64,
    /// Failures within the crash window.
    pub recent_crashes: u32,
    /// How the last worker ended, if one did.
    pub last_exit: Option<String>,
    /// Why its tools are refused, while quarantined.
    pub quarantined: Option<String>,
    /// What confines it, in one line ("fully enforced (...)" only when every
    /// protection holds).
    pub sandbox: String,
    /// What confines it, protection by protection.
    #[serde(default)]
    pub confinement: Confinement,
    /// What keeps its processes together: `cgroup v1 PATH`, `cgroup v2 PATH`, `PID
    /// namespace` or `process group`.
    #[serde(default)]
    pub containment: String,
    /// The running worker of each profile that called the plugin (one worker per
    /// profile; `""`: calls that name no profile), by process id.
    #[serde(default)]
    pub profiles: BTreeMap<String, u32>,
}

struct SupState {
    /// One worker per profile (`""`: calls that name none), each able to write only that
    /// profile's state folder.
    conns: BTreeMap<String, Arc<Connection>>,
    /// Crashes, backoff, quarantine.
    lifecycle: Lifecycle,
}

/// One plugin file at one generation, run in workers.
pub(crate) struct WorkerPlugin {
    pub(super) name: Arc<str>,
    pub(super) file: PathBuf,
    /// The host's verified private copy the workers map; removed with the generation.
    copy: PathBuf,
    pub(super) sha256: String,
    pub(super) policy: Arc<IsolationPolicy>,
    launch: Launch,
    tool_names: Vec<String>,
    state: Mutex<SupState>,
    starting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for WorkerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPlugin")
            .field("name", &self.name)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// What the worker loaded, for the loader.
pub(crate) struct WorkerLoad {
    pub(crate) plugin: Arc<WorkerPlugin>,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) api_version: String,
    pub(crate) abi_version: String,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) skipped_tools: Vec<String>,
    pub(crate) settings_schema: Option<serde_json::Value>,
}

impl WorkerPlugin {
    /// Starts the first worker for `file` (its verified private copy is `copy`) and
    /// reads the plugin's tools. Blocking. If the tools need more than the most restrictive
    /// start gave them (environment variables they name, TCP for a `network` tool), the
    /// worker is started once more with exactly that, before any call.
    pub(crate) fn start(
        file: &Path,
        copy: &Path,
        sha256: &str,
        policy: Arc<IsolationPolicy>,
    ) -> Result<WorkerLoad, WorkerStartError> {
        let plugin_file = WorkerFile { file, copy, sha256 };
        let strict = Launch::strict(file, &policy);
        let profile = policy.default_profile.clone();
        let first = spawn(plugin_file, &policy, &strict, None, &profile)?;
        let wanted = Launch::for_tools(&first.hello, file, &policy);
        let started = if wanted == strict {
            first
        } else {
            first.conn.close();
            let again = spawn(plugin_file, &policy, &wanted, None, &profile)?;
            if tool_names(&again.hello.tools) != tool_names(&first.hello.tools) {
                again.conn.close();
                return Err(WorkerStartError::ToolsChangedOnSecondStart);
            }
            again
        };
        let Started { conn, hello } = started;
        let limits = CrashLimits {
            max_crashes: policy.max_crashes,
            window: policy.crash_window,
        };
        let plugin = Arc::new(WorkerPlugin {
            name: Arc::from(hello.name.as_str()),
            file: file.to_path_buf(),
            copy: copy.to_path_buf(),
            sha256: sha256.to_owned(),
            policy,
            launch: wanted,
            tool_names: tool_names(&hello.tools),
            state: Mutex::new(SupState {
                conns: BTreeMap::from([(profile, Arc::clone(&conn))]),
                lifecycle: Lifecycle::new(limits),
            }),
            starting: tokio::sync::Mutex::new(()),
        });
        conn.set_owner(owner_of(&plugin));
        Ok(WorkerLoad {
            plugin,
            name: hello.name,
            version: hello.version,
            api_version: hello.api_version,
            abi_version: hello.abi_version,
            tools: hello.tools,
            skipped_tools: hello.skipped_tools,
            settings_schema: hello.settings_schema,
        })
    }

    /// Whether its workers reach the profile's workspace roots (a tool declares it).
    pub(super) fn has_workspace(&self) -> bool {
        self.launch.workspace
    }

    /// The plugin's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Status of its worker.
    pub(crate) fn status(&self) -> WorkerStatus {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let live: Vec<(&String, &Arc<Connection>)> =
            st.conns.iter().filter(|(_, c)| c.alive()).collect();
        // The default profile's worker first, else any.
        let conn = live
            .iter()
            .find(|(p, _)| **p == self.policy.default_profile)
            .or(live.first())
            .map(|(_, c)| *c);
        let facts = st.lifecycle.facts(Instant::now());
        WorkerStatus {
            pid: conn.map(|c| c.pid),
            state: if facts.quarantined.is_some() {
                "quarantined"
            } else if conn.is_some() {
                "running"
            } else {
                "stopped"
            }
            .to_owned(),
            restarts: facts.restarts,
            recent_crashes: facts.recent_crashes,
            last_exit: facts.last_exit,
            quarantined: facts.quarantined,
            sandbox: conn.map(|c| c.confinement.to_string()).unwrap_or_default(),
            confinement: conn.map(|c| c.confinement.clone()).unwrap_or_default(),
            profiles: live.iter().map(|(p, c)| ((*p).clone(), c.pid)).collect(),
            containment: conn.map(|c| c.containment.describe()).unwrap_or_default(),
        }
    }

    /// Lets a quarantined plugin start again (`toolhost reload`); `true` if it was.
    pub(crate) fn lift_quarantine(&self) -> bool {
        let was = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lifecycle
            .lift();
        if was {
            tracing::info!(plugin = &*self.name, "quarantine lifted");
        }
        was
    }

    /// A worker of this plugin died with `reason` (`conn` is `None` for a worker that
    /// failed to start, which counts too): the lifecycle decides what happens next, for
    /// the callers' errors.
    fn count_crash(&self, conn: Option<&Connection>, reason: &str) -> AfterCrash {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(conn) = conn {
            st.conns.retain(|_, c| !std::ptr::eq(&**c, conn));
        }
        let next = st.lifecycle.crashed(now, reason);
        tracing::warn!(
            plugin = &*self.name,
            "the plugin's worker {}{next}",
            crate::text::for_log(reason)
        );
        next
    }

    /// The live connection of `profile`'s worker, starting one if none runs and the
    /// lifecycle allows it (after its backoff; never while quarantined).
    pub(super) async fn connection(
        self: &Arc<Self>,
        profile: &str,
    ) -> Result<Arc<Connection>, WorkerUnavailable> {
        loop {
            let admission = {
                let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(conn) = st.conns.get(profile).filter(|c| c.alive()) {
                    return Ok(Arc::clone(conn));
                }
                st.lifecycle.admit(Instant::now())
            };
            match admission {
                Admission::Quarantined(why) => {
                    return Err(WorkerUnavailable::Quarantined {
                        plugin: Arc::clone(&self.name),
                        why,
                    });
                }
                Admission::Wait(wait) => tokio::time::sleep(wait).await,
                Admission::Start => {}
            }
            let _one_at_a_time = self.starting.lock().await;
            {
                let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if st.conns.get(profile).is_some_and(|c| c.alive()) {
                    continue;
                }
                if st.lifecycle.admit(Instant::now()) != Admission::Start {
                    continue;
                }
            }
            let this = Arc::clone(self);
            let for_profile = profile.to_owned();
            let started = tokio::task::spawn_blocking(move || this.restart(&for_profile))
                .await
                .unwrap_or_else(|e| Err(WorkerStartError::Interrupted(e)));
            match started {
                Ok(conn) => {
                    let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                    let replaced = st
                        .conns
                        .insert(profile.to_owned(), Arc::clone(&conn))
                        .is_some();
                    st.lifecycle.started(replaced);
                    tracing::info!(plugin = &*self.name, pid = conn.pid, "worker restarted");
                    return Ok(conn);
                }
                Err(source) => {
                    let reason = format!("could not be started again: {source}");
                    let next = self.count_crash(None, &reason);
                    return Err(WorkerUnavailable::NotStarted {
                        plugin: Arc::clone(&self.name),
                        source,
                        next,
                    });
                }
            }
        }
    }

    /// Starts a fresh worker for `profile` (blocking) and checks it exports what the
    /// first did.
    fn restart(self: &Arc<Self>, profile: &str) -> Result<Arc<Connection>, WorkerStartError> {
        let plugin_file = WorkerFile {
            file: &self.file,
            copy: &self.copy,
            sha256: &self.sha256,
        };
        let started = spawn(
            plugin_file,
            &self.policy,
            &self.launch,
            Some(Arc::clone(&self.name)),
            profile,
        )?;
        if tool_names(&started.hello.tools) != self.tool_names {
            started.conn.close();
            return Err(WorkerStartError::ToolsChangedSinceLoad);
        }
        started.conn.set_owner(owner_of(self));
        Ok(started.conn)
    }
}

impl WorkerOwner for WorkerPlugin {
    fn crashed(&self, conn: &Connection, reason: &str) -> AfterCrash {
        self.count_crash(Some(conn), reason)
    }
}

/// How a connection refers to its plugin: weakly, so that dropping the generation ends it.
fn owner_of(plugin: &Arc<WorkerPlugin>) -> Weak<dyn WorkerOwner> {
    let weak: Weak<WorkerPlugin> = Arc::downgrade(plugin);
    weak
}

impl Drop for WorkerPlugin {
    fn drop(&mut self) {
        let conns = std::mem::take(
            &mut self
                .state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .conns,
        );
        for conn in conns.into_values() {
            conn.close();
        }
        let _ = std::fs::remove_file(&self.copy);
    }
}

fn tool_names(tools: &[ToolSpec]) -> Vec<String> {
    tools.iter().map(|t| t.name.clone()).collect()
}
