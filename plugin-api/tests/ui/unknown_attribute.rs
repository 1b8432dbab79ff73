use toolhost_plugin_api::tool;

/// Says hi.
#[tool(risk = read, danger = high)]
async fn hi() -> String {
    "hi".into()
}

fn main() {}
