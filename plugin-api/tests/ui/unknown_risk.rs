use toolhost_plugin_api::tool;

/// Says hi.
#[tool(risk = harmless)]
async fn hi() -> String {
    "hi".into()
}

fn main() {}
