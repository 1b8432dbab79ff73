//! Telling a service manager what the host is doing, with systemd's notification protocol
//! (`sd_notify`, through the `sd-notify` crate: one datagram to `$NOTIFY_SOCKET`): ready
//! once it serves, reloading then ready again around a rescan asked for by the operator
//! (SIGHUP, `toolhost reload`), stopping when shutdown begins. Without `NOTIFY_SOCKET`
//! (not started by systemd as `Type=notify`) every call does nothing. A failure to send
//! is logged once per kind and never stops the host: the service manager is a watcher,
//! not a dependency.

use sd_notify::NotifyState;

/// The host serves: its plugins are loaded and its control socket answers. `status` is
/// a line for `systemctl status`.
pub(crate) fn ready(status: &str) {
    send(
        "READY=1",
        &[NotifyState::Ready, NotifyState::Status(status)],
    );
}

/// A rescan the operator asked for begins (systemd 253+ wants the monotonic time with
/// it); [`ready`] follows when it is done.
pub(crate) fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send("RELOADING=1", &[NotifyState::Reloading, now]),
        Err(e) => tracing::debug!("could not read the monotonic clock for RELOADING=1: {e}"),
    }
}

/// Shutdown begins.
pub(crate) fn stopping() {
    send("STOPPING=1", &[NotifyState::Stopping]);
}

fn send(what: &str, states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(
            "could not tell the service manager {what} through NOTIFY_SOCKET: {e}; the host \
             keeps serving (check the unit's NotifyAccess= and the socket)"
        );
    }
}
