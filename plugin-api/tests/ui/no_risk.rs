use toolhost_plugin_api::tool;

/// Says hi.
#[tool]
async fn hi() -> String {
    "hi".into()
}

fn main() {}
