use toolhost_plugin_api::tool;

/// Says hi.
#[tool(risk = read)]
async fn a_function_whose_name_is_far_too_long_to_be_the_name_of_a_tool_anywhere() -> String {
    "hi".into()
}

fn main() {}
