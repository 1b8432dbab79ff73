use toolhost_plugin_api::tool;

/// Says hi.
#[tool(risk = read, name = "say hi")]
async fn hi() -> String {
    "hi".into()
}

fn main() {}
