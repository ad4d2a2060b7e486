//! `reask: auto`: the re-ask strategy chosen from measured statistics.
//!
//! [`StrategyStats`] counts what each strategy achieved per model, profile and issue code (an
//! eval writes them, outcomes add to them). A [`ReaskChooser`], given to the enforcer with
//! [`Enforcer::with_chooser`](crate::Enforcer::with_chooser), picks each re-ask's strategy
//! when the policy says [`reask_auto`](crate::Policy::reask_auto); [`ThompsonChooser`] is
//! the one enforce ships: Thompson sampling over Beta posteriors of the rate of valid answers,
//! per token. The choice and its reason go into the attempt's audit
//! ([`Attempt::reask_choice`](crate::Attempt::reask_choice)).

use crate::outcome::ChoiceReason;
use crate::policy::Reask;
use crate::Outcome;

mod effect;
mod live;
mod stats;
mod thompson;

pub use crate::outcome::{ChosenBy, Compared};
pub use effect::{reask_effects, ReaskEffect, ReaskedAttempt};
pub use live::{LiveChooser, LiveStats};
pub use stats::{StatsError, StatsKey, StrategyStats, Tally, STATS_VERSION};
pub use thompson::{ThompsonChooser, ThompsonSettings};

/// Picks the strategy of one re-ask. One method, called by the loop once per re-ask of a
/// policy with [`reask_auto`](crate::Policy::reask_auto); it must not block (no I/O), and it
/// is called from concurrent runs.
pub trait ReaskChooser: Send + Sync + std::fmt::Debug {
    /// The strategy for the re-ask `input` describes, and why. It should be one of
    /// `input.candidates`; the loop takes the fallback's rung otherwise.
    fn choose(&self, input: &ChoiceInput<'_>) -> Choice;

    /// Told the outcome of an enforcement by the enforcer this chooser chose for (a service
    /// calls it once per concluded request): a chooser that learns adds it to its
    /// statistics ([`LiveChooser`]). By default, nothing.
    fn record(&self, outcome: &Outcome) {
        let _ = outcome;
    }
}

/// What a chooser is told about one re-ask.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ChoiceInput<'a> {
    /// The error codes of the answer the re-ask is about, sorted, without repeats.
    pub codes: &'a [&'a str],
    /// The strategies that apply to this request, the fallback's rung first.
    pub candidates: &'a [Reask],
    /// The rung of the fallback ladder for this re-ask.
    pub fallback: Reask,
    /// The number of the attempt the re-ask makes (2 for the first re-ask).
    pub attempt: u32,
    /// The request's `seed` when it carries one, else a digest of its messages: with the
    /// attempt number, what a chooser derives its randomness from, so that a choice depends
    /// on the request and not on what ran concurrently.
    pub request_key: u64,
}

impl<'a> ChoiceInput<'a> {
    /// A re-ask about an answer with `codes`, among `candidates`, with `fallback` the ladder's
    /// rung; attempt 2 of a request whose key is 0.
    pub fn new(codes: &'a [&'a str], candidates: &'a [Reask], fallback: Reask) -> Self {
        ChoiceInput {
            codes,
            candidates,
            fallback,
            attempt: 2,
            request_key: 0,
        }
    }

    /// The same re-ask as attempt `attempt` of the request with key `request_key`.
    pub fn of_request(mut self, attempt: u32, request_key: u64) -> Self {
        self.attempt = attempt;
        self.request_key = request_key;
        self
    }
}

/// A chooser's answer: the strategy, and the reason the audit records.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The strategy of the re-ask.
    pub strategy: Reask,
    /// Why.
    pub reason: ChoiceReason,
}

impl Choice {
    /// The fallback's rung, chosen `by` one of the fallback reasons, for an answer with `codes`.
    pub fn fallback(input: &ChoiceInput<'_>, by: ChosenBy) -> Self {
        Choice {
            strategy: input.fallback,
            reason: ChoiceReason {
                by,
                codes: input.codes.iter().map(|c| (*c).to_string()).collect(),
                compared: Vec::new(),
            },
        }
    }
}
