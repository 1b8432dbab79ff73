//! What the code `#[tool]` writes calls at run time: the error conversion, the settings,
//! the text for direct callers, and the compile-time check that a structured result is an
//! object.

use std::any::Any;
use std::fmt::Display;
use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::Serialize;

use crate::outcome::ToolOutput;
use crate::tool::ToolError;

/// A `#[tool]` function's error as a tool failure: a [`ToolError`] stays what it is (so
/// `ToolError::invalid_args` says invalid arguments), as does one boxed as
/// `Box<dyn Error + Send + Sync>`; any other error becomes [`ToolError::Failed`] with its
/// text (`{:#}`, which prints an `anyhow::Error`'s causes too).
pub fn into_tool_error<E: Display + 'static>(error: E) -> ToolError {
    let any: &dyn Any = &error;
    if let Some(e) = any.downcast_ref::<ToolError>() {
        return e.clone();
    }
    if let Some(boxed) = any.downcast_ref::<Box<dyn std::error::Error + Send + Sync>>()
        && let Some(e) = boxed.downcast_ref::<ToolError>()
    {
        return e.clone();
    }
    if let Some(boxed) = any.downcast_ref::<Box<dyn std::error::Error>>()
        && let Some(e) = boxed.downcast_ref::<ToolError>()
    {
        return e.clone();
    }
    ToolError::Failed(format!("{error:#}"))
}

/// A `#[settings]` parameter's value: the plugin's settings read into `T`, or `T`'s
/// defaults on a host that has no settings to give (one older than plugin-api 0.1.4:
/// such a host has no `[plugins.NAME.settings]` either). Settings that do not fit `T`
/// are a failure naming the table to fix.
pub async fn settings_or_default<T: serde::de::DeserializeOwned + Default>(
    ctx: &crate::context::ToolContext<'_>,
) -> Result<T, ToolError> {
    match ctx.settings::<T>().await {
        Ok(settings) => Ok(settings),
        Err(crate::context::ServiceError::Unavailable(_)) => Ok(T::default()),
        Err(e) => Err(e.into()),
    }
}

/// The text a direct Rust caller of `TypedTool::run` gets for an outcome: an outcome
/// that says it failed is an error with its text.
pub fn output_text(out: Result<ToolOutput, ToolError>) -> Result<String, ToolError> {
    let out = out?;
    if out.is_error {
        Err(ToolError::Failed(out.degraded_text()))
    } else {
        Ok(out.degraded_text())
    }
}

/// The compile-time check of a `#[tool]` function's structured result: `check` resolves
/// to the inherent method, whose bound fails with a message, when the type is one known
/// not to be an object; otherwise to [`AnyOutput`]'s, which accepts it (the host checks
/// the derived schema again when it loads the tool).
pub struct OutputCheck<T>(PhantomData<T>);

impl<T> OutputCheck<T> {
    /// The check for `T`.
    pub fn new() -> Self {
        OutputCheck(PhantomData)
    }
}

impl<T> Default for OutputCheck<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: NotAnObject> OutputCheck<T> {
    /// Fails to compile: `T` is not an object.
    pub fn check(&self)
    where
        T: ObjectOutput,
    {
    }
}

/// The fallback of [`OutputCheck::check`]: any other type passes.
pub trait AnyOutput {
    /// Accepts the type.
    fn check(&self) {}
}

impl<T: Serialize + JsonSchema> AnyOutput for &OutputCheck<T> {}

/// Implemented for no type: the bound that makes a non-object structured result a
/// compile error with this message.
#[diagnostic::on_unimplemented(
    message = "a #[tool] function's structured result must be an object, and `{Self}` is not one",
    label = "MCP clients read a structured result as a JSON object",
    note = "return a struct with named fields (e.g. `struct Found {{ items: Vec<String> }}`), or `String` for text, `ToolOutput`, `Vec<Diagnostic>` or `(String, T)` with T a struct"
)]
pub trait ObjectOutput {}

/// Types whose JSON is not an object.
pub trait NotAnObject {}

macro_rules! not_objects {
    ($($t:ty),* $(,)?) => { $(impl NotAnObject for $t {})* };
}
not_objects!(
    (),
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    str,
    &str,
    String,
    serde_json::Value,
    std::path::PathBuf,
);
impl<T> NotAnObject for Vec<T> {}
impl<T> NotAnObject for Option<T> {}
impl<T, const N: usize> NotAnObject for [T; N] {}
impl<T> NotAnObject for [T] {}
impl<T> NotAnObject for std::collections::VecDeque<T> {}
impl<T> NotAnObject for std::collections::BTreeSet<T> {}
impl<T, S> NotAnObject for std::collections::HashSet<T, S> {}
impl<A, B> NotAnObject for (A, B) {}
impl<A, B, C> NotAnObject for (A, B, C) {}
