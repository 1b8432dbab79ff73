//! The transport to a stdio MCP server: JSON-RPC messages as lines on its standard
//! streams, as rmcp's own, with one difference that pays on every relayed call: a
//! `tools/call` result is decoded straight as one, where rmcp decodes every server
//! message through its untagged result union, trying fifteen other result types (and
//! formatting an error for each) before it reaches a tool's result. Anything else takes
//! rmcp's path. A line past the size limit, or that is not a message, is skipped and
//! logged.

use std::sync::Arc;

use rmcp::model::{
    CallToolResult, ClientJsonRpcMessage, JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0,
    RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::RoleClient;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};

/// The longest line read from a server (what rmcp's own transport allows).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Lines to and from one stdio server.
pub(crate) struct Lines<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    write: Arc<tokio::sync::Mutex<W>>,
    server: Arc<str>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Lines<R, W> {
    /// The transport on the server's standard output (`read`) and input (`write`).
    pub(crate) fn new(read: R, write: W, server: Arc<str>) -> Self {
        Lines {
            read: BufReader::new(read),
            line: Vec::new(),
            write: Arc::new(tokio::sync::Mutex::new(write)),
            server,
        }
    }

    /// The next line (without its newline), `None` at the end of the stream. A line
    /// longer than [`MAX_LINE`] is skipped whole.
    async fn next_line(&mut self) -> Option<()> {
        self.line.clear();
        let mut oversized = false;
        loop {
            let (done, used) = {
                let available = self.read.fill_buf().await.ok()?;
                if available.is_empty() {
                    return None;
                }
                let end = available.iter().position(|b| *b == b'\n');
                let take = end.map_or(available.len(), |i| i + 1);
                if !oversized {
                    if self.line.len() + take > MAX_LINE {
                        oversized = true;
                        self.line.clear();
                    } else {
                        self.line.extend_from_slice(&available[..take]);
                    }
                }
                (end.is_some(), take)
            };
            self.read.consume(used);
            if done {
                if oversized {
                    tracing::warn!(
                        server = &*self.server,
                        "skipped a message of more than {MAX_LINE} bytes from the MCP server"
                    );
                    oversized = false;
                    continue;
                }
                return Some(());
            }
        }
    }
}

/// A response carrying a tool's result.
#[derive(serde::Deserialize)]
struct ToolResponse {
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    result: CallToolResult,
}

/// A server's line as a message: a tool's result straight, anything else as rmcp decodes
/// it; `None` if it is no message.
pub(crate) fn decode(line: &[u8]) -> Option<ServerJsonRpcMessage> {
    // Only a result whose object has `content` can be a tool's (the other results that
    // carry a `content` key fail `CallToolResult`'s own checks and go the long way).
    if crate::text::contains_bytes(line, b"\"result\"")
        && crate::text::contains_bytes(line, b"\"content\"")
        && let Ok(response) = serde_json::from_slice::<ToolResponse>(line)
    {
        return Some(JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc: response.jsonrpc,
            id: response.id,
            result: ServerResult::CallToolResult(response.result),
        }));
    }
    serde_json::from_slice(line).ok()
}

impl<R, W> rmcp::transport::Transport<RoleClient> for Lines<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        async move {
            let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            line.push(b'\n');
            let mut write = write.lock().await;
            write.write_all(&line).await?;
            write.flush().await
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            self.next_line().await?;
            let line = self.line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            match decode(line) {
                Some(message) => return Some(message),
                None => tracing::debug!(
                    server = &*self.server,
                    "skipped a line from the MCP server that is no JSON-RPC message: {}",
                    crate::text::for_log(&String::from_utf8_lossy(&line[..line.len().min(200)]))
                ),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_result_decodes_straight_and_the_rest_as_rmcp_does() {
        let tool = br#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"hi"}],"isError":false}}"#;
        match decode(tool) {
            Some(JsonRpcMessage::Response(r)) => {
                assert!(matches!(r.result, ServerResult::CallToolResult(_)));
            }
            other => panic!("{other:?}"),
        }
        // Same answer as rmcp's own decoding.
        let slow: ServerJsonRpcMessage = serde_json::from_slice(tool).expect("rmcp decodes it");
        assert_eq!(format!("{:?}", decode(tool)), format!("{:?}", Some(slow)));
        let input_required = br#"{"jsonrpc":"2.0","id":5,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list"}},"content":[]}}"#;
        assert!(!matches!(
            decode(input_required),
            Some(JsonRpcMessage::Response(JsonRpcResponse {
                result: ServerResult::CallToolResult(_),
                ..
            }))
        ));
        let tools = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
        assert!(matches!(
            decode(tools),
            Some(JsonRpcMessage::Response(JsonRpcResponse {
                result: ServerResult::ListToolsResult(_),
                ..
            }))
        ));
        assert!(decode(b"not json").is_none());
    }
}
