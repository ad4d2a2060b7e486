//! The chooser of `reask: auto` on its own: with clear data the better rate per token wins,
//! exploration draws a less measured strategy sometimes (the same one per request), within
//! its bound, or not at all; without enough data for every code the fallback's rung.

use crate::auto::{key, tally_of};
use enforce_core::policy::Reask;
use enforce_core::strategy::{
    ChoiceInput, ChosenBy, ReaskChooser, StrategyStats, Tally, ThompsonChooser, ThompsonSettings,
};

fn stats(rows: &[(&str, Reask, Tally)]) -> StrategyStats {
    let mut stats = StrategyStats::default();
    for (code, strategy, t) in rows {
        stats.add(key(code, *strategy), *t);
    }
    stats
}

const BOTH: [Reask; 2] = [Reask::Feedback, Reask::Resample];

fn settings(explore: bool) -> ThompsonSettings {
    let mut settings = ThompsonSettings::default();
    settings.explore = explore;
    settings
}

#[test]
fn with_clear_data_the_better_rate_per_token_wins_whatever_the_seed() {
    let stats = stats(&[
        ("INVALID_JSON", Reask::Feedback, tally_of(40, 4, 100)),
        ("INVALID_JSON", Reask::Resample, tally_of(40, 30, 100)),
    ]);
    let input = ChoiceInput::new(&["INVALID_JSON"], &BOTH, Reask::Feedback);
    for seed in 0..50 {
        let mut seeded = settings(true);
        seeded.seed = seed;
        let chooser = ThompsonChooser::new(&stats, "m", "p", seeded);
        let choice = chooser.choose(&input.of_request(2, seed * 7));
        assert_eq!(choice.strategy, Reask::Resample, "seed {seed}");
        assert_eq!(choice.reason.by, ChosenBy::Sampled);
    }
}

#[test]
fn tokens_decide_between_equal_rates() {
    // Same rate; feedback costs four times the tokens of a resample.
    let stats = stats(&[
        ("X", Reask::Feedback, tally_of(50, 25, 400)),
        ("X", Reask::Resample, tally_of(50, 25, 100)),
    ]);
    let chooser = ThompsonChooser::new(&stats, "m", "p", settings(false));
    let choice = chooser.choose(&ChoiceInput::new(&["X"], &BOTH, Reask::Feedback));
    assert_eq!(choice.strategy, Reask::Resample);
    let scores: Vec<f64> = choice.reason.compared.iter().map(|c| c.score).collect();
    assert!(scores[1] > scores[0] * 3.5, "{scores:?}");
}

#[test]
fn exploration_off_takes_the_best_mean() {
    // Resample's mean is higher, but it was measured less: with exploration off it is
    // still taken, on every request.
    let stats = stats(&[
        ("X", Reask::Feedback, tally_of(200, 80, 100)),
        ("X", Reask::Resample, tally_of(6, 3, 100)),
    ]);
    let chooser = ThompsonChooser::new(&stats, "m", "p", settings(false));
    for request in 0..20 {
        let input = ChoiceInput::new(&["X"], &BOTH, Reask::Feedback).of_request(2, request);
        let choice = chooser.choose(&input);
        assert_eq!(choice.strategy, Reask::Resample);
        assert_eq!(choice.reason.by, ChosenBy::Mean);
        assert!(choice.reason.compared.iter().all(|c| c.sampled.is_none()));
    }
}

#[test]
fn exploring_draws_a_less_measured_strategy_sometimes_and_repeats_itself_per_request() {
    let stats = stats(&[
        ("X", Reask::Feedback, tally_of(200, 80, 100)),
        ("X", Reask::Resample, tally_of(6, 2, 100)),
    ]);
    let chooser = ThompsonChooser::new(&stats, "m", "p", settings(true));
    let picks: Vec<Reask> = (0..200)
        .map(|request| {
            let input = ChoiceInput::new(&["X"], &BOTH, Reask::Feedback);
            chooser.choose(&input.of_request(2, request)).strategy
        })
        .collect();
    let resampled = picks.iter().filter(|s| **s == Reask::Resample).count();
    assert!(resampled > 0 && resampled < 200, "{resampled} of 200");
    // The same request, attempt and seed: the same choice.
    let again: Vec<Reask> = (0..200)
        .map(|request| {
            let input = ChoiceInput::new(&["X"], &BOTH, Reask::Feedback);
            chooser.choose(&input.of_request(2, request)).strategy
        })
        .collect();
    assert_eq!(picks, again);
}

#[test]
fn exploration_is_bounded_to_strategies_near_the_best() {
    // Feedback's mean is far below half of resample's: it is never drawn.
    let stats = stats(&[
        ("X", Reask::Feedback, tally_of(8, 0, 100)),
        ("X", Reask::Resample, tally_of(8, 8, 100)),
    ]);
    let chooser = ThompsonChooser::new(&stats, "m", "p", settings(true));
    for request in 0..300 {
        let input = ChoiceInput::new(&["X"], &BOTH, Reask::Feedback).of_request(3, request);
        let choice = chooser.choose(&input);
        assert_eq!(choice.strategy, Reask::Resample, "request {request}");
        assert_eq!(choice.reason.compared[0].sampled, None);
    }
}

#[test]
fn without_enough_data_for_every_code_the_fallback_rung_is_taken() {
    let stats = stats(&[
        ("X", Reask::Resample, tally_of(50, 40, 100)),
        ("Y", Reask::Resample, tally_of(4, 4, 100)),
    ]);
    let chooser = ThompsonChooser::new(&stats, "m", "p", settings(true));
    // Y has 4 re-asks measured, below the minimum of 5.
    let choice = chooser.choose(&ChoiceInput::new(&["X", "Y"], &BOTH, Reask::Feedback));
    assert_eq!(choice.strategy, Reask::Feedback);
    assert_eq!(choice.reason.by, ChosenBy::NoData);
    assert!(choice.reason.by.is_fallback());
    // X alone has data.
    let choice = chooser.choose(&ChoiceInput::new(&["X"], &BOTH, Reask::Feedback));
    assert_eq!(choice.strategy, Reask::Resample);
    // Another model's statistics are not this one's.
    let other = ThompsonChooser::new(&stats, "other", "p", settings(true));
    let choice = other.choose(&ChoiceInput::new(&["X"], &BOTH, Reask::Feedback));
    assert_eq!(choice.reason.by, ChosenBy::NoData);
}

#[test]
fn only_candidates_are_chosen() {
    let stats = stats(&[
        ("X", Reask::Feedback, tally_of(50, 10, 100)),
        ("X", Reask::Constrained, tally_of(50, 50, 100)),
    ]);
    let chooser = ThompsonChooser::new(&stats, "m", "p", settings(false));
    let choice = chooser.choose(&ChoiceInput::new(&["X"], &BOTH, Reask::Feedback));
    assert_eq!(choice.strategy, Reask::Feedback);
    let with = [Reask::Feedback, Reask::Constrained];
    let choice = chooser.choose(&ChoiceInput::new(&["X"], &with, Reask::Feedback));
    assert_eq!(choice.strategy, Reask::Constrained);
}

#[test]
fn without_token_counts_rates_are_compared_alone() {
    let mut cheap_but_poor = tally_of(50, 10, 1);
    cheap_but_poor.tokens_counted = 0;
    cheap_but_poor.tokens = 0;
    let stats = stats(&[
        ("X", Reask::Feedback, cheap_but_poor),
        ("X", Reask::Resample, tally_of(50, 30, 1000)),
    ]);
    let chooser = ThompsonChooser::new(&stats, "m", "p", settings(false));
    let choice = chooser.choose(&ChoiceInput::new(&["X"], &BOTH, Reask::Feedback));
    assert_eq!(choice.strategy, Reask::Resample);
    let c = &choice.reason.compared[1];
    assert!((c.score - c.mean).abs() < 1e-12, "{c:?}");
}
