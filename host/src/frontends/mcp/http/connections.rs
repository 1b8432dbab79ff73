//! The connection table: at most `max_connections`, the least recently used idle one
//! closed for a newcomer, and the header-read and idle deadlines.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::HttpLimits;

/// The connections of a door: how many, and which is idle since when.
pub(super) struct Connections {
    max: usize,
    next: AtomicU64,
    table: Mutex<BTreeMap<u64, Arc<ConnectionState>>>,
    freed: Notify,
}

/// One connection: requests in flight, last activity, and the token that closes it.
pub(super) struct ConnectionState {
    pub(super) id: u64,
    accepted: Instant,
    in_flight: AtomicUsize,
    served: AtomicU64,
    /// Milliseconds after `accepted` of the last response's end.
    last_active_ms: AtomicU64,
    pub(super) changed: Notify,
    pub(super) evict: CancellationToken,
}

impl ConnectionState {
    pub(super) fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
        Busy(Arc::clone(self))
    }

    /// When this connection expires if nothing happens: `None` while a request is in
    /// flight; else the header-read timeout after acceptance (no request yet) or the
    /// idle timeout after the last response.
    pub(super) fn deadline(&self, limits: &HttpLimits) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.served.load(Ordering::Acquire) == 0 {
            return Some(self.accepted + limits.header_read_timeout);
        }
        let last =
            self.accepted + Duration::from_millis(self.last_active_ms.load(Ordering::Acquire));
        Some(last + limits.idle_timeout)
    }

    /// Since when the connection has been idle, if it is.
    fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0).then(|| {
            self.accepted + Duration::from_millis(self.last_active_ms.load(Ordering::Acquire))
        })
    }
}

/// A request in flight on a connection (until its response body is done).
pub(super) struct Busy(Arc<ConnectionState>);

impl Drop for Busy {
    fn drop(&mut self) {
        let c = &self.0;
        let ms = u64::try_from(c.accepted.elapsed().as_millis()).unwrap_or(u64::MAX);
        c.last_active_ms.store(ms, Ordering::Release);
        c.served.fetch_add(1, Ordering::AcqRel);
        c.in_flight.fetch_sub(1, Ordering::AcqRel);
        c.changed.notify_one();
    }
}

/// Removes a connection from the table when its task ends.
pub(super) struct Registered<'a> {
    pub(super) connections: &'a Connections,
    pub(super) id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.connections.remove(self.id);
    }
}

impl Connections {
    pub(super) fn new(max: usize) -> Connections {
        Connections {
            max: max.max(1),
            next: AtomicU64::new(0),
            table: Mutex::new(BTreeMap::new()),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ConnectionState>>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until another connection may be accepted: there is room, or the oldest idle
    /// connection was closed to make some. `false` when `stop` came first.
    pub(super) async fn make_room(&self, stop: &CancellationToken) -> bool {
        loop {
            let freed = self.freed.notified();
            {
                let mut table = self.lock();
                if table.len() < self.max {
                    return true;
                }
                let oldest_idle = table
                    .values()
                    .filter_map(|c| c.idle_since().map(|since| (since, c.id)))
                    .min();
                if let Some((_, id)) = oldest_idle
                    && let Some(c) = table.remove(&id)
                {
                    c.evict.cancel();
                    return true;
                }
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = freed => {}
            }
        }
    }

    pub(super) fn add(&self) -> Arc<ConnectionState> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnectionState {
            id,
            accepted: Instant::now(),
            in_flight: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            last_active_ms: AtomicU64::new(0),
            changed: Notify::new(),
            evict: CancellationToken::new(),
        });
        self.lock().insert(id, Arc::clone(&state));
        state
    }

    fn remove(&self, id: u64) {
        if self.lock().remove(&id).is_some() {
            self.freed.notify_one();
        }
    }
}
