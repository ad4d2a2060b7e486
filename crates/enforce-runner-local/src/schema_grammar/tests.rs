//! What the grammars accept, checked with a small GBNF matcher rather than by their spelling.

use super::*;
use serde_json::json;

use super::gbnf_matcher as gbnf;

fn grammar(schema: Value) -> gbnf::Grammar {
    let converted = json_schema_to_gbnf(&schema);
    gbnf::Grammar::parse(&converted.gbnf)
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
fn impossible_or_unknown_schemas_loosen_to_any_value_and_say_why() {
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
        let converted = json_schema_to_gbnf(&schema);
        assert!(
            converted.loosened.iter().any(|l| l.contains(expected)),
            "{schema}: {:?}",
            converted.loosened
        );
        let g = gbnf::Grammar::parse(&converted.gbnf);
        assert!(g.accepts(r#"{"any": ["json", 1]}"#), "{schema}");
        assert!(!g.accepts("not json"), "{schema}");
    }
}

#[test]
fn a_part_that_cannot_be_followed_loosens_only_that_part() {
    let converted = json_schema_to_gbnf(&json!({
        "type": "object",
        "properties": {"id": {"type": "integer"}, "odd": {"type": "decimal"}},
        "required": ["id", "odd"],
        "additionalProperties": false
    }));
    assert_eq!(converted.loosened.len(), 1, "{:?}", converted.loosened);
    assert!(
        converted.loosened[0].contains("root-odd"),
        "{:?}",
        converted.loosened
    );
    let g = gbnf::Grammar::parse(&converted.gbnf);
    assert!(g.accepts(r#"{"id": 1, "odd": [true]}"#));
    assert!(
        !g.accepts(r#"{"id": "1", "odd": 2}"#),
        "the rest is still exact"
    );
}

/// One `maxLength: 10000` field must not break the grammar: llama.cpp takes at most
/// `MAX_GRAMMAR_REPETITION` repetitions, so the bound is dropped (looser) and said.
#[test]
fn lengths_and_counts_above_llama_cpps_repetition_limit_become_unbounded() {
    let converted = json_schema_to_gbnf(&json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "maxLength": 10000},
            "short": {"type": "string", "maxLength": 3},
            "lines": {"type": "array", "items": {"type": "integer"}, "minItems": 5000}
        },
        "required": ["code", "short", "lines"]
    }));
    let limit = MAX_GRAMMAR_REPETITION;
    let repetitions = repetition_counts(&converted.gbnf);
    assert!(
        repetitions.iter().all(|n| *n <= limit),
        "{repetitions:?} in\n{}",
        converted.gbnf
    );
    assert!(converted
        .loosened
        .iter()
        .any(|l| l.contains("maxLength` 10000")));
    assert!(converted
        .loosened
        .iter()
        .any(|l| l.contains("minItems` 5000")));
    let g = gbnf::Grammar::parse(&converted.gbnf);
    let long = "x".repeat(12_000);
    let at_least = |n: usize| vec!["1"; n].join(",");
    assert!(g.accepts(&format!(
        r#"{{"code": "{long}", "short": "abc", "lines": [{}]}}"#,
        at_least(limit as usize)
    )));
    assert!(
        !g.accepts(&format!(
            r#"{{"code": "x", "short": "abcd", "lines": [{}]}}"#,
            at_least(limit as usize)
        )),
        "a small bound is still exact"
    );
}

/// Every `{m,n}` / `{m,}` count in a GBNF text.
fn repetition_counts(gbnf: &str) -> Vec<u64> {
    let mut counts = Vec::new();
    for part in gbnf.split('{').skip(1) {
        let Some((inner, _)) = part.split_once('}') else {
            continue;
        };
        counts.extend(
            inner
                .split(',')
                .filter_map(|n| n.trim().parse::<u64>().ok()),
        );
    }
    counts
}

#[test]
fn nesting_deeper_than_the_limit_accepts_any_value_below_it() {
    let mut schema = json!({"type": "integer"});
    for _ in 0..MAX_GRAMMAR_DEPTH + 5 {
        schema = json!({"type": "array", "items": schema});
    }
    let converted = json_schema_to_gbnf(&schema);
    assert!(
        converted
            .loosened
            .iter()
            .any(|l| l.contains("nested deeper")),
        "{:?}",
        converted.loosened
    );
    let g = gbnf::Grammar::parse(&converted.gbnf);
    let deep = |inner: &str| {
        format!(
            "{}{inner}{}",
            "[".repeat(MAX_GRAMMAR_DEPTH + 5),
            "]".repeat(MAX_GRAMMAR_DEPTH + 5)
        )
    };
    assert!(g.accepts(&deep("1")));
    assert!(!g.accepts("1"), "the outer levels are still arrays");
}

#[test]
fn keywords_a_grammar_cannot_express_are_listed() {
    let converted = json_schema_to_gbnf(&json!({
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}, "s": {"type": "string", "pattern": "^a"}}
    }));
    let loosened = converted.loosened.join("\n");
    assert!(loosened.contains("`root-n.minimum`"), "{loosened}");
    assert!(loosened.contains("`root-s.pattern`"), "{loosened}");
    assert!(
        json_schema_to_gbnf(&json!({"type": "string", "maxLength": 4}))
            .loosened
            .is_empty()
    );
}

/// Whitespace between tokens is bounded, so a model cannot fill its budget with it.
#[test]
fn whitespace_is_bounded() {
    let g = grammar(json!({"type": "object", "properties": {"a": {"type": "integer"}}}));
    assert!(g.accepts("{\n  \"a\": 1\n}"));
    assert!(!g.accepts(&format!("{{{}\"a\": 1}}", " ".repeat(50))));
    assert!(!g.accepts(&format!("{{{}\"a\": 1}}", "\n".repeat(3))));
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

#[test]
fn a_choice_grammar_accepts_exactly_the_choices() {
    let g = gbnf::Grammar::parse(&choices_to_gbnf(&["yes".into(), "no \"way\"\n".into()]));
    assert!(g.accepts("yes"));
    assert!(g.accepts("no \"way\"\n"));
    assert!(!g.accepts("yes "));
    assert!(!g.accepts("maybe"));
}
