//! Grammar-constrained generation: the answer follows the JSON Schema.

use crate::shared_runner;
use enforce_core::Ask;
use enforce_core::{runner::FinishReason, Request, Runner};
use serde_json::{json, Value};

#[tokio::test]
async fn a_json_schema_response_format_gives_json_that_matches() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "population": {"type": "integer", "minimum": 0, "maximum": 100000000}
        },
        "required": ["city", "population"],
        "additionalProperties": false
    });
    let mut request = Request::prompt("Give the largest city of Japan and its population as JSON.");
    request.params = json!({
        "max_tokens": 96, "seed": 3, "temperature": 0.7,
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
    })
    .as_object()
    .cloned()
    .unwrap();
    let reply = runner
        .ask(Ask::new(&request))
        .reply()
        .await
        .expect("a reply");
    assert_eq!(
        reply.finish_reason,
        Some(FinishReason::Stop),
        "{}",
        reply.text
    );
    let value: Value = serde_json::from_str(&reply.text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", reply.text));
    assert!(value["city"].is_string(), "{value}");
    assert!(value["population"].is_u64(), "{value}");
    assert_eq!(value.as_object().map(|o| o.len()), Some(2), "{value}");
}

/// A grammar the model's own first choice breaks at once: the answer is still one the
/// grammar allows (the token drawn without the grammar is refused and drawn again under it).
#[tokio::test]
async fn a_grammar_the_model_would_not_follow_still_holds() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let mut request = Request::prompt("Write a short poem about the sea.");
    request.params = json!({
        "max_tokens": 16, "temperature": 0,
        "grammar": "root ::= (\"yes\" | \"no\") \".\""
    })
    .as_object()
    .cloned()
    .unwrap();
    let reply = runner
        .ask(Ask::new(&request))
        .reply()
        .await
        .expect("a reply");
    assert!(
        ["yes.", "no."].contains(&reply.text.as_str()),
        "{:?}",
        reply.text
    );
    assert_eq!(reply.finish_reason, Some(FinishReason::Stop));
}

/// `json_object` asks for any JSON object.
#[tokio::test]
async fn a_json_object_response_format_gives_an_object() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let mut request = Request::prompt("Describe a cat as JSON with a name and an age.");
    request.params =
        json!({"max_tokens": 64, "temperature": 0, "response_format": {"type": "json_object"}})
            .as_object()
            .cloned()
            .unwrap();
    let reply = runner
        .ask(Ask::new(&request))
        .reply()
        .await
        .expect("a reply");
    if reply.finish_reason == Some(FinishReason::Stop) {
        let value: Value = serde_json::from_str(&reply.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", reply.text));
        assert!(value.is_object(), "{value}");
    } else {
        // Cut at the limit: still the start of an object, never prose.
        assert!(reply.text.trim_start().starts_with('{'), "{}", reply.text);
    }
}

/// Lengths above llama.cpp's repetition limit still give a grammar llama.cpp's own parser
/// takes (the bounds are loosened), so the request is answered, not refused: a `minLength`
/// above the limit is an error in that parser, a `maxLength` one in some of its versions.
#[tokio::test]
async fn a_schema_with_max_length_10000_is_taken_by_llama_cpps_grammar_parser() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let schema = json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "maxLength": 10000},
            "padding": {"type": "string", "minLength": 3000}
        },
        "required": ["code"],
        "additionalProperties": false
    });
    let mut request = Request::prompt("Write a Python hello world as JSON with a `code` field.");
    request.params = json!({
        "max_tokens": 24, "seed": 1, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "code", "schema": schema}}
    })
    .as_object()
    .cloned()
    .unwrap();
    let reply = runner
        .ask(Ask::new(&request))
        .reply()
        .await
        .expect("the grammar is accepted");
    let compact: String = reply.text.split_whitespace().collect();
    assert!(compact.starts_with(r#"{"code":""#), "{}", reply.text);
}
