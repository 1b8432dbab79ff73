use toolhost_plugin_api::tool;

/// Repeats a word.
#[tool(risk = read)]
async fn repeat(
    /// The word.
    word: String,
    /// How many times.
    #[arg(maximum = 10)]
    times: usize,
) -> String {
    word.repeat(times)
}

fn main() {}
