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
///
/// ```
/// use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool, blocking};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct DuArgs {
///     /// The folder to measure.
///     path: String,
/// }
///
/// struct Du;
///
/// impl TypedTool for Du {
///     type Args = DuArgs;
///     fn name(&self) -> &str { "du" }
///     fn description(&self) -> &str { "Disk usage of a folder, as `du -sh` prints it." }
///     fn risk(&self) -> Risk { Risk::Read }
///     async fn run(&self, _ctx: &ToolContext<'_>, args: DuArgs) -> Result<String, ToolError> {
///         let du = move || std::process::Command::new("du").arg("-sh").arg(&args.path).output();
///         let output = blocking(du)
///             .await
///             .map_err(ToolError::failed)? // the closure panicked
///             .map_err(ToolError::failed)?; // `du` could not be started
///         Ok(String::from_utf8_lossy(&output.stdout).into_owned())
///     }
/// }
/// ```
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
                .map_err(crate::unwind::take_message);
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
///
/// ```
/// use toolhost_plugin_api::CancelFlag;
///
/// /// Counts the lines of `text`, stopping early when the call is cancelled.
/// fn count_lines(text: &str, cancel: &CancelFlag) -> Option<usize> {
///     let mut lines = 0;
///     for (i, _) in text.lines().enumerate() {
///         if i % 10_000 == 0 && cancel.is_cancelled() {
///             return None;
///         }
///         lines += 1;
///     }
///     Some(lines)
/// }
///
/// // A flag of one's own (in a test) is never cancelled.
/// assert_eq!(count_lines("a\nb\n", &CancelFlag::default()), Some(2));
/// ```
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// Whether the call was cancelled; the work should stop soon after this turns true.
    ///
    /// ```
    /// assert!(!toolhost_plugin_api::CancelFlag::default().is_cancelled());
    /// ```
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
