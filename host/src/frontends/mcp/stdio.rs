//! The stdio transport: the MCP client's pipes, moved off descriptors 0 and 1 before
//! plugins load so nothing but the protocol reaches the client.

/// The MCP client's stdin and stdout, moved off descriptors 0 and 1 so that nothing but the
/// protocol reaches the client: plugins, and the programs they start (an editor, a shell),
/// get `/dev/null` as stdin and the host's stderr as stdout.
pub struct ClientStdio {
    input: std::os::fd::OwnedFd,
    output: std::os::fd::OwnedFd,
}

pub(super) type BoxedRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
pub(super) type BoxedWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

impl ClientStdio {
    /// Takes stdin and stdout for the MCP session. Call it once, before plugins load.
    pub fn take() -> std::io::Result<ClientStdio> {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        // Duplicates marked close-on-exec: child processes never inherit the client's pipes.
        let input = std::io::stdin().as_fd().try_clone_to_owned()?;
        let output = std::io::stdout().as_fd().try_clone_to_owned()?;
        let null = std::fs::File::open("/dev/null")?;
        // SAFETY: dup2 on descriptors this process owns (`null` is open; 0, 1 and 2 are the
        // standard streams); it only replaces what 0 and 1 refer to.
        let redirected = unsafe { libc::dup2(null.as_raw_fd(), 0) >= 0 && libc::dup2(2, 1) >= 0 };
        if !redirected {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ClientStdio { input, output })
    }

    /// Pipes go through tokio's non-blocking pipe driver (the way clients start stdio
    /// servers, and the faster path); anything else through the blocking file adapter.
    pub(super) fn into_transport(self) -> std::io::Result<(BoxedRead, BoxedWrite)> {
        use std::os::unix::fs::FileTypeExt as _;
        use tokio::net::unix::pipe;
        let input = std::fs::File::from(self.input);
        let output = std::fs::File::from(self.output);
        let read: BoxedRead = if input.metadata()?.file_type().is_fifo() {
            Box::new(pipe::Receiver::from_file(input)?)
        } else {
            Box::new(tokio::fs::File::from_std(input))
        };
        let write: BoxedWrite = if output.metadata()?.file_type().is_fifo() {
            Box::new(pipe::Sender::from_file(output)?)
        } else {
            Box::new(tokio::fs::File::from_std(output))
        };
        Ok((read, write))
    }
}
