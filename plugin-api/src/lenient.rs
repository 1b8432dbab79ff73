//! Lenient readers for fields that hosts have always read with defaults: a missing or
//! mistyped field takes its default instead of failing the whole value.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

pub(crate) fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        _ => String::new(),
    })
}

pub(crate) fn text_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

pub(crate) fn count_or_five<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Value::deserialize(d)?
        .as_u64()
        .map_or(5, |n| u32::try_from(n).unwrap_or(u32::MAX)))
}

pub(crate) fn flag_or_yes<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Value::deserialize(d)?.as_bool().unwrap_or(true))
}

pub(crate) fn five() -> u32 {
    5
}

pub(crate) fn yes() -> bool {
    true
}

pub(crate) fn thousand() -> u32 {
    1000
}

pub(crate) fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}
