//! Grammar-constrained generation: the answer follows the JSON Schema.

use crate::{own_runner, shared_runner};
use enforce_core::Ask;
use enforce_core::{runner::FinishReason, Reply, Request, Runner};
use enforce_runner_local::{ConstraintEngine, LocalConfig, LocalRunner};
use serde_json::{json, Value};

/// The test model on the GBNF engine (a runner of its own: the model is loaded again).
fn gbnf_runner() -> Option<LocalRunner> {
    own_runner(|c| LocalConfig {
        constraint_engine: ConstraintEngine::Gbnf,
        ..c
    })
}

/// `runner`'s answer to `prompt` with `params`.
async fn answer(runner: &LocalRunner, prompt: &str, params: Value) -> Reply {
    let mut request = Request::prompt(prompt);
    request.params = params.as_object().cloned().expect("params are an object");
    runner
        .ask(Ask::new(&request))
        .reply()
        .await
        .expect("a reply")
}

/// The schema of an object with exactly the key `key`, of schema `value`.
fn one_key_object(key: &str, value: Value) -> Value {
    json!({
        "type": "object",
        "properties": {key: value},
        "required": [key],
        "additionalProperties": false
    })
}

/// `AAA-123`: three capitals, a dash, three digits (the pattern the tests below ask for).
fn is_booking_code(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 7
        && b[..3].iter().all(u8::is_ascii_uppercase)
        && b[3] == b'-'
        && b[4..].iter().all(u8::is_ascii_digit)
}

/// llguidance takes a string's `pattern`: every answer's code matches it (GBNF leaves it to
/// the validator, and the model writes what it likes there).
#[tokio::test]
async fn a_schema_pattern_holds_in_every_answer_under_llguidance() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let schema = one_key_object(
        "code",
        json!({"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}),
    );
    for seed in [1, 2, 3] {
        let reply = answer(
            runner,
            "Make up a flight booking code and give it as JSON with the key `code`.",
            json!({
                "max_tokens": 48, "seed": seed, "temperature": 0.8,
                "response_format": {"type": "json_schema", "json_schema": {"name": "code", "schema": schema}}
            }),
        )
        .await;
        let value: Value = serde_json::from_str(&reply.text)
            .unwrap_or_else(|e| panic!("seed {seed}: not JSON ({e}): {}", reply.text));
        let code = value["code"].as_str().unwrap_or_default();
        assert!(is_booking_code(code), "seed {seed}: {}", reply.text);
    }
}

/// A `regex` parameter: the whole answer matches it.
#[tokio::test]
async fn a_regex_constrains_the_whole_answer() {
    let Some(runner) = shared_runner() else {
        return;
    };
    for seed in [1, 2] {
        let reply = answer(
            runner,
            "Make up a flight booking code.",
            json!({"max_tokens": 16, "seed": seed, "temperature": 0.8, "regex": "[A-Z]{3}-[0-9]{3}"}),
        )
        .await;
        assert_eq!(
            reply.finish_reason,
            Some(FinishReason::Stop),
            "{}",
            reply.text
        );
        assert!(
            is_booking_code(&reply.text),
            "seed {seed}: {:?}",
            reply.text
        );
    }
    // One llguidance cannot compile is refused with the reason, not ignored.
    let mut request = Request::prompt("hi");
    request.params = json!({"regex": "a(?=b)"}).as_object().cloned().unwrap();
    let e = crate::unavailable_message(runner.ask(Ask::new(&request)).reply().await);
    assert!(e.contains("the regex cannot constrain decoding"), "{e}");
}

/// A schema llguidance rejects (a look-ahead in a `pattern`) is compiled to GBNF: still
/// answered, in the schema's shape.
#[tokio::test]
async fn a_schema_llguidance_rejects_is_answered_under_gbnf() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let schema = one_key_object(
        "password",
        json!({"type": "string", "maxLength": 16, "pattern": "^(?=.*[0-9]).{8,}$"}),
    );
    let reply = answer(
        runner,
        "Make up a password and give it as JSON with the key `password`.",
        json!({
            "max_tokens": 48, "seed": 1, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
        }),
    )
    .await;
    let value: Value = serde_json::from_str(&reply.text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", reply.text));
    assert!(value["password"].is_string(), "{value}");
}

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
    let params = json!({
        "max_tokens": 96, "seed": 3, "temperature": 0.7,
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
    });
    let prompt = "Give the largest city of Japan and its population as JSON.";
    let reply = answer(runner, prompt, params).await;
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
    let params = json!({
        "max_tokens": 16, "temperature": 0,
        "grammar": "root ::= (\"yes\" | \"no\") \".\""
    });
    let reply = answer(runner, "Write a short poem about the sea.", params).await;
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
    let params =
        json!({"max_tokens": 64, "temperature": 0, "response_format": {"type": "json_object"}});
    let reply = answer(
        runner,
        "Describe a cat as JSON with a name and an age.",
        params,
    )
    .await;
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
/// llguidance takes both bounds as they are.
#[tokio::test]
async fn a_schema_with_max_length_10000_is_answered_on_both_engines() {
    let (Some(llguidance), Some(gbnf)) = (shared_runner(), gbnf_runner()) else {
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
    let params = json!({
        "max_tokens": 24, "seed": 1, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "code", "schema": schema}}
    });
    for runner in [llguidance, &gbnf] {
        let engine = runner.config().constraint_engine.as_str();
        let reply = answer(
            runner,
            "Write a Python hello world as JSON with a `code` field.",
            params.clone(),
        )
        .await;
        let compact: String = reply.text.split_whitespace().collect();
        assert!(
            compact.starts_with(r#"{"code":""#),
            "{engine}: {}",
            reply.text
        );
    }
}
