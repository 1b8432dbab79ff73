use toolhost_plugin_api::tool;

#[tool(risk = read)]
async fn hi() -> String {
    "hi".into()
}

fn main() {}
