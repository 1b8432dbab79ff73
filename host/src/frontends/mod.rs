//! Frontends: the ways a call reaches the host from outside. `control` is the local Unix
//! socket (`reload`, `status`, `call`); `mcp` serves tools to MCP clients over stdio and
//! HTTP. Frontends depend on the core (`calls`, `plugins`, `host`); the core never names a
//! frontend's types.

pub(crate) mod control;
pub(crate) mod mcp;
