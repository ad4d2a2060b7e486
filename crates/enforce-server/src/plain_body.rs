//! Request bodies of the common shape read in one pass: the top-level object's entries as
//! they come, text turns typed, no `serde_json::Value` map built and then taken apart.
//!
//! A surface tries its one-pass reading first and reads the body in full when it answers
//! `None`; the full reading gives every error and every rarer field. So a one-pass reading
//! must never accept a body the full reading treats differently: a repeated key, a value of
//! another shape or a key the surface leaves to its full reading refuses, and each surface's
//! tests hold the two readings to the same result on random bodies.

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// Reads `body` as one JSON object with `T`, whose visitor takes only a map; `None` for
/// anything `T` refuses.
pub(crate) fn read<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Option<T> {
    serde_json::from_slice(body).ok()
}

/// The error a one-pass visitor answers with to leave the body to the full reading.
pub(crate) fn refuse<E: de::Error>() -> E {
    E::custom("left to the full reading")
}

/// Fills `slot` once: a key given twice is left to the full reading (where the last one
/// counts, as in a map).
pub(crate) fn once<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    match slot {
        Some(_) => Err(refuse()),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// An object key, borrowed from the body unless it holds an escape.
pub(crate) struct Key<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_string())))
            }
            fn visit_string<E: de::Error>(self, key: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A turn of the common shape: `{"role": "...", "content": "text"}`, each once, nothing else.
pub(crate) struct TextTurn<'de> {
    /// The role as sent; the surface decides which it takes.
    pub role: Key<'de>,
    /// The text.
    pub content: String,
}

impl<'de> Deserialize<'de> for TextTurn<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TurnVisitor;
        impl<'de> Visitor<'de> for TurnVisitor {
            type Value = TextTurn<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a text turn")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TextTurn<'de>, A::Error> {
                let (mut role, mut content) = (None, None);
                while let Some(Key(key)) = map.next_key()? {
                    match &*key {
                        "role" => once(&mut role, map.next_value::<Key<'de>>()?)?,
                        "content" => once(&mut content, map.next_value::<String>()?)?,
                        _ => return Err(refuse()),
                    }
                }
                match (role, content) {
                    (Some(role), Some(content)) => Ok(TextTurn { role, content }),
                    _ => Err(refuse()),
                }
            }
        }
        deserializer.deserialize_map(TurnVisitor)
    }
}

/// What the surfaces' tests of their one-pass readings share.
#[cfg(test)]
pub(crate) mod testing {
    use std::fmt::Debug;

    /// Where the one-pass reading answered (`Some`), the full reading answers the same;
    /// whether it answered.
    pub(crate) fn agrees<T: Debug>(body: &[u8], one_pass: Option<T>, full: T) -> bool {
        match one_pass {
            Some(one_pass) => {
                assert_eq!(
                    format!("{one_pass:?}"),
                    format!("{full:?}"),
                    "{}",
                    String::from_utf8_lossy(body)
                );
                true
            }
            None => false,
        }
    }

    /// Asserts of each of `bodies` whether the one-pass reading `read_in_one_pass` answers
    /// it (and, through [`agrees`], that it answers as the full reading).
    pub(crate) fn read_in_one_pass_or_not(
        bodies: &[&str],
        expected: bool,
        read_in_one_pass: fn(&[u8]) -> bool,
    ) {
        for body in bodies {
            assert_eq!(read_in_one_pass(body.as_bytes()), expected, "{body}");
        }
    }

    /// `count` random request bodies ([`request_body`]), each whole, then cut and altered
    /// along its length: `read_in_one_pass` must agree with the full reading on all, and the
    /// generator must reach the one pass (over 1,000 answered), not only its refusals.
    pub(crate) fn random_bodies_agree(
        seed: u64,
        count: usize,
        keys: &[&str],
        shape: &mut enforce_testkit::random_json::Shape<'_>,
        read_in_one_pass: fn(&[u8]) -> bool,
    ) {
        let mut random = enforce_testkit::random_json::RandomJson::new(seed);
        let (mut answered, mut bodies) = (0, 0);
        for _ in 0..count {
            let body = request_body(&mut random, keys, shape);
            for variant in enforce_testkit::random_json::variants(&body) {
                bodies += 1;
                answered += usize::from(read_in_one_pass(variant.as_bytes()));
            }
        }
        assert!(answered > 1000, "{answered} of {bodies} read in one pass");
    }

    /// A `messages` array of up to three turns: mostly `{"role", "content"}` with a role from
    /// `roles`, sometimes an object of keys from `turn_keys`; values from `shape`.
    pub(crate) fn turns(
        random: &mut enforce_testkit::random_json::RandomJson,
        depth: usize,
        roles: &[&str],
        turn_keys: &[&str],
        shape: &mut enforce_testkit::random_json::Shape<'_>,
    ) -> String {
        random.array(4, &mut |random| {
            if random.below(4) == 0 {
                random.object(depth, turn_keys, shape)
            } else {
                format!(
                    "{{\"role\":{},\"content\":{}}}",
                    random.pick(roles),
                    shape(random, depth + 1, "content")
                )
            }
        })
    }

    /// A request body: mostly with `model` and `messages` (whose values `shape` gives), then
    /// up to three entries with keys from `keys`, in a random order.
    fn request_body(
        random: &mut enforce_testkit::random_json::RandomJson,
        keys: &[&str],
        shape: &mut enforce_testkit::random_json::Shape<'_>,
    ) -> String {
        let mut entries = Vec::new();
        for key in ["model", "messages"] {
            if random.below(8) != 0 {
                entries.push(format!("\"{key}\":{}", shape(random, 1, key)));
            }
        }
        for _ in 0..random.below(4) {
            let key = random.pick(keys);
            entries.push(format!("\"{key}\": {}", shape(random, 1, key)));
        }
        for at in (1..entries.len()).rev() {
            entries.swap(at, random.below(at + 1));
        }
        format!("{{{}}}", entries.join(","))
    }
}
