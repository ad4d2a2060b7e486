//! CI gates: `--fail-under ARM=RATE` and `--max-tokens-per-valid ARM=N`, checked against the
//! summary once every output is written, so a failing gate still leaves the whole report.

use enforce_eval::summary::ArmSummary;
use std::str::FromStr;

/// `--fail-under ARM=RATE`: the arm's valid rate must be at least RATE.
#[derive(Debug, Clone, PartialEq)]
pub struct RateGate {
    /// The arm.
    pub arm: String,
    /// The lowest valid rate accepted, 0..=1.
    pub rate: f64,
}

/// `--max-tokens-per-valid ARM=N`: the arm's tokens (prompt + completion) per valid answer
/// must be at most N.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenGate {
    /// The arm.
    pub arm: String,
    /// The most tokens per valid answer accepted.
    pub tokens: f64,
}

fn split(text: &str) -> Result<(String, &str), String> {
    match text.rsplit_once('=') {
        Some((arm, value)) if !arm.trim().is_empty() && !value.trim().is_empty() => {
            Ok((arm.trim().to_string(), value.trim()))
        }
        _ => Err(format!("`{text}`: give ARM=VALUE, e.g. feedback=0.9")),
    }
}

impl FromStr for RateGate {
    type Err = String;

    /// `feedback=0.9` or `feedback=90%`.
    fn from_str(text: &str) -> Result<RateGate, String> {
        let (arm, value) = split(text)?;
        let (number, scale) = match value.strip_suffix('%') {
            Some(percent) => (percent.trim(), 100.0),
            None => (value, 1.0),
        };
        let rate = number
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite())
            .map(|r| r / scale)
            .ok_or_else(|| format!("`{text}`: `{value}` is not a rate (0.9 or 90%)"))?;
        if !(0.0..=1.0).contains(&rate) {
            return Err(format!(
                "`{text}`: a rate is from 0 to 1, or from 0% to 100% (0.9 or 90%)"
            ));
        }
        Ok(RateGate { arm, rate })
    }
}

impl FromStr for TokenGate {
    type Err = String;

    /// `feedback=400`.
    fn from_str(text: &str) -> Result<TokenGate, String> {
        let (arm, value) = split(text)?;
        let tokens = value
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t > 0.0)
            .ok_or_else(|| format!("`{text}`: `{value}` is not a positive number of tokens"))?;
        Ok(TokenGate { arm, tokens })
    }
}

/// The first gate naming an arm that is not in `arms`, as a usage error's message.
pub fn unknown_arm(rates: &[RateGate], tokens: &[TokenGate], arms: &[String]) -> Option<String> {
    let named = rates
        .iter()
        .map(|g| (g.arm.as_str(), "--fail-under"))
        .chain(
            tokens
                .iter()
                .map(|g| (g.arm.as_str(), "--max-tokens-per-valid")),
        );
    for (arm, flag) in named {
        if !arms.iter().any(|a| a == arm) {
            return Some(format!(
                "{flag} names the arm `{arm}`, which this eval does not run (its arms: {})",
                arms.join(", ")
            ));
        }
    }
    None
}

/// One message per gate the summary's arms do not meet; empty when all pass.
pub fn failures(arms: &[ArmSummary], rates: &[RateGate], tokens: &[TokenGate]) -> Vec<String> {
    let find = |name: &str| arms.iter().find(|a| a.arm == name);
    let mut failed = Vec::new();
    for gate in rates {
        let Some(arm) = find(&gate.arm) else { continue };
        if arm.valid.rate.rate < gate.rate {
            failed.push(format!(
                "arm `{}`: valid rate {:.1}% ({} of {}) is under --fail-under {:.1}%",
                arm.arm,
                arm.valid.rate.rate * 100.0,
                arm.valid.rate.k,
                arm.valid.rate.n,
                gate.rate * 100.0
            ));
        }
    }
    for gate in tokens {
        let Some(arm) = find(&gate.arm) else { continue };
        let limit = format!("--max-tokens-per-valid {}", gate.tokens);
        let measured = match (arm.prompt_tokens_per_valid, arm.completion_tokens_per_valid) {
            (Some(prompt), Some(completion)) => prompt + completion,
            _ if arm.valid.rate.k == 0 => {
                failed.push(format!("arm `{}`: no valid answer, over {limit}", arm.arm));
                continue;
            }
            _ => {
                failed.push(format!(
                    "arm `{}`: the runner reported no token usage, so {limit} cannot be met",
                    arm.arm
                ));
                continue;
            }
        };
        if measured > gate.tokens {
            failed.push(format!(
                "arm `{}`: {measured:.0} tokens per valid answer is over {limit}",
                arm.arm
            ));
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_fractions_or_percentages() {
        let gate: RateGate = "feedback=0.9".parse().expect("a fraction");
        assert_eq!(
            gate,
            RateGate {
                arm: "feedback".into(),
                rate: 0.9
            }
        );
        let gate: RateGate = "feedback+abort = 85%".parse().expect("a percentage");
        assert_eq!(gate.arm, "feedback+abort");
        assert!((gate.rate - 0.85).abs() < 1e-12);
        for bad in [
            "feedback=90",
            "feedback",
            "=0.5",
            "feedback=x",
            "feedback=-1%",
        ] {
            assert!(bad.parse::<RateGate>().is_err(), "{bad}");
        }
        let gate: TokenGate = "none=400".parse().expect("tokens");
        assert_eq!(gate.tokens, 400.0);
        assert!("none=0".parse::<TokenGate>().is_err());
    }

    #[test]
    fn an_arm_not_run_is_named() {
        let arms = vec!["none".to_string(), "feedback".to_string()];
        let rates = vec![RateGate {
            arm: "feedback".into(),
            rate: 0.5,
        }];
        assert_eq!(unknown_arm(&rates, &[], &arms), None);
        let tokens = vec![TokenGate {
            arm: "resample".into(),
            tokens: 9.0,
        }];
        let said = unknown_arm(&rates, &tokens, &arms).expect("resample is not run");
        assert!(
            said.contains("`resample`") && said.contains("none, feedback"),
            "{said}"
        );
    }
}
