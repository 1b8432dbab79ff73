//! Frontends: the ways a call reaches the host from outside. `control` is the local Unix
//! socket (`reload`, `status`, `call`); `mcp` serves tools to MCP clients over stdio and
//! HTTP; `relay` holds the approval questions of MCP clients that cannot ask their
//! user until a terminal answers them on the control socket. Frontends depend on the core (`calls`, `plugins`, `host`); the core never names a
//! frontend's types.

pub(crate) mod control;
pub(crate) mod mcp;
pub(crate) mod relay;
