//! The local-speed section of BENCHMARKS.md, from the figures alone.

use super::{Answer, ModelRun, Row, Setting, Side, Timing};
use crate::section::LOCAL_SPEED;
use crate::stats::median;
use std::fmt::Write as _;

/// The least generation rate the runner keeps, as a share of llama.cpp's own on the same
/// answer.
pub const TARGET_RATIO: f64 = 0.9;

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Runner => "enforce local runner, as shipped (AVX2)",
            Side::RunnerNative => "enforce local runner, built for this CPU",
            Side::Llama => "llama.cpp (node-llama-cpp)",
            Side::LlamaRunnerIsa => "llama.cpp (node-llama-cpp), AVX2 variant",
        }
    }
}

impl Answer {
    fn label(self) -> &'static str {
        match self {
            Answer::Text => "free text",
            Answer::CityGrammar => "city JSON, GBNF grammar",
        }
    }
}

/// How a generation rate is counted: per second of the clock, or per CPU-second.
type Rate = fn(&Timing) -> Option<f64>;
const WALL: Rate = Timing::generation_rate;
const CPU: Rate = Timing::generation_cpu_rate;

impl Row {
    fn generation_rates(&self, rate: Rate) -> Vec<f64> {
        self.timings.iter().filter_map(rate).collect()
    }

    fn prompt_rates(&self) -> Vec<f64> {
        self.timings.iter().map(|t| t.prompt_rate()).collect()
    }
}

impl ModelRun {
    fn row(&self, side: Side, answer: Answer) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.side == side && r.answer == answer)
    }

    /// `side`'s median generation rate over `reference`'s on `answer`, counted by `rate`.
    pub fn ratio(&self, side: Side, answer: Answer, reference: Side, rate: Rate) -> Option<f64> {
        let median_of = |side| {
            let rates = self.row(side, answer)?.generation_rates(rate);
            (!rates.is_empty()).then(|| median(&rates))
        };
        Some(median_of(side)? / median_of(reference)?)
    }
}

/// A build of the runner held against a build of llama.cpp: in the table's ratio columns
/// and in the verdict, most telling first.
struct Comparison {
    side: Side,
    reference: Side,
    /// Who generates, as the verdict's subject.
    subject: &'static str,
    /// The reference, as the verdict names it.
    against: &'static str,
}

const COMPARISONS: [Comparison; 3] = [
    Comparison {
        side: Side::RunnerNative,
        reference: Side::Llama,
        subject: "Built for this CPU (`-C target-cpu=native`), the local runner",
        against: "llama.cpp's best build",
    },
    Comparison {
        side: Side::Runner,
        reference: Side::LlamaRunnerIsa,
        subject: "As shipped (AVX2), the local runner",
        against: "llama.cpp's AVX2 variant",
    },
    Comparison {
        side: Side::Runner,
        reference: Side::Llama,
        subject: "As shipped (AVX2), the local runner",
        against: "llama.cpp's best build",
    },
];

/// Each model's free-text ratio of `side` to `reference`, and the same per CPU-second.
fn text_ratios(runs: &[ModelRun], side: Side, reference: Side) -> Vec<(&str, f64, Option<f64>)> {
    runs.iter()
        .filter_map(|r| {
            let wall = r.ratio(side, Answer::Text, reference, WALL)?;
            Some((
                r.model.as_str(),
                wall,
                r.ratio(side, Answer::Text, reference, CPU),
            ))
        })
        .collect()
}

fn listed(ratios: &[(&str, f64, Option<f64>)]) -> String {
    ratios
        .iter()
        .map(|(model, wall, cpu)| match cpu {
            Some(cpu) => format!("{model} {wall:.2}×, per CPU-second {cpu:.2}×"),
            None => format!("{model} {wall:.2}×"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The sentences that answer "is the runner at llama.cpp's speed?": one per comparison with
/// figures on free text, each naming the models below the target.
fn verdict(runs: &[ModelRun]) -> String {
    let sentences: Vec<String> = COMPARISONS
        .iter()
        .filter_map(|c| {
            let ratios = text_ratios(runs, c.side, c.reference);
            if ratios.is_empty() {
                return None;
            }
            let slow: Vec<&str> = ratios
                .iter()
                .filter(|(_, ratio, _)| *ratio < TARGET_RATIO)
                .map(|(model, _, _)| *model)
                .collect();
            let (subject, against, listed) = (c.subject, c.against, listed(&ratios));
            Some(if slow.is_empty() {
                format!("**{subject} generates at ≥ {TARGET_RATIO}× the rate of {against} on every model measured** (free text: {listed}).")
            } else {
                format!(
                    "**{subject} is below {TARGET_RATIO}× the rate of {against} on {}** (free text: {listed}).",
                    slow.join(", ")
                )
            })
        })
        .collect();
    if sentences.is_empty() {
        return "No model was measured on both sides, so there is no ratio to llama.cpp.".into();
    }
    sentences.join(" ")
}

fn rates_cell(rates: &[f64]) -> String {
    if rates.is_empty() {
        return "–".into();
    }
    let each = rates
        .iter()
        .map(|r| format!("{r:.1}"))
        .collect::<Vec<_>>()
        .join(" ");
    format!("{:.1} ({each})", median(rates))
}

/// A count that should be the same in every round: one figure, or each one when they differ.
fn counts_cell(counts: impl Iterator<Item = u64>) -> String {
    let mut counts: Vec<u64> = counts.collect();
    counts.dedup();
    counts
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn model_table(s: &mut String, run: &ModelRun) {
    let _ = writeln!(s, "### {}\n", run.model);
    s.push_str("| runner | answer | prompt tokens | prompt tokens/s | answer tokens | generation tokens/s | per CPU-second | generation × llama.cpp (per CPU-second) | × llama.cpp AVX2 (per CPU-second) |\n|---|---|---|---|---|---|---|---|---|\n");
    for answer in super::ANSWERS {
        for side in super::SIDES {
            let Some(row) = run.row(side, answer) else {
                continue;
            };
            let ratio = |reference| {
                if side == reference {
                    return "1".to_string();
                }
                if !COMPARISONS
                    .iter()
                    .any(|c| c.side == side && c.reference == reference)
                {
                    return String::new();
                }
                match (
                    run.ratio(side, answer, reference, WALL),
                    run.ratio(side, answer, reference, CPU),
                ) {
                    (Some(wall), Some(cpu)) => format!("**{wall:.2}** ({cpu:.2})"),
                    (Some(wall), None) => format!("**{wall:.2}**"),
                    _ => "–".into(),
                }
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                side.label(),
                answer.label(),
                counts_cell(row.timings.iter().map(|t| t.prompt_tokens)),
                rates_cell(&row.prompt_rates()),
                counts_cell(row.timings.iter().map(|t| t.tokens)),
                rates_cell(&row.generation_rates(WALL)),
                rates_cell(&row.generation_rates(CPU)),
                ratio(Side::Llama),
                ratio(Side::LlamaRunnerIsa),
            );
        }
    }
    if !run.failures.is_empty() {
        s.push_str("\nNot measured:\n\n");
        for failure in &run.failures {
            let _ = writeln!(s, "- {failure}");
        }
    }
    s.push('\n');
}

/// The whole section, between its markers.
pub fn render(setting: &Setting, runs: &[ModelRun]) -> String {
    let mut s = format!(
        "{}\n## The local runner beside llama.cpp\n\n",
        LOCAL_SPEED.begin
    );
    let _ = writeln!(
        s,
        "Generated by `{}` on {}; do not edit by hand. The run took {:.0} s on {}; load average before: {}, after: {}. **Measured under load** (the machine was shared with other work): absolute figures move with it, the ratios are what to read.\n",
        setting.command, setting.date, setting.seconds, setting.machine, setting.load_before, setting.load_after
    );
    let reference = match &setting.reference {
        Ok(version) => version.clone(),
        Err(why) => format!("not measured: {why}"),
    };
    let runner_isa = match &setting.runner_isa {
        Ok(()) => "measured".to_string(),
        Err(why) => format!("not measured: {why}"),
    };
    let native = match &setting.native {
        Ok(harness) => format!("measured with `{harness}`"),
        Err(why) => format!("not measured: {why}"),
    };
    let _ = writeln!(
        s,
        "enforce's local runner (`enforce-runner-local`, in process, {}; {}) and llama.cpp itself ({reference}) on the same GGUF and the same prompt in the model's chat template, {} thread(s), greedy sampling (temperature 0), at most {} tokens an answer, a fresh context per answer on every side. node-llama-cpp loads the best of its CPU variants of ggml for this CPU; the runner's llama.cpp is built without `target-cpu` for AVX2 (`GGML_NATIVE` off: SSE4.2, AVX, AVX2, F16C, FMA, BMI2), so the *AVX2 variant* rows ({runner_isa}) run node-llama-cpp with only ggml's `haswell` variant, the same instruction set, to tell the instruction set from the runner's own cost. The *built for this CPU* rows ({native}) time the same runner in a second build of the harness made with `RUSTFLAGS=\"-C target-cpu=native\"` (the Rust code for this CPU, llama.cpp with `GGML_NATIVE` on: what a user who builds enforce for their own CPU runs), a subprocess per answer that loads the model untimed, then times the answer as the in-process runner is timed; they are held against node-llama-cpp's best variant. *Prompt tokens/s*: prompt tokens / the time to the first answer token (making the context, reading the prompt, sampling one token). *Generation tokens/s*: answer tokens after the first / the time from the first to the last; *per CPU-second*: the same tokens / the CPU time the generation used meanwhile (the runner's generating thread, from the kernel's `schedstat`; the reference's node process, `process.cpuUsage()`), which other work on the machine stretches much less than the clock. {} rounds; each times every side one after the other, the side that goes first alternating; the median of the rounds, then each round's figure. The grammar rows hold the answer to the GBNF grammar of the city contract's JSON Schema (`examples/eval/enforce.yaml`, `validators.city`, as `json_schema_to_gbnf` writes it) on every side.\n",
        setting.runner_llama, setting.build, setting.threads, setting.max_tokens, setting.rounds
    );
    let _ = writeln!(s, "{}\n", verdict(runs));
    for run in runs {
        model_table(&mut s, run);
    }
    if !setting.commands.is_empty() {
        s.push_str("The commands of the subprocess sides (the first round's; `llama.mjs` is `crates/enforce-bench/src/local_speed/llama.mjs`, `local-speed-answer` the harness's hidden subcommand that times one answer of the local runner):\n\n```sh\n");
        for command in &setting.commands {
            s.push_str(command);
            s.push('\n');
        }
        s.push_str("```\n\n");
    }
    s.push_str(LOCAL_SPEED.end);
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::super::Timing;
    use super::*;

    fn timing(prompt_tokens: u64, first_s: f64, tokens: u64, rest_s: f64) -> Timing {
        Timing {
            prompt_tokens,
            tokens,
            first_s,
            rest_s,
            rest_cpu_s: Some(rest_s / 2.0),
        }
    }

    fn setting() -> Setting {
        Setting {
            command: "cargo xtask bench-peers --local-speed --gguf m.gguf".into(),
            date: "2026-01-02 03:04 UTC".into(),
            rounds: 2,
            threads: 1,
            max_tokens: 200,
            machine: "2 cores, a CPU".into(),
            load_before: "1.00 2.00 3.00".into(),
            load_after: "4.00 5.00 6.00".into(),
            seconds: 42.0,
            runner_llama: "llama.cpp X".into(),
            build: "build Z".into(),
            reference: Ok("node-llama-cpp Y".into()),
            runner_isa: Ok(()),
            native: Ok("target/native-cpu/dist/enforce-bench".into()),
            commands: vec!["node llama.mjs m.gguf".into()],
        }
    }

    /// A model whose runner generates `runner` tokens/s and llama.cpp `llama` on free text,
    /// two rounds each (11 tokens, the last 10 in 10 / rate seconds).
    fn run(model: &str, runner: [f64; 2], llama: [f64; 2]) -> ModelRun {
        let row = |side, rates: [f64; 2]| Row {
            side,
            answer: Answer::Text,
            timings: rates
                .iter()
                .map(|rate| timing(40, 0.5, 11, 10.0 / rate))
                .collect(),
        };
        ModelRun {
            model: model.into(),
            rows: vec![row(Side::Runner, runner), row(Side::Llama, llama)],
            failures: vec![],
        }
    }

    /// `run` with `side`'s free-text row at `rate` tokens/s, one round.
    fn with_side(mut run: ModelRun, side: Side, rate: f64) -> ModelRun {
        run.rows.push(Row {
            side,
            answer: Answer::Text,
            timings: vec![timing(40, 0.5, 11, 10.0 / rate)],
        });
        run
    }

    #[test]
    fn the_table_holds_medians_rounds_and_the_ratio() {
        let s = render(&setting(), &[run("a.gguf", [9.0, 11.0], [20.0, 20.0])]);
        assert!(s.starts_with(LOCAL_SPEED.begin) && s.trim_end().ends_with(LOCAL_SPEED.end));
        assert!(s.contains("### a.gguf"), "{s}");
        assert!(
            s.contains("| enforce local runner, as shipped (AVX2) | free text | 40 | 80.0 (80.0 80.0) | 11 | 10.0 (9.0 11.0) | 20.0 (18.0 22.0) | **0.50** (0.50) | – |"),
            "{s}"
        );
        assert!(
            s.contains("| llama.cpp (node-llama-cpp) | free text | 40 | 80.0 (80.0 80.0) | 11 | 20.0 (20.0 20.0) | 40.0 (40.0 40.0) | 1 |  |"),
            "{s}"
        );
        for part in [
            "cargo xtask bench-peers --local-speed --gguf m.gguf",
            "2026-01-02 03:04 UTC",
            "load average before: 1.00 2.00 3.00, after: 4.00 5.00 6.00",
            "Measured under load",
            "llama.cpp X",
            "build Z",
            "node-llama-cpp Y",
            "node llama.mjs m.gguf",
            "2 rounds",
            "*built for this CPU* rows (measured with `target/native-cpu/dist/enforce-bench`)",
        ] {
            assert!(s.contains(part), "{part} missing from {s}");
        }
    }

    #[test]
    fn the_avx2_reference_gets_its_own_ratio() {
        let both = with_side(
            run("a.gguf", [9.0, 11.0], [20.0, 20.0]),
            Side::LlamaRunnerIsa,
            12.5,
        );
        let s = render(&setting(), &[both]);
        assert!(
            s.contains(
                "| 10.0 (9.0 11.0) | 20.0 (18.0 22.0) | **0.50** (0.50) | **0.80** (0.80) |"
            ),
            "{s}"
        );
        assert!(
            s.contains("| llama.cpp (node-llama-cpp), AVX2 variant | free text | 40 | 80.0 (80.0) | 11 | 12.5 (12.5) | 25.0 (25.0) |  | 1 |"),
            "{s}"
        );
        assert!(
            s.contains("**As shipped (AVX2), the local runner is below 0.9× the rate of llama.cpp's AVX2 variant on a.gguf** (free text: a.gguf 0.80×, per CPU-second 0.80×)."),
            "{s}"
        );
    }

    #[test]
    fn the_build_for_this_cpu_is_held_against_the_best_build() {
        let all = with_side(
            with_side(
                run("a.gguf", [9.0, 11.0], [20.0, 20.0]),
                Side::LlamaRunnerIsa,
                10.0,
            ),
            Side::RunnerNative,
            19.0,
        );
        let s = render(&setting(), &[all]);
        assert!(
            s.contains("| enforce local runner, built for this CPU | free text | 40 | 80.0 (80.0) | 11 | 19.0 (19.0) | 38.0 (38.0) | **0.95** (0.95) |  |"),
            "{s}"
        );
        let native_row = s.find("built for this CPU | free text").unwrap();
        let best_row = s.find("| llama.cpp (node-llama-cpp) | free text").unwrap();
        assert!(s.find("as shipped (AVX2) | free text").unwrap() < native_row);
        assert!(native_row < best_row, "the runner's rows first: {s}");
        assert!(
            s.contains("**Built for this CPU (`-C target-cpu=native`), the local runner generates at ≥ 0.9× the rate of llama.cpp's best build on every model measured** (free text: a.gguf 0.95×, per CPU-second 0.95×). **As shipped (AVX2), the local runner generates at ≥ 0.9× the rate of llama.cpp's AVX2 variant on every model measured** (free text: a.gguf 1.00×, per CPU-second 1.00×). **As shipped (AVX2), the local runner is below 0.9× the rate of llama.cpp's best build on a.gguf** (free text: a.gguf 0.50×, per CPU-second 0.50×)."),
            "{s}"
        );
    }

    #[test]
    fn the_verdict_names_the_models_below_the_target() {
        let fast = with_side(
            run("fast.gguf", [1.0, 1.0], [20.0, 20.0]),
            Side::RunnerNative,
            19.0,
        );
        let slow = with_side(
            run("slow.gguf", [1.0, 1.0], [20.0, 20.0]),
            Side::RunnerNative,
            17.0,
        );
        let s = render(&setting(), std::slice::from_ref(&fast));
        assert!(s.contains("local runner generates at ≥ 0.9× the rate of llama.cpp's best build on every model measured** (free text: fast.gguf 0.95×, per CPU-second 0.95×)"), "{s}");
        let s = render(&setting(), &[fast, slow]);
        assert!(
            s.contains("local runner is below 0.9× the rate of llama.cpp's best build on slow.gguf** (free text: fast.gguf 0.95×, per CPU-second 0.95×; slow.gguf 0.85×, per CPU-second 0.85×)"),
            "{s}"
        );
    }

    #[test]
    fn a_missing_reference_says_why_and_gives_no_ratio() {
        let mut only_runner = run("a.gguf", [10.0, 10.0], [1.0, 1.0]);
        only_runner.rows.retain(|r| r.side == Side::Runner);
        only_runner.failures.push("Llama Text: node failed".into());
        let setting = Setting {
            reference: Err("skipped: npm not found".into()),
            native: Err("not asked for: `--native` adds it".into()),
            commands: vec![],
            ..setting()
        };
        let s = render(&setting, &[only_runner]);
        assert!(s.contains("not measured: skipped: npm not found"), "{s}");
        assert!(
            s.contains(
                "*built for this CPU* rows (not measured: not asked for: `--native` adds it)"
            ),
            "{s}"
        );
        assert!(
            s.contains("| 10.0 (10.0 10.0) | 20.0 (20.0 20.0) | – | – |"),
            "{s}"
        );
        assert!(s.contains("- Llama Text: node failed"), "{s}");
        assert!(s.contains("No model was measured on both sides"), "{s}");
        assert!(!s.contains("```"), "no subprocess commands: {s}");
    }
}
