//! [`ThompsonChooser`]: Thompson sampling over Beta posteriors of each strategy's rate of
//! valid answers, scored per token.

use super::{Choice, ChoiceInput, ChosenBy, Compared, ReaskChooser, StrategyStats, Tally};
use crate::outcome::ChoiceReason;
use crate::policy::Reask;
use rand::rngs::ChaCha8Rng;
use rand::SeedableRng;
use rand_distr::{Beta, Distribution};
use std::collections::BTreeMap;

/// How a [`ThompsonChooser`] chooses.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ThompsonSettings {
    /// The seed every choice's randomness derives from, with the request's key and the
    /// attempt number (default 0).
    pub seed: u64,
    /// Draw each rate from its posterior (default `false`): a strategy measured less gets
    /// tried in proportion to how likely it is the best. `false` takes the best posterior
    /// mean, always the same strategy for the same codes. Drawing pays only where the
    /// outcomes of the choices are added to the statistics chosen by (a [`LiveChooser`]
    /// told of them): over fixed statistics a draw away from the best mean buys no
    /// information and only costs.
    ///
    /// [`LiveChooser`]: super::LiveChooser
    pub explore: bool,
    /// Re-asks a strategy needs measured for every code of the answer before it is compared
    /// (default 5); where none has that many, the fallback ladder's rung is taken.
    pub min_attempts: u64,
    /// The bound on exploration (default 0.5): a strategy whose expected valid answers per
    /// token (posterior mean) is below this share of the best strategy's is not drawn, so
    /// exploring never takes a strategy known to be much worse.
    pub explore_within: f64,
}

impl Default for ThompsonSettings {
    fn default() -> Self {
        ThompsonSettings {
            seed: 0,
            explore: false,
            min_attempts: 5,
            explore_within: 0.5,
        }
    }
}

/// The chooser of `reask: auto` for one model and profile: per re-ask, among the candidate
/// strategies with at least [`min_attempts`](ThompsonSettings::min_attempts) re-asks
/// measured for every error code of the answer, the one with the most expected valid answers
/// per token. A strategy's rate is Beta(1 + valid, 1 + attempts − valid) over the re-asks
/// measured for those codes (summed over the codes); its cost the mean tokens those re-asks
/// spent. When a compared strategy has no token counts, rates are compared alone.
///
/// Deterministic: the randomness of each choice is derived from the configured seed, the
/// request's key and the attempt number, so the same request gets the same choices however
/// many run at once.
///
/// ```
/// use enforce_core::policy::Reask;
/// use enforce_core::strategy::{ChoiceInput, ReaskChooser, StatsKey, StrategyStats, Tally,
///                              ThompsonChooser, ThompsonSettings};
///
/// let mut stats = StrategyStats::default();
/// for (strategy, valid) in [(Reask::Feedback, 2), (Reask::Resample, 16)] {
///     let key = StatsKey { model: "m".into(), profile: "p".into(),
///                          code: "INVALID_JSON".into(), strategy };
///     stats.add(key, Tally { attempts: 20, valid, tokens: 2000, tokens_counted: 20,
///                            ..Tally::default() });
/// }
/// let chooser = ThompsonChooser::new(&stats, "m", "p", ThompsonSettings::default());
/// let candidates = [Reask::Feedback, Reask::Resample];
/// let choice = chooser.choose(&ChoiceInput::new(&["INVALID_JSON"], &candidates, Reask::Feedback));
/// assert_eq!(choice.strategy, Reask::Resample);
/// ```
#[derive(Debug, Clone)]
pub struct ThompsonChooser {
    /// The tallies of the model and profile, by (code, strategy).
    tallies: BTreeMap<(String, Reask), Tally>,
    settings: ThompsonSettings,
}

/// One candidate with enough data: its pooled tally.
struct Measured {
    strategy: Reask,
    tally: Tally,
}

impl ThompsonChooser {
    /// A chooser over the statistics of `model` under `profile` in `stats`.
    pub fn new(
        stats: &StrategyStats,
        model: &str,
        profile: &str,
        settings: ThompsonSettings,
    ) -> Self {
        let tallies = stats
            .iter()
            .filter(|(key, _)| key.model == model && key.profile == profile)
            .map(|(key, tally)| ((key.code.clone(), key.strategy), *tally))
            .collect();
        ThompsonChooser { tallies, settings }
    }

    /// The settings.
    pub fn settings(&self) -> &ThompsonSettings {
        &self.settings
    }

    /// The issue codes with any re-ask measured, sorted.
    pub fn codes(&self) -> Vec<&str> {
        let mut codes: Vec<&str> = self.tallies.keys().map(|(c, _)| c.as_str()).collect();
        codes.dedup();
        codes
    }

    /// What [`choose`](ReaskChooser::choose) takes with exploration off: the best posterior
    /// mean. For showing what the statistics say (`enforce config explain`).
    pub fn by_means(&self, input: &ChoiceInput<'_>) -> Choice {
        self.decide(input, false)
    }

    /// The candidates of `input` with enough re-asks measured for each of its codes, with
    /// their tallies pooled over the codes, in the candidates' order.
    fn measured(&self, input: &ChoiceInput<'_>) -> Vec<Measured> {
        let mut measured = Vec::new();
        for &strategy in input.candidates {
            let mut pooled = Tally::default();
            let enough = input.codes.iter().all(|code| {
                let key = ((*code).to_string(), strategy);
                let tally = self.tallies.get(&key).copied().unwrap_or_default();
                pooled.add(&tally);
                tally.attempts >= self.settings.min_attempts.max(1)
            });
            if enough && !input.codes.is_empty() {
                measured.push(Measured {
                    strategy,
                    tally: pooled,
                });
            }
        }
        measured
    }

    fn decide(&self, input: &ChoiceInput<'_>, explore: bool) -> Choice {
        let measured = self.measured(input);
        if measured.is_empty() {
            return Choice::fallback(input, ChosenBy::NoData);
        }
        let per_token = measured.iter().all(|m| m.tally.mean_tokens().is_some());
        let mut compared: Vec<Compared> = measured
            .iter()
            .map(|m| {
                let mean = posterior_mean(&m.tally);
                let tokens = m.tally.mean_tokens();
                Compared {
                    strategy: m.strategy,
                    attempts: m.tally.attempts,
                    valid: m.tally.valid.min(m.tally.attempts),
                    mean,
                    sampled: None,
                    tokens,
                    score: score(mean, tokens, per_token),
                }
            })
            .collect();
        if explore {
            self.draw(input, &mut compared, per_token);
        }
        let best = best_of(&compared);
        Choice {
            strategy: compared[best].strategy,
            reason: ChoiceReason {
                by: if explore {
                    ChosenBy::Sampled
                } else {
                    ChosenBy::Mean
                },
                codes: input.codes.iter().map(|c| (*c).to_string()).collect(),
                compared,
            },
        }
    }

    /// Replaces the score of each strategy within the exploration bound by one from a rate
    /// drawn from its posterior; the others keep their mean's score and cannot win.
    fn draw(&self, input: &ChoiceInput<'_>, compared: &mut [Compared], per_token: bool) {
        let best_mean = compared.iter().map(|c| c.score).fold(0.0, f64::max);
        let floor = best_mean * self.settings.explore_within.clamp(0.0, 1.0);
        let mut rng = self.rng(input);
        for candidate in compared.iter_mut() {
            if candidate.score < floor {
                // Out of the draw: below every drawn score that can win.
                candidate.score = -1.0;
                continue;
            }
            let (alpha, beta) = posterior(candidate.attempts, candidate.valid);
            // Both parameters are at least 1, so the distribution always exists.
            let Ok(distribution) = Beta::new(alpha, beta) else {
                continue;
            };
            let rate: f64 = distribution.sample(&mut rng);
            candidate.sampled = Some(rate);
            candidate.score = score(rate, candidate.tokens, per_token);
        }
    }

    /// The generator of one choice: from the seed, the request's key and the attempt.
    fn rng(&self, input: &ChoiceInput<'_>) -> ChaCha8Rng {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.settings.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&input.request_key.to_le_bytes());
        seed[16..20].copy_from_slice(&input.attempt.to_le_bytes());
        ChaCha8Rng::from_seed(seed)
    }
}

impl ReaskChooser for ThompsonChooser {
    fn choose(&self, input: &ChoiceInput<'_>) -> Choice {
        self.decide(input, self.settings.explore)
    }
}

/// The Beta posterior's parameters after `valid` of `attempts` re-asks, from a uniform prior.
fn posterior(attempts: u64, valid: u64) -> (f64, f64) {
    let valid = valid.min(attempts);
    (1.0 + valid as f64, 1.0 + (attempts - valid) as f64)
}

fn posterior_mean(tally: &Tally) -> f64 {
    let (alpha, beta) = posterior(tally.attempts, tally.valid);
    alpha / (alpha + beta)
}

/// Valid answers per 1,000 tokens at `rate`, or the rate when tokens are not compared.
fn score(rate: f64, tokens: Option<f64>, per_token: bool) -> f64 {
    match tokens {
        Some(tokens) if per_token && tokens > 0.0 => rate * 1000.0 / tokens,
        _ => rate,
    }
}

/// The index of the highest score; the first on a tie (the fallback's rung comes first).
fn best_of(compared: &[Compared]) -> usize {
    let mut best = 0;
    for (i, c) in compared.iter().enumerate() {
        if c.score > compared[best].score {
            best = i;
        }
    }
    best
}
