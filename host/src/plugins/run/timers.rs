//! `sleep` for plugins: the runtime's timer when first polled on one of the host's
//! runtime threads, else a timer thread of its own ([`ThreadTimer`]), so a sleep ends even
//! when the plugin blocks the thread that polls the call.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// `sleep` for a plugin: `true` when the time is up, `false` when the call was cancelled
/// first. Where it is first polled decides the timer: on a thread of the host's runtime,
/// the runtime's timer (polled inside the call's runtime from then on, whichever thread
/// polls); on any other thread (a plugin's own), a [`ThreadTimer`], which needs nobody to
/// drive it, so the sleep ends even if the plugin blocks the thread that polls the call.
/// A panic ends it as cancelled (the API's only other answer); it is logged.
pub(super) struct HostSleep {
    runtime: Option<tokio::runtime::Handle>,
    duration: Duration,
    cancelled: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    timer: Option<SleepTimer>,
}

impl HostSleep {
    /// A sleep of `duration` that ends early (as cancelled) when `cancel` fires; `runtime`
    /// is the call's, if it started on one.
    pub(super) fn new(
        runtime: Option<tokio::runtime::Handle>,
        duration: Duration,
        cancel: tokio_util::sync::CancellationToken,
    ) -> HostSleep {
        HostSleep {
            runtime,
            duration,
            cancelled: Box::pin(cancel.cancelled_owned()),
            timer: None,
        }
    }
}

enum SleepTimer {
    Runtime(Pin<Box<tokio::time::Sleep>>),
    Thread(ThreadTimer),
}

impl Future for HostSleep {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let this = &mut *self;
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if this.cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            // A pool thread does not enter the runtime (`call_pool`), but the runtime's
            // timer serves it as it serves the runtime's own threads.
            let on_runtime_thread = tokio::runtime::Handle::try_current().is_ok()
                || (this.runtime.is_some() && super::call_pool::on_pool_thread());
            let _entered = this.runtime.as_ref().map(tokio::runtime::Handle::enter);
            let duration = this.duration;
            let timer = this.timer.get_or_insert_with(|| {
                if on_runtime_thread {
                    SleepTimer::Runtime(Box::pin(tokio::time::sleep(duration)))
                } else {
                    SleepTimer::Thread(ThreadTimer::new(duration))
                }
            });
            let elapsed = match timer {
                SleepTimer::Runtime(sleep) => sleep.as_mut().poll(cx),
                SleepTimer::Thread(thread) => Pin::new(thread).poll(cx),
            };
            elapsed.map(|()| true)
        }));
        polled.unwrap_or_else(|payload| {
            let message = toolhost_plugin_api::take_message(payload);
            tracing::warn!("a plugin's sleep panicked in the host: {message}");
            Poll::Ready(false)
        })
    }
}

impl Drop for HostSleep {
    fn drop(&mut self) {
        let _entered = self.runtime.as_ref().map(tokio::runtime::Handle::enter);
        let timer = self.timer.take();
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(timer)))
        {
            toolhost_plugin_api::dispose_payload(payload);
        }
    }
}

/// A timer that runs on a thread of its own: for `sleep` asked from a thread outside the
/// host's runtime. The thread starts at the first poll and ends when the time is up or the
/// timer is dropped, whichever comes first.
struct ThreadTimer {
    duration: Duration,
    shared: Arc<TimerShared>,
}

#[derive(Default)]
struct TimerShared {
    state: Mutex<TimerState>,
    changed: Condvar,
}

#[derive(Default)]
struct TimerState {
    started: bool,
    fired: bool,
    dropped: bool,
    waker: Option<Waker>,
}

impl ThreadTimer {
    fn new(duration: Duration) -> ThreadTimer {
        ThreadTimer {
            duration,
            shared: Arc::default(),
        }
    }

    fn run(shared: &TimerShared, deadline: Option<Instant>) {
        let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if state.dropped {
                return;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                break;
            }
            state = match left {
                Some(left) => {
                    shared
                        .changed
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
        state.fired = true;
        let waker = state.waker.take();
        drop(state);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Future for ThreadTimer {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if state.fired {
            return Poll::Ready(());
        }
        state.waker = Some(cx.waker().clone());
        if !state.started {
            state.started = true;
            // `None`: further away than `Instant` can say, so never.
            let deadline = Instant::now().checked_add(self.duration);
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("toolhost-plugin-sleep".to_owned())
                .spawn(move || ThreadTimer::run(&shared, deadline));
            if let Err(e) = spawned {
                tracing::warn!("could not start a timer thread for a plugin's sleep: {e}");
                state.fired = true;
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .dropped = true;
        self.shared.changed.notify_all();
    }
}
