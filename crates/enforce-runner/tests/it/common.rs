//! What several test modules share: collecting a streamed answer, and a validator with a
//! partial check that cuts an answer naming "Acme".

use enforce_core::Ask;
use enforce_core::{
    async_trait, Context, Issue, PartialCheck, Request, Runner, RunnerError, Severity, StreamEvent,
    Validation, Validator,
};
use futures_util::StreamExt;

/// Every event of a streamed ask, or the error that ended it.
pub async fn collect(
    runner: &dyn Runner,
    request: &Request,
) -> (Vec<StreamEvent>, Option<RunnerError>) {
    let mut stream = runner.ask(Ask::new(request).streamed());
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => return (events, Some(error)),
        }
    }
    (events, None)
}

/// The text deltas of a streamed answer.
pub fn texts(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Text(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// Forbids "Acme" once a character after it settles the word.
pub struct NoAcme;

struct NoAcmeCheck;

pub fn acme_issue() -> Issue {
    Issue::new(Severity::Error, "FORBIDDEN_TERM", "The text names 'Acme'.")
}

#[async_trait]
impl PartialCheck for NoAcmeCheck {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        let definite = prefix.match_indices("Acme").any(|(at, _)| {
            prefix[at + 4..]
                .chars()
                .next()
                .is_some_and(|c| !c.is_alphanumeric())
        });
        if definite {
            vec![acme_issue()]
        } else {
            Vec::new()
        }
    }
}

#[async_trait]
impl Validator for NoAcme {
    fn name(&self) -> &str {
        "no_acme"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains("Acme") {
            vec![acme_issue()]
        } else {
            Vec::new()
        })
    }
    fn partial_check<'a>(&'a self, _: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        Some(Box::new(NoAcmeCheck))
    }
}
