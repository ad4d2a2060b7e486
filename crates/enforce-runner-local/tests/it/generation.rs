//! Streaming, token counts, finish reasons, seeds, follow-ups.

use crate::{drain, own_runner, shared_runner};
use enforce_core::Ask;
use enforce_core::{runner::FinishReason, Reply, Request, Runner, StreamEvent};
use enforce_runner_local::LocalConfig;
use serde_json::json;
use std::time::Instant;

fn request(prompt: &str, params: serde_json::Value) -> Request {
    let mut request = Request::prompt(prompt);
    request.params = params.as_object().cloned().unwrap_or_default();
    request
}

/// Text arrives token by token, each followed by a usage snapshot; the reply counts exactly
/// the tokens generated and says it hit the limit.
#[tokio::test]
async fn it_streams_token_by_token_and_counts_exactly() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let req = request(
        "Write a long story about a dragon who learns to cook.",
        json!({"max_tokens": 24, "seed": 1, "temperature": 0.7}),
    );
    let started = Instant::now();
    let (events, reply) = drain(runner.ask(Ask::new(&req).streamed())).await;
    let elapsed = started.elapsed();
    let reply = reply.expect("a reply");
    let usage = reply.usage.expect("usage");
    assert_eq!(reply.finish_reason, Some(FinishReason::Length));
    assert_eq!(usage.output_tokens, 24, "max_tokens is exact");
    assert!(
        usage.input_tokens > 10,
        "the prompt in its chat template: {usage:?}"
    );
    let texts: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let snapshots: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Spent { usage: Some(u), .. } => Some(u.output_tokens),
            _ => None,
        })
        .collect();
    // One snapshot per token, counting up; at most one text piece per token.
    assert_eq!(snapshots, (1..=24).collect::<Vec<u64>>());
    assert!(
        texts.len() > 12 && texts.len() <= 24,
        "{} pieces",
        texts.len()
    );
    assert_eq!(texts.concat(), reply.text);
    assert!(!reply.text.trim().is_empty());
    eprintln!(
        "local runner: {} prompt + {} completion tokens in {:.2} s ({:.1} completion tokens/s incl. prompt)",
        usage.input_tokens,
        usage.output_tokens,
        elapsed.as_secs_f64(),
        usage.output_tokens as f64 / elapsed.as_secs_f64()
    );
}

/// A short answer ends at the end-of-generation token: `stop`, and the count includes that
/// token (as llama.cpp's server counts).
#[tokio::test]
async fn a_finished_answer_stops_and_counts_its_end_token() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let req = request(
        "What is the capital of France? Answer in one short sentence.",
        json!({"max_tokens": 64, "temperature": 0}),
    );
    let (events, reply) = drain(runner.ask(Ask::new(&req).streamed())).await;
    let reply = reply.expect("a reply");
    assert_eq!(reply.finish_reason, Some(FinishReason::Stop), "{reply:?}");
    let spent = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Spent { .. }))
        .count() as u64;
    let usage = reply.usage.expect("usage");
    assert_eq!(
        usage.output_tokens,
        spent + 1,
        "text tokens + the end token"
    );
    assert!(usage.output_tokens < 64);
    assert!(reply.text.contains("Paris"), "{}", reply.text);
}

/// The same seed gives the same answer; other seeds give other answers.
#[tokio::test]
async fn seeds_make_answers_repeatable() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let ask = |seed: u64| {
        let req = request(
            "Invent a name for a new fruit and describe its taste.",
            json!({"max_tokens": 20, "seed": seed, "temperature": 1.0}),
        );
        async move {
            runner
                .ask(Ask::new(&req))
                .reply()
                .await
                .expect("a reply")
                .text
        }
    };
    let first = ask(11).await;
    assert_eq!(ask(11).await, first, "same seed, same text");
    let mut others = Vec::new();
    for seed in [12, 13, 14] {
        others.push(ask(seed).await);
    }
    assert!(
        others.iter().any(|t| *t != first),
        "three other seeds all gave {first:?}"
    );
}

/// The configuration's seed and limit apply when the request has none.
#[tokio::test]
async fn the_configuration_supplies_what_the_request_does_not() {
    let Some(runner) = own_runner(|c| enforce_runner_local::LocalConfig {
        seed: Some(5),
        max_tokens: 6,
        ..c
    }) else {
        return;
    };
    let req = Request::prompt("Tell me about the sea.");
    let a = runner.ask(Ask::new(&req)).reply().await.expect("a reply");
    let b = runner.ask(Ask::new(&req)).reply().await.expect("a reply");
    assert_eq!(a.usage.map(|u| u.output_tokens), Some(6));
    assert_eq!(a.finish_reason, Some(FinishReason::Length));
    assert_eq!(a.text, b.text);
}

/// A follow-up is stateless: the conversation, the previous answer and the feedback, so it
/// costs more prompt tokens than the first ask.
#[tokio::test]
async fn a_follow_up_carries_the_previous_answer_and_the_feedback() {
    let Some(runner) = shared_runner() else {
        return;
    };
    let req = request(
        "Name a colour.",
        json!({"max_tokens": 12, "temperature": 0}),
    );
    let first = runner.ask(Ask::new(&req)).reply().await.expect("a reply");
    let previous = Reply::text("Blue is a colour that many people like a lot.");
    let again = runner
        .ask(Ask::follow_up(
            &req,
            &previous,
            "Answer with one word only.",
        ))
        .reply()
        .await
        .expect("a reply");
    let (first_in, again_in) = (
        first.usage.expect("usage").input_tokens,
        again.usage.expect("usage").input_tokens,
    );
    assert!(again_in > first_in + 10, "{first_in} then {again_in}");
}

/// An error for every answer: the loop re-asks once with feedback.
struct NeverRight;

#[enforce_core::async_trait]
impl enforce_core::Validator for NeverRight {
    fn name(&self) -> &str {
        "never_right"
    }
    async fn validate(&self, _: &str, _: &enforce_core::Context) -> enforce_core::Validation {
        Ok(vec![enforce_core::Issue::error(
            "never_right",
            "WRONG",
            "Answer with one word only.",
        )])
    }
}

/// A feedback re-ask draws with the next seed (the configured one, advanced), so the model
/// does not copy its failed answer token for token, as it did when the re-ask sent the
/// failed attempt's seed.
#[tokio::test]
async fn a_feedback_reask_draws_anew_and_is_no_copy_of_the_failed_answer() {
    let Some(runner) = own_runner(|c| LocalConfig {
        seed: Some(3),
        temperature: 0.8,
        max_tokens: 24,
        ..c
    }) else {
        return;
    };
    let enforcer = enforce_core::Enforcer::new(vec![Box::new(NeverRight)]).with_policy(
        enforce_core::Policy::builder()
            .max_retries(1)
            .reask(enforce_core::policy::Reask::Feedback)
            .build(),
    );
    let request = Request::prompt("Name a colour of the sky, with a short reason.");
    let outcome = enforcer
        .run(&runner, &request, &enforce_core::Context::new())
        .await;
    let attempts = &outcome.attempts;
    assert_eq!(attempts.len(), 2, "{}", outcome.summary());
    let seeds: Vec<_> = attempts.iter().map(|a| a.seed).collect();
    assert_eq!(
        seeds,
        vec![Some(3), Some(4)],
        "the seeds the runner drew with"
    );
    assert_ne!(
        attempts[0].response_digest, attempts[1].response_digest,
        "the re-ask's answer is a byte copy of the failed one"
    );
}
