//! Running blocking work (a subprocess, a big file read) from a tool without a runtime:
//! the work runs on its own thread and the tool awaits its result. With
//! [`crate::ToolContext::blocking`], the work also sees the call's cancellation.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// Runs `work` on a new thread and resolves with its result.
///
/// Plugins have no runtime of their own (a plugin's tokio has no reactor), so this is the
/// way to block without stalling the host's worker threads. A panic in `work` resolves to
/// `Err` with the panic message. Dropping the future does not stop the thread: for long
/// work use [`crate::ToolContext::blocking`], whose closure can watch a [`CancelFlag`].
pub fn blocking<T, F>(work: F) -> impl Future<Output = Result<T, String>> + Send + 'static
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let shared = Arc::new(Mutex::new(Slot::<T> {
        result: None,
        waker: None,
    }));
    let worker_side = Arc::clone(&shared);
    let spawned = std::thread::Builder::new()
        .name("toolhost-plugin-blocking".to_owned())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .map_err(|p| crate::unwind::panic_message(p.as_ref()));
            let waker = {
                let mut slot = worker_side.lock().unwrap_or_else(PoisonError::into_inner);
                slot.result = Some(result);
                slot.waker.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        });
    if let Err(e) = spawned {
        shared.lock().unwrap_or_else(PoisonError::into_inner).result =
            Some(Err(format!("could not start a thread: {e}")));
    }
    BlockingResult { shared }
}

/// Tells blocking work that its call was cancelled (see [`crate::ToolContext::blocking`]).
/// Cheap to check often.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// Whether the call was cancelled; the work should stop soon after this turns true.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }
}

struct Slot<T> {
    result: Option<Result<T, String>>,
    waker: Option<Waker>,
}

struct BlockingResult<T> {
    shared: Arc<Mutex<Slot<T>>>,
}

impl<T> Future for BlockingResult<T> {
    type Output = Result<T, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
