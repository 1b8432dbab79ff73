//! A line-oriented JSON-RPC client on an MCP server's stdio (raw lines, no SDK), shared
//! by the benchmarks that measure stdio round trips.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

/// A server process and a line-oriented JSON-RPC client on its stdio.
pub(crate) struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Peer {
    pub(crate) fn start(mut command: Command) -> Peer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut peer = Peer {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        peer.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench-client", "version": "1.0"}
            }),
        );
        peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        peer
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("encode");
        line.push(b'\n');
        self.stdin.write_all(&line).expect("write to the server");
        self.stdin.flush().expect("flush");
    }

    /// The next message from the server.
    pub(crate) fn read(&mut self) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .expect("read from the server");
            assert!(n > 0, "the server closed its stdout");
            if !line.trim().is_empty() {
                return serde_json::from_str(&line).expect("the server wrote JSON");
            }
        }
    }

    /// Sends a request and returns its result, skipping notifications.
    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.read();
            if message.get("id") == Some(&json!(id)) {
                assert!(message.get("error").is_none(), "{method} failed: {message}");
                return message["result"].clone();
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
