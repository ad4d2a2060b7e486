//! The peers' own re-ask loops (Instructor, Pydantic AI, Guardrails) on the JSON contract,
//! each against `enforce serve` used as a plain relay to the same local model.

use super::{absolute, dataset_in, RealModelArgs, CONTRACTS};
use crate::peers::{self, Guarded};
use crate::results::PEERS;
use anyhow::{anyhow, Context as _};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The peers' loops, on the JSON contract: (peers.py library, virtualenv, shown name, knob).
const LOOP_PEERS: &[(&str, &str, &str, &str)] = &[
    ("instructor", "instructor", "Instructor", "max_retries"),
    ("pydantic-ai", "pydanticai", "Pydantic AI", "retries"),
    ("guardrails", "guardrails", "Guardrails AI", "num_reasks"),
];

/// What one peer's loop measured.
pub(super) struct PeerRun {
    pub name: &'static str,
    pub knob: &'static str,
    pub cases: usize,
    pub valid: usize,
    pub calls: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub wall_ms: f64,
    pub errors: Vec<String>,
    pub command: String,
}

/// The JSON contract's schema, for the peers' Pydantic models.
fn json_schema(args: &RealModelArgs) -> anyhow::Result<Value> {
    let path = args.eval_dir.join("enforce.yaml");
    let yaml: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path)?)
        .with_context(|| format!("cannot read {}", path.display()))?;
    yaml.pointer("/validators/city/schema")
        .cloned()
        .ok_or_else(|| anyhow!("{} has no validators.city.schema", path.display()))
}

const RELAY_CONFIG: &str = r#"# enforce serve as a plain relay to the local model: the peers' loops run against it, and its
# audit log counts every call's tokens.
profiles:
  plain:
    validators: []
models:
  - id: local
    runner: { type: local, model: "${ENFORCE_BENCH_GGUF}", threads: ${ENFORCE_BENCH_THREADS} }
    profile: plain
server:
  audit_log: "${ENFORCE_BENCH_AUDIT}"
"#;

/// Each peer's loop on the JSON contract, against `enforce serve` relaying to the model.
pub(super) fn run(args: &RealModelArgs, work: &Path) -> anyhow::Result<Vec<PeerRun>> {
    let script = work.join("peers.py");
    std::fs::write(&script, peers::PEERS_PY)?;
    let json_contract = &CONTRACTS[0];
    let schema = work.join("real-model-schema.json");
    std::fs::write(&schema, serde_json::to_vec_pretty(&json_schema(args)?)?)?;
    let dataset = absolute(&dataset_in(args, work, json_contract.dataset)?)?;
    let config = work.join("real-model-relay.yaml");
    std::fs::write(&config, RELAY_CONFIG)?;
    let mut runs = Vec::new();
    for &(lib, venv, name, knob) in LOOP_PEERS {
        let Some(peer) = PEERS.iter().find(|p| p.venv == venv) else {
            continue;
        };
        if let Err(e) = peers::install(work, peer) {
            eprintln!("bench: {name} unsupported: {e}");
            continue;
        }
        let audit = work.join(format!("real-model-{venv}-audit.jsonl"));
        let _ = std::fs::remove_file(&audit);
        let port = peers::free_port()?;
        let mut serve = Command::new(&args.enforce_bin);
        serve
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("ENFORCE_BENCH_GGUF", absolute(&args.gguf)?)
            .env("ENFORCE_BENCH_THREADS", args.threads.to_string())
            .env("ENFORCE_BENCH_AUDIT", &audit)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(
                work.join(format!("real-model-{venv}-serve.log")),
            )?));
        let server = Guarded(serve.spawn()?);
        let base = format!("http://127.0.0.1:{port}");
        if !peers::wait_http(&format!("{base}/healthz"), None, Duration::from_secs(60)) {
            return Err(anyhow!(
                "enforce serve (relay to the local model) did not start"
            ));
        }
        let a = vec![
            script.to_string_lossy().to_string(),
            "real-model".into(),
            lib.into(),
            format!("{base}/v1"),
            "local".into(),
            dataset.to_string_lossy().to_string(),
            schema.to_string_lossy().to_string(),
            args.retries.to_string(),
            args.seed.to_string(),
            args.temperature.to_string(),
            args.max_tokens
                .unwrap_or(json_contract.max_tokens)
                .to_string(),
        ];
        let mut cmd = peers::command(&[], &peers::python(work, venv), &a);
        peers::quiet_env(&mut cmd);
        let command = peers::describe(&cmd);
        let mut scratch = crate::results::Results::default();
        let result = peers::output_json(cmd, &mut scratch);
        drop(server);
        let value = match result {
            Ok(v) => v,
            Err(e) => {
                eprintln!("bench: {name} on the real model failed: {e:#}");
                continue;
            }
        };
        let cases = value
            .get("cases")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let (calls, prompt_tokens, completion_tokens) = audit_usage(&audit)?;
        runs.push(PeerRun {
            name,
            knob,
            cases: cases.len(),
            valid: cases
                .iter()
                .filter(|c| c.get("valid").and_then(Value::as_bool) == Some(true))
                .count(),
            calls,
            prompt_tokens,
            completion_tokens,
            wall_ms: cases
                .iter()
                .filter_map(|c| c.get("wall_ms").and_then(Value::as_f64))
                .sum(),
            errors: cases
                .iter()
                .filter_map(|c| c.get("error").and_then(Value::as_str))
                .map(|e| e.split(':').next().unwrap_or(e).to_string())
                .collect(),
            command,
        });
    }
    Ok(runs)
}

/// Requests and tokens in a relay's audit log (one line per request the peer made).
fn audit_usage(path: &Path) -> anyhow::Result<(usize, u64, u64)> {
    // A peer that never reached the relay left no log: no calls.
    if !path.exists() {
        return Ok((0, 0, 0));
    }
    let report = enforce_report::summarize(&[path], enforce_report::Options::default())?;
    let spend = report.spend;
    let calls = report.input.records + report.input.refused;
    Ok((
        usize::try_from(calls)?,
        spend.first_attempts.input_tokens + spend.reasks.input_tokens,
        spend.first_attempts.output_tokens + spend.reasks.output_tokens,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_usage_counts_every_call_and_sums_the_attempts_tokens() {
        let dir = std::env::temp_dir().join(format!("audit-usage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("audit.jsonl");
        let lines = [
            r#"{"status":"passed","attempts":[{"usage":{"input_tokens":5,"output_tokens":7}},{"usage":{"input_tokens":6,"output_tokens":8}}]}"#,
            r#"{"status":"passed","attempts":[{"usage":{"input_tokens":10,"output_tokens":1}}]}"#,
            r#"{"status":"refused","reason":"unauthorized"}"#,
            "torn",
        ];
        std::fs::write(&file, lines.join("\n")).unwrap();
        assert_eq!(audit_usage(&file).unwrap(), (3, 21, 16));
        assert_eq!(audit_usage(&dir.join("absent.jsonl")).unwrap(), (0, 0, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
