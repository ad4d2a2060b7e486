//! `junit.xml`: one test suite per arm, one test case per case × repeat; a failure is an
//! answer that is not valid, with its status and issue codes.

use super::trials::Trial;
use crate::render::html::escape;
use std::fmt::Write as _;

/// The JUnit XML of `trials`, suites in the order of `arms`, cases sorted by case and repeat.
pub fn render(arms: &[String], trials: &[Trial]) -> String {
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
        in_arm.sort_by(|a, b| (&a.key.case, a.key.repeat).cmp(&(&b.key.case, b.key.repeat)));
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
