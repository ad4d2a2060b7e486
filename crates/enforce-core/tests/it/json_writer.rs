//! `enforce_core::json` writes what serde_json writes, for every shape serde has.

use enforce_core::json;
use proptest::prelude::*;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

fn same<T: Serialize + ?Sized>(value: &T) {
    let ours = json::to_vec(value).expect("ours writes it");
    let theirs = serde_json::to_vec(value).expect("serde_json writes it");
    assert_eq!(
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&theirs)
    );
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Shape {
    Unit,
    Newtype(u8),
    Tuple(i32, String),
    EmptyTuple(),
    Struct { a: Option<f64>, b: bool },
    EmptyStruct {},
}

#[derive(Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
enum Tagged {
    Clean,
    Failed { attempts: u32 },
}

#[derive(Serialize)]
struct Unit;

#[derive(Serialize)]
struct Newtype(String);

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Everything<'a> {
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<u8>,
    none: Option<u8>,
    shapes: Vec<Shape>,
    tagged: [Tagged; 2],
    unit: Unit,
    newtype: Newtype,
    empty: Empty,
    empty_list: Vec<u8>,
    tuple: (u8, char, f32),
    numbers: (i8, i16, i32, i64, i128, u8, u16, u32, u64, u128),
    floats: [f64; 7],
    int_keys: BTreeMap<i64, bool>,
    bool_keys: BTreeMap<bool, ()>,
    char_keys: BTreeMap<char, u8>,
    value: Value,
    raw: Box<serde_json::value::RawValue>,
}

struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

#[test]
fn every_serde_shape_is_written_as_serde_json_writes_it() {
    let everything = Everything {
        text: "quote \" backslash \\ slash / tab \t nl \n cr \r ff \u{c} bs \u{8} nul \0 us \u{1f} del \u{7f} é 漢 🦀",
        skipped: None,
        none: None,
        shapes: vec![
            Shape::Unit,
            Shape::Newtype(7),
            Shape::Tuple(-3, "x".into()),
            Shape::EmptyTuple(),
            Shape::Struct { a: None, b: true },
            Shape::Struct { a: Some(0.5), b: false },
            Shape::EmptyStruct {},
        ],
        tagged: [Tagged::Clean, Tagged::Failed { attempts: 3 }],
        unit: Unit,
        newtype: Newtype("n".into()),
        empty: Empty {},
        empty_list: Vec::new(),
        tuple: (1, '"', 1.5),
        numbers: (i8::MIN, i16::MIN, i32::MIN, i64::MIN, i128::MIN, u8::MAX, u16::MAX, u32::MAX, u64::MAX, u128::MAX),
        floats: [0.0, -0.0, 1.0, 1e20, 1.5e-300, f64::NAN, f64::INFINITY],
        int_keys: [(-1, true), (10, false)].into_iter().collect(),
        bool_keys: [(true, ()), (false, ())].into_iter().collect(),
        char_keys: [('a', 1), ('"', 2)].into_iter().collect(),
        value: serde_json::json!({"z": [1, -2, 3.25, null, true, "s\u{1}"], "a": {}, "m": []}),
        raw: serde_json::value::RawValue::from_string(r#"{"kept" :  "as is"}"#.into())
            .expect("raw JSON"),
    };
    same(&everything);
    same(&Bytes(b"\x00\xff"));
    same(&Bytes(b""));
    same("");
    same(&f32::NAN);
}

#[test]
fn keys_json_cannot_hold_are_refused() {
    let map: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into_iter().collect();
    assert!(serde_json::to_vec(&map).is_err());
    assert!(json::to_vec(&map).is_err());
}

fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[\\x00-\\x7f\"\\\\]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_json_value_is_written_as_serde_json_writes_it(value in any_value()) {
        let ours = json::to_vec(&value).expect("ours writes it");
        prop_assert_eq!(ours, serde_json::to_vec(&value).expect("serde_json writes it"));
    }
}
