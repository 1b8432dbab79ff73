//! The stdio transport to an MCP client: JSON-RPC messages as lines, as rmcp's own, but
//! each line goes through [`screen`](super::screen) first, so a line that is not JSON is
//! answered -32700 (rmcp drops it unanswered), a bad request is answered with its id, and
//! a known method's bad params get -32602; the next line is served as usual. A line past
//! the size limit is skipped and logged, as rmcp does.

use std::sync::Arc;

use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleServer;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};

use super::screen::{Refused, screen};

/// The longest line read from a client (what rmcp's own transport allows).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Lines to and from one stdio client.
pub(super) struct ClientLines<R, W> {
    read: BufReader<R>,
    /// The line read so far: kept across a cancelled `receive` (rmcp polls it in a
    /// `select!`), cleared once a whole line is handled.
    line: Vec<u8>,
    /// Dropping the rest of a line past [`MAX_LINE`].
    discarding: bool,
    write: Arc<tokio::sync::Mutex<W>>,
}

/// One step of reading a line.
enum Read {
    Line,
    Oversized,
    End,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> ClientLines<R, W> {
    /// The transport on the client's stdin (`read`) and stdout (`write`).
    pub(super) fn new(read: R, write: W) -> Self {
        ClientLines {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            write: Arc::new(tokio::sync::Mutex::new(write)),
        }
    }

    /// Reads up to the end of a line into `self.line` (cancel-safe: what was read stays).
    async fn next_line(&mut self) -> Read {
        loop {
            let (used, ended, oversized) = {
                let Ok(available) = self.read.fill_buf().await else {
                    return Read::End;
                };
                if available.is_empty() {
                    return Read::End;
                }
                let end = available.iter().position(|b| *b == b'\n');
                let take = end.map_or(available.len(), |i| i + 1);
                let mut oversized = false;
                if !self.discarding {
                    if self.line.len() + take > MAX_LINE {
                        self.line.clear();
                        self.discarding = true;
                        oversized = true;
                    } else {
                        self.line.extend_from_slice(&available[..take]);
                    }
                }
                (take, end.is_some(), oversized)
            };
            self.read.consume(used);
            if ended && self.discarding {
                self.discarding = false;
                if !oversized {
                    continue;
                }
            }
            if oversized {
                return Read::Oversized;
            }
            if ended {
                return Read::Line;
            }
        }
    }
}

/// Writes `line` and a newline, whole, under the writer's lock.
async fn write_line<W: AsyncWrite + Unpin>(
    write: &tokio::sync::Mutex<W>,
    mut line: Vec<u8>,
) -> std::io::Result<()> {
    line.push(b'\n');
    let mut write = write.lock().await;
    write.write_all(&line).await?;
    write.flush().await
}

impl<R, W> rmcp::transport::Transport<RoleServer> for ClientLines<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        async move {
            let line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            write_line(&write, line).await
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            match self.next_line().await {
                Read::End => return None,
                Read::Oversized => {
                    tracing::error!(
                        "a message from the MCP client is longer than {MAX_LINE} bytes; \
                         skipped it"
                    );
                    continue;
                }
                Read::Line => {}
            }
            let screened = {
                let line = self.line.trim_ascii();
                (!line.is_empty()).then(|| screen(line, None))
            };
            self.line.clear();
            match screened {
                None => {}
                Some(Ok(message)) => return Some(message),
                Some(Err(refused)) => {
                    tracing::debug!("refused a message from the MCP client: {refused}");
                    if let Some(response) = refused_line(&refused) {
                        // Written from its own task: `receive` may be dropped at any await
                        // (rmcp polls it in a `select!`), and the answer must still go out
                        // whole.
                        let write = Arc::clone(&self.write);
                        tokio::spawn(async move {
                            if let Err(e) = write_line(&write, response).await {
                                tracing::debug!("could not answer a refused message: {e}");
                            }
                        });
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.shutdown().await
    }
}

fn refused_line(refused: &Refused) -> Option<Vec<u8>> {
    refused.response().and_then(|r| serde_json::to_vec(&r).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::Transport as _;

    #[tokio::test]
    async fn a_bad_line_is_answered_and_the_next_one_served() {
        let (mut client, server_read) = tokio::io::duplex(4096);
        let (server_write, mut client_out) = tokio::io::duplex(4096);
        let mut lines = ClientLines::new(server_read, server_write);
        client
            .write_all(b"not json\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n")
            .await
            .expect("write");
        let message = lines.receive().await.expect("a message");
        assert!(matches!(message, rmcp::model::JsonRpcMessage::Request(_)));
        let mut out = BufReader::new(&mut client_out);
        let mut answer = String::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            out.read_line(&mut answer),
        )
        .await
        .expect("answered in time")
        .expect("read");
        let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
        assert_eq!(answer["error"]["code"], -32700, "{answer}");
        assert_eq!(answer["id"], serde_json::Value::Null, "{answer}");
    }
}
