//! A JSON answer read as far as a check needs it, never built whole: a 60 MB answer of numbers
//! would be a value tree some 35 times its size (3.5 GB was seen for a 100 MB answer), on the runtime
//! thread that serves every call.
//!
//! [`read_outline`] reads the whole text (so that what is not JSON, RFC 8259 as serde_json reads
//! it, is refused, at most 127 levels deep) and keeps an [`Outline`]: every list's length, every
//! object's keys, every string and number, and of a list's items and an object's members only
//! those its [`Keep`] names. What a check keeps is a few names and shapes, whatever the size of
//! the tensors beside them.

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// What is kept of a value's children (its own kind, a list's length and an object's keys always are).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Keep {
    /// nothing below: a list's items and an object's members are read and dropped
    #[default]
    Nothing,
    /// a list's every item, each kept by the inner rule
    Items(Box<Keep>),
    /// the object's members of these keys, each kept by its rule
    Members(Vec<(String, Keep)>),
}

impl Keep {
    /// The members at these key paths (`a.b`: key `b` of the object at key `a`), merged.
    pub fn paths<'a>(paths: impl IntoIterator<Item = &'a str>) -> Keep {
        let mut keep = Keep::Nothing;
        for path in paths {
            keep.add(path.split('.'));
        }
        keep
    }

    fn add<'a>(&mut self, mut keys: impl Iterator<Item = &'a str>) {
        let Some(key) = keys.next() else { return };
        if !matches!(self, Keep::Members(_)) {
            *self = Keep::Members(Vec::new());
        }
        let Keep::Members(members) = self else {
            unreachable!("made members above")
        };
        match members.iter_mut().find(|(k, _)| k == key) {
            Some((_, inner)) => inner.add(keys),
            None => {
                let mut inner = Keep::Nothing;
                inner.add(keys);
                members.push((key.to_owned(), inner));
            }
        }
    }

    /// The rule for the member `key`, if it is kept.
    fn member(&self, key: &str) -> Option<&Keep> {
        match self {
            Keep::Members(members) => members.iter().find(|(k, _)| k == key).map(|(_, keep)| keep),
            _ => None,
        }
    }
}

/// A JSON value as far as it was kept.
#[derive(Clone, Debug, PartialEq)]
pub enum Outline {
    Null,
    Bool,
    Number(serde_json::Number),
    String(String),
    /// the list's length, and its items when they were kept
    List {
        len: usize,
        items: Vec<Outline>,
    },
    /// every key in order; the members kept
    Object {
        keys: Vec<String>,
        members: Vec<(String, Outline)>,
    },
}

impl Outline {
    /// The member `key`, if it was kept (the last one, when a key repeats).
    pub fn get(&self, key: &str) -> Option<&Outline> {
        match self {
            Outline::Object { members, .. } => {
                members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
            }
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Outline::String(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Outline::Number(number) => number.as_i64(),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Outline::Number(number) => number.as_u64(),
            _ => None,
        }
    }

    /// A list's kept items.
    pub fn items(&self) -> Option<&[Outline]> {
        match self {
            Outline::List { items, .. } => Some(items),
            _ => None,
        }
    }
}

/// The answer's outline, keeping what `keep` names; None when it is not JSON.
pub fn read_outline(body: &[u8], keep: &Keep) -> Option<Outline> {
    let mut reader = serde_json::Deserializer::from_slice(body);
    let outline = keep.deserialize(&mut reader).ok()?;
    reader.end().ok()?;
    Some(outline)
}

impl<'de> DeserializeSeed<'de> for &Keep {
    type Value = Outline;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Outline, D::Error> {
        deserializer.deserialize_any(OutlineVisitor(self))
    }
}

struct OutlineVisitor<'k>(&'k Keep);

impl<'de> Visitor<'de> for OutlineVisitor<'_> {
    type Value = Outline;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Outline, E> {
        Ok(Outline::Null)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Outline, E> {
        Ok(Outline::Bool)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Outline, E> {
        Ok(Outline::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Outline, E> {
        Ok(Outline::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Outline, E> {
        serde_json::Number::from_f64(value)
            .map(Outline::Number)
            .ok_or_else(|| E::custom("a number out of range"))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Outline, E> {
        Ok(Outline::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Outline, E> {
        Ok(Outline::String(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Outline, A::Error> {
        let mut len = 0;
        let mut items = Vec::new();
        match self.0 {
            Keep::Items(inner) => {
                while let Some(item) = seq.next_element_seed(inner.as_ref())? {
                    items.push(item);
                    len += 1;
                }
            }
            _ => {
                while seq.next_element::<Skipped>()?.is_some() {
                    len += 1;
                }
            }
        }
        Ok(Outline::List { len, items })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Outline, A::Error> {
        let mut keys = Vec::new();
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match self.0.member(&key) {
                Some(inner) => members.push((key.clone(), map.next_value_seed(inner)?)),
                None => {
                    map.next_value::<Skipped>()?;
                }
            }
            keys.push(key);
        }
        Ok(Outline::Object { keys, members })
    }
}

/// A value read and dropped: as serde's `IgnoredAny`, but its numbers read as numbers (serde skips
/// them by their syntax alone, so a `1e400` it skips would pass where a kept one fails).
struct Skipped;

impl<'de> Deserialize<'de> for Skipped {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Skipped, D::Error> {
        deserializer.deserialize_any(SkippedVisitor)
    }
}

struct SkippedVisitor;

impl<'de> Visitor<'de> for SkippedVisitor {
    type Value = Skipped;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Skipped, E> {
        Ok(Skipped)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skipped, E> {
        Ok(Skipped)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skipped, E> {
        Ok(Skipped)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skipped, E> {
        Ok(Skipped)
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Skipped, E> {
        if value.is_finite() {
            Ok(Skipped)
        } else {
            Err(E::custom("a number out of range"))
        }
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Skipped, E> {
        Ok(Skipped)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skipped, A::Error> {
        while seq.next_element::<Skipped>()?.is_some() {}
        Ok(Skipped)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skipped, A::Error> {
        while map.next_key::<Skipped>()?.is_some() {
            map.next_value::<Skipped>()?;
        }
        Ok(Skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_asked_is_kept_and_every_list_is_counted() {
        let keep = Keep::Members(vec![(
            "outputs".into(),
            Keep::Items(Box::new(Keep::paths(["name", "shape"]))),
        )]);
        let answer =
            br#"{"model": "m", "outputs": [{"name": "O", "shape": [1, 2], "data": [[1, 2]]}]}"#;
        let outline = read_outline(answer, &keep).expect("JSON");
        let Outline::Object { keys, .. } = &outline else {
            panic!("an object")
        };
        assert_eq!(keys, &["model", "outputs"]);
        let output = &outline
            .get("outputs")
            .and_then(Outline::items)
            .expect("items")[0];
        assert_eq!(output.get("name").and_then(Outline::as_str), Some("O"));
        assert_eq!(
            output.get("shape"),
            Some(&Outline::List {
                len: 2,
                items: vec![]
            })
        );
        assert_eq!(output.get("data"), None);
    }

    #[test]
    fn what_is_not_json_is_none() {
        for text in [
            "",
            "[1, 2",
            "[1] x",
            "[NaN]",
            "[1e400]",
            "\u{feff}[]",
            r#"["\ud800"]"#,
        ] {
            assert_eq!(
                read_outline(text.as_bytes(), &Keep::Nothing),
                None,
                "{text}"
            );
        }
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(read_outline(nested(127).as_bytes(), &Keep::Nothing).is_some());
        assert!(read_outline(nested(128).as_bytes(), &Keep::Nothing).is_none());
    }

    #[test]
    fn key_paths_merge_into_one_rule() {
        assert_eq!(
            Keep::paths(["error.message", "error", "detail"]),
            Keep::Members(vec![
                (
                    "error".into(),
                    Keep::Members(vec![("message".into(), Keep::Nothing)])
                ),
                ("detail".into(), Keep::Nothing),
            ])
        );
    }
}
