//! Turning panics into values: a future wrapper that catches a panic in `poll` and in its
//! future's destructor, the text of a panic payload, and a way to get rid of a payload
//! whose own destructor panics. Used on both sides of the plugin boundary.
//!
//! Weak spot: a panic while a thread is already unwinding still aborts the process (Rust
//! cannot catch it); these helpers only make sure no panic from plugin destructors starts
//! outside a `catch_unwind`.

use std::any::Any;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Wraps a future so that a panic inside `poll` ends it with `Err(message)` instead of
/// unwinding into the caller, and a panic inside the future's destructor is caught and
/// swallowed (the wrapper drops its future under `catch_unwind`).
///
/// Panic payloads are read for their message and then disposed of with
/// [`dispose_payload`], so a payload whose own `Drop` panics is harmless too.
///
/// `export_plugin!` wraps every tool call in it; hosts and tests can use it for any future.
///
/// ```
/// use std::future::Future;
/// use std::pin::pin;
/// use std::task::{Context, Poll, Waker};
/// use toolhost_plugin_api::CatchUnwind;
///
/// let mut future = pin!(CatchUnwind::new(async {
///     let v: Vec<u32> = Vec::new();
///     v[3] // panics
/// }));
/// let polled = future.as_mut().poll(&mut Context::from_waker(Waker::noop()));
/// let Poll::Ready(Err(message)) = polled else { panic!("expected the panic as a value") };
/// assert!(message.contains("index out of bounds"), "{message}");
/// ```
pub struct CatchUnwind<F> {
    inner: ManuallyDrop<F>,
}

impl<F: Future> CatchUnwind<F> {
    /// Wraps `future`.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::task::{Context, Poll, Waker};
    /// use toolhost_plugin_api::CatchUnwind;
    ///
    /// let mut future = pin!(CatchUnwind::new(async { 6 * 7 }));
    /// let polled = future.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    /// assert_eq!(polled, Poll::Ready(Ok(42)));
    /// ```
    pub fn new(future: F) -> Self {
        CatchUnwind {
            inner: ManuallyDrop::new(future),
        }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning: `inner` is never moved out of a pinned `CatchUnwind`
        // (its `Drop` drops it in place), and `CatchUnwind` has no `Unpin` impl of its own.
        let inner = unsafe { self.map_unchecked_mut(|s| &mut *s.inner) };
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(take_message(payload))),
        }
    }
}

impl<F> Drop for CatchUnwind<F> {
    fn drop(&mut self) {
        let inner = &mut self.inner;
        let dropped = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: dropped exactly once, here, in place (so a pinned future stays put);
            // `inner` is never used again.
            unsafe { ManuallyDrop::drop(inner) }
        }));
        if let Err(payload) = dropped {
            dispose_payload(payload);
        }
    }
}

/// The message of a panic payload (`panic!("...")` gives a `&str` or a `String`).
///
/// ```
/// use toolhost_plugin_api::panic_message;
///
/// let payload = std::panic::catch_unwind(|| panic!("out of {}", "tea")).unwrap_err();
/// assert_eq!(panic_message(payload.as_ref()), "out of tea");
/// let payload = std::panic::catch_unwind(|| std::panic::panic_any(42)).unwrap_err();
/// assert_eq!(panic_message(payload.as_ref()), "panic with a non-string payload");
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

/// The message of a panic payload, which is then disposed of with [`dispose_payload`].
///
/// ```
/// use toolhost_plugin_api::take_message;
///
/// let message = std::panic::catch_unwind(|| panic!("no config")).map_err(take_message);
/// assert_eq!(message, Err("no config".to_owned()));
/// ```
pub fn take_message(payload: Box<dyn Any + Send>) -> String {
    let message = panic_message(payload.as_ref());
    dispose_payload(payload);
    message
}

/// Drops a panic payload under `catch_unwind`; if its destructor panics in turn, that
/// second payload is leaked rather than dropped. Nothing unwinds out of this function, so
/// it is safe to call in an `extern "C"` function or a destructor.
///
/// ```
/// use toolhost_plugin_api::dispose_payload;
///
/// struct PanicsOnDrop;
/// impl Drop for PanicsOnDrop {
///     fn drop(&mut self) { panic!("in drop") }
/// }
///
/// let payload = std::panic::catch_unwind(|| std::panic::panic_any(PanicsOnDrop)).unwrap_err();
/// dispose_payload(payload); // does not unwind
/// ```
pub fn dispose_payload(payload: Box<dyn Any + Send>) {
    if let Err(second) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(second);
    }
}

/// What hosts and the test harness append to a tool's panic message when it shows a
/// runtime used inside a plugin (tokio's "there is no reactor running", "must be called
/// from the context of a Tokio 1.x runtime"): a plugin has no runtime of its own, and the
/// context's services are the way out. Empty for any other panic.
///
/// ```
/// use toolhost_plugin_api::__private::panic_hint;
/// assert!(panic_hint("there is no reactor running, must be called from the context of \
///     a Tokio 1.x runtime").contains("ctx.sleep"));
/// assert_eq!(panic_hint("index out of bounds"), "");
/// ```
#[doc(hidden)]
pub fn panic_hint(message: &str) -> &'static str {
    const RUNTIME_PANICS: [&str; 2] = [
        "there is no reactor running",
        "must be called from the context of a Tokio",
    ];
    if RUNTIME_PANICS.iter().any(|p| message.contains(p)) {
        " (a plugin has no tokio runtime: use ctx.sleep for timers and ctx.blocking for \
         blocking work)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Panics when dropped.
    struct PanicOnDrop;

    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("fixture panic in drop");
        }
    }

    /// A payload whose own destructor panics.
    struct BadPayload(#[allow(dead_code, reason = "only its drop matters")] PanicOnDrop);

    #[test]
    fn dropping_a_future_whose_destructor_panics_does_not_unwind() {
        let guard = PanicOnDrop;
        let future = CatchUnwind::new(async move {
            let _guard = &guard;
            std::future::pending::<()>().await;
        });
        // Polled once so the guard lives in the future's state.
        let mut future = Box::pin(future);
        let waker = std::task::Waker::noop();
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
        let dropped = catch_unwind(AssertUnwindSafe(move || drop(future)));
        assert!(dropped.is_ok(), "the drop panic escaped CatchUnwind");
    }

    #[test]
    fn a_payload_whose_destructor_panics_is_disposed_of_without_unwinding() {
        let payload = catch_unwind(|| std::panic::panic_any(BadPayload(PanicOnDrop)))
            .expect_err("it panicked");
        let outcome = catch_unwind(AssertUnwindSafe(move || take_message(payload)));
        assert_eq!(
            outcome.ok().as_deref(),
            Some("panic with a non-string payload")
        );
    }
}
