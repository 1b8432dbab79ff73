//! Reading a settings table into a plugin's type while noting the top-level keys the type
//! ignored (a misspelt key a `#[serde(default)]` type would pass over silently): what
//! [`TestHost::settings`](crate::testing::TestHost::settings) turns into a failure, as a
//! host warns of them from the plugin's settings schema.

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// `T` from `value`, and the keys of its top-level object `T` ignored.
pub(crate) fn from_value_noting_unread<T: DeserializeOwned>(
    value: Value,
) -> Result<(T, Vec<String>), serde_json::Error> {
    let mut unread = Vec::new();
    let t = T::deserialize(Top {
        value,
        unread: &mut unread,
    })?;
    Ok((t, unread))
}

/// The table itself: an object is handed to the type's visitor key by key.
struct Top<'a> {
    value: Value,
    unread: &'a mut Vec<String>,
}

impl<'de> Deserializer<'de> for Top<'_> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Object(map) => visitor.visit_map(Entries {
                entries: map.into_iter(),
                key: None,
                value: None,
                unread: self.unread,
            }),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.value.deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// The object's entries; a value the type reads as `IgnoredAny` is a key it ignored.
struct Entries<'a> {
    entries: serde_json::map::IntoIter,
    key: Option<String>,
    value: Option<Value>,
    unread: &'a mut Vec<String>,
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                self.key = Some(key.clone());
                seed.deserialize(Value::String(key)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let value = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a value asked for before its key"))?;
        seed.deserialize(Noted {
            value,
            key: self.key.take(),
            unread: self.unread,
        })
    }
}

/// One entry's value: read as the type asks, noting its key when it is ignored.
struct Noted<'a> {
    value: Value,
    key: Option<String>,
    unread: &'a mut Vec<String>,
}

impl<'de> Deserializer<'de> for Noted<'_> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.value.deserialize_any(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.unread.extend(self.key);
        self.value.deserialize_ignored_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.value.deserialize_option(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.value.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.value.deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize, Debug, PartialEq, Default)]
    #[serde(default)]
    struct Settings {
        units: String,
        depth: Option<u32>,
    }

    #[test]
    fn the_keys_a_type_ignores_are_noted_and_the_rest_read_as_serde_json_reads_them() {
        let (s, unread) = from_value_noting_unread::<Settings>(
            json!({"units": "celsius", "unts": "kelvin", "depth": 3}),
        )
        .expect("reads");
        assert_eq!(
            (s, unread),
            (
                Settings {
                    units: "celsius".into(),
                    depth: Some(3)
                },
                vec!["unts".to_owned()]
            )
        );
        let (_, unread) =
            from_value_noting_unread::<Settings>(json!({"depth": null})).expect("reads");
        assert!(unread.is_empty());
        // A map type reads every key; a wrong type is still an error.
        let (_, unread) =
            from_value_noting_unread::<std::collections::BTreeMap<String, Value>>(json!({"a": 1}))
                .expect("reads");
        assert!(unread.is_empty());
        assert!(from_value_noting_unread::<Settings>(json!({"depth": "x"})).is_err());
    }
}
