//! Arms: the strategies an eval compares. Each is `+`-joined words that change only the
//! profile's policy (how to re-ask, when to repair, early abort).

use crate::EvalError;
use enforce_core::{
    policy::AutoReask, policy::FirstAttempt, policy::Ladder, policy::Reask, policy::RepairWhen,
    Policy,
};

/// The arms compared when none are named: one attempt, the three ways to re-ask most
/// contracts take, and repairs first.
pub const DEFAULT: &str = "none,resample,feedback,feedback+abort,repair-first";

/// The words an arm is made of, with what each means (for `--help` and errors).
pub const WORDS: [(&str, &str); 12] = [
    (
        "none",
        "no re-ask (max_retries 0); repairs still apply at the end",
    ),
    (
        "resample",
        "re-ask with the original prompt and the next seed",
    ),
    (
        "feedback",
        "re-ask with the failed answer and feedback naming its errors",
    ),
    (
        "fresh",
        "re-ask with the original prompt plus the feedback, without the failed answer",
    ),
    (
        "ladder",
        "answer freely first, then re-ask with constrained decoding (a plain resample where the contract gives no constraint), then with fresh samples, feedback last (reask: [constrained, resample, feedback])",
    ),
    (
        "reason-format",
        "every attempt, the first included, asks twice: a free answer without the decoding constraint, then that answer in the contract's format (first_attempt and reask: reason_then_format)",
    ),
    (
        "escalate",
        "re-ask with feedback first, then ask the escalation model (--escalate-model, or the profile's escalate_to) with feedback (reask: [feedback, escalate])",
    ),
    (
        "auto",
        "reask: auto: each re-ask takes the strategy the statistics of --stats-from FILE (learned by another eval, e.g. on other seeds) say pays best for the answer's issue codes; where they have no data, the profile's reask_auto fallback, else the ladder's rungs; repairs first, as reask: auto does by default",
    ),
    (
        "all-attempts",
        "make every attempt: no progress never ends the loop (stop_on_no_progress: false)",
    ),
    (
        "abort",
        "early abort on: cut a streamed answer at a definite error (off otherwise)",
    ),
    (
        "repair-first",
        "apply deterministic repairs before spending a re-ask",
    ),
    (
        "constrained",
        "constrain decoding to the profile's contract (`decode: constrained`: a grammar, a strict JSON Schema) where the runner can",
    ),
];

/// One arm: its name as given and the policy changes it makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arm {
    /// The arm as written (`feedback+abort`).
    pub name: String,
    /// `false` for `none`: the first attempt is the only one.
    pub reasks: bool,
    /// How each re-ask asks.
    pub reask: Ladder,
    /// No progress on the last rung ends the loop (`false` with `all-attempts`).
    pub stop_on_no_progress: bool,
    /// When repairs run.
    pub repair: RepairWhen,
    /// Early abort.
    pub early_abort: bool,
    /// Constrained decoding, as `decode: constrained` asks for it.
    pub constrained: bool,
    /// How the first attempt asks.
    pub first_attempt: FirstAttempt,
    /// `reask: auto`: a chooser picks each re-ask's strategy from learned statistics (the
    /// eval's `stats_from`); [`reask`](Self::reask) is unused, the profile's ladder is the
    /// fallback.
    pub auto: bool,
}

impl Arm {
    /// Parses one arm, e.g. `feedback+abort`.
    pub(crate) fn parse(text: &str) -> Result<Arm, String> {
        let name = text.trim();
        if name.is_empty() {
            return Err(format!(
                "an empty arm in --arms (valid words: {})",
                word_list()
            ));
        }
        let mut none = false;
        let mut reask: Option<(&str, Ladder)> = None;
        let mut stop_on_no_progress = true;
        let mut repair = RepairWhen::Last;
        let mut early_abort = false;
        let mut constrained = false;
        let mut first_attempt = FirstAttempt::Direct;
        let mut auto = false;
        for word in name.split('+').map(str::trim) {
            let set_reask = |current: &mut Option<(&str, Ladder)>, w, r: Ladder| match current {
                Some((other, _)) => Err(format!(
                    "arm `{name}`: `{other}` and `{w}` are two ways to re-ask; pick one"
                )),
                None => {
                    *current = Some((w, r));
                    Ok(())
                }
            };
            match word {
                "none" => none = true,
                "resample" => set_reask(&mut reask, "resample", Reask::Resample.into())?,
                "feedback" => set_reask(&mut reask, "feedback", Reask::Feedback.into())?,
                "fresh" => set_reask(&mut reask, "fresh", Reask::FeedbackFresh.into())?,
                "ladder" => set_reask(&mut reask, "ladder", constrained_resample_feedback())?,
                "reason-format" => {
                    set_reask(&mut reask, "reason-format", Reask::ReasonThenFormat.into())?;
                    first_attempt = FirstAttempt::ReasonThenFormat;
                }
                "escalate" => set_reask(
                    &mut reask,
                    "escalate",
                    rungs(&[Reask::Feedback, Reask::Escalate]),
                )?,
                "auto" => {
                    set_reask(&mut reask, "auto", Ladder::default())?;
                    auto = true;
                    // As `reask: auto` repairs first unless a profile says otherwise: a repair
                    // that makes the answer clean costs no tokens.
                    repair = RepairWhen::First;
                }
                "all-attempts" => stop_on_no_progress = false,
                "abort" => early_abort = true,
                "repair-first" => repair = RepairWhen::First,
                "constrained" => constrained = true,
                other => {
                    return Err(format!(
                        "arm `{name}`: unknown word `{other}` (valid words: {})",
                        word_list()
                    ))
                }
            }
        }
        if constrained
            && reask
                .as_ref()
                .is_some_and(|(_, r)| r.rungs().contains(&Reask::Constrained))
        {
            return Err(format!(
                "arm `{name}`: `ladder` constrains its re-asks and answers freely first; every attempt constrained is the arm `constrained` (with another way to re-ask, e.g. `constrained+resample`)"
            ));
        }
        if none {
            if let Some((w, _)) = reask {
                return Err(format!(
                    "arm `{name}`: `none` makes no re-ask, so `{w}` cannot apply"
                ));
            }
            if early_abort {
                return Err(format!(
                    "arm `{name}`: `none` makes no re-ask, and early abort cuts only an answer a re-ask follows"
                ));
            }
        }
        Ok(Arm {
            name: name.to_string(),
            reasks: !none,
            // `abort` or `repair-first` alone re-ask the default way.
            reask: reask.map_or_else(|| Reask::Feedback.into(), |(_, r)| r),
            stop_on_no_progress,
            repair,
            early_abort,
            constrained,
            first_attempt,
            auto,
        })
    }

    /// Whether a re-ask of this arm asks the escalation model.
    pub fn escalates(&self) -> bool {
        self.reasks && self.reask.rungs().contains(&Reask::Escalate)
    }

    /// Parses a comma-separated list, e.g. `none,feedback+abort`; names must not repeat.
    /// [`EvalError::Input`] names the arm and the word at fault, and lists the valid words.
    pub fn parse_list(text: &str) -> Result<Vec<Arm>, EvalError> {
        let mut arms: Vec<Arm> = Vec::new();
        for part in text.split(',') {
            let arm = Arm::parse(part).map_err(EvalError::Input)?;
            if arms.iter().any(|a| a.name == arm.name) {
                return Err(EvalError::Input(format!(
                    "arm `{}` is listed twice",
                    arm.name
                )));
            }
            arms.push(arm);
        }
        Ok(arms)
    }

    /// The profile's policy with this arm's changes.
    pub fn policy(&self, profile: &Policy) -> Policy {
        let mut policy = profile.clone();
        if !self.reasks {
            policy.max_retries = 0;
        }
        if self.auto {
            // The profile's own `reask_auto` (its strategies, its fallback ladder) when it has
            // one; otherwise every strategy, with `reask: auto`'s default fallback, as a
            // profile with `reask: auto` and no `fallback` has.
            let mut auto = match &profile.reask_auto {
                Some(own) => own.clone(),
                None => {
                    policy.reask = AutoReask::default_fallback(self.constrained);
                    AutoReask::default()
                }
            };
            if self.constrained {
                // Every attempt is constrained by rule: `constrained` would be a resample.
                auto.strategies.retain(|s| *s != Reask::Constrained);
            }
            policy.reask_auto = Some(auto);
        } else {
            policy.reask = self.reask.clone();
            // The arm's strategy is the one measured: a profile's `reask: auto` would choose
            // another.
            policy.reask_auto = None;
        }
        policy.stop_on_no_progress = self.stop_on_no_progress;
        policy.repair = self.repair;
        policy.early_abort = self.early_abort;
        policy.first_attempt = self.first_attempt;
        policy
    }
}

/// The `ladder` arm's rungs, ordered by what paid on small models: the format fixed by
/// constrained decoding, then fresh draws, feedback last (`reask: auto`'s default fallback).
fn constrained_resample_feedback() -> Ladder {
    AutoReask::default_fallback(false)
}

/// A ladder of `rungs` (never empty here).
fn rungs(rungs: &[Reask]) -> Ladder {
    Ladder::new(rungs.to_vec()).unwrap_or_default()
}

fn word_list() -> String {
    WORDS.iter().map(|(w, _)| *w).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm_measures_its_own_strategy_even_on_a_profile_that_chooses() {
        let mut base = Policy::builder().max_retries(2).build();
        base.reask_auto = Some(Default::default());
        let arm = &Arm::parse_list("resample").unwrap()[0];
        let policy = arm.policy(&base);
        assert!(policy.reask_auto.is_none());
        assert_eq!(policy.reask.rungs(), [Reask::Resample]);
    }

    #[test]
    fn the_auto_arm_repairs_first_and_falls_back_as_reask_auto_does() {
        let base = Policy::builder()
            .max_retries(2)
            .reask(Reask::Resample)
            .build();
        let arm = Arm::parse("auto").expect("auto");
        assert!(arm.auto && !arm.escalates());
        let policy = arm.policy(&base);
        // A profile without `reask: auto`: its default fallback, and repairs first.
        assert_eq!(
            policy.reask.rungs(),
            [Reask::Constrained, Reask::Resample, Reask::Feedback]
        );
        assert_eq!(policy.repair, RepairWhen::First);
        let auto = policy.reask_auto.expect("reask: auto");
        assert!(auto.strategies.contains(&Reask::Constrained));
        // A profile with `reask: auto` keeps its own strategies and fallback ladder.
        let mut chooses = base.clone();
        chooses.reask_auto = Some(enforce_core::policy::AutoReask::among([Reask::Feedback]));
        let policy = arm.policy(&chooses);
        assert_eq!(policy.reask.rungs(), [Reask::Resample]);
        assert_eq!(
            policy.reask_auto.expect("auto").strategies,
            [Reask::Feedback]
        );
        // Every attempt constrained: no bet on `constrained`, no such rung to fall back to.
        let constrained = Arm::parse("auto+constrained").expect("auto combines");
        let policy = constrained.policy(&base);
        assert_eq!(policy.reask.rungs(), [Reask::Resample, Reask::Feedback]);
        let strategies = policy.reask_auto.expect("auto").strategies;
        assert!(!strategies.contains(&Reask::Constrained), "{strategies:?}");
        assert!(Arm::parse("auto+feedback")
            .expect_err("two")
            .contains("pick one"));
        assert!(Arm::parse("none+auto").is_err());
    }

    #[test]
    fn every_word_parses_into_its_policy() {
        let base = Policy::builder().max_retries(3).early_abort(true).build();
        let cases = [
            ("none", 0, Reask::Feedback, RepairWhen::Last, false),
            ("resample", 3, Reask::Resample, RepairWhen::Last, false),
            ("feedback", 3, Reask::Feedback, RepairWhen::Last, false),
            ("fresh", 3, Reask::FeedbackFresh, RepairWhen::Last, false),
            ("feedback+abort", 3, Reask::Feedback, RepairWhen::Last, true),
            ("abort", 3, Reask::Feedback, RepairWhen::Last, true),
            ("repair-first", 3, Reask::Feedback, RepairWhen::First, false),
            (
                "resample + repair-first",
                3,
                Reask::Resample,
                RepairWhen::First,
                false,
            ),
            (
                "none+repair-first",
                0,
                Reask::Feedback,
                RepairWhen::First,
                false,
            ),
            ("ladder", 3, Reask::Constrained, RepairWhen::Last, false),
        ];
        for (text, retries, reask, repair, abort) in cases {
            let policy = Arm::parse(text).expect(text).policy(&base);
            assert_eq!(policy.max_retries, retries, "{text}");
            assert_eq!(policy.reask.rung(0), reask, "{text}");
            assert_eq!(policy.repair, repair, "{text}");
            assert_eq!(policy.early_abort, abort, "{text}");
        }
    }

    #[test]
    fn constrained_combines_with_the_other_words() {
        assert!(!Arm::parse("feedback").unwrap().constrained);
        let arm = Arm::parse("constrained+resample").unwrap();
        assert!(arm.constrained);
        assert_eq!(arm.reask, Reask::Resample.into());
        let alone = Arm::parse("none+constrained").unwrap();
        assert!(alone.constrained && !alone.reasks);
    }

    #[test]
    fn bad_arms_are_clear_errors() {
        let err = Arm::parse("feedbak").expect_err("typo");
        assert!(err.contains("unknown word `feedbak`"), "{err}");
        for (w, _) in WORDS {
            assert!(err.contains(w), "{err} lists {w}");
        }
        assert!(Arm::parse("resample+feedback")
            .expect_err("two")
            .contains("pick one"));
        assert!(Arm::parse("none+feedback").is_err());
        assert!(Arm::parse("none+abort").is_err());
        assert!(Arm::parse_list("none,,feedback").is_err());
        assert!(Arm::parse_list("none,none")
            .expect_err("twice")
            .to_string()
            .contains("twice"));
        let arms = Arm::parse_list("none,resample,feedback,feedback+abort,repair-first")
            .expect("the documented list");
        assert_eq!(arms.len(), 5);
        assert!(Arm::parse("ladder+resample")
            .expect_err("two")
            .contains("pick one"));
    }

    #[test]
    fn reason_format_reasons_first_from_the_first_attempt_and_escalate_climbs_to_it() {
        let base = Policy::default();
        let policy = Arm::parse("reason-format").expect("word").policy(&base);
        assert_eq!(policy.first_attempt, FirstAttempt::ReasonThenFormat);
        assert_eq!(policy.reask.rungs(), [Reask::ReasonThenFormat]);
        let constrained = Arm::parse("reason-format+constrained").expect("combined");
        assert!(constrained.constrained);
        // Any other arm leaves the first attempt direct, whatever the profile says.
        let profile = Policy::builder()
            .first_attempt(FirstAttempt::ReasonThenFormat)
            .build();
        let policy = Arm::parse("feedback").expect("word").policy(&profile);
        assert_eq!(policy.first_attempt, FirstAttempt::Direct);
        let arm = Arm::parse("escalate").expect("word");
        assert!(arm.escalates());
        assert_eq!(
            arm.policy(&base).reask.rungs(),
            [Reask::Feedback, Reask::Escalate]
        );
        assert!(!Arm::parse("ladder").expect("word").escalates());
        assert!(Arm::parse("escalate+resample")
            .expect_err("two")
            .contains("pick one"));
    }

    #[test]
    fn the_ladder_arm_climbs_from_constrained_to_resample_to_feedback() {
        let base = Policy::default();
        let arm = Arm::parse("ladder").expect("ladder");
        // The arm constrains only its re-asks: the loop's rung does, not `decode`.
        assert!(!arm.constrained);
        let policy = arm.policy(&base);
        assert_eq!(
            policy.reask.rungs(),
            [Reask::Constrained, Reask::Resample, Reask::Feedback]
        );
        assert!(policy.stop_on_no_progress);
        let err = Arm::parse("ladder+constrained").expect_err("every attempt or the re-asks");
        assert!(err.contains("every attempt constrained"), "{err}");
        let policy = Arm::parse("ladder+all-attempts")
            .expect("combined")
            .policy(&base);
        assert!(!policy.stop_on_no_progress);
    }
}
