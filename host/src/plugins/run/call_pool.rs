//! The threads plugin calls run on. A plugin's future is never polled on the host's
//! runtime threads (which serve the control socket, MCP, the watcher and every timer):
//! each call is handed to a thread of this pool, which polls it until it is ready, and
//! the host awaits the answer. A plugin that spins or blocks in `poll` (a busy loop, a
//! blocking read, `std::thread::sleep` in an async fn) holds only its own pool thread, so
//! timeouts fire, status answers and other calls run.
//!
//! Sizing: threads are made on demand, one per call running at once (a call waits only if
//! [`MAX_THREADS`] are busy), and an idle thread ends after [`IDLE_LIFETIME`]. While it
//! polls, a pool thread is inside the call's tokio runtime, so the plugin's host services
//! (timers, child turns, questions) work as they do on the host's own threads.
//!
//! Speed: a hand-off that woke a sleeping thread each way cost about 10 µs on a small VM,
//! more than most plugin calls. So an idle pool thread looks for the next call for a
//! moment before it sleeps, and the caller looks for the answer for a moment (on its first
//! poll, at most [`SPIN_FOR_RESULT`]) before it yields its runtime thread: a quick call
//! wakes nobody. The bound keeps the guarantee above: a plugin that spins or blocks holds a
//! runtime thread that long at most.
//!
//! When the caller gives up on a call (its timeout and grace passed, or the turn was
//! dropped), the pool thread drops the plugin's future at its next wake-up. A future that
//! never returns from `poll` cannot be dropped: native code cannot be stopped from outside.
//! Such a call is listed by [`stuck_calls`] (and in `toolhost status`) until it returns;
//! its thread is lost until then.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use toolhost_plugin_api::take_message;

/// The most pool threads at once; past it, new calls wait for a thread.
pub(crate) const MAX_THREADS: usize = 512;

/// How long an idle pool thread waits for work before it ends.
pub(crate) const IDLE_LIFETIME: Duration = Duration::from_secs(30);

/// How long an idle pool thread looks for the next call before it sleeps.
const SPIN_FOR_WORK: Duration = Duration::from_micros(150);

/// How long a caller looks for its call's output, on its first poll, before it registers
/// its waker and yields its runtime thread. Most plugin calls answer within a few
/// microseconds; waking a parked runtime thread costs more than that on a small machine.
/// Bounded, so a plugin that spins or blocks holds a runtime thread for this long at most.
const SPIN_FOR_RESULT: Duration = Duration::from_micros(50);

/// How long a caller giving up waits for the plugin's future to be dropped on its thread.
const DROP_WAIT: Duration = Duration::from_millis(100);

/// Why the pool gave no output for a call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PoolError {
    /// No thread could be started for the call (and none was free).
    #[error(
        "could not start a thread for the plugin call: {0}; the process may be at its thread \
         limit (ulimit -u)"
    )]
    NoThread(#[source] std::io::Error),
    /// The call's `poll` panicked on its plugin thread (the FFI edge catches plugin
    /// panics; this is the host's last line).
    #[error("the call panicked on its plugin thread: {0}")]
    Panicked(String),
    /// The call was given up ([`Detached::give_up`]) and its future dropped.
    #[error("the call was given up")]
    GivenUp,
}

/// A plugin call that its caller gave up on and whose plugin code has not returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StuckCall {
    /// The tool.
    pub tool: String,
    /// The plugin that exports it.
    pub plugin: String,
    /// Seconds since the call started.
    pub running_secs: f64,
    /// Seconds since its caller gave up (timeout and grace, or a cancelled turn).
    pub abandoned_secs: f64,
    /// What to do about it.
    pub advice: String,
}

/// The calls of the whole process that are stuck now (see the module docs).
pub(crate) fn stuck_calls() -> Vec<StuckCall> {
    let now = Instant::now();
    POOL.running
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .filter_map(|r| {
            let abandoned = (*r.abandoned.lock().unwrap_or_else(PoisonError::into_inner))?;
            Some(StuckCall {
                tool: r.tool.to_string(),
                plugin: r.plugin.to_string(),
                running_secs: now.duration_since(r.started).as_secs_f64(),
                abandoned_secs: now.duration_since(abandoned).as_secs_f64(),
                advice: format!(
                    "the plugin '{}' does not return from tool '{}' although the call was \
                     given up: it holds one of the host's plugin threads (and a CPU if it \
                     spins) until it returns. Restart toolhost to reclaim it, and fix or \
                     remove the plugin, or run it in a worker process (`--isolate`, or \
                     `[isolation.plugins] {} = \"process\"`), where such a call gets its \
                     worker killed and restarted",
                    r.plugin, r.tool, r.plugin
                ),
            })
        })
        .collect()
}

/// The future of one plugin call, with everything it borrows, ready to be polled on a
/// pool thread. The implementor makes sure dropping it drops the plugin's future first.
pub(crate) type PoolFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs `future` on a pool thread (inside `runtime`, if given) and waits for its output.
/// An error if the pool could not run it (no thread could be started) or its `poll`
/// panicked (the FFI edge catches plugin panics; this is the host's last line). Dropping the
/// returned future gives the call up: the pool drops the plugin's future at once if it is
/// waiting, or as soon as its `poll` returns.
pub(crate) async fn run<T: Send + 'static>(
    tool: Arc<str>,
    plugin: Arc<str>,
    runtime: Option<tokio::runtime::Handle>,
    future: PoolFuture<T>,
) -> Result<T, PoolError> {
    let shared = Arc::new(JobShared {
        output: Mutex::new(None),
        ready: AtomicBool::new(false),
        host_waker: Mutex::new(None),
        worker: Mutex::new(None),
        given_up: AtomicBool::new(false),
        ended: Mutex::new(false),
        ended_changed: Condvar::new(),
    });
    let running = submit(
        tool,
        plugin,
        runtime,
        future,
        Arc::clone(&shared) as Arc<dyn JobSignals<T>>,
    )?;
    let mut waiting = Waiting {
        shared,
        running,
        done: false,
        spun: false,
    };
    (&mut waiting).await
}

/// A call started with [`start`], running on a pool thread with no one awaiting it.
pub(crate) struct Detached {
    shared: Arc<dyn GiveUp>,
    running: Arc<Running>,
}

impl Detached {
    /// Gives the call up: its future is dropped on its thread at once if it is waiting,
    /// or as soon as its `poll` returns; then its `on_done` runs with an error. A call
    /// whose `poll` never returns never gets there (and is listed as stuck).
    pub(crate) fn give_up(&self) {
        *self
            .running
            .abandoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        self.shared.give_up();
    }
}

/// Starts `future` on a pool thread (inside `runtime`, if given) with nobody awaiting it:
/// `on_done` runs on that thread, exactly once, with the output, or with an error once the
/// future is dropped after [`Detached::give_up`] (or its `poll` panicked). A worker process
/// answers its host from the plugin thread this way, with no runtime thread to wake.
pub(crate) fn start<T: Send + 'static>(
    tool: Arc<str>,
    plugin: Arc<str>,
    runtime: Option<tokio::runtime::Handle>,
    future: PoolFuture<T>,
    on_done: OnDone<T>,
) -> Result<Detached, PoolError> {
    let shared = Arc::new(DetachedShared {
        on_done: Mutex::new(Some(on_done)),
        worker: Mutex::new(None),
        given_up: AtomicBool::new(false),
    });
    let running = submit(
        tool,
        plugin,
        runtime,
        future,
        Arc::clone(&shared) as Arc<dyn JobSignals<T>>,
    )?;
    Ok(Detached { shared, running })
}

/// What runs on the plugin thread with a detached call's outcome.
pub(crate) type OnDone<T> = Box<dyn FnOnce(Result<T, PoolError>) + Send>;

struct DetachedShared<T> {
    on_done: Mutex<Option<OnDone<T>>>,
    worker: Mutex<Option<Thread>>,
    given_up: AtomicBool,
}

trait GiveUp: Send + Sync {
    fn give_up(&self);
}

impl<T: Send> GiveUp for DetachedShared<T> {
    fn give_up(&self) {
        self.given_up.store(true, Ordering::Release);
        if let Some(worker) = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            worker.unpark();
        }
    }
}

impl<T: Send> JobSignals<T> for DetachedShared<T> {
    fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
    }

    fn set_worker(&self, thread: Option<Thread>) {
        *self.worker.lock().unwrap_or_else(PoisonError::into_inner) = thread;
    }

    fn finish(&self, output: Result<T, PoolError>) {
        let done = self
            .on_done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(done) = done {
            done(output);
        }
    }

    fn ended(&self) {
        // Given up: the future is gone now; say so once.
        self.finish(Err(PoolError::GivenUp));
    }
}

/// Lists the call as running and hands it to the pool.
fn submit<T: Send + 'static>(
    tool: Arc<str>,
    plugin: Arc<str>,
    runtime: Option<tokio::runtime::Handle>,
    future: PoolFuture<T>,
    shared: Arc<dyn JobSignals<T>>,
) -> Result<Arc<Running>, PoolError> {
    let id = POOL.next_id.fetch_add(1, Ordering::Relaxed);
    let running = Arc::new(Running {
        tool,
        plugin,
        started: Instant::now(),
        abandoned: Mutex::new(None),
    });
    POOL.running
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(id, Arc::clone(&running));
    let job = Job {
        id,
        future,
        runtime,
        shared,
    };
    if let Err(e) = POOL.submit(Box::new(move || job.run())) {
        POOL.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        return Err(e);
    }
    Ok(running)
}

/// The process's one pool.
static POOL: LazyLock<Pool> = LazyLock::new(Pool::default);

#[derive(Default)]
struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
    /// Jobs in `state.jobs`, readable without the lock.
    queued: std::sync::atomic::AtomicUsize,
    next_id: AtomicU64,
    /// Calls started and not yet finished on their thread.
    running: Mutex<BTreeMap<u64, Arc<Running>>>,
}

#[derive(Default)]
struct PoolState {
    jobs: VecDeque<Box<dyn FnOnce() + Send>>,
    /// Threads asleep on the condition variable.
    idle: usize,
    /// Threads looking for work before they sleep (they take a new job without a wake-up).
    spinning: usize,
    threads: usize,
}

impl Pool {
    fn submit(&'static self, job: Box<dyn FnOnce() + Send>) -> Result<(), PoolError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.jobs.push_back(job);
        self.queued.fetch_add(1, Ordering::Release);
        // Each spinning or sleeping thread takes one queued job; a job beyond what they
        // will take needs a thread of its own (else it would wait behind a busy call).
        let queued = state.jobs.len();
        if queued <= state.spinning + state.idle {
            if queued > state.spinning {
                self.work.notify_one();
            }
            return Ok(());
        }
        if state.threads >= MAX_THREADS {
            // Every thread is busy: the job waits for one.
            return Ok(());
        }
        state.threads += 1;
        drop(state);
        let spawned = std::thread::Builder::new()
            .name("toolhost-plugin".to_owned())
            .spawn(move || self.work_loop());
        if let Err(e) = spawned {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.threads -= 1;
            // The job stays queued if another thread will take it; else it is refused.
            if state.threads == 0 {
                if state.jobs.pop_back().is_some() {
                    self.queued.fetch_sub(1, Ordering::Release);
                }
                return Err(PoolError::NoThread(e));
            }
        }
        Ok(())
    }

    fn work_loop(&self) {
        loop {
            // A call often follows the last at once (a model's batch, an MCP client's next
            // request): look for it for a moment before sleeping on the condition variable,
            // which costs a futex wake-up per call.
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .spinning += 1;
            // Watches a counter, not the lock, so the submitter never waits for it.
            spin_until(SPIN_FOR_WORK, || self.queued.load(Ordering::Acquire) > 0);
            // No longer spinning: from here a new job wakes or spawns a thread, and this
            // one takes what is queued before it sleeps.
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .spinning -= 1;
            let job = {
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    if let Some(job) = state.jobs.pop_front() {
                        self.queued.fetch_sub(1, Ordering::Release);
                        break job;
                    }
                    state.idle += 1;
                    let (next, timeout) = self
                        .work
                        .wait_timeout(state, IDLE_LIFETIME)
                        .unwrap_or_else(PoisonError::into_inner);
                    state = next;
                    state.idle -= 1;
                    if timeout.timed_out() && state.jobs.is_empty() {
                        state.threads -= 1;
                        return;
                    }
                }
            };
            job();
        }
    }
}

/// What status needs of a running call.
struct Running {
    tool: Arc<str>,
    plugin: Arc<str>,
    started: Instant,
    /// When its caller gave up, if it did.
    abandoned: Mutex<Option<Instant>>,
}

/// Shared by the waiting caller and the pool thread.
struct JobShared<T> {
    output: Mutex<Option<Result<T, PoolError>>>,
    /// Set once `output` holds the result (what a spinning caller watches).
    ready: AtomicBool,
    host_waker: Mutex<Option<Waker>>,
    /// The pool thread polling the call, once one took it.
    worker: Mutex<Option<Thread>>,
    given_up: AtomicBool,
    /// Set once the pool thread has dropped the future (after its output, or given up).
    ended: Mutex<bool>,
    ended_changed: Condvar,
}

/// The pool thread's view of [`JobShared`], without its output type in the job's type.
trait JobSignals<T>: Send + Sync {
    fn given_up(&self) -> bool;
    fn set_worker(&self, thread: Option<Thread>);
    fn finish(&self, output: Result<T, PoolError>);
    fn ended(&self);
}

impl<T: Send> JobSignals<T> for JobShared<T> {
    fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
    }

    fn set_worker(&self, thread: Option<Thread>) {
        *self.worker.lock().unwrap_or_else(PoisonError::into_inner) = thread;
    }

    fn ended(&self) {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner) = true;
        // Only a caller that gave up waits for this (it says so before it looks): a
        // notification costs a system call, so the common case makes none.
        if self.given_up.load(Ordering::SeqCst) {
            self.ended_changed.notify_all();
        }
    }

    fn finish(&self, output: Result<T, PoolError>) {
        *self.output.lock().unwrap_or_else(PoisonError::into_inner) = Some(output);
        self.ready.store(true, Ordering::Release);
        if let Some(waker) = self
            .host_waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            waker.wake();
        }
    }
}

struct Job<T> {
    id: u64,
    future: PoolFuture<T>,
    runtime: Option<tokio::runtime::Handle>,
    shared: Arc<dyn JobSignals<T>>,
}

impl<T: Send + 'static> Job<T> {
    /// Polls the call to its end on this thread, parking between wake-ups; drops it early
    /// once the caller gave up.
    fn run(self) {
        let Job {
            id,
            mut future,
            runtime,
            shared,
        } = self;
        let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
        shared.set_worker(Some(std::thread::current()));
        let waker = THREAD_WAKER.with(Waker::clone);
        let mut cx = Context::from_waker(&waker);
        loop {
            if shared.given_up() {
                break;
            }
            match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
                Ok(Poll::Ready(output)) => {
                    shared.finish(Ok(output));
                    break;
                }
                Ok(Poll::Pending) => std::thread::park(),
                Err(panic) => {
                    shared.finish(Err(PoolError::Panicked(take_message(panic))));
                    break;
                }
            }
        }
        // Dropped here, on this thread, inside the runtime: the plugin's future, then
        // what it borrowed (see the caller's `PoolFuture`). A panic while dropping is
        // contained like one while polling.
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| drop(future))) {
            tracing::warn!(
                "dropping a plugin call panicked on its plugin thread: {}",
                take_message(panic)
            );
        }
        shared.set_worker(None);
        shared.ended();
        POOL.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }
}

/// Spins until `done` or `limit` passed: mostly on the CPU (a hand-off between cores
/// takes well under a microsecond), yielding now and then so that on one core the thread
/// being waited for gets to run. Returns whether `done` became true.
fn spin_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut round: u32 = 0;
    loop {
        if done() {
            return true;
        }
        round = round.wrapping_add(1);
        if round.is_multiple_of(64) {
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

thread_local! {
    /// The waker that unparks this pool thread, made once per thread.
    static THREAD_WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
}

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The caller's side: resolves with the output; dropped early, gives the call up.
struct Waiting<T> {
    shared: Arc<JobShared<T>>,
    running: Arc<Running>,
    done: bool,
    /// Whether it already looked for the output before yielding (first poll only).
    spun: bool,
}

impl<T> Future for &mut Waiting<T> {
    type Output = Result<T, PoolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, PoolError>> {
        let this = self.get_mut();
        if !this.spun {
            // A quick call answers while the caller still runs: no wake-up either way.
            this.spun = true;
            spin_until(SPIN_FOR_RESULT, || {
                this.shared.ready.load(Ordering::Acquire)
            });
        }
        // The waker first, then the output: a `finish` in between wakes this waker.
        *this
            .shared
            .host_waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        match this
            .shared
            .output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            Some(output) => {
                this.done = true;
                Poll::Ready(output)
            }
            None => Poll::Pending,
        }
    }
}

impl<T> Drop for Waiting<T> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        *self
            .running
            .abandoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        self.shared.given_up.store(true, Ordering::SeqCst);
        let worker = self
            .shared
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(worker) = worker {
            worker.unpark();
            // A future that is waiting (the usual case) is dropped at once on its thread;
            // wait for that, briefly, so the plugin has wound down when the caller goes
            // on. One that spins is left to its thread (and listed as stuck).
            let ended = self
                .shared
                .ended
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let _ = self
                .shared
                .ended_changed
                .wait_timeout_while(ended, DROP_WAIT, |ended| !*ended);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct SetOnDrop(Arc<AtomicBool>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn names() -> (Arc<str>, Arc<str>) {
        (Arc::from("tool"), Arc::from("plugin"))
    }

    /// Regression: calls submitted together while one thread looked for work all got that
    /// one thread, and all but the first waited behind it (a crash call waited 20 s behind
    /// two busy ones).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_submitted_together_each_get_a_thread_at_once() {
        let (tool, plugin) = names();
        for round in 0..20 {
            // One quick call leaves its thread looking for work.
            run(
                Arc::clone(&tool),
                Arc::clone(&plugin),
                None,
                Box::pin(async {}),
            )
            .await
            .expect("ran");
            // Four calls that can only finish together: each blocks its thread until all
            // four run at once.
            let barrier = Arc::new(std::sync::Barrier::new(4));
            let calls: Vec<_> = (0..4)
                .map(|_| {
                    let barrier = Arc::clone(&barrier);
                    tokio::spawn(run(
                        Arc::clone(&tool),
                        Arc::clone(&plugin),
                        None,
                        Box::pin(async move {
                            barrier.wait();
                        }),
                    ))
                })
                .collect();
            let all = async {
                for call in calls {
                    call.await.expect("joined").expect("ran");
                }
            };
            tokio::time::timeout(std::time::Duration::from_secs(10), all)
                .await
                .unwrap_or_else(|_| panic!("round {round}: a call waited behind the others"));
        }
    }

    #[tokio::test]
    async fn a_call_runs_on_a_pool_thread_and_a_panic_there_is_an_error() {
        let (tool, plugin) = names();
        let here = std::thread::current().id();
        let ran_on = run(
            Arc::clone(&tool),
            Arc::clone(&plugin),
            None,
            Box::pin(async { std::thread::current().id() }),
        )
        .await
        .expect("ran");
        assert_ne!(ran_on, here, "polled on a pool thread");
        let panicked = run::<()>(tool, plugin, None, Box::pin(async { panic!("boom") })).await;
        assert!(
            panicked
                .as_ref()
                .is_err_and(|e| e.to_string().contains("boom")),
            "{panicked:?}"
        );
    }

    #[tokio::test]
    async fn a_call_given_up_while_it_waits_is_dropped_on_its_thread_and_not_stuck() {
        let (tool, plugin) = names();
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = SetOnDrop(Arc::clone(&dropped));
        let call = run::<()>(
            Arc::from("waits_forever"),
            plugin,
            None,
            Box::pin(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            }),
        );
        let given_up = tokio::time::timeout(Duration::from_millis(20), call).await;
        assert!(given_up.is_err(), "it never finishes on its own");
        // Dropped at once if a thread had taken it (the caller waits for that), else as
        // soon as one takes it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dropped.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "never dropped after it was given up"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Its entry goes just after the drop returns.
        while stuck_calls().iter().any(|c| c.tool == "waits_forever") {
            assert!(
                Instant::now() < deadline,
                "a future that waits is not stuck"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(tool);
    }
}
