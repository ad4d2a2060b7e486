//! Every re-ask samples anew: a seeded model answers the same seed with the same answer, so a
//! re-ask that sent a failed attempt's seed would get the failed answer back.

use async_trait::async_trait;
use enforce_core::{
    policy::Reask, Context, Enforcer, Issue, Policy, Reply, Request, Runner, RunnerError, Status,
    Validation, Validator,
};
use enforce_core::{Ask, ReplyStream};
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// A model whose draw is decided by its seed: a seed it has seen gives the answer it gave
/// then, byte for byte; a new seed gives the next answer of its script. Like a local model,
/// it draws with its own configured seed (advanced by the request's `seed_offset`) when the
/// request carries none.
struct SeededModel {
    configured_seed: u64,
    script: Mutex<VecDeque<&'static str>>,
    drawn: Mutex<BTreeMap<u64, String>>,
    seeds: Mutex<Vec<u64>>,
}

impl SeededModel {
    fn new(script: &[&'static str]) -> Self {
        SeededModel {
            configured_seed: 7,
            script: Mutex::new(script.iter().copied().collect()),
            drawn: Mutex::new(BTreeMap::new()),
            seeds: Mutex::new(Vec::new()),
        }
    }

    fn draw(&self, request: &Request) -> Result<Reply, RunnerError> {
        let seed = match request.params.get("seed").and_then(|s| s.as_u64()) {
            Some(seed) => seed,
            None => self.configured_seed + request.seed_offset,
        };
        self.seeds.lock().unwrap().push(seed);
        let mut drawn = self.drawn.lock().unwrap();
        let text = match drawn.get(&seed) {
            Some(text) => text.clone(),
            None => {
                let next = self.script.lock().unwrap().pop_front().unwrap_or("nothing");
                drawn.insert(seed, next.to_string());
                next.to_string()
            }
        };
        Ok(Reply {
            seed: request.params.get("seed").is_none().then_some(seed),
            ..Reply::text(text)
        })
    }

    fn seeds(&self) -> Vec<u64> {
        self.seeds.lock().unwrap().clone()
    }
}

impl Runner for SeededModel {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async move { self.draw(ask.request) })
    }
}

/// An error unless the answer holds "title"; the same error every time.
pub(crate) struct NeedsTitle;

#[async_trait]
impl Validator for NeedsTitle {
    fn name(&self) -> &str {
        "needs_title"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains("title") {
            vec![]
        } else {
            vec![Issue::error("needs_title", "NO_TITLE", "Write a title.")]
        })
    }
}

const REASKS: [Reask; 4] = [
    Reask::Feedback,
    Reask::FeedbackFresh,
    Reask::Resample,
    Reask::Constrained,
];

#[tokio::test]
async fn no_reask_sends_a_failed_attempts_seed_whatever_the_strategy() {
    for reask in REASKS {
        let model = SeededModel::new(&["no heading", "a title"]);
        let mut request = crate::req();
        request.params.insert("seed".into(), json!(41));
        let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
            .with_policy(Policy::builder().reask(reask).build())
            .run(&model, &request, &Context::new())
            .await;
        assert_eq!(outcome.status, Status::Passed, "{reask:?}: {outcome:?}");
        assert_eq!(model.seeds(), vec![41, 42], "{reask:?}");
        let audited: Vec<_> = outcome.attempts.iter().map(|a| a.seed).collect();
        assert_eq!(audited, vec![Some(41), Some(42)], "{reask:?}");
    }
}

#[tokio::test]
async fn a_runners_own_seed_is_advanced_through_the_seed_offset_and_audited() {
    for reask in REASKS {
        let model = SeededModel::new(&["no heading", "a title"]);
        let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
            .with_policy(Policy::builder().reask(reask).build())
            .run(&model, &crate::req(), &Context::new())
            .await;
        assert_eq!(outcome.status, Status::Passed, "{reask:?}: {outcome:?}");
        assert_eq!(model.seeds(), vec![7, 8], "{reask:?}");
        let audited: Vec<_> = outcome.attempts.iter().map(|a| a.seed).collect();
        assert_eq!(
            audited,
            vec![Some(7), Some(8)],
            "the seeds the runner reported"
        );
    }
}
