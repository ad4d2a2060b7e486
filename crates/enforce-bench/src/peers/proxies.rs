//! The proxies under test in front of the mock: the relay floor, `enforce serve`, TensorZero
//! and LiteLLM, each driven unstreamed and streamed.

use super::harness::read_first_line;
use super::{
    command, describe, free_port, python, quiet_env, start_printing_address, wait_http, Guarded,
    PeersArgs, Pinning,
};
use crate::results::{Results, RELAY};
use anyhow::anyhow;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// The byte relay on the SUT core in front of the `ok` mock: what any proxy costs here.
pub(super) fn proxy_relay(
    me: &Path,
    pin: &Pinning,
    ok_url: &str,
    r: &mut Results,
    drive: &Drive<'_>,
) -> anyhow::Result<()> {
    let upstream = ok_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let (child, addr) = start_printing_address(
        me,
        &pin.sut,
        &["relay".into(), "--upstream".into(), upstream],
        r,
    )?;
    drive_both(
        r,
        drive,
        RELAY,
        &format!("http://{addr}/v1/chat/completions"),
        "mock",
        "sk-bench",
        child.0.id(),
    );
    Ok(())
}

pub(super) type Drive<'a> =
    dyn Fn(&mut Results, &str, &str, &str, bool, u32) -> anyhow::Result<Value> + 'a;

fn drive_both(
    r: &mut Results,
    drive: &Drive<'_>,
    name: &str,
    url: &str,
    model: &str,
    key: &str,
    pid: u32,
) {
    for stream in [false, true] {
        let driven = drive(r, url, model, key, stream, pid);
        if let Some(v) = r.measured(format!("{name} stream={stream}"), driven) {
            r.proxy.insert((name.to_string(), stream), v);
        }
    }
}

pub(crate) const PERSON_CONFIG: &str = r#"# enforce serve for the benchmark: one model whose profile checks the JSON answer.
validators:
  person:
    type: json
    bare: false
    schema:
      type: object
      required: [name, age]
      properties:
        name: {type: string}
        age: {type: integer}
profiles:
  person:
    validators: [person]
"#;

pub(super) fn proxy_enforce(
    args: &PeersArgs,
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    r: &mut Results,
    drive: &Drive<'_>,
) -> anyhow::Result<()> {
    let (child, base) = start_enforce(&args.enforce_bin, pin, ok_url, work, r)?;
    drive_both(
        r,
        drive,
        "enforce",
        &format!("{base}/v1/chat/completions"),
        "mock",
        "sk-bench",
        child.0.id(),
    );
    Ok(())
}

/// Starts `enforce serve` on the SUT core in front of the `ok` mock (model `mock`, profile
/// `person`, key `sk-bench`); the process and its base URL (without `/v1`), once healthy.
pub(crate) fn start_enforce(
    enforce_bin: &Path,
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    r: &mut Results,
) -> anyhow::Result<(Guarded, String)> {
    let flags = [
        "--upstream-url",
        ok_url,
        "--upstream-model",
        "mock",
        "--upstream-key",
        "sk-bench",
        "--profile",
        "person",
        "--model-id",
        "mock",
        "--api-key",
        "sk-bench",
    ];
    let served = Served {
        name: "enforce-bench",
        config: PERSON_CONFIG,
        log: "enforce-serve.log",
    };
    serve(enforce_bin, pin, work, r, &served, &flags)
}

/// An `enforce serve` of the benchmark: its configuration's file name (in the work folder,
/// without `.yaml`), its text, and its log's file name.
pub(crate) struct Served<'a> {
    pub name: &'a str,
    pub config: &'a str,
    pub log: &'a str,
}

/// Starts `enforce serve` with `served`'s configuration and `flags` on the SUT core; the
/// process and its base URL (without `/v1`), once healthy.
pub(crate) fn serve(
    enforce_bin: &Path,
    pin: &Pinning,
    work: &Path,
    r: &mut Results,
    served: &Served<'_>,
    flags: &[&str],
) -> anyhow::Result<(Guarded, String)> {
    let cfg = work.join(format!("{}.yaml", served.name));
    std::fs::write(&cfg, served.config)?;
    let port = free_port()?;
    let mut a: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        cfg.to_string_lossy().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    a.extend(flags.iter().map(|f| f.to_string()));
    let mut cmd = command(&pin.sut, enforce_bin, &a);
    cmd.env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(work.join(served.log))?));
    r.commands.push(describe(&cmd));
    let child = Guarded(cmd.spawn()?);
    let base = format!("http://127.0.0.1:{port}");
    if !wait_http(&format!("{base}/healthz"), None, Duration::from_secs(20)) {
        return Err(anyhow!(
            "enforce serve did not become healthy (see {})",
            served.log
        ));
    }
    Ok((child, base))
}

pub(super) fn proxy_tensorzero(
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    script: &Path,
    r: &mut Results,
    drive: &Drive<'_>,
) -> anyhow::Result<()> {
    let cfg = work.join("tensorzero.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\nobservability.enabled = false\n\n[models.mock]\nrouting = [\"mock\"]\n\n[models.mock.providers.mock]\ntype = \"openai\"\nmodel_name = \"mock\"\napi_base = \"{ok_url}/\"\napi_key_location = \"none\"\n"
        ),
    )?;
    let a = vec![
        script.to_string_lossy().to_string(),
        "tensorzero-gateway".into(),
        cfg.to_string_lossy().to_string(),
    ];
    let mut cmd = command(&pin.sut, &python(work, "tensorzero"), &a);
    quiet_env(&mut cmd);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(
            work.join("tensorzero.log"),
        )?));
    r.commands.push(describe(&cmd));
    let mut child = Guarded(cmd.spawn()?);
    let line = read_first_line(&mut child.0, Duration::from_secs(60))
        .map_err(|e| anyhow!("gateway did not start: {e} (see tensorzero.log)"))?;
    let v: Value = serde_json::from_str(line.trim()).map_err(|_| {
        anyhow!(
            "gateway did not start: {} (see tensorzero.log)",
            line.trim()
        )
    })?;
    let base = v["base_url"]
        .as_str()
        .unwrap_or_default()
        .trim_end_matches('/')
        // Some launcher versions report the OpenAI-compatible prefix as part of the base URL.
        .trim_end_matches("/openai/v1")
        .to_string();
    wait_http(&format!("{base}/health"), None, Duration::from_secs(20));
    let pid = child.0.id();
    drive_both(
        r,
        drive,
        "TensorZero",
        &format!("{base}/openai/v1/chat/completions"),
        "tensorzero::model_name::mock",
        "sk-bench",
        pid,
    );
    Ok(())
}

pub(super) fn proxy_litellm(
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    r: &mut Results,
    drive: &Drive<'_>,
) -> anyhow::Result<()> {
    let cfg = work.join("litellm.yaml");
    std::fs::write(
        &cfg,
        format!(
            "model_list:\n  - model_name: mock\n    litellm_params:\n      model: openai/mock\n      api_base: {ok_url}\n      api_key: sk-bench\nlitellm_settings:\n  telemetry: false\n  drop_params: true\ngeneral_settings:\n  master_key: sk-bench-master\n"
        ),
    )?;
    let port = free_port()?;
    let bin = work.join("venv-litellm").join("bin").join("litellm");
    let a: Vec<String> = vec![
        "--config".into(),
        cfg.to_string_lossy().to_string(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
        "--num_workers".into(),
        "1".into(),
    ];
    let mut cmd = command(&pin.sut, &bin, &a);
    quiet_env(&mut cmd);
    cmd.stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            work.join("litellm.log"),
        )?));
    r.commands.push(describe(&cmd));
    let child = Guarded(cmd.spawn()?);
    let base = format!("http://127.0.0.1:{port}");
    if !wait_http(
        &format!("{base}/health/liveliness"),
        None,
        Duration::from_secs(120),
    ) {
        return Err(anyhow!(
            "LiteLLM proxy did not become live within 120 s (see litellm.log)"
        ));
    }
    drive_both(
        r,
        drive,
        "LiteLLM",
        &format!("{base}/v1/chat/completions"),
        "mock",
        "sk-bench-master",
        child.0.id(),
    );
    Ok(())
}
