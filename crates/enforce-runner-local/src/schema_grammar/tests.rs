//! What the grammars accept, checked with a small GBNF matcher rather than by their spelling.

use super::*;
use serde_json::json;

use super::gbnf_matcher as gbnf;

fn grammar(schema: Value) -> gbnf::Grammar {
    let text = json_schema_to_gbnf(&schema).expect("a grammar");
    gbnf::Grammar::parse(&text)
}

#[test]
fn an_object_with_required_and_optional_properties() {
    let g = grammar(json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 5},
            "population": {"type": "integer"},
            "note": {"type": "string"}
        },
        "required": ["city", "population"],
        "additionalProperties": false
    }));
    assert!(g.accepts(r#"{"city": "Tokyo", "population": 37}"#));
    assert!(g.accepts(r#"{"city":"Oslo","population":-1,"note":"x"}"#));
    assert!(
        !g.accepts(r#"{"city": "Tokyo"}"#),
        "a required key is missing"
    );
    assert!(
        !g.accepts(r#"{"city": "Yokohama", "population": 3}"#),
        "longer than maxLength"
    );
    assert!(
        !g.accepts(r#"{"city": "Oslo", "population": 1.5}"#),
        "not an integer"
    );
    assert!(
        !g.accepts(r#"{"city": "Oslo", "population": 1, "x": 1}"#),
        "closed object"
    );
    assert!(
        !g.accepts(r#"Sure! {"city": "Oslo", "population": 1}"#),
        "prose before"
    );
}

#[test]
fn optional_only_properties_take_any_subset_in_order() {
    let g = grammar(json!({
        "type": "object",
        "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}}
    }));
    for ok in [
        r#"{}"#,
        r#"{"a": true}"#,
        r#"{"b": null}"#,
        r#"{"a": false, "c": 2.5e3}"#,
        r#"{"a":true,"b":null,"c":0}"#,
    ] {
        assert!(g.accepts(ok), "{ok}");
    }
    for bad in [
        r#"{,"a": true}"#,
        r#"{"a": true,}"#,
        r#"{"c": 1, "a": true}"#,
        r#"{"d": 1}"#,
    ] {
        assert!(!g.accepts(bad), "{bad}");
    }
}

#[test]
fn additional_properties_given_as_a_schema_or_allowed() {
    let g = grammar(json!({"type": "object", "additionalProperties": {"type": "integer"}}));
    assert!(g.accepts(r#"{"x": 1, "y": 2}"#));
    assert!(!g.accepts(r#"{"x": "1"}"#));
    let g = grammar(
        json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": true}),
    );
    assert!(g.accepts(r#"{"a": 1, "b": [true, {"c": null}], "d": "e"}"#));
    assert!(g.accepts(r#"{"a": 1}"#));
}

#[test]
fn arrays_enums_consts_and_alternatives() {
    let g = grammar(json!({
        "type": "array",
        "items": {"enum": ["red", "green", 3]},
        "minItems": 1,
        "maxItems": 2
    }));
    assert!(g.accepts(r#"["red"]"#));
    assert!(g.accepts(r#"["green", 3]"#));
    assert!(!g.accepts(r#"[]"#), "minItems");
    assert!(!g.accepts(r#"["red", "red", "red"]"#), "maxItems");
    assert!(!g.accepts(r#"["blue"]"#), "not in the enum");

    let g = grammar(json!({"anyOf": [{"type": "string"}, {"const": {"k": [1, "\"q\""]}}]}));
    assert!(g.accepts(r#""any""#));
    assert!(g.accepts(r#"{"k":[1,"\"q\""]}"#));
    assert!(!g.accepts("12"));

    let g = grammar(json!({"type": ["integer", "null"]}));
    assert!(g.accepts("null") && g.accepts("-12") && !g.accepts("true"));

    let g = grammar(json!({"prefixItems": [{"type": "string"}, {"type": "boolean"}]}));
    assert!(g.accepts(r#"["a", false]"#) && !g.accepts(r#"[false, "a"]"#));
}

#[test]
fn strings_escape_and_refuse_raw_control_characters() {
    let g = grammar(json!({"type": "string"}));
    assert!(g.accepts(r#""a \"quoted\" \\ \u00e9 line\nbreak""#));
    assert!(!g.accepts("\"raw\nnewline\""));
    assert!(!g.accepts(r#""unterminated"#));
}

#[test]
fn refs_resolve_including_recursive_ones() {
    let g = grammar(json!({
        "$defs": {"node": {"type": "object", "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
        }, "required": ["name"]}},
        "$ref": "#/$defs/node"
    }));
    assert!(
        g.accepts(r#"{"name": "a", "children": [{"name": "b"}, {"name": "c", "children": []}]}"#)
    );
    assert!(!g.accepts(r#"{"name": "a", "children": [{"children": []}]}"#));
}

#[test]
fn all_of_objects_merge() {
    let g = grammar(json!({"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"properties": {"b": {"type": "string"}}, "required": ["b"], "additionalProperties": false}
    ]}));
    assert!(g.accepts(r#"{"a": 1, "b": "x"}"#));
    assert!(!g.accepts(r#"{"a": 1}"#));
}

#[test]
fn any_schema_and_empty_schema_accept_any_json() {
    for schema in [json!(true), json!({})] {
        let g = grammar(schema);
        assert!(g.accepts(r#"{"x": [1, 2.5, "s", null, true]}"#));
        assert!(g.accepts("[]"));
        assert!(!g.accepts("{x}"));
    }
}

#[test]
fn impossible_or_unknown_schemas_are_typed_errors() {
    let cases = [
        (json!(false), "no JSON value"),
        (json!({"enum": []}), "non-empty"),
        (json!({"$ref": "https://example.com/s.json"}), "$ref"),
        (json!({"type": "decimal"}), "not a JSON Schema type"),
        (
            json!({"type": "array", "minItems": 3, "maxItems": 1}),
            "maxItems",
        ),
        (
            json!({"allOf": [{"type": "string"}, {"type": "object"}]}),
            "other than objects",
        ),
        (json!(3), "not a schema"),
    ];
    for (schema, expected) in cases {
        let message = json_schema_to_gbnf(&schema).unwrap_err().to_string();
        assert!(message.contains(expected), "{schema}: {message}");
    }
}

#[test]
fn rule_names_from_odd_property_names_stay_valid() {
    let g = grammar(json!({
        "type": "object",
        "properties": {"naïve key": {"type": "string"}, "a_b": {"enum": [1]}, "": {"type": "integer"}},
        "required": ["naïve key", "a_b", ""]
    }));
    assert!(g.accepts(r#"{"naïve key": "x", "a_b": 1, "": 2}"#));
}
