//! The threads plugin calls run on. A plugin's future is never polled on the host's
//! runtime threads (which serve the control socket, MCP, the watcher and every timer):
//! each call is handed to a thread of this pool, which polls it until it is ready, and
//! the host awaits the answer. A plugin that spins or blocks in `poll` (a busy loop, a
//! blocking read, `std::thread::sleep` in an async fn) holds only its own pool thread, so
//! timeouts fire, status answers and other calls run.
//!
//! Sizing: threads are made on demand, one per call being polled at once (a call waits
//! only if [`MAX_THREADS`] are busy), and an idle thread ends after [`IDLE_LIFETIME`]. A
//! call whose future is waiting (`Pending`: a question to its client, a timer, a child
//! turn) holds no thread: the pool thread puts it back and goes on, and the call's own
//! waker hands it to a pool thread again when it can go on (a state word, so a wake-up
//! during a poll makes the thread poll once more rather than be lost). So any number of
//! calls may wait for their clients while other calls run. A
//! thread does not enter the caller's tokio runtime: the plugin's host services (timers,
//! child turns, questions) enter the runtime the call started on themselves, so the
//! runtime's handle is not shared by two threads on every call ([`on_pool_thread`] tells
//! the timers that the runtime's timer will do).
//!
//! Speed: the hand-off is what a plugin call costs beyond the plugin (`threads.rs` says
//! how a call reaches a thread). A wake-up each way costs more than most plugin calls on a
//! small VM, so where the process has a second CPU the caller looks for the answer for a
//! moment (on its first poll, at most [`SPIN_FOR_RESULT`]) before it yields its runtime
//! thread, and a pool thread just done looks for the next call for a moment before it
//! sleeps: a quick call wakes nobody. The bound keeps the guarantee above: a plugin that
//! spins or blocks holds a runtime thread that long at most. With one CPU nobody spins:
//! there, the thread waited for runs only once the spinner stops.
//!
//! When the caller gives up on a call (its timeout and grace passed, or the turn was
//! dropped), a pool thread drops the plugin's future: at once if it was waiting, else when
//! its `poll` returns. A future that
//! never returns from `poll` cannot be dropped: native code cannot be stopped from outside.
//! Such a call is listed by [`stuck_calls`] (and in `toolhost status`) until it returns;
//! its thread is lost until then.

mod threads;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use toolhost_plugin_api::take_message;

use threads::Task;

/// The most pool threads at once (calls being polled, not calls waiting); past it, calls
/// wait for a thread.
pub(crate) const MAX_THREADS: usize = 512;

/// How long an idle pool thread waits for work before it ends.
pub(crate) const IDLE_LIFETIME: Duration = Duration::from_secs(30);

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
    let mut stuck = Vec::new();
    threads::running(|call| stuck.extend(call.stuck(now)));
    stuck
}

/// What a call is, for [`stuck_calls`]: set by its caller, read by nobody else until the
/// call is given up.
struct CallNames {
    tool: Arc<str>,
    plugin: Arc<str>,
    started: Instant,
    /// When the caller gave up, if it did.
    abandoned: Mutex<Option<Instant>>,
}

impl CallNames {
    fn new(tool: Arc<str>, plugin: Arc<str>) -> CallNames {
        CallNames {
            tool,
            plugin,
            started: Instant::now(),
            abandoned: Mutex::new(None),
        }
    }

    fn abandon(&self) {
        *self
            .abandoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    fn stuck(&self, now: Instant) -> Option<StuckCall> {
        let abandoned = (*self
            .abandoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner))?;
        Some(StuckCall {
            tool: self.tool.to_string(),
            plugin: self.plugin.to_string(),
            running_secs: now.duration_since(self.started).as_secs_f64(),
            abandoned_secs: now.duration_since(abandoned).as_secs_f64(),
            advice: format!(
                "the plugin '{}' does not return from tool '{}' although the call was \
                 given up: it holds one of the host's plugin threads (and a CPU if it \
                 spins) until it returns. Restart toolhost to reclaim it, and fix or \
                 remove the plugin, or run it in a worker process (`--isolate`, or \
                 `[isolation.plugins] {} = \"process\"`), where such a call gets its \
                 worker killed and restarted",
                self.plugin, self.tool, self.plugin
            ),
        })
    }
}

/// Whether this thread is one of the pool's (where a plugin's host services run).
pub(crate) fn on_pool_thread() -> bool {
    threads::on_pool_thread()
}

/// The future of one plugin call, with everything it borrows, ready to be polled on a
/// pool thread. The implementor makes sure dropping it drops the plugin's future first,
/// and that once it answered it holds nothing that must be dropped on a pool thread: the
/// pool hands a future that answered back to its caller, which frees it (memory freed by
/// the thread that allocated it stays in that thread's cache).
pub(crate) type PoolFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs `future` on a pool thread and waits for its output.
/// An error if the pool could not run it (no thread could be started) or its `poll`
/// panicked (the FFI edge catches plugin panics; this is the host's last line). Dropping the
/// returned future gives the call up: the pool drops the plugin's future at once if it is
/// waiting, or as soon as its `poll` returns.
pub(crate) async fn run<T: Send + 'static>(
    tool: Arc<str>,
    plugin: Arc<str>,
    future: PoolFuture<T>,
) -> Result<T, PoolError> {
    let job = Job::new(
        future,
        Awaited {
            ready: Padded(AtomicBool::new(false)),
            output: Mutex::new(None),
            host_waker: Mutex::new(None),
            given_up: AtomicBool::new(false),
            ended: Mutex::new(false),
            ended_changed: Condvar::new(),
            names: CallNames::new(tool, plugin),
        },
    );
    threads::submit(Arc::clone(&job) as Arc<dyn Task>)?;
    let mut waiting = Waiting {
        job,
        done: false,
        spun: false,
    };
    (&mut waiting).await
}

/// A call started with [`start`], running on a pool thread with no one awaiting it.
pub(crate) struct Detached {
    job: Arc<dyn GiveUp>,
}

impl Detached {
    /// Gives the call up: its future is dropped on its thread at once if it is waiting,
    /// or as soon as its `poll` returns; then its `on_done` runs with an error. A call
    /// whose `poll` never returns never gets there (and is listed as stuck).
    pub(crate) fn give_up(&self) {
        Arc::clone(&self.job).give_up();
    }
}

/// Starts `future` on a pool thread with nobody awaiting it:
/// `on_done` runs on that thread, exactly once, with the output, or with an error once the
/// future is dropped after [`Detached::give_up`] (or its `poll` panicked). A worker process
/// answers its host from the plugin thread this way, with no runtime thread to wake.
pub(crate) fn start<T: Send + 'static>(
    tool: Arc<str>,
    plugin: Arc<str>,
    future: PoolFuture<T>,
    on_done: OnDone<T>,
) -> Result<Detached, PoolError> {
    let job = Job::new(
        future,
        Unawaited {
            on_done: Mutex::new(Some(on_done)),
            given_up: AtomicBool::new(false),
            names: CallNames::new(tool, plugin),
        },
    );
    threads::submit(Arc::clone(&job) as Arc<dyn Task>)?;
    Ok(Detached { job })
}

/// What runs on the plugin thread with a detached call's outcome.
pub(crate) type OnDone<T> = Box<dyn FnOnce(Result<T, PoolError>) + Send>;

/// A job's scheduling states ([`Job::state`]).
/// Waiting for a wake-up: its future is in the job, on no thread.
const IDLE: u32 = 0;
/// Handed to the pool (at its start, or woken from `IDLE`).
const QUEUED: u32 = 1;
/// Being polled on a pool thread.
const RUNNING: u32 = 2;
/// Woken while being polled: the thread polls it again before it lets it go.
const NOTIFIED: u32 = 3;
/// Answered, or dropped.
const DONE: u32 = 4;

/// One call: its future (on a pool thread while it is polled, in the job while it waits)
/// and how its end is told. It is its own waker ([`Wake`]): a wake-up hands a waiting
/// call to a pool thread.
struct Job<T, S> {
    /// Taken by the pool thread that polls the call, put back while it waits; put back
    /// once it answered, for the last owner to drop (see [`PoolFuture`]).
    future: Mutex<Option<PoolFuture<T>>>,
    /// `IDLE`, `QUEUED`, `RUNNING`, `NOTIFIED` or `DONE`.
    state: AtomicU32,
    /// Whether a pool thread ever took it (a caller giving up waits for its drop only
    /// then).
    started: AtomicBool,
    signals: S,
}

impl<T: Send + 'static, S: JobSignals<T> + 'static> Job<T, S> {
    /// A new call, queued (it is handed to the pool at once).
    fn new(future: PoolFuture<T>, signals: S) -> Arc<Self> {
        Arc::new(Job {
            future: Mutex::new(Some(future)),
            state: AtomicU32::new(QUEUED),
            started: AtomicBool::new(false),
            signals,
        })
    }

    /// Hands the call to a pool thread if it waits (`IDLE`), or has the thread polling it
    /// poll it again (`RUNNING`); nothing if it is queued, already woken or done.
    fn schedule(self: &Arc<Self>) {
        let mut now = self.state.load(Ordering::Acquire);
        loop {
            let next = match now {
                IDLE => QUEUED,
                RUNNING => NOTIFIED,
                _ => return,
            };
            match self
                .state
                .compare_exchange_weak(now, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        if now == IDLE
            && let Err(e) = threads::submit(Arc::clone(self) as Arc<dyn Task>)
        {
            // No thread runs and none could be started: the call ends with that error
            // (its future dropped here: no pool thread is left to drop it on).
            self.state.store(DONE, Ordering::Release);
            let future = self
                .future
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| drop(future))) {
                tracing::warn!("dropping a plugin call panicked: {}", take_message(panic));
            }
            self.signals.ended(false);
            self.signals.finish(Err(e));
        }
    }
}

impl<T: Send + 'static, S: JobSignals<T> + 'static> Wake for Job<T, S> {
    fn wake(self: Arc<Self>) {
        self.schedule();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.schedule();
    }
}

/// How the end of a call is told: to a waiting caller ([`Awaited`]) or to a callback
/// ([`Unawaited`]).
trait JobSignals<T>: Send + Sync {
    fn given_up(&self) -> bool;
    /// The output (or why there is none), once the plugin's future is done.
    fn finish(&self, output: Result<T, PoolError>);
    /// The plugin's future is done with; `dropped_early` if it was given up before its
    /// output.
    fn ended(&self, dropped_early: bool);
    fn names(&self) -> &CallNames;
}

/// A value alone on its cache line, so that the thread spinning on it is not disturbed by
/// writes to its neighbours.
#[repr(align(128))]
struct Padded<T>(T);

/// The end of a call that a caller awaits ([`Waiting`]).
struct Awaited<T> {
    /// Set once `output` holds the result: what a spinning caller watches.
    ready: Padded<AtomicBool>,
    output: Mutex<Option<Result<T, PoolError>>>,
    host_waker: Mutex<Option<Waker>>,
    given_up: AtomicBool,
    /// Set once the pool thread is done with the future (dropped, or answered).
    ended: Mutex<bool>,
    ended_changed: Condvar,
    names: CallNames,
}

impl<T: Send> JobSignals<T> for Awaited<T> {
    fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
    }

    fn ended(&self, _dropped_early: bool) {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner) = true;
        // Only a caller that gave up waits for this (it says so before it looks): a
        // notification costs a system call, so the common case makes none.
        if self.given_up.load(Ordering::SeqCst) {
            self.ended_changed.notify_all();
        }
    }

    fn finish(&self, output: Result<T, PoolError>) {
        *self.output.lock().unwrap_or_else(PoisonError::into_inner) = Some(output);
        // The waker before `ready`: a caller that saw `ready` is reading the output, and
        // this thread is done with the line it shares with the waker.
        let waker = self
            .host_waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.ready.0.store(true, Ordering::Release);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn names(&self) -> &CallNames {
        &self.names
    }
}

/// The end of a call started with [`start`].
struct Unawaited<T> {
    on_done: Mutex<Option<OnDone<T>>>,
    given_up: AtomicBool,
    names: CallNames,
}

trait GiveUp: Send + Sync {
    fn give_up(self: Arc<Self>);
}

impl<T: Send + 'static> GiveUp for Job<T, Unawaited<T>> {
    fn give_up(self: Arc<Self>) {
        self.signals.names.abandon();
        self.signals.given_up.store(true, Ordering::SeqCst);
        // A waiting call goes to a thread, which drops it.
        self.schedule();
    }
}

impl<T: Send> JobSignals<T> for Unawaited<T> {
    fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
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

    fn ended(&self, dropped_early: bool) {
        if dropped_early {
            // Given up: the future is gone now; say so once.
            self.finish(Err(PoolError::GivenUp));
        }
    }

    fn names(&self) -> &CallNames {
        &self.names
    }
}

impl<T: Send + 'static, S: JobSignals<T> + 'static> Task for Job<T, S> {
    fn stuck(&self, now: Instant) -> Option<StuckCall> {
        self.signals.names().stuck(now)
    }

    /// Polls the call on this thread until it answers or waits; a call that waits goes
    /// back into the job and this thread goes on (the call's waker brings it back). Drops
    /// it early once the caller gave up (or its `poll` panicked). A future that answered
    /// goes back into the job, for its owner to drop. What this thread does after
    /// `finishing` is a few stores (see `threads.rs`: the caller's next call waits for them
    /// rather than for another thread).
    fn run(self: Arc<Self>, finishing: &dyn Fn()) {
        let signals = &self.signals;
        let Some(mut future) = self
            .future
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        self.started.store(true, Ordering::SeqCst);
        self.state.store(RUNNING, Ordering::Release);
        let waker = Waker::from(Arc::clone(&self));
        let mut cx = Context::from_waker(&waker);
        let output = loop {
            if signals.given_up() {
                break None;
            }
            match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
                Ok(Poll::Ready(output)) => break Some(Ok(output)),
                Ok(Poll::Pending) => {
                    // Back into the job, and this thread is free, unless it was woken
                    // meanwhile (then it is polled again here).
                    *self.future.lock().unwrap_or_else(PoisonError::into_inner) = Some(future);
                    if self
                        .state
                        .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return;
                    }
                    self.state.store(RUNNING, Ordering::Release);
                    match self
                        .future
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .take()
                    {
                        Some(again) => future = again,
                        None => return,
                    }
                }
                Err(panic) => break Some(Err(PoolError::Panicked(take_message(panic)))),
            }
        };
        self.state.store(DONE, Ordering::Release);
        if matches!(output, Some(Ok(_))) {
            *self.future.lock().unwrap_or_else(PoisonError::into_inner) = Some(future);
        } else if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| drop(future))) {
            // Dropped here, on this thread: the plugin's future, then what it borrowed
            // (see `PoolFuture`). A panic while dropping is contained like one while
            // polling.
            tracing::warn!(
                "dropping a plugin call panicked on its plugin thread: {}",
                take_message(panic)
            );
        }
        signals.ended(output.is_none());
        if let Some(output) = output {
            finishing();
            signals.finish(output);
        }
    }
}

/// The caller's side: resolves with the output; dropped early, gives the call up.
struct Waiting<T: Send + 'static> {
    job: Arc<Job<T, Awaited<T>>>,
    done: bool,
    /// Whether it already looked for the output before yielding (first poll only).
    spun: bool,
}

impl<T: Send + 'static> Future for &mut Waiting<T> {
    type Output = Result<T, PoolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, PoolError>> {
        let this = self.get_mut();
        let signals = &this.job.signals;
        if !this.spun {
            // A quick call answers while the caller still runs: no wake-up either way.
            this.spun = true;
            if threads::caller_may_spin()
                && threads::spin_until(SPIN_FOR_RESULT, || signals.ready.0.load(Ordering::Acquire))
                && let Some(output) = signals
                    .output
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
            {
                this.done = true;
                return Poll::Ready(output);
            }
        }
        // The waker first, then the output: a `finish` in between wakes this waker.
        *signals
            .host_waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        match signals
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

impl<T: Send + 'static> Drop for Waiting<T> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let signals = &self.job.signals;
        signals.names.abandon();
        signals.given_up.store(true, Ordering::SeqCst);
        // A waiting call goes to a pool thread, which drops it; one being polled is
        // dropped when its `poll` returns.
        self.job.schedule();
        if self.job.started.load(Ordering::SeqCst) {
            // A future that is waiting (the usual case) is dropped at once on a pool
            // thread; wait for that, briefly, so the plugin has wound down when the caller
            // goes on. One that spins is left to its thread (and listed as stuck).
            let ended = signals.ended.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = signals
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
            run(Arc::clone(&tool), Arc::clone(&plugin), Box::pin(async {}))
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
            Box::pin(async { std::thread::current().id() }),
        )
        .await
        .expect("ran");
        assert_ne!(ran_on, here, "polled on a pool thread");
        let panicked = run::<()>(tool, plugin, Box::pin(async { panic!("boom") })).await;
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
