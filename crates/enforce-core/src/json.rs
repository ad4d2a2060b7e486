//! A JSON writer for any `Serialize` type that writes exactly the bytes `serde_json::to_vec`
//! writes, with less work per string: an answer or a stream event is mostly keys and ids of a
//! few words, and serde_json walks each byte by byte and copies it with a call to `memcpy`.
//! Here a string of up to 16 bytes is read, checked and written as two machine words; a longer
//! one is checked eight bytes at a time and copied in one piece; only a string that needs
//! escaping is walked. Numbers go straight to `itoa` and `zmij` (serde_json's own). The proxy
//! writes its answers, stream events and upstream request bodies through it.
//!
//! ```
//! let value = serde_json::json!({"b": [1, 2.5, null], "a": "say \"hi\"\n"});
//! let written = enforce_core::json::to_vec(&value).unwrap();
//! assert_eq!(written, serde_json::to_vec(&value).unwrap());
//! ```

use serde::ser::{self, Serialize};
use std::fmt;

/// Why a value could not be written as JSON: its `Serialize` implementation failed, or it has
/// a map key JSON cannot hold (serde_json refuses the same values).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

impl ser::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Error(message.to_string())
    }
}

/// `value` as JSON bytes, as `serde_json::to_vec` writes them.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(128);
    write(&mut out, value)?;
    Ok(out)
}

/// Appends `value` as JSON to `out`, as `serde_json::to_writer` writes it. On an error `out`
/// may hold part of the value.
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    value.serialize(&mut Writer { out })
}

/// Writes one JSON object entry by entry straight to bytes, for an object whose entries are
/// mostly fixed: those go down as prepared `"key":value` text, the others as values. What it
/// writes is what a serializer writes of the same entries.
///
/// ```
/// let mut out = Vec::new();
/// let mut object = enforce_core::json::ObjectWriter::new(&mut out);
/// object.entry("id", "r1").unwrap();
/// object.prepared(r#""object":"response""#);
/// enforce_core::json::write(object.prepared_key(r#""status":"#), "completed").unwrap();
/// object.end();
/// assert_eq!(out, br#"{"id":"r1","object":"response","status":"completed"}"#);
/// ```
#[derive(Debug)]
pub struct ObjectWriter<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> ObjectWriter<'a> {
    /// Opens the object (`{`) at the end of `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        ObjectWriter { out, empty: true }
    }

    fn comma(&mut self) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
    }

    /// Writes the entry `key`: `value`.
    pub fn entry<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        self.comma();
        write_str(self.out, key);
        self.out.push(b':');
        write(self.out, value)
    }

    /// Starts the entry whose key is prepared as JSON text (`"key":`): the key costs a copy,
    /// not a check for characters to escape. Write the entry's one JSON value to the buffer
    /// returned.
    pub fn prepared_key(&mut self, key: &str) -> &mut Vec<u8> {
        self.comma();
        self.out.extend_from_slice(key.as_bytes());
        self.out
    }

    /// Writes `entry`, an entry prepared as JSON text (`"key":value`), as it is.
    pub fn prepared(&mut self, entry: &str) {
        self.comma();
        self.out.extend_from_slice(entry.as_bytes());
    }

    /// Closes the object (`}`).
    pub fn end(self) {
        self.out.push(b'}');
    }
}

/// The name serde_json's `RawValue` serializes under: its text is written as it is.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// JSON text that serializes as itself, as serde_json's `RawValue` does (through this writer,
/// serde_json's writers and `serde_json::to_value`), without being parsed first: for bytes
/// prepared once and written many times. The text must be one JSON value.
///
/// ```
/// let clean = enforce_core::json::Raw(r#"{"ok":true}"#);
/// let written = enforce_core::json::to_vec(&[clean]).unwrap();
/// assert_eq!(written, br#"[{"ok":true}]"#);
/// assert_eq!(serde_json::to_vec(&[clean]).unwrap(), written);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raw<'a>(pub &'a str);

impl Serialize for Raw<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use ser::SerializeStruct;
        let mut raw = serializer.serialize_struct(RAW_VALUE_TOKEN, 1)?;
        raw.serialize_field(RAW_VALUE_TOKEN, self.0)?;
        raw.end()
    }
}

/// What each byte below 0x80 needs: 0 nothing, `u` a `\u00XX` escape, else the letter after
/// the backslash. Bytes from 0x80 (UTF-8 beyond ASCII) are written as they are, as serde_json
/// writes them.
const ESCAPE: [u8; 128] = {
    let mut table = [0u8; 128];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Writes `text` as a JSON string. Most strings written are keys and ids of a few words: up
/// to 16 bytes they are read and written as two machine words, with no byte walk and no call
/// to `memcpy` (serde_json's walk and copies were most of the cost of writing an answer).
fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    let Some((first, last)) = short_words(bytes) else {
        return write_long_str(out, bytes);
    };
    if flagged(first) || flagged(last) {
        return write_escaped_str(out, bytes);
    }
    // The quoted string put together in one block: the opening quote, the first word, the
    // last word where it ends at the string's end (overlapping the first), the closing quote.
    // The whole block is copied (a fixed size: no call to `memcpy`), then cut to length.
    let len = bytes.len();
    let mut block = [PAD; 18];
    block[0] = b'"';
    block[1..9].copy_from_slice(&first.to_le_bytes());
    if len > 8 {
        if let Some(end) = block.get_mut(len - 7..=len) {
            end.copy_from_slice(&last.to_le_bytes());
        }
    }
    if let Some(quote) = block.get_mut(len + 1) {
        *quote = b'"';
    }
    let written = out.len() + len + 2;
    out.extend_from_slice(&block);
    out.truncate(written);
}

/// A string of at most 16 bytes as two little-endian words: its first eight bytes and its
/// last eight (overlapping when shorter than 16); the bytes past a string shorter than eight
/// are `PAD`. `None` for a longer string.
#[inline]
fn short_words(bytes: &[u8]) -> Option<(u64, u64)> {
    let len = bytes.len();
    let word_at = |at: usize| -> u64 {
        let mut word = [0u8; 8];
        if let Some(eight) = bytes.get(at..at + 8) {
            word.copy_from_slice(eight);
        }
        u64::from_le_bytes(word)
    };
    let half_at = |at: usize| -> u64 {
        let mut half = [0u8; 4];
        if let Some(four) = bytes.get(at..at + 4) {
            half.copy_from_slice(four);
        }
        u64::from(u32::from_le_bytes(half))
    };
    let byte_at = |at: usize| u64::from(bytes.get(at).copied().unwrap_or(PAD));
    let word = match len {
        0 => 0,
        1..=3 => {
            byte_at(0) | byte_at(len / 2) << (8 * (len / 2)) | byte_at(len - 1) << (8 * (len - 1))
        }
        4..=7 => half_at(0) | half_at(len - 4) << (8 * (len - 4)),
        8..=16 => return Some((word_at(0), word_at(len - 8))),
        _ => return None,
    };
    // Shorter than a word: the rest is padding that needs no escaping.
    let word = word | (ONES * u64::from(PAD)) << (8 * len);
    Some((word, word))
}

/// What pads a short string's word: a byte that needs no escaping.
const PAD: u8 = b'a';
const ONES: u64 = u64::from_le_bytes([1; 8]);

/// A string longer than 16 bytes: checked a word at a time, copied in one piece.
fn write_long_str(out: &mut Vec<u8>, bytes: &[u8]) {
    if needs_escaping(bytes) {
        return write_escaped_str(out, bytes);
    }
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    out.extend_from_slice(bytes);
    out.push(b'"');
}

#[cold]
fn write_escaped_str(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    write_escaped(out, bytes);
    out.push(b'"');
}

/// Whether `bytes` hold a control character, `"` or `\\`, eight bytes at a time.
fn needs_escaping(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        if flagged(word_of(word)) {
            return true;
        }
    }
    if words.remainder().is_empty() {
        return false;
    }
    match bytes.len().checked_sub(8).and_then(|at| bytes.get(at..)) {
        // The last eight bytes again, overlapping the words already checked.
        Some(last) => flagged(word_of(last)),
        None => short_words(bytes).is_some_and(|(first, _)| flagged(first)),
    }
}

/// Eight bytes as a little-endian word.
#[inline]
fn word_of(eight: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(eight);
    u64::from_le_bytes(word)
}

/// Whether one of eight bytes needs escaping: a control character, `"` or `\\`. Each test is
/// the classic "has a byte below n" / "has a zero byte" word trick, exact for the word as a
/// whole, which is all this asks.
#[inline]
fn flagged(word: u64) -> bool {
    const HIGH: u64 = ONES * 0x80;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let has_quote = quote.wrapping_sub(ONES) & !quote;
    let has_backslash = backslash.wrapping_sub(ONES) & !backslash;
    (below_space | has_quote | has_backslash) & HIGH != 0
}

fn write_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape = ESCAPE.get(usize::from(byte)).copied().unwrap_or(0);
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.push(b'\\');
            out.push(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

fn write_integer(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Writes a float as serde_json does: its shortest round-trip form, `null` when not finite.
fn write_float(out: &mut Vec<u8>, value: impl zmij::Float, finite: bool) {
    if finite {
        out.extend_from_slice(zmij::Buffer::new().format_finite(value).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

/// Where a compound value is: nothing written (an empty one, already closed), its first
/// element next, or a later one (after a comma). serde_json's own states.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Empty,
    First,
    Rest,
}

/// A sequence, map or struct being written; `raw`: serde_json's `RawValue`, written as it is.
struct Compound<'w, 'a> {
    writer: &'w mut Writer<'a>,
    state: State,
    raw: bool,
}

impl<'w, 'a> Compound<'w, 'a> {
    fn next(&mut self) {
        if self.state != State::First {
            self.writer.out.push(b',');
        }
        self.state = State::Rest;
    }

    /// Writes `end` unless the compound was empty (closed when opened); the writer goes on.
    fn close(self, end: u8) -> &'w mut Writer<'a> {
        if self.state != State::Empty {
            self.writer.out.push(end);
        }
        self.writer
    }
}

impl<'w, 'a> Writer<'a> {
    fn open(&'w mut self, start: u8, end: u8, len: Option<usize>) -> Compound<'w, 'a> {
        self.out.push(start);
        let state = if len == Some(0) {
            self.out.push(end);
            State::Empty
        } else {
            State::First
        };
        Compound {
            writer: self,
            state,
            raw: false,
        }
    }

    /// `{"variant":` before a variant's content (closed with a second `}` at its end).
    fn open_variant(&mut self, variant: &str) {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.push(b':');
    }
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Compound<'w, 'a>;
    type SerializeStruct = Compound<'w, 'a>;
    type SerializeStructVariant = Compound<'w, 'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out
            .extend_from_slice(if v { b"true" as &[u8] } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        write_integer(self.out, v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        write_float(self.out, v, v.is_finite());
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        write_float(self.out, v, v.is_finite());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        // serde_json writes bytes as an array of numbers.
        use ser::SerializeSeq;
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for byte in v {
            seq.serialize_element(byte)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        write_str(self.out, variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.open_variant(variant);
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(self.open(b'[', b']', len))
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.open_variant(variant);
        self.serialize_seq(Some(len))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(self.open(b'{', b'}', len))
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'w, 'a>, Error> {
        if name == RAW_VALUE_TOKEN {
            return Ok(Compound {
                writer: self,
                state: State::Rest,
                raw: true,
            });
        }
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.open_variant(variant);
        self.serialize_map(Some(len))
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.next();
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        self.close(b']');
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<(), Error> {
        // The array, then the `{"variant":` around it.
        self.close(b']').out.push(b'}');
        Ok(())
    }
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.next();
        key.serialize(KeyWriter {
            out: self.writer.out,
        })
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        self.close(b'}');
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        if self.raw {
            return value.serialize(RawWriter {
                out: self.writer.out,
            });
        }
        self.next();
        write_str(self.writer.out, key);
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        if !self.raw {
            self.close(b'}');
        }
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        ser::SerializeStruct::serialize_field(self, key, value)
    }
    fn end(self) -> Result<(), Error> {
        // The fields, then the `{"variant":` around them.
        self.close(b'}').out.push(b'}');
        Ok(())
    }
}

/// Writes a map key: a string as it is, a number or a bool quoted, as serde_json does; any
/// other key is an error.
struct KeyWriter<'a> {
    out: &'a mut Vec<u8>,
}

fn key_must_be_a_string() -> Error {
    Error("key must be a string".into())
}

impl KeyWriter<'_> {
    fn quoted(self, text: &[u8]) -> Result<(), Error> {
        self.out.push(b'"');
        self.out.extend_from_slice(text);
        self.out.push(b'"');
        Ok(())
    }
}

impl ser::Serializer for KeyWriter<'_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = ser::Impossible<(), Error>;
    type SerializeTuple = ser::Impossible<(), Error>;
    type SerializeTupleStruct = ser::Impossible<(), Error>;
    type SerializeTupleVariant = ser::Impossible<(), Error>;
    type SerializeMap = ser::Impossible<(), Error>;
    type SerializeStruct = ser::Impossible<(), Error>;
    type SerializeStructVariant = ser::Impossible<(), Error>;

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.quoted(if v { b"true" } else { b"false" })
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.quoted(itoa::Buffer::new().format(v).as_bytes())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        if !v.is_finite() {
            return Err(Error("float key must be finite".into()));
        }
        self.quoted(zmij::Buffer::new().format_finite(v).as_bytes())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        if !v.is_finite() {
            return Err(Error("float key must be finite".into()));
        }
        self.quoted(zmij::Buffer::new().format_finite(v).as_bytes())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_none(self) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(key_must_be_a_string())
    }
}

/// Writes the text of serde_json's `RawValue` as it is (it is JSON already).
struct RawWriter<'a> {
    out: &'a mut Vec<u8>,
}

fn expected_raw_json() -> Error {
    Error("expected the text of a RawValue".into())
}

impl ser::Serializer for RawWriter<'_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = ser::Impossible<(), Error>;
    type SerializeTuple = ser::Impossible<(), Error>;
    type SerializeTupleStruct = ser::Impossible<(), Error>;
    type SerializeTupleVariant = ser::Impossible<(), Error>;
    type SerializeMap = ser::Impossible<(), Error>;
    type SerializeStruct = ser::Impossible<(), Error>;
    type SerializeStructVariant = ser::Impossible<(), Error>;

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.out.extend_from_slice(v.as_bytes());
        Ok(())
    }
    fn serialize_bool(self, _v: bool) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_i8(self, _v: i8) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_i16(self, _v: i16) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_i32(self, _v: i32) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_u8(self, _v: u8) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_u16(self, _v: u16) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_u32(self, _v: u32) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_f32(self, _v: f32) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_i64(self, _v: i64) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_u64(self, _v: u64) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_f64(self, _v: f64) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_char(self, _v: char) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_none(self) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
    ) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _value: &T,
    ) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Error> {
        Err(expected_raw_json())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(expected_raw_json())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Error> {
        Err(expected_raw_json())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(expected_raw_json())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(expected_raw_json())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(expected_raw_json())
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Error> {
        Err(expected_raw_json())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(expected_raw_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time check agrees with a walk byte by byte for every byte value at every
    /// position of strings of 0 to 24 bytes, among bytes that need nothing and bytes above
    /// 0x7f (which the word tricks must not take for a control character); and every such
    /// string that is UTF-8 is written as serde_json writes it, after other bytes.
    #[test]
    fn the_word_check_finds_exactly_the_bytes_that_need_escaping() {
        let walk = |bytes: &[u8]| bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
        let check = |bytes: &[u8]| {
            assert_eq!(needs_escaping(bytes), walk(bytes), "{bytes:?}");
            if let Ok(text) = std::str::from_utf8(bytes) {
                let mut out = b"[1,".to_vec();
                write_str(&mut out, text);
                let mut expected = b"[1,".to_vec();
                serde_json::to_writer(&mut expected, text).expect("a string");
                assert_eq!(out, expected, "{bytes:?}");
            }
        };
        for len in 0..=24usize {
            for background in [b'a', 0x80, 0xff, b'!', b'#', b'[', b']', 0x7f] {
                let mut bytes = vec![background; len];
                check(&bytes);
                for at in 0..len {
                    for byte in 0..=255u8 {
                        bytes[at] = byte;
                        check(&bytes);
                    }
                    bytes[at] = background;
                }
            }
        }
    }
}
