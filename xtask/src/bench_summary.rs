//! Reads criterion's terminal output and condenses it to one line per benchmark.

/// One benchmark: its full id and criterion's median estimate as printed (e.g. `1.23 µs`).
#[derive(Debug, PartialEq)]
pub struct Estimate {
    pub id: String,
    pub median: String,
    pub change: Option<String>,
}

/// Extracts every `time: [low median high]` estimate with the benchmark id printed before it
/// (on the same line, or alone on the line above when the id is long).
pub fn parse(output: &str) -> Vec<Estimate> {
    let mut estimates = Vec::new();
    let mut last_id = String::new();
    for line in output.lines() {
        if let Some(at) = line.find("time:") {
            let before = line[..at].trim();
            let id = if before.is_empty() {
                last_id.clone()
            } else {
                before.to_string()
            };
            let inside = line[at..]
                .split_once('[')
                .and_then(|(_, rest)| rest.split_once(']'))
                .map(|(inside, _)| inside);
            let parts: Vec<&str> = inside.unwrap_or_default().split_whitespace().collect();
            // "low unit median unit high unit"
            if parts.len() == 6 {
                estimates.push(Estimate {
                    id,
                    median: format!("{} {}", parts[2], parts[3]),
                    change: None,
                });
            }
        } else if line.trim_start().starts_with("change:") {
            if let Some(last) = estimates.last_mut() {
                last.change = line.split_once('[').and_then(|(_, r)| {
                    r.split_once(']')
                        .map(|(c, _)| c.split_whitespace().nth(1).unwrap_or_default().to_string())
                });
            }
        } else if !line.starts_with(' ') && !line.trim().is_empty() {
            last_id = line.trim().to_string();
        }
    }
    estimates
}

/// A fixed-width table of the estimates.
pub fn render(estimates: &[Estimate]) -> String {
    if estimates.is_empty() {
        return "xtask bench: no criterion estimates found in the output".into();
    }
    let width = estimates.iter().map(|e| e.id.len()).max().unwrap_or(0);
    let mut out = format!(
        "Summary ({} benchmarks, median of criterion's estimate):\n",
        estimates.len()
    );
    for e in estimates {
        let change = e
            .change
            .as_deref()
            .map(|c| format!("  (change {c})"))
            .unwrap_or_default();
        out.push_str(&format!("  {:<width$}  {:>12}{change}\n", e.id, e.median));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ids_on_the_same_line_and_on_the_line_above() {
        let out = "\
short                   time:   [1.0000 µs 1.2000 µs 1.4000 µs]
a/very/long/benchmark/name/that/wraps
                        time:   [10.0 ns 11.5 ns 12.0 ns]
                        change: [-1.0% +2.5% +3.0%] (p = 0.01 < 0.05)
Found 2 outliers
";
        let e = parse(out);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].id, "short");
        assert_eq!(e[0].median, "1.2000 µs");
        assert_eq!(e[1].id, "a/very/long/benchmark/name/that/wraps");
        assert_eq!(e[1].median, "11.5 ns");
        assert_eq!(e[1].change.as_deref(), Some("+2.5%"));
        assert!(render(&e).contains("11.5 ns"));
    }
}
