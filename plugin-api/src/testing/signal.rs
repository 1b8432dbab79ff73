//! The harness's cancel signal, the futures built on it (`cancelled`, `sleep`) and the
//! tiny executor `TestHost::call` blocks on. Threads and wakers only: no runtime.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// A host's cancel signal: set once, never reset. Timer threads wait on `changed`.
#[derive(Default)]
pub(super) struct Signal {
    state: Mutex<SignalState>,
    changed: Condvar,
}

#[derive(Default)]
struct SignalState {
    cancelled: bool,
    /// The `TestHost` was dropped: timer threads end without cancelling.
    closed: bool,
    /// Wakers of pending `cancelled()` futures, by future.
    wakers: BTreeMap<u64, Waker>,
    next_id: u64,
}

impl Signal {
    fn lock(&self) -> MutexGuard<'_, SignalState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn is_cancelled(&self) -> bool {
        self.lock().cancelled
    }

    /// Cancels: wakes every `cancelled()` future and every sleep.
    pub(super) fn cancel(&self) {
        let wakers = {
            let mut state = self.lock();
            state.cancelled = true;
            self.changed.notify_all();
            std::mem::take(&mut state.wakers)
        };
        wakers.into_values().for_each(Waker::wake);
    }

    /// The host is gone: timer threads waiting on this signal end.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Cancels after `delay` from a thread of its own, unless the host is dropped first.
    pub(super) fn cancel_after(self: &Arc<Self>, delay: Duration) {
        // A delay past the end of time never comes.
        let Some(deadline) = Instant::now().checked_add(delay) else {
            return;
        };
        let signal = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("toolhost-test-cancel".to_owned())
            .spawn(move || {
                let state = signal.wait_until(deadline, || false);
                let due = !state.cancelled && !state.closed;
                drop(state);
                if due {
                    signal.cancel();
                }
            });
        if spawned.is_err() {
            // No thread for the timer: cancelling at once is closer than never.
            self.cancel();
        }
    }

    /// Waits until `deadline`, a cancel, the host's drop or `stop()`, whichever is first.
    fn wait_until(
        &self,
        deadline: Instant,
        stop: impl Fn() -> bool,
    ) -> MutexGuard<'_, SignalState> {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            if state.cancelled || state.closed || stop() || now >= deadline {
                return state;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Wakes the timer threads so they look at their `stop` condition again.
    fn nudge(&self) {
        let _state = self.lock();
        self.changed.notify_all();
    }
}

/// Resolves when the signal is cancelled (`ToolContext::cancelled`). Owns what it needs.
pub(super) struct WhenCancelled {
    signal: Arc<Signal>,
    id: Option<u64>,
}

impl WhenCancelled {
    pub(super) fn new(signal: Arc<Signal>) -> Self {
        WhenCancelled { signal, id: None }
    }
}

impl Future for WhenCancelled {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut state = this.signal.lock();
        if state.cancelled {
            return Poll::Ready(());
        }
        let id = *this.id.get_or_insert_with(|| {
            state.next_id += 1;
            state.next_id
        });
        state.wakers.insert(id, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for WhenCancelled {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.signal.lock().wakers.remove(&id);
        }
    }
}

/// `ToolContext::sleep`: `true` when the time passed, `false` when cancelled first. As in
/// the host, the time starts at the first poll and a cancelled call's sleep ends at once.
/// The timer is a thread that waits on the signal, so a cancel ends it early.
pub(super) struct Sleep {
    signal: Arc<Signal>,
    duration: Duration,
    timer: Option<Arc<Timer>>,
}

#[derive(Default)]
struct Timer {
    /// `Some(true)`: the time passed; `Some(false)`: the thread ended otherwise.
    outcome: Mutex<(Option<bool>, Option<Waker>)>,
    abandoned: AtomicBool,
}

impl Sleep {
    pub(super) fn new(signal: Arc<Signal>, duration: Duration) -> Self {
        Sleep {
            signal,
            duration,
            timer: None,
        }
    }

    fn start(&self) -> Option<Arc<Timer>> {
        let timer = Arc::new(Timer::default());
        let (signal, thread_timer) = (Arc::clone(&self.signal), Arc::clone(&timer));
        let deadline = Instant::now().checked_add(self.duration)?;
        let spawned = std::thread::Builder::new()
            .name("toolhost-test-sleep".to_owned())
            .spawn(move || {
                let state =
                    signal.wait_until(deadline, || thread_timer.abandoned.load(Ordering::Acquire));
                let elapsed = !state.cancelled && !state.closed && Instant::now() >= deadline;
                drop(state);
                let waker = {
                    let mut slot = thread_timer
                        .outcome
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    slot.0 = Some(elapsed);
                    slot.1.take()
                };
                if let Some(waker) = waker {
                    waker.wake();
                }
            });
        spawned.ok().map(|_| timer)
    }
}

impl Future for Sleep {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        if self.signal.is_cancelled() {
            return Poll::Ready(false);
        }
        if self.duration.is_zero() {
            return Poll::Ready(true);
        }
        if self.timer.is_none() {
            match self.start() {
                Some(timer) => self.timer = Some(timer),
                // No thread (or a deadline past the end of time): the sleep cannot end on
                // its own, so it ends as the API's only other answer says, cancelled.
                None => return Poll::Ready(false),
            }
        }
        let Some(timer) = &self.timer else {
            return Poll::Ready(false);
        };
        let mut slot = timer.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.0 {
            Some(elapsed) => Poll::Ready(elapsed),
            None => {
                slot.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(timer) = &self.timer {
            timer.abandoned.store(true, Ordering::Release);
            self.signal.nudge();
        }
    }
}

/// Wakes a thread parked in [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread until it is ready, parking in between.
pub(super) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        // A wake before this park makes it return at once (the thread's token).
        std::thread::park();
    }
}
