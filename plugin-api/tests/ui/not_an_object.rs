use toolhost_plugin_api::{ToolError, tool};

/// Lists the files.
#[tool(risk = read)]
async fn list_files() -> Result<Vec<String>, ToolError> {
    Ok(Vec::new())
}

fn main() {}
