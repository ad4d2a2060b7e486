//! Dropping a stream stops the generation itself, and the loop's early abort saves real
//! tokens.

use crate::own_runner;
use enforce_core::Ask;
use enforce_core::{
    async_trait, Context, Enforcer, Issue, PartialCheck, Policy, Request, Runner, StreamEvent,
    Validation, Validator,
};
use futures_util::StreamExt;
use serde_json::json;
use std::time::Duration;

/// No answer may contain the letter `e` — which nearly every English answer breaks within a
/// few tokens, and which no later byte can undo (a definite error).
struct NoLetterE;

fn issue() -> Issue {
    Issue::error("no_e", "HAS_E", "The answer contains the letter e.")
}

struct FindE;

#[async_trait]
impl PartialCheck for FindE {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        if prefix.contains('e') {
            vec![issue()]
        } else {
            Vec::new()
        }
    }
}

#[async_trait]
impl Validator for NoLetterE {
    fn name(&self) -> &str {
        "no_e"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains('e') {
            vec![issue()]
        } else {
            Vec::new()
        })
    }
    fn partial_check<'a>(&'a self, _: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        Some(Box::new(FindE))
    }
}

/// After the stream is dropped, the generating thread adds at most the token it was on.
#[tokio::test]
async fn dropping_the_stream_stops_generating() {
    let Some(runner) = own_runner(|c| c) else {
        return;
    };
    let mut request = Request::prompt("Write a very long essay about the history of bread.");
    request.params = json!({"max_tokens": 400, "seed": 2})
        .as_object()
        .cloned()
        .unwrap();
    let mut stream = runner.ask(Ask::new(&request).streamed());
    let mut texts = 0;
    while texts < 5 {
        match stream.next().await {
            Some(Ok(StreamEvent::Text(_))) => texts += 1,
            Some(Ok(StreamEvent::Done(reply))) => panic!("finished early: {reply:?}"),
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    drop(stream);
    let at_drop = runner.tokens_generated();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = runner.tokens_generated();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        runner.tokens_generated(),
        after,
        "still generating after a second"
    );
    assert!(
        after - at_drop <= 2,
        "{at_drop} tokens at the drop, {after} after"
    );
    assert!(after < 20, "{after} tokens of 400 generated");
}

/// A loop whose partial check fails at once cuts the first attempt within a few tokens; the
/// audit's usage says so, and the runner really generated no more than the attempts report.
#[tokio::test]
async fn early_abort_stops_a_real_generation() {
    let Some(runner) = own_runner(|c| c) else {
        return;
    };
    let max_tokens = 128;
    let mut request = Request::prompt("Describe the city of Paris in detail.");
    request.params = json!({"max_tokens": max_tokens, "seed": 4, "temperature": 0.7})
        .as_object()
        .cloned()
        .unwrap();
    let policy = Policy::builder()
        .max_retries(1)
        .early_abort(true)
        .partial_check_bytes(8)
        .build();
    let enforcer = Enforcer::new(vec![Box::new(NoLetterE)]).with_policy(policy);
    let outcome = enforcer.run(&runner, &request, &Context::new()).await;
    let first = &outcome.attempts[0];
    assert!(
        first.cut.is_some(),
        "the first attempt was not cut: {first:?}"
    );
    let first_tokens = first.usage.expect("usage of the cut attempt").output_tokens;
    assert!(
        first_tokens <= 16,
        "{first_tokens} tokens before the cut, of {max_tokens}"
    );
    let reported: u64 = outcome
        .attempts
        .iter()
        .filter_map(|a| a.usage.map(|u| u.output_tokens))
        .sum();
    // Let a generation that was not stopped show itself.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let generated = runner.tokens_generated();
    assert!(
        generated <= reported + 2 * outcome.attempts.len() as u64,
        "the runner generated {generated} tokens, the attempts report {reported}"
    );
}
