use toolhost_plugin_api::tool;

/// Picks a number.
#[tool(risk = read)]
async fn pick(#[arg(range = 1..10)] n: u32) -> String {
    n.to_string()
}

fn main() {}
