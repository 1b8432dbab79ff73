use toolhost_plugin_api::tool;

/// Shouts.
#[tool(risk = read)]
async fn shout(text: &str) -> String {
    text.to_uppercase()
}

fn main() {}
