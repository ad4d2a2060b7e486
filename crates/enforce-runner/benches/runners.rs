//! What a runner adds on top of the model: parsing the CLI's result and a completion, one
//! HTTP round trip to a loopback server, one process spawn.
//!
//! `cargo bench -p enforce-runner --bench runners`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use enforce_core::Ask;
use enforce_core::{Request, Runner};
use enforce_runner::{
    parse_completion, parse_result, CommandConfig, CommandRunner, OpenAiConfig, OpenAiRunner,
};
use enforce_testkit::{MockOpenAi, MockReply, MockScript, Then};

const CLAUDE_RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1998,"num_turns":1,"result":"Here is the ADR you asked for.\n\n## Kontext\nText.\n\n<!-- STEP: generate -->","session_id":"8c3f7f0e-1c6a-4c1f-9a55-0b0f6f1d2e3a","total_cost_usd":0.008,"usage":{"input_tokens":3,"cache_creation_input_tokens":1200,"cache_read_input_tokens":14000,"output_tokens":640}}"#;

const COMPLETION: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Here is the answer.\n<!-- STEP: done -->"},"finish_reason":"stop"}],"usage":{"prompt_tokens":120,"completion_tokens":40,"total_tokens":160}}"#;

fn parsing(c: &mut Criterion) {
    c.bench_function("parse_claude_result", |b| {
        b.iter(|| parse_result(black_box(CLAUDE_RESULT)))
    });
    c.bench_function("parse_openai_completion", |b| {
        b.iter(|| parse_completion(black_box(COMPLETION)))
    });
}

fn round_trips(c: &mut Criterion) {
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    else {
        return;
    };
    let Ok(mock) = runtime.block_on(MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text("warm-up"))
            .then(Then::Echo),
    )) else {
        return;
    };
    let Ok(openai) = OpenAiRunner::new(OpenAiConfig {
        base_url: mock.url(),
        model: "m".into(),
        ..OpenAiConfig::default()
    }) else {
        return;
    };
    let request = Request::prompt("Say hello.");
    c.bench_function("openai_ask_loopback", |b| {
        b.iter(|| runtime.block_on(openai.ask(Ask::new(&request)).reply()))
    });

    let Ok(command) = CommandRunner::new(CommandConfig {
        program: "cat".into(),
        ..CommandConfig::default()
    }) else {
        return;
    };
    c.bench_function("command_ask_cat", |b| {
        b.iter(|| runtime.block_on(command.ask(Ask::new(&request)).reply()))
    });
}

criterion_group!(benches, parsing, round_trips);
criterion_main!(benches);
