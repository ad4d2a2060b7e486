//! Scenario 4, streaming: what cutting a failing generation early saves, what `draft` mode costs
//! in time to the first visible byte, and whether hundreds of concurrent streams arrive whole.
//!
//! Everything runs in this process: the paced mock upstream of `enforce-testkit` (one token per
//! chunk, `tokens_per_sec` of them a second), `enforce serve`'s server with the OpenAI runner in
//! front of it, and the client. Three failures, each answered right once the feedback names its
//! code: a forbidden term near the start, broken JSON near the start, and a missing step marker
//! (decidable only at the end).

use crate::stats::median;
use enforce_core::{Enforcer, Policy, Validator};
use enforce_documents::step_marker::StepMarker;
use enforce_runner::{OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_server::{Model, ModelOptions, Server, ServerConfig, StreamMode};
use enforce_testkit::{MockOpenAi, MockScript, Then};
use enforce_validators::json::JsonValidator;
use enforce_validators::terms::{Term, Terms};
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The scenario's knobs.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct StreamArgs {
    /// Tokens (chunks) the paced upstream writes a second.
    #[arg(long, default_value_t = 50)]
    pub tokens_per_sec: u32,
    /// Tokens in one answer.
    #[arg(long, default_value_t = 600)]
    pub answer_tokens: usize,
    /// Requests per case and setting (the p50 is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Concurrent streams in the integrity check.
    #[arg(long, default_value_t = 512)]
    pub concurrent: usize,
}

/// One failure case, with early abort off and on.
#[derive(Debug, Serialize)]
pub struct CaseFigures {
    pub case: &'static str,
    pub off_valid_answer_ms_p50: f64,
    pub on_valid_answer_ms_p50: f64,
    pub off_tokens_per_valid_answer: f64,
    pub on_tokens_per_valid_answer: f64,
    /// Tokens of the valid answer itself (generated either way).
    pub valid_answer_tokens: f64,
    pub time_ratio: f64,
    pub token_ratio: f64,
    /// Tokens spent on failing attempts, off / on.
    pub wasted_token_ratio: f64,
}

/// The whole scenario.
#[derive(Debug, Serialize)]
pub struct StreamFigures {
    pub tokens_per_sec: u32,
    pub answer_tokens: usize,
    pub runs: usize,
    pub cases: Vec<CaseFigures>,
    /// Time to the first streamed byte of the answer, asking the mock directly.
    pub direct_ttft_ms_p50: f64,
    /// Time to the first visible byte (`reasoning_content`) through the proxy in `draft` mode.
    pub draft_first_byte_ms_p50: f64,
    pub draft_added_ms: f64,
    /// Concurrent `draft` streams whose drafts and answer arrived whole and in order.
    pub concurrent_streams: usize,
    pub concurrent_intact: usize,
}

/// ~4 characters a token: `n` tokens of prose.
fn words(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("w{:02} ", i % 100)).collect()
}

/// One failure case: an invalid answer, the valid one, the validator that tells them apart and
/// the code its feedback names.
struct Case {
    name: &'static str,
    invalid: Vec<String>,
    valid: Vec<String>,
    validator: Box<dyn Validator>,
    code: &'static str,
}

/// The three failures, each answer `tokens` chunks long.
fn cases(tokens: usize) -> Vec<Case> {
    let body = |head: &str, tail: &str| {
        let mut t = vec![head.to_string()];
        t.extend(words(tokens.saturating_sub(2)));
        t.push(tail.to_string());
        t
    };
    let terms = Terms::builder("wording")
        .forbid(Term::new("guaranteed").code("FORBIDDEN_TERM"))
        .build()
        .expect("terms");
    // A JSON string holding the words: valid, or broken right after the opening.
    let json_answer = |broken: bool| {
        let mut t = vec![if broken {
            "{\"a\": tru x, \"b\": \""
        } else {
            "{\"a\": true, \"b\": \""
        }
        .to_string()];
        t.extend(words(tokens.saturating_sub(2)));
        t.push("\"}".to_string());
        t
    };
    vec![
        Case {
            name: "forbidden term near the start",
            invalid: body("This is guaranteed: ", "."),
            valid: body("This should work: ", "."),
            validator: Box::new(terms),
            code: "FORBIDDEN_TERM",
        },
        Case {
            name: "broken JSON near the start",
            invalid: json_answer(true),
            valid: json_answer(false),
            validator: Box::new(JsonValidator::new("json").bare(true)),
            code: "INVALID_JSON",
        },
        Case {
            name: "missing step marker (decided at the end)",
            invalid: body("Here is why: ", "."),
            valid: body("Here is why: ", "\n<!-- STEP: why -->"),
            validator: Box::new(
                StepMarker::new(
                    "step_marker",
                    enforce_documents::step_marker::DEFAULT_STEPS
                        .iter()
                        .copied(),
                )
                .expect("step marker"),
            ),
            code: "MISSING_STEP_MARKER",
        },
    ]
}

/// A mock that answers `invalid` until the feedback names `code`, one token per chunk.
async fn mock(
    invalid: &[String],
    valid: &[String],
    code: &str,
    gap: Duration,
) -> anyhow::Result<MockOpenAi> {
    let chunks = invalid.len().max(valid.len());
    let script = MockScript::new()
        .then(Then::FailFirst {
            invalid: invalid.concat(),
            valid: valid.concat(),
            marker: code.to_string(),
        })
        .stream_chunks(chunks, gap)
        // Without early abort the loop asks for whole answers: they take as long to write.
        .pace_whole_answers(true);
    Ok(MockOpenAi::start(script).await?)
}

async fn proxy(
    upstream: &str,
    validator: Box<dyn Validator>,
    early_abort: bool,
    mode: StreamMode,
) -> anyhow::Result<String> {
    let runner = OpenAiRunner::new(OpenAiConfig {
        base_url: upstream.to_string(),
        model: "mock-model".into(),
        timeout_secs: 600.0,
        retry: RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        },
        ..OpenAiConfig::default()
    })?;
    let enforcer = Enforcer::new(vec![validator]).with_policy(
        Policy::builder()
            .max_retries(2)
            .early_abort(early_abort)
            .build(),
    );
    let server = Server::builder(ServerConfig {
        max_concurrent: 4096,
        request_timeout: Duration::from_secs(900),
        ..ServerConfig::default()
    })
    .model(
        Model::new("m", Arc::new(runner), Arc::new(enforcer)).with_options(ModelOptions {
            stream_mode: mode,
            ..ModelOptions::default()
        }),
    )
    .build()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(server.serve(listener, std::future::pending()));
    Ok(format!("http://{addr}/v1/chat/completions"))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(4096)
        .build()
        .expect("client")
}

fn body(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "Go."}]})
}

/// Time to the first SSE data line whose JSON has `delta.<field>`.
async fn first_byte(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    field: &str,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut response = client
        .post(url)
        .json(&json!({"model": model, "stream": true,
                      "messages": [{"role": "user", "content": "Go."}]}))
        .send()
        .await?;
    let needle = format!("\"{field}\":\"");
    let mut seen = String::new();
    while let Some(chunk) = response.chunk().await? {
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if seen.contains(&needle) {
            return Ok(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    anyhow::bail!("no `{field}` delta in the stream")
}

/// Runs the scenario.
pub async fn run(args: StreamArgs) -> anyhow::Result<StreamFigures> {
    let gap = Duration::from_secs_f64(1.0 / f64::from(args.tokens_per_sec.max(1)));
    let client = client();
    let mut figures = Vec::new();
    for case in cases(args.answer_tokens) {
        let (name, invalid, valid, code) = (case.name, case.invalid, case.valid, case.code);
        // The valid answer alone: ask the mock directly with the code in the message.
        let valid_tokens = {
            let upstream = mock(&invalid, &valid, code, gap).await?;
            let raw = client
                .post(format!("{}/chat/completions", upstream.url()))
                .json(&json!({"model": "mock-model", "stream": true,
                              "messages": [{"role": "user", "content": code}]}))
                .send()
                .await?
                .text()
                .await?;
            anyhow::ensure!(
                raw.contains("[DONE]"),
                "{name}: the direct stream did not finish"
            );
            upstream.content_chunks_sent() as f64
        };
        let mut by_setting = Vec::new();
        for early_abort in [false, true] {
            // A fresh validator per setting (the list above is consumed once per case).
            let validator = cases(args.answer_tokens)
                .into_iter()
                .find(|c| c.name == name)
                .map(|c| c.validator)
                .expect("case");
            let upstream = mock(&invalid, &valid, code, gap).await?;
            let url = proxy(&upstream.url(), validator, early_abort, StreamMode::Hold).await?;
            let mut times = Vec::new();
            let mut tokens = Vec::new();
            for _ in 0..args.runs {
                let before = upstream.content_chunks_sent();
                let started = Instant::now();
                let response = client.post(&url).json(&body(false)).send().await?;
                let answer: Value = response.json().await?;
                times.push(started.elapsed().as_secs_f64() * 1e3);
                anyhow::ensure!(
                    answer["enforcement"]["status"] == "passed",
                    "{name}: the answer did not pass: {answer}"
                );
                tokens.push((upstream.content_chunks_sent() - before) as f64);
            }
            by_setting.push((
                median(&times),
                tokens.iter().sum::<f64>() / tokens.len().max(1) as f64,
            ));
        }
        let (off, on) = (by_setting[0], by_setting[1]);
        figures.push(CaseFigures {
            case: name,
            off_valid_answer_ms_p50: off.0,
            on_valid_answer_ms_p50: on.0,
            off_tokens_per_valid_answer: off.1,
            on_tokens_per_valid_answer: on.1,
            valid_answer_tokens: valid_tokens,
            time_ratio: off.0 / on.0,
            token_ratio: off.1 / on.1,
            wasted_token_ratio: (off.1 - valid_tokens) / (on.1 - valid_tokens).max(1.0),
        });
    }

    // Draft mode: the first visible byte against the model's own first token.
    let first = cases(args.answer_tokens).remove(0);
    let upstream = mock(&first.valid, &first.valid, first.code, gap).await?;
    let direct = format!("{}/chat/completions", upstream.url());
    let draft_validator = first.validator;
    let draft = proxy(&upstream.url(), draft_validator, true, StreamMode::Draft).await?;
    let mut direct_ttft = Vec::new();
    let mut draft_first = Vec::new();
    for _ in 0..args.runs.max(5) {
        direct_ttft.push(first_byte(&client, &direct, "mock-model", "content").await?);
        draft_first.push(first_byte(&client, &draft, "m", "reasoning_content").await?);
    }
    let (direct_ttft, draft_first) = (median(&direct_ttft), median(&draft_first));

    // Integrity: many concurrent draft streams of a short passing answer.
    let short: Vec<String> = words(50);
    let expected = short.concat();
    let upstream = mock(&short, &short, "NEVER", Duration::from_millis(2)).await?;
    let validator = cases(args.answer_tokens).remove(0).validator;
    let url = proxy(&upstream.url(), validator, true, StreamMode::Draft).await?;
    let tasks: Vec<_> = (0..args.concurrent)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            let expected = expected.clone();
            tokio::spawn(async move {
                let Ok(response) = client.post(&url).json(&body(true)).send().await else {
                    return false;
                };
                let Ok(raw) = response.text().await else {
                    return false;
                };
                let parsed = enforce_testkit::sse::ParsedStream::parse(&raw);
                let reasoning: String = parsed
                    .chunks()
                    .iter()
                    .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
                    .collect();
                parsed.done_last && reasoning == expected && parsed.content() == expected
            })
        })
        .collect();
    let mut intact = 0;
    for t in tasks {
        if t.await.unwrap_or(false) {
            intact += 1;
        }
    }

    Ok(StreamFigures {
        tokens_per_sec: args.tokens_per_sec,
        answer_tokens: args.answer_tokens,
        runs: args.runs,
        cases: figures,
        direct_ttft_ms_p50: direct_ttft,
        draft_first_byte_ms_p50: draft_first,
        draft_added_ms: draft_first - direct_ttft,
        concurrent_streams: args.concurrent,
        concurrent_intact: intact,
    })
}
