//! The tables of an eval's summary, one function each: for the terminal and for the page.

use crate::summary::{Summary, STATUSES};
use enforce_report::render::table::Table;

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

/// Valid answers per arm, after each attempt.
pub fn arms(summary: &Summary) -> Table {
    let longest = summary.most_attempts();
    let mut headers = vec!["arm".to_string(), "trials".into(), "first attempt".into()];
    headers.extend((1..=longest).map(|k| format!("valid ≤{k} att.")));
    headers.push("valid".into());
    let clustered = summary.setup.repeats > 1;
    let mut note = "valid = passed or repaired; \"valid ≤k att.\" counts answers valid within k \
                    attempts"
        .to_string();
    if clustered {
        note.push_str(
            "; intervals count a case's repeats as one cluster (Wilson on the trials over the \
             design effect, deff)",
        );
    }
    let mut table = Table::new(
        "Valid answers per arm (95 % intervals)",
        &[],
        1..headers.len(),
    )
    .note(Some(note));
    if clustered {
        headers.push("deff".into());
        table.numbers = 1..headers.len();
    }
    table.headers = headers;
    for a in &summary.arms {
        let mut row = vec![
            a.arm.clone(),
            a.trials.to_string(),
            a.first_attempt_passed.rate.display(),
        ];
        row.extend(a.valid_after_attempts.iter().map(|r| r.rate.display()));
        row.push(a.valid.rate.display());
        if clustered {
            row.push(format!("{:.2}", a.valid.design_effect));
        }
        table.rows.push(row);
    }
    table
}

/// Outcomes per arm, by status.
pub fn outcomes(summary: &Summary) -> Table {
    let mut headers = vec!["arm"];
    headers.extend(STATUSES.iter().map(|s| s.as_str()));
    let mut table = Table::new("Outcomes per arm", &headers, 1..6);
    for a in &summary.arms {
        let mut row = vec![a.arm.clone()];
        row.extend(
            STATUSES
                .iter()
                .map(|s| a.outcomes.get(s.as_str()).copied().unwrap_or(0).to_string()),
        );
        table.rows.push(row);
    }
    table
}

/// Tokens and time per valid answer.
pub fn spend(summary: &Summary) -> Table {
    let mut table = Table::new(
        "Spend per valid answer",
        &[
            "arm",
            "attempts",
            "escalated",
            "prompt tok",
            "completion tok",
            "estimated tok",
            "prompt tok/valid",
            "completion tok/valid",
            "ms/valid",
        ],
        1..9,
    )
    .note(Some(
        "all tokens and time of the arm divided by its valid answers; escalated = attempts \
         the escalation model answered; estimated = counted from the chunks received, not \
         reported by the model"
            .into(),
    ));
    for a in &summary.arms {
        table.rows.push(vec![
            a.arm.clone(),
            a.attempts.to_string(),
            a.escalated_attempts.to_string(),
            a.prompt_tokens.to_string(),
            a.completion_tokens.to_string(),
            a.estimated_tokens.to_string(),
            opt(a.prompt_tokens_per_valid, 0),
            opt(a.completion_tokens_per_valid, 0),
            opt(a.wall_ms_per_valid, 1),
        ]);
    }
    table
}

/// Valid answers for the tokens spent, against blind resampling with the same tokens.
pub fn cost_matched(summary: &Summary) -> Table {
    let mut table = Table::new(
        "Cost-matched: valid answers for the tokens spent",
        &[
            "arm",
            "tokens",
            "valid",
            "valid/1k tok",
            "resample at equal tok",
            "its attempts",
            "valid − resample",
        ],
        1..7,
    )
    .note(Some(
        "tokens = prompt + completion; resample at equal tok = the valid answers blind \
         resampling would give with the arm's tokens, estimated from the run's own samples \
         (see `enforce eval --help`); its attempts = the attempts per trial those tokens buy"
            .into(),
    ));
    for a in &summary.arms {
        let baseline = a.cost.resample_at_equal_tokens;
        table.rows.push(vec![
            a.arm.clone(),
            (a.prompt_tokens + a.completion_tokens).to_string(),
            a.valid.rate.k.to_string(),
            opt(a.cost.valid_per_1k_tokens, 2),
            baseline.map_or("-".into(), |b| {
                format!("{:.1} ({:.0}%)", b.valid, b.rate * 100.0)
            }),
            opt(baseline.map(|b| b.attempts), 2),
            opt(baseline.map(|b| a.valid.rate.k as f64 - b.valid), 1),
        ]);
    }
    table
}

/// Issue codes on first attempts, and how often each arm fixed them.
pub fn codes(summary: &Summary) -> Table {
    let mut headers = vec!["code".to_string()];
    for a in &summary.arms {
        headers.push(format!("{}: first/fixed", a.arm));
    }
    let mut table = Table::new(
        "Issue codes on the first attempt, and how often each arm fixed them",
        &[],
        1..headers.len(),
    )
    .note(Some(
        "first = trials whose first attempt had the error; fixed = of those, valid at the end"
            .into(),
    ));
    table.headers = headers;
    for c in &summary.issue_codes {
        let mut row = vec![c.code.clone()];
        row.extend(
            c.arms
                .iter()
                .map(|a| format!("{}/{}", a.first_attempt, a.fixed)),
        );
        table.rows.push(row);
    }
    table
}

/// Every pair of arms: trial by trial, case by case, with Holm's adjusted p and the minimum
/// detectable effect.
pub fn pairs(summary: &Summary) -> Table {
    let mut table = Table::new(
        "Arms compared on the same trials",
        &[
            "a",
            "b",
            "paired",
            "both valid",
            "only a",
            "only b",
            "neither",
            "cases a/b better",
            "a − b",
            "p (sign test)",
            "p (Holm)",
            "MDE",
        ],
        2..12,
    )
    .note(Some(
        "p: the chance, if both arms were equally good, of cases favouring one arm at least \
         this unevenly (sign test over cases); p (Holm): adjusted for the number of pairs, read \
         it against 0.05; MDE: the smallest difference of valid rates this run would detect \
         with 80 % power (\"-\": too few cases to ever reach 0.05)"
            .into(),
    ));
    for p in &summary.pairs {
        let t = &p.test;
        table.rows.push(vec![
            p.a.clone(),
            p.b.clone(),
            p.paired.to_string(),
            p.both_valid.to_string(),
            p.only_a.to_string(),
            p.only_b.to_string(),
            p.neither.to_string(),
            format!("{}/{}", t.cases_a_better, t.cases_b_better),
            format!("{:+.0} pt", t.difference * 100.0),
            format!("{:.3}", t.p_value),
            format!("{:.3}", p.p_adjusted),
            t.minimum_detectable_effect
                .map_or("-".into(), |m| format!("{:.0} pt", m * 100.0)),
        ]);
    }
    table
}

/// What produced the numbers, one row per fact.
pub fn provenance(summary: &Summary) -> Table {
    let mut table = Table::new("Provenance", &["what", "value"], 0..0);
    let Some(p) = &summary.provenance else {
        return table;
    };
    let mut row = |what: &str, value: String| table.rows.push(vec![what.to_string(), value]);
    row("enforce", p.enforce_version.clone());
    row("runner", p.runner.kind.clone());
    if let Some(model) = &p.runner.model {
        row("model", model.clone());
    }
    if let Some(url) = &p.runner.base_url {
        row("base URL", url.clone());
    }
    if let Some(file) = &p.runner.model_file {
        row(
            "model file",
            format!("{} ({} bytes)", file.path, file.bytes),
        );
        row("model sha256", file.sha256.clone());
    }
    for (key, value) in &p.runner.settings {
        row(&format!("runner {key}"), value.to_string());
    }
    for (key, value) in &p.sampling {
        row(&format!("sampling {key}"), value.to_string());
    }
    row("seeds", format!("{} to {}", p.seeds.first, p.seeds.last));
    row("dataset digest", p.dataset_digest.clone());
    row(
        "config digest",
        p.config_digest.clone().unwrap_or_else(|| "-".into()),
    );
    for m in &p.machines {
        row(
            "machine",
            format!(
                "{} {}, {} CPU(s){}",
                m.os,
                m.arch,
                m.cpus.map_or("?".into(), |n| n.to_string()),
                m.cpu_model
                    .as_deref()
                    .map(|c| format!(", {c}"))
                    .unwrap_or_default()
            ),
        );
    }
    table
}

/// The tables of a summary.
pub struct Tables {
    /// Valid answers per arm.
    pub arms: Table,
    /// Outcomes per arm.
    pub outcomes: Table,
    /// Tokens and time.
    pub cost: Table,
    /// Valid answers for the tokens spent, against blind resampling.
    pub cost_matched: Table,
    /// Issue codes.
    pub codes: Table,
    /// Pairs of arms.
    pub pairs: Table,
    /// What produced the numbers.
    pub provenance: Table,
}

/// The tables: arms, outcomes, tokens and time, cost-matched, issue codes, pairs, provenance.
pub fn tables(summary: &Summary) -> Tables {
    Tables {
        arms: arms(summary),
        outcomes: outcomes(summary),
        cost: spend(summary),
        cost_matched: cost_matched(summary),
        codes: codes(summary),
        pairs: pairs(summary),
        provenance: provenance(summary),
    }
}

/// The summary as text tables, for the terminal.
pub fn text(summary: &Summary) -> String {
    let s = &summary.setup;
    let mut out = format!(
        "enforce eval: {} ({} case(s) × {} repeat(s), seed {}){}, profile {}, runner {}{}\n",
        s.dataset,
        s.cases,
        s.repeats,
        s.seed,
        s.shard
            .map(|shard| format!(", shard {shard}"))
            .unwrap_or_default(),
        s.profile,
        s.runner,
        s.model
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    );
    if let Some(p) = &summary.provenance {
        let machine = p.machines.first().map_or(String::new(), |m| {
            format!(", {} {} × {} CPU(s)", m.os, m.arch, m.cpus.unwrap_or(0))
        });
        out.push_str(&format!(
            "enforce {}, dataset {}, config {}{machine}\n",
            p.enforce_version,
            p.dataset_digest,
            p.config_digest.as_deref().unwrap_or("-"),
        ));
    }
    let t = tables(summary);
    for table in [t.arms, t.outcomes, t.cost, t.cost_matched, t.codes, t.pairs] {
        out.push('\n');
        enforce_report::render::table::write_text(&mut out, &table);
    }
    out
}
