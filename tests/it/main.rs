//! Integration tests: real .so files (good and broken) built by the test setup, loaded
//! through the real loader, registry and dispatcher, and the `toolhost` binary.

mod agent;
mod approvals;
mod architecture;
mod audit;
mod blocking;
mod cli;
mod compat;
mod dispatch;
mod door;
mod doors;
mod ffi_boundary;
mod fuzz;
mod http_door;
mod isolation;
mod limits;
mod loading;
mod mcp;
mod metrics;
mod new_plugin;
mod operating;
mod operators;
mod outcomes;
mod outputs;
mod plugins;
mod policy;
mod profiles;
mod registry;
mod reload;
mod serve;
mod state_home;
mod state_links;
mod support;
mod trust;
mod worker_sandbox;
mod workspace;
