//! Turning panics into values: a future wrapper that catches a panic in `poll`, and the
//! text of a panic payload. Used on both sides of the plugin boundary.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Wraps a future so that a panic inside `poll` ends it with `Err(message)` instead of
/// unwinding into the caller.
///
/// A panic inside the future's destructor is not caught (Rust cannot unwind out of a
/// drop during a drop); keep destructors panic-free.
pub struct CatchUnwind<F> {
    inner: F,
}

impl<F: Future> CatchUnwind<F> {
    /// Wraps `future`.
    pub fn new(future: F) -> Self {
        CatchUnwind { inner: future }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning: `inner` is never moved out of a pinned `CatchUnwind`
        // and `CatchUnwind` has no `Drop` impl or `Unpin` impl of its own.
        let inner = unsafe { self.map_unchecked_mut(|s| &mut s.inner) };
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    }
}

/// The message of a panic payload (`panic!("...")` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}
