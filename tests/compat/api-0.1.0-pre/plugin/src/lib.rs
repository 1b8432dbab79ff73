//! A plugin built against the first, pre-release plugin-api 0.1.0, whose root module lacks
//! `table_layouts`. Hosts refuse it with a message that says to rebuild it.

use serde_json::Value;
use toolhost_plugin_api::{Risk, Tool, ToolContext, ToolError, export_plugin};

/// Answers "pre-release" (never reached: no host loads this plugin).
struct PreRelease;

impl Tool for PreRelease {
    fn name(&self) -> &str {
        "compat_pre_release"
    }
    fn description(&self) -> &str {
        "Answers \"pre-release\"."
    }
    fn schema(&self) -> Value {
        serde_json::json!({"type": "object"})
    }
    fn risk(&self) -> Risk {
        Risk::Read
    }
    async fn call(&self, _ctx: &ToolContext<'_>, _args: Value) -> Result<String, ToolError> {
        Ok("pre-release".to_owned())
    }
}

export_plugin! { name: "compat-0.1.0-pre", version: env!("CARGO_PKG_VERSION"), tools: [PreRelease] }
