//! Which engine a decoding constraint goes to, and what the constraint leaves looser than
//! asked.
//!
//! Planned without a model: llguidance compiles a grammar against any tokenizer, so a schema
//! or regex it rejects is found with a one-byte-per-token vocabulary before a model is loaded.
//! The runner makes the same choice when it builds its sampler, so what `enforce config
//! explain` and the decode notes say is what the runner does.

use crate::config::ConstraintEngine;
use serde_json::Value;

/// Whitespace llguidance may put between two JSON tokens: one space, or a line break and up
/// to 20 blanks of indentation; the GBNF grammar's `space` rule allows the same, so neither
/// engine lets a model spend its tokens on blank lines inside a value.
#[cfg(feature = "llguidance")]
const JSON_WHITESPACE: &str = r"(?:\x20|\n[\x20\t]{0,20})";

/// How a JSON Schema is constrained: by which engine, and what that leaves looser than the
/// schema (one line each, for the decode notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaPlan {
    /// The engine that compiles the schema: the configured one, or GBNF when llguidance
    /// rejects the schema.
    pub engine: ConstraintEngine,
    /// What the constraint does not enforce, and why the configured engine is not used if it
    /// is not. The validators still check every answer.
    pub notes: Vec<String>,
}

/// Plans `schema` on `engine`: llguidance when it is configured and takes the schema, the
/// GBNF converter otherwise. Never fails.
pub fn plan_schema(engine: ConstraintEngine, schema: &Value) -> SchemaPlan {
    let mut notes = Vec::new();
    if engine == ConstraintEngine::Llguidance {
        match check_schema(schema) {
            Ok(warnings) => {
                return SchemaPlan {
                    engine,
                    notes: warnings
                        .into_iter()
                        .map(|w| format!("llguidance: {w}"))
                        .collect(),
                }
            }
            Err(why) => notes.push(format!(
                "llguidance cannot take the schema ({why}); the GBNF grammar is used"
            )),
        }
    }
    notes.extend(
        crate::json_schema_to_gbnf(schema)
            .loosened
            .into_iter()
            .map(|l| format!("grammar: {l}")),
    );
    SchemaPlan {
        engine: ConstraintEngine::Gbnf,
        notes,
    }
}

/// Whether the local runner can constrain an answer to match `regex` whole (through
/// llguidance, whatever `constraint_engine` says: GBNF takes no regex): `Err` says why not.
pub fn plan_regex(regex: &str) -> Result<(), String> {
    check_regex(regex)
}

#[cfg(feature = "llguidance")]
pub(crate) use with_llguidance::{regex_grammar, schema_grammar};

#[cfg(feature = "llguidance")]
fn check_schema(schema: &Value) -> Result<Vec<String>, String> {
    with_llguidance::check(schema_grammar(schema))
}

#[cfg(feature = "llguidance")]
fn check_regex(regex: &str) -> Result<(), String> {
    with_llguidance::check(regex_grammar(regex)).map(drop)
}

#[cfg(not(feature = "llguidance"))]
fn check_schema(_schema: &Value) -> Result<Vec<String>, String> {
    Err(NOT_BUILT.into())
}

#[cfg(not(feature = "llguidance"))]
fn check_regex(_regex: &str) -> Result<(), String> {
    Err(NOT_BUILT.into())
}

#[cfg(not(feature = "llguidance"))]
const NOT_BUILT: &str = "this build has no llguidance (feature `llguidance`)";

#[cfg(feature = "llguidance")]
mod with_llguidance {
    use super::JSON_WHITESPACE;
    use llguidance::api::TopLevelGrammar;
    use llguidance::toktrie::ApproximateTokEnv;
    use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
    use serde_json::{Map, Value};
    use std::sync::OnceLock;

    /// The grammar of a JSON Schema, with whitespace between tokens bounded and objects
    /// closed as the GBNF converter closes them.
    pub(crate) fn schema_grammar(schema: &Value) -> TopLevelGrammar {
        let mut schema = match schema {
            Value::Object(map) => Value::Object(map.clone()),
            // `true` (anything) is the empty schema; llguidance takes only objects.
            _ => Value::Object(Map::new()),
        };
        close_objects(&mut schema, 0);
        let options = JsonCompileOptions {
            whitespace_pattern: Some(JSON_WHITESPACE.into()),
            // A keyword llguidance does not implement (`uniqueItems`, `not`, …) is a warning,
            // as the GBNF converter leaves it: the validators check it after generation.
            lenient: true,
            ..JsonCompileOptions::default()
        };
        if let (Value::Object(map), Ok(options)) = (&mut schema, serde_json::to_value(&options)) {
            map.insert("x-guidance".into(), options);
        }
        TopLevelGrammar::from_json_schema(schema)
    }

    /// Gives every object schema that lists `properties` and says nothing of
    /// `additionalProperties` an `additionalProperties: false`, as the GBNF converter (and
    /// llama.cpp's own) reads it: left open, a small model appended keys until its token limit
    /// (SmolLM2 on the city contract: three of 22 first answers cut or broken that way).
    /// Not inside `allOf`, whose parts are merged (a closed part would exclude the others'
    /// keys), nor in values (`const`, `enum`, `default`, `examples`).
    fn close_objects(schema: &mut Value, depth: usize) {
        if depth > crate::MAX_GRAMMAR_DEPTH {
            return;
        }
        match schema {
            Value::Object(map) => {
                if map.get("properties").is_some_and(Value::is_object)
                    && !map.contains_key("additionalProperties")
                {
                    map.insert("additionalProperties".into(), Value::Bool(false));
                }
                for (key, sub) in map.iter_mut() {
                    if !matches!(
                        key.as_str(),
                        "allOf" | "const" | "enum" | "default" | "examples"
                    ) {
                        close_objects(sub, depth + 1);
                    }
                }
            }
            Value::Array(items) => {
                for sub in items {
                    close_objects(sub, depth + 1);
                }
            }
            _ => {}
        }
    }

    /// The grammar of texts `regex` matches whole.
    pub(crate) fn regex_grammar(regex: &str) -> TopLevelGrammar {
        TopLevelGrammar::from_regex(regex)
    }

    /// Whether `grammar` accepts `text` whole, one byte per token.
    #[cfg(test)]
    pub(super) fn accepts(grammar: TopLevelGrammar, text: &str) -> bool {
        let Ok(factory) = byte_factory() else {
            return false;
        };
        let mut matcher = Matcher::new(factory.create_parser(grammar));
        let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
        matcher.try_consume_tokens(&tokens).ok() == Some(tokens.len())
            && matcher.is_accepting().unwrap_or(false)
    }

    /// A parser factory over a vocabulary of the 256 bytes: enough to compile any grammar,
    /// and built once.
    fn byte_factory() -> Result<&'static ParserFactory, String> {
        static FACTORY: OnceLock<Result<ParserFactory, String>> = OnceLock::new();
        FACTORY
            .get_or_init(|| {
                let env = ApproximateTokEnv::single_byte_env();
                ParserFactory::new_simple(&env)
                    .map(|mut f| {
                        f.quiet();
                        f
                    })
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Compiles `grammar`: its warnings, or why llguidance rejects it.
    pub(super) fn check(grammar: TopLevelGrammar) -> Result<Vec<String>, String> {
        let mut matcher = Matcher::new(byte_factory()?.create_parser(grammar));
        match matcher.get_error() {
            Some(e) => Err(first_line(&e)),
            None => Ok(matcher.grammar_warnings()),
        }
    }

    /// llguidance's errors add the grammar and parser state after the first line.
    pub(crate) fn first_line(e: &str) -> String {
        e.lines().next().unwrap_or_default().trim().to_string()
    }
}

#[cfg(feature = "llama")]
pub(crate) use with_llguidance::first_line;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[cfg(feature = "llguidance")]
    #[test]
    fn llguidance_takes_patterns_formats_and_bounds_without_a_note() {
        let schema = json!({
            "type": "object",
            "properties": {
                "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                "when": {"type": "string", "format": "date"},
                "n": {"type": "integer", "minimum": 0, "maximum": 10},
                "text": {"type": "string", "maxLength": 10000}
            },
            "required": ["code"]
        });
        let plan = plan_schema(ConstraintEngine::Llguidance, &schema);
        assert_eq!(plan.engine, ConstraintEngine::Llguidance);
        assert!(plan.notes.is_empty(), "{:?}", plan.notes);
        // The GBNF grammar leaves all four to the validators.
        let gbnf = plan_schema(ConstraintEngine::Gbnf, &schema);
        assert_eq!(gbnf.engine, ConstraintEngine::Gbnf);
        assert!(gbnf.notes.len() >= 4, "{:?}", gbnf.notes);
    }

    #[cfg(feature = "llguidance")]
    #[test]
    fn a_schema_llguidance_rejects_falls_back_to_gbnf_with_the_reason() {
        // A look-ahead: ECMA regex syntax that llguidance's regex engine does not have.
        let schema = json!({"type": "string", "pattern": "^(?=.*[0-9]).{8,}$"});
        let plan = plan_schema(ConstraintEngine::Llguidance, &schema);
        assert_eq!(plan.engine, ConstraintEngine::Gbnf);
        assert!(
            plan.notes[0].starts_with("llguidance cannot take the schema (")
                && plan.notes[0].ends_with("the GBNF grammar is used"),
            "{:?}",
            plan.notes
        );
        // And the GBNF grammar's own note on the pattern follows.
        assert!(plan.notes[1].starts_with("grammar: "), "{:?}", plan.notes);
    }

    #[cfg(feature = "llguidance")]
    #[test]
    fn whitespace_between_json_tokens_is_bounded_as_in_the_gbnf_grammar() {
        use with_llguidance::accepts;
        let object =
            json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}});
        let schema = || schema_grammar(&object);
        assert!(accepts(schema(), r#"{"a":1}"#));
        assert!(accepts(schema(), "{\n  \"a\": 1\n}"));
        // One space, or a line break and at most 20 blanks: no runs of blank lines.
        assert!(!accepts(schema(), r#"{  "a":1}"#));
        assert!(!accepts(schema(), "{\n\n\"a\":1}"));
        assert!(!accepts(
            schema(),
            &format!("{{\n{}\"a\":1}}", " ".repeat(21))
        ));
        // And the bound is llguidance's own: `minimum` holds.
        assert!(!accepts(schema(), r#"{"a":-1}"#));
    }

    /// The start of a real answer of SmolLM2 under an open llguidance grammar (closed with a
    /// `}`): the city schema lists its properties without `additionalProperties`, and the
    /// model went on adding keys until its token limit.
    #[cfg(feature = "llguidance")]
    #[test]
    fn objects_that_list_properties_are_closed_as_in_the_gbnf_grammar() {
        use with_llguidance::accepts;
        let city = json!({
            "type": "object",
            "required": ["name", "country", "population"],
            "properties": {
                "name": {"type": "string"},
                "country": {"type": "string"},
                "population": {"type": "integer"}
            }
        });
        let rambling = "{\n  \"name\": \"Lima\",\n  \"country\": \"Perú\",\n  \"population\": 1,\n\"population_percent\": 0.08,\n\"population_percentage_miles_per_acre\": 20.00\n}";
        assert!(!accepts(schema_grammar(&city), rambling));
        assert!(accepts(
            schema_grammar(&city),
            "{\n  \"name\": \"Lima\",\n  \"country\": \"Perú\",\n  \"population\": 1\n}"
        ));
        // Said otherwise, the schema keeps its word; `allOf` parts stay open to be merged.
        let open = json!({"properties": {"a": {"type": "integer"}}, "additionalProperties": true});
        assert!(accepts(schema_grammar(&open), r#"{"a":1,"b":2}"#));
        let merged = json!({"allOf": [
            {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]}
        ]});
        assert!(accepts(schema_grammar(&merged), r#"{"a":1,"b":2}"#));
    }

    #[cfg(feature = "llguidance")]
    #[test]
    fn a_keyword_llguidance_does_not_implement_is_a_note_not_a_fallback() {
        let schema = json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": true});
        let plan = plan_schema(ConstraintEngine::Llguidance, &schema);
        assert_eq!(plan.engine, ConstraintEngine::Llguidance);
        assert!(
            plan.notes.iter().any(|n| n.contains("uniqueItems")),
            "{:?}",
            plan.notes
        );
    }

    #[cfg(feature = "llguidance")]
    #[test]
    fn regexes_llguidance_cannot_compile_are_refused() {
        assert_eq!(plan_regex("(yes|no)"), Ok(()));
        assert!(plan_regex("(unclosed").is_err());
        assert!(plan_regex("a(?=b)").is_err());
    }

    #[test]
    fn the_gbnf_engine_lists_what_its_grammar_loosens() {
        let plan = plan_schema(
            ConstraintEngine::Gbnf,
            &json!({"type": "string", "maxLength": 10000}),
        );
        assert_eq!(plan.engine, ConstraintEngine::Gbnf);
        assert!(
            plan.notes.iter().any(|n| n.contains("maxLength` 10000")),
            "{:?}",
            plan.notes
        );
    }
}
