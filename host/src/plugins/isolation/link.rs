//! The worker's end of its connection to the host: frames out (a reply too large for the
//! protocol becomes an error reply for its call) and the service requests of its calls,
//! each waiting for the host's answer. The worker's main loop (`worker.rs`) and the host
//! services inside a worker (`proxy.rs`) both use it.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, PoisonError};

use serde_json::Value;
use tokio::sync::oneshot;

use super::protocol::{self, FromWorker, ServiceCall, WireServiceError, WireToolError};
use crate::sys::process::exit_now;
use toolhost_plugin_api::ServiceError;

/// The worker's end of the connection: frames out, and the service requests waiting for
/// the host's answer.
pub(crate) struct Link {
    stream: Mutex<UnixStream>,
    services: Mutex<HashMap<u64, oneshot::Sender<Result<Value, WireServiceError>>>>,
    next_service: std::sync::atomic::AtomicU64,
}

impl Link {
    /// The worker's end of the socketpair it inherited.
    pub(crate) fn new(stream: UnixStream) -> Link {
        Link {
            stream: Mutex::new(stream),
            services: Mutex::new(HashMap::new()),
            next_service: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The host answered service request `id`: the call waiting for it goes on.
    pub(crate) fn answered(&self, id: u64, answer: Result<Value, WireServiceError>) {
        let waiting = self
            .services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if let Some(tx) = waiting {
            let _ = tx.send(answer);
        }
    }

    /// Sends `message`; a worker whose host is gone has nothing left to do and exits. A
    /// reply the protocol cannot carry (over [`protocol::MAX_FRAME`]) becomes an error
    /// reply for its call, so the host fails the call at once instead of at its timeout.
    pub(crate) fn send(&self, message: &FromWorker) {
        let Err(e) = self.try_send(message) else {
            return;
        };
        match message {
            FromWorker::Reply { id, result } => {
                let message = match e {
                    protocol::FrameError::TooLarge(frame) => {
                        let (what, len) = match result {
                            Ok(output) => (
                                "result",
                                output.text.len()
                                    + output
                                        .structured
                                        .as_ref()
                                        .map_or(0, |v| v.to_string().len()),
                            ),
                            Err(error) => ("error message", error.message.len()),
                        };
                        format!(
                            "the {what} is {} bytes, more than the {} MiB a worker may send; \
                             return less or write it to a file",
                            crate::text::grouped(if len > protocol::MAX_FRAME {
                                len
                            } else {
                                frame
                            }),
                            protocol::MAX_FRAME >> 20
                        )
                    }
                    other => format!("the worker could not send the result: {other}"),
                };
                let refusal = FromWorker::Reply {
                    id: *id,
                    result: Err(WireToolError {
                        invalid_args: false,
                        message,
                    }),
                };
                if let Err(e) = self.try_send(&refusal) {
                    tracing::error!("could not send the host a call's refusal: {e}");
                }
            }
            _ => tracing::error!("could not encode a message for the host: {e}"),
        }
    }

    /// Sends `message`: `Err` if it cannot be encoded (too large); a failed write means the
    /// host is gone, and the worker exits.
    fn try_send(&self, message: &FromWorker) -> Result<(), protocol::FrameError> {
        let frame = protocol::encode(message)?;
        let stream = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = protocol::write_frame(&stream, &frame) {
            tracing::debug!("the host is gone ({e}); the worker ends");
            exit_now(0);
        }
        Ok(())
    }

    /// Asks the host for a service on behalf of call `call` and waits for the answer. A
    /// request too large to send fails at once.
    pub(crate) async fn service(
        &self,
        call: u64,
        request: ServiceCall,
    ) -> Result<Value, WireServiceError> {
        let id = self
            .next_service
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        if let Err(e) = self.try_send(&FromWorker::Service { id, call, request }) {
            self.services
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            return Err(ServiceError::Failed(format!(
                "the request could not be sent to the host: {e}"
            ))
            .into());
        }
        rx.await.unwrap_or_else(|_| {
            Err(ServiceError::Unavailable(
                "the host ended the worker before it answered".to_owned(),
            )
            .into())
        })
    }
}
