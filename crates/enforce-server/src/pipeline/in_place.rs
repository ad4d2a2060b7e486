//! A large request body read with its longest text made a `String` in the body's own buffer
//! rather than copied out of it: a 9 MB message is in memory once while its request is read,
//! not twice (the body's bytes and the parsed text).
//!
//! serde_json does the reading, in two passes. The first walks the body for its longest string
//! value without escapes (serde hands such a string out borrowed from the body, so where its
//! bytes lie is known) and the keys and indexes that lead to it. The second parses the rest of
//! the body, that string's contents left out, into a [`Value`]. The body's buffer, cut down to
//! the string's bytes, then becomes the string at its place. A body this does not fit (small,
//! shared, without a text that is most of it, with a key given twice, or not JSON) is given
//! back for the plain read, which reports its errors.

use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::collections::HashSet;
use std::fmt;
use std::ops::Range;

/// The smallest body read in place: below it the copy costs little and one pass is quicker.
const SMALLEST_BODY: usize = 1 << 20;

/// Reads `body` as JSON with its longest text taken in place, or gives it back (`Err`) for
/// the plain read: when it is under a MiB, its buffer is shared, its longest text without
/// escapes is less than half of it (the rest, copied, would cost more than the text saves),
/// a key is given twice (the last counts, so the text's place may not be where it is kept),
/// or it is not JSON.
pub(crate) fn read_in_place(body: Bytes) -> Result<Value, Bytes> {
    if body.len() < SMALLEST_BODY || !body.is_unique() {
        return Err(body);
    }
    let Some(found) = longest_text(&body).filter(|found| found.range.len() >= body.len() / 2)
    else {
        return Err(body);
    };
    let mut value = match rest_of(&body, &found.range) {
        Some(value) => value,
        None => return Err(body),
    };
    let Some(slot) = found.path.iter().try_fold(&mut value, Step::inside) else {
        return Err(body);
    };
    // The buffer is not shared (checked above), so this takes it without a copy.
    let mut bytes = Vec::from(body);
    bytes.truncate(found.range.end);
    bytes.drain(..found.range.start);
    // Valid UTF-8 always (serde_json borrowed these bytes as a `str`): the lossy reading is
    // there only so that no input can panic.
    let text = String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    *slot = Value::String(text);
    Ok(value)
}

/// The body without the contents of the string at `range` (its quotes kept: an empty string
/// in its place), parsed.
fn rest_of(body: &[u8], range: &Range<usize>) -> Option<Value> {
    let mut rest = Vec::with_capacity(body.len() - range.len());
    rest.extend_from_slice(body.get(..range.start)?);
    rest.extend_from_slice(body.get(range.end..)?);
    serde_json::from_slice(&rest).ok()
}

/// A step from a JSON value to one inside it.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

impl Step {
    fn inside<'v>(value: &'v mut Value, step: &Step) -> Option<&'v mut Value> {
        match step {
            Step::Key(key) => value.get_mut(key.as_str()),
            Step::Index(index) => value.get_mut(*index),
        }
    }
}

/// Where the longest text lies: its bytes in the body (inside the quotes) and the steps to it.
#[derive(Debug)]
struct Found {
    range: Range<usize>,
    path: Vec<Step>,
}

/// The longest string value without escapes in `body`, if it is JSON without a repeated key.
fn longest_text(body: &[u8]) -> Option<Found> {
    let mut walk = Walk {
        body: body.as_ptr() as usize..body.as_ptr() as usize + body.len(),
        path: Vec::new(),
        longest: None,
        repeated_key: false,
    };
    let mut reader = serde_json::Deserializer::from_slice(body);
    Node(&mut walk).deserialize(&mut reader).ok()?;
    reader.end().ok()?;
    if walk.repeated_key {
        return None;
    }
    walk.longest
}

/// The first pass's state.
struct Walk {
    /// The body's addresses, to place the strings borrowed from it.
    body: Range<usize>,
    /// The steps to the value being read.
    path: Vec<Step>,
    longest: Option<Found>,
    repeated_key: bool,
}

impl Walk {
    fn saw(&mut self, text: &str) {
        let start = text.as_ptr() as usize;
        let longer = self
            .longest
            .as_ref()
            .is_none_or(|found| text.len() > found.range.len());
        if !longer || start < self.body.start || start + text.len() > self.body.end {
            return;
        }
        let start = start - self.body.start;
        self.longest = Some(Found {
            range: start..start + text.len(),
            path: self.path.clone(),
        });
    }
}

/// One JSON value of the first pass, read for its strings and nothing kept.
struct Node<'w>(&'w mut Walk);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, from: D) -> Result<(), D::Error> {
        from.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<(), E> {
        self.0.saw(text);
        Ok(())
    }

    // A string with escapes: serde_json unescapes it into a buffer of its own, so it is
    // copied as in the plain read.
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        let walk = self.0;
        for index in 0.. {
            walk.path.push(Step::Index(index));
            let more = items.next_element_seed(Node(walk))?;
            walk.path.pop();
            if more.is_none() {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<(), A::Error> {
        let walk = self.0;
        let mut keys = HashSet::new();
        while let Some(key) = fields.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                walk.repeated_key = true;
            }
            walk.path.push(Step::Key(key));
            fields.next_value_seed(Node(walk))?;
            walk.path.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A body of `value`, its buffer owned by the `Bytes` alone, and where that buffer lies.
    fn body_of(value: &Value) -> (Bytes, Range<usize>) {
        let bytes = serde_json::to_vec(value).expect("JSON");
        let at = bytes.as_ptr() as usize;
        let range = at..at + bytes.capacity();
        (Bytes::from(bytes), range)
    }

    fn big(piece: &str) -> String {
        piece.repeat(SMALLEST_BODY / piece.len() + 1)
    }

    /// The in-place read gives what serde_json's own gives, for texts with and without escapes,
    /// multi-byte characters, several messages with the longest not first; and the longest
    /// text is the body's own buffer.
    #[test]
    fn the_longest_text_is_read_in_place_and_the_value_is_serde_jsons() {
        let cases = [
            json!({"model": "m", "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": big("héllo wörld ✓ ")},
                {"role": "assistant", "content": "tab\there \"quoted\" \u{1F600}"},
            ], "n": 1, "x": [true, null, 2.5, -3]}),
            json!({"input": [{"role": "user", "content": [
                {"type": "text", "text": "first"},
                {"type": "text", "text": big("日本語のテキスト")},
            ]}]}),
            // A text with escapes is copied; the one without is taken.
            json!({"a": big("line\n"), "b": "x".repeat(SMALLEST_BODY * 3)}),
        ];
        for value in cases {
            let (body, buffer) = body_of(&value);
            let plain: Value = serde_json::from_slice(&body).expect("JSON");
            let read = read_in_place(body).expect("read in place");
            assert_eq!(read, plain);
            assert_eq!(read, value);
            let longest = longest_string(&read);
            assert!(
                buffer.contains(&(longest.as_ptr() as usize)),
                "the longest text was copied"
            );
        }
    }

    fn longest_string(value: &Value) -> &str {
        match value {
            Value::String(s) => Some(s.as_str()),
            Value::Array(items) => items.iter().map(longest_string).max_by_key(|s| s.len()),
            Value::Object(fields) => fields.values().map(longest_string).max_by_key(|s| s.len()),
            _ => None,
        }
        .unwrap_or("")
    }

    /// A body that does not fit is given back whole, for the plain read and its errors.
    #[test]
    fn a_body_that_does_not_fit_is_given_back() {
        let text = big("x");
        let shared = Bytes::from(serde_json::to_vec(&json!({"a": text})).expect("JSON"));
        let _other_holder = shared.clone();
        let cases = [
            Bytes::from(serde_json::to_vec(&json!({"a": "small"})).expect("JSON")),
            shared,
            // Every text escaped.
            Bytes::from(serde_json::to_vec(&json!({"a": big("\n")})).expect("JSON")),
            // The longest text is under half the body.
            Bytes::from(
                serde_json::to_vec(&json!({"a": text, "b": text, "c": text})).expect("JSON"),
            ),
            Bytes::from(format!(r#"{{"a":"{text}","a":"b"}}"#)),
            Bytes::from(format!(r#"{{"a":"{text}""#)),
            Bytes::from(format!(r#"{{"a":"{text}"}} trailing"#)),
        ];
        for body in cases {
            let sent = body.to_vec();
            let given_back = read_in_place(body).expect_err("given back");
            assert_eq!(given_back, sent);
        }
    }

    /// Every surface's reader keeps the longest message in the body's buffer, the same text
    /// it reads from a copied body.
    #[test]
    fn each_surface_reads_its_longest_message_in_place() {
        use crate::pipeline::Surface;
        let text = big("héllo wörld ✓ ");
        let conversation = json!([{"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"}, {"role": "user", "content": text}]);
        check::<crate::openai::Chat>(&json!({"model": "m", "messages": conversation}), &text);
        check::<crate::messages::Messages>(
            &json!({"model": "m", "max_tokens": 5, "messages": conversation}),
            &text,
        );
        check::<crate::responses::Responses>(&json!({"model": "m", "input": text}), &text);
        check::<crate::responses::Responses>(&json!({"model": "m", "input": conversation}), &text);

        fn check<S: Surface>(request: &Value, text: &str) {
            let (body, buffer) = body_of(request);
            let copied = S::parse(Bytes::copy_from_slice(&body)).expect("read").0;
            let ask = S::parse(body).expect("read in place").0;
            assert_eq!(ask.messages, copied.messages);
            let last = ask.messages.last().expect("a message");
            assert_eq!(last.content, text);
            assert!(
                buffer.contains(&(last.content.as_ptr() as usize)),
                "{}",
                S::NAME
            );
        }
    }

    /// A whole body that is one long string is read as that string.
    #[test]
    fn a_body_that_is_one_string_is_that_string() {
        let text = big("ab");
        let read = read_in_place(body_of(&json!(text)).0).expect("read in place");
        assert_eq!(read, Value::String(text));
    }
}
