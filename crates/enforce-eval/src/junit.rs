//! `junit.xml`: one test suite per arm, one test case per case × repeat; a failure is an
//! answer that is not valid, with its status and issue codes.

use super::trials::Trial;
use enforce_report::render::html::escape;
use std::fmt::Write as _;

/// The JUnit XML of `trials`: suites in the order of `arms`, test cases in the order of `cases`
/// (the dataset's ids), then by repeat.
pub fn render(arms: &[String], cases: &[String], trials: &[Trial]) -> String {
    let position = |id: &str| cases.iter().position(|c| c == id).unwrap_or(usize::MAX);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let all_failures = trials
        .iter()
        .filter(|t| !t.outcome.status.is_success())
        .count();
    let _ = writeln!(
        out,
        "<testsuites name=\"enforce eval\" tests=\"{}\" failures=\"{all_failures}\">",
        trials.len()
    );
    for arm in arms {
        let mut in_arm: Vec<&Trial> = trials.iter().filter(|t| &t.key.arm == arm).collect();
        in_arm.sort_by_key(|t| (position(&t.key.case), t.key.repeat));
        let failures = in_arm
            .iter()
            .filter(|t| !t.outcome.status.is_success())
            .count();
        let seconds: f64 = in_arm.iter().map(|t| t.outcome.total_us as f64 / 1e6).sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" time=\"{seconds:.3}\">",
            escape(arm),
            in_arm.len()
        );
        for t in in_arm {
            let name = format!("{} #{}", t.key.case, t.key.repeat + 1);
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
                escape(arm),
                escape(&name),
                t.outcome.total_us as f64 / 1e6
            );
            if t.outcome.status.is_success() {
                out.push_str("/>\n");
                continue;
            }
            let codes = t.outcome.codes();
            let message = if codes.is_empty() {
                t.outcome.summary()
            } else {
                format!("{}: {}", t.outcome.status, codes.join(", "))
            };
            let _ = writeln!(
                out,
                ">\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>",
                t.outcome.status,
                escape(&message),
                escape(&t.outcome.summary())
            );
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trials::TrialKey;

    fn trial(arm: &str, case: &str, status: &str, codes: &[&str]) -> Trial {
        let issues: Vec<serde_json::Value> = codes
            .iter()
            .map(|c| serde_json::json!({"severity": "error", "code": c, "message": "m", "validator": "v", "repairable": true}))
            .collect();
        let outcome = serde_json::from_value(serde_json::json!({
            "status": status, "stop_reason": {"reason": "retries_exhausted"}, "response": "<x>",
            "issues": issues, "warnings": [], "attempts": [], "total_us": 1500, "runner_us": 0,
        }))
        .expect("an outcome");
        Trial {
            key: TrialKey {
                arm: arm.into(),
                case: case.into(),
                repeat: 0,
                seed: 0,
            },
            profile: "p".into(),
            outcome,
            estimated_tokens: 0,
        }
    }

    #[test]
    fn one_case_per_trial_in_dataset_order_failures_name_the_codes() {
        let trials = [
            trial("a&b", "z", "passed", &[]),
            trial("a&b", "y", "unresolved", &["BAD_<THING>"]),
            trial("c", "z", "repaired", &[]),
        ];
        let xml = render(
            &["a&b".into(), "c".into()],
            &["z".into(), "y".into()],
            &trials,
        );
        assert!(xml.contains("<testsuites name=\"enforce eval\" tests=\"3\" failures=\"1\">"));
        assert!(xml.contains("<testsuite name=\"a&amp;b\" tests=\"2\" failures=\"1\""));
        let z = xml.find("name=\"z #1\"").expect("z");
        let y = xml.find("name=\"y #1\"").expect("y");
        assert!(z < y, "dataset order: {xml}");
        assert!(
            xml.contains("message=\"unresolved: BAD_&lt;THING&gt;\""),
            "{xml}"
        );
        assert_eq!(xml.matches("<failure ").count(), 1);
        assert_eq!(xml.matches("<testcase ").count(), 3);
    }
}
