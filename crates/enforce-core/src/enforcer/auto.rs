//! `reask: auto` in the loop: which strategy a re-ask takes when the policy leaves it to the
//! enforcer's chooser.

use super::run::Run;
use super::steps::warn_once;
use super::{error_codes, seed_of, Enforcer, REASK_AUTO_NO_CHOOSER};
use crate::outcome::{fnv1a, ChoiceReason};
use crate::policy::Reask;
use crate::strategy::{Choice, ChoiceInput, ChosenBy};
use crate::{Issue, Request};

impl Enforcer {
    /// The strategy of re-ask `number` about an answer with `issues`: the fallback ladder's
    /// next rung, or with `reask: auto` the chooser's pick among the strategies that apply,
    /// with the reason for the audit.
    pub(super) fn strategy_for(
        &self,
        request: &Request,
        run: &mut Run<'_>,
        number: u32,
        issues: &[Issue],
    ) -> (Reask, Option<ChoiceReason>) {
        let rung = self.policy.reask.rung(run.rungs_used);
        run.rungs_used = run.rungs_used.saturating_add(1);
        let Some(auto) = &self.policy.reask_auto else {
            return (rung, None);
        };
        let codes = error_codes(issues);
        let constraint = !request.constraint_params.is_empty();
        let candidates = auto.candidates(rung, constraint, self.escalation.is_some());
        let input =
            ChoiceInput::new(&codes, &candidates, rung).of_request(number, request_key(request));
        let Some(chooser) = &self.chooser else {
            warn_once(
                run,
                REASK_AUTO_NO_CHOOSER,
                "The profile's `reask: auto` has no statistics to choose by (no \
                 `reask_auto.stats` file, or none given to this enforcer); the re-asks took \
                 the fallback ladder.",
            );
            return (
                rung,
                Some(Choice::fallback(&input, ChosenBy::NoChooser).reason),
            );
        };
        let choice = chooser.choose(&input);
        let strategy = if candidates.contains(&choice.strategy) {
            choice.strategy
        } else {
            rung
        };
        (strategy, Some(choice.reason))
    }

    /// Whether `reask: auto` may take `constrained`: then, as with a ladder that has the rung,
    /// the request's decoding constraint goes only with that strategy's asks (also while no
    /// chooser is given: the fallback ladder asks as it would beside the chooser).
    pub(super) fn auto_may_constrain(&self) -> bool {
        self.policy
            .reask_auto
            .as_ref()
            .is_some_and(|auto| auto.strategies.contains(&Reask::Constrained))
    }
}

/// What a choice's randomness derives from besides the seed: the request's `seed`, else a
/// digest of its messages.
fn request_key(request: &Request) -> u64 {
    seed_of(request).unwrap_or_else(|| {
        let mut text = String::new();
        for message in &request.messages {
            text.push_str(&message.content);
            text.push('\0');
        }
        fnv1a(&text)
    })
}
