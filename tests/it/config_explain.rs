//! `enforce config explain`: the resolved contract of a served model with the source of each
//! value, a key's access, and `server.api_keys` misuse located at file:line:key.

use crate::{text, BIN};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CONFIG: &str = "\
defaults:
  max_retries: 3
  budget: {max_tokens: 5000}
validators:
  steps:
    type: step_marker
    allowed: [ask, answer]
profiles:
  support:
    validators: [steps]
    max_retries: 1
  loose:
    validators: []
runner: {type: openai, base_url: \"http://127.0.0.1:9/v1\", model: m, api_key: sk-upstream}
models:
  - id: support
    profile: support
    allow_request_limits: true
    stream_mode: draft
  - id: other
    profile: loose
    routes:
      - {profile: support, when: {header: X-Kind, equals: s}}
server:
  request_timeout_secs: 60
  api_keys:
    - admin-key
    - name: support-app
      key_env: ENFORCE_TEST_SUPPORT_KEY
      models: [support]
      profiles: [support]
";

const KEY_ENV: &str = "ENFORCE_TEST_SUPPORT_KEY";

fn write(dir: &Path, name: &str, yaml: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path
}

fn explain(config: &Path, args: &[&str], key_env: Option<&str>) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(["config", "explain", "--config"])
        .arg(config)
        .args(args)
        .env_remove(KEY_ENV)
        .env_remove("ENFORCE_API_KEYS")
        .env_remove("ENFORCE_CONFIG");
    if let Some(value) = key_env {
        command.env(KEY_ENV, value);
    }
    command.output().unwrap()
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&output.stdout), text(&output.stderr)))
}

/// `(value, from)` of a contract entry.
fn entry<'a>(explained: &'a Value, key: &str) -> (&'a Value, &'a str) {
    let item = &explained["contract"][key];
    (
        &item["value"],
        item["from"]
            .as_str()
            .unwrap_or_else(|| panic!("no {key}: {explained}")),
    )
}

#[test]
fn explain_names_each_value_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "enforce.yaml", CONFIG);
    let out = explain(&config, &["--model", "support", "--json"], Some("sek"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let support = json(&out);
    assert_eq!(
        entry(&support, "profile"),
        (&"support".into(), "models[0].profile")
    );
    assert_eq!(
        entry(&support, "max_retries"),
        (&1.into(), "profiles.support.max_retries")
    );
    let (budget, from) = entry(&support, "budget");
    assert_eq!(
        (&budget["max_tokens"], from),
        (&5000.into(), "defaults.budget")
    );
    let (steps, from) = entry(&support, "validators.steps");
    assert_eq!(steps["allowed"], serde_json::json!(["ask", "answer"]));
    assert!(from.starts_with("validators.steps"), "{from}");
    assert_eq!(
        entry(&support, "request_timeout_secs").1,
        "server.request_timeout_secs"
    );
    assert_eq!(
        entry(&support, "request_limits").1,
        "models[0].allow_request_limits"
    );
    assert_eq!(
        entry(&support, "stream_mode"),
        (&"draft".into(), "models[0].stream_mode")
    );
    let (on_unresolved, from) = entry(&support, "on_unresolved");
    assert_eq!(on_unresolved, "error");
    assert!(from.contains("draft"), "{from}");
    let (runner, from) = entry(&support, "runner");
    assert_eq!(from, "runner");
    assert_eq!(
        runner["api_key"], "(set)",
        "the upstream key is not printed"
    );
    assert!(!text(&out.stdout).contains("sk-upstream"));

    let out = explain(&config, &["--model", "other", "--json"], Some("sek"));
    let other = json(&out);
    assert_eq!(
        entry(&other, "max_retries"),
        (&3.into(), "defaults.max_retries")
    );
    assert_eq!(entry(&other, "request_limits").1, "built-in default");
    assert_eq!(entry(&other, "on_unresolved").0, "return");
    let (route, from) = entry(&other, "routes[0]");
    assert_eq!(
        (&route["profile"], from),
        (&"support".into(), "models[1].routes[0]")
    );

    // Readable text by default, the same values.
    let out = explain(&config, &["--model", "support"], Some("sek"));
    let shown = text(&out.stdout);
    assert!(shown.starts_with("model support\n"), "{shown}");
    assert!(
        shown.contains("from: profiles.support.max_retries"),
        "{shown}"
    );
}

#[test]
fn explain_with_a_key_says_what_it_may_use() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "enforce.yaml", CONFIG);
    // By name or by the key itself.
    for key in ["support-app", "sek"] {
        let out = explain(
            &config,
            &["-m", "support", "--key", key, "--json"],
            Some("sek"),
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let access = &json(&out)["access"];
        assert_eq!(access["key"], "support-app");
        assert_eq!(access["from"], "server.api_keys[1]");
        assert_eq!(access["allowed"], true);
    }
    let out = explain(
        &config,
        &["-m", "other", "--key", "support-app"],
        Some("sek"),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a key refused for the model: exit 1"
    );
    let shown = text(&out.stdout);
    assert!(shown.contains("may NOT use the model `other`"), "{shown}");
    assert!(shown.contains("may NOT use the profile `loose`"), "{shown}");
    assert!(!shown.contains("sek"), "the key is never printed: {shown}");
    let out = explain(
        &config,
        &["-m", "other", "--key", "admin-key", "--json"],
        Some("sek"),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["access"]["models"], "all");

    for (args, says) in [
        (vec!["-m", "nope"], "no model `nope`"),
        (
            vec!["-m", "support", "--key", "stranger"],
            "no key `stranger`",
        ),
    ] {
        let out = explain(&config, &args, Some("sek"));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
}

#[test]
fn api_key_misuse_is_located_at_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let ok = write(dir.path(), "ok.yaml", CONFIG);
    let unset = explain(&ok, &["-m", "support"], None);
    let cases = [
        (
            CONFIG.replace("models: [support]", "models: [nope]"),
            ":30:",
            "server.api_keys[1].models[0]",
            "no served model `nope`",
        ),
        (
            CONFIG.replace("profiles: [support]", "profiles: [support, ghost]"),
            ":31:",
            "server.api_keys[1].profiles[1]",
            "no profile `ghost`",
        ),
        (
            CONFIG.replace("      models: [support]", "      modles: [support]"),
            ":30:",
            "server.api_keys[1].modles",
            "unknown field `modles`",
        ),
        (
            CONFIG.replace(
                "      key_env: ENFORCE_TEST_SUPPORT_KEY\n",
                "      key_env: ENFORCE_TEST_SUPPORT_KEY\n      key: inline\n",
            ),
            ":28:",
            "server.api_keys[1]",
            "exactly one of `key` or `key_env`",
        ),
        (
            CONFIG.replace("allow_request_limits: true", "allow_request_limits: maybe"),
            ":18:",
            "models[0].allow_request_limits",
            "expected a boolean",
        ),
    ];
    for (i, (yaml, line, key, says)) in cases.iter().enumerate() {
        let config = write(dir.path(), &format!("bad{i}.yaml"), yaml);
        let out = explain(&config, &["-m", "support"], Some("sek"));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let at = format!("{}{line}", config.display());
        assert!(
            stderr.contains(&at) && stderr.contains(key) && stderr.contains(says),
            "{key}: {stderr}"
        );
    }
    // An unset key_env is an error at its key, for `enforce serve` alike.
    let stderr = text(&unset.stderr);
    assert_eq!(unset.status.code(), Some(2));
    assert!(
        stderr.contains(&format!("{}:29:", ok.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("server.api_keys[1].key_env") && stderr.contains(KEY_ENV),
        "{stderr}"
    );
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&ok)
        .env_remove(KEY_ENV)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("server.api_keys[1].key_env"),
        "{}",
        text(&out.stderr)
    );
}

/// `enforce config explain` given `enforce serve`'s model flags explains the model `serve`
/// builds from them: the same id (here the upstream's first model, asked by both), runner,
/// profile and options, each from its flag; and `serve` with those flags serves exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_resolves_the_command_line_model_as_serve_does() {
    use enforce_testkit::{MockOpenAi, MockReply, MockScript};
    let upstream = MockOpenAi::start(
        MockScript::new()
            .model("upstream-llm")
            .replies((0..8).map(|_| MockReply::text("An answer without a marker."))),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "enforce.yaml",
        "defaults:\n  max_retries: 3\nvalidators:\n  object: {type: json}\nprofiles:\n  support:\n    validators: [object]\n    max_retries: 1\n",
    );
    let url = upstream.url();
    // No --upstream-model: both ask the upstream for its first model.
    let flags = [
        "--upstream-url",
        url.as_str(),
        "--profile",
        "support",
        "--stream-mode",
        "draft",
        "--upstream-timeout",
        "7",
    ];
    let explained = {
        let (config, flags) = (config.clone(), flags.map(str::to_string));
        tokio::task::spawn_blocking(move || {
            let mut args = vec!["--model", "upstream-llm", "--json"];
            args.extend(flags.iter().map(String::as_str));
            explain(&config, &args, None)
        })
        .await
        .unwrap()
    };
    assert_eq!(
        explained.status.code(),
        Some(0),
        "{}",
        text(&explained.stderr)
    );
    let explained = json(&explained);
    let (runner, from) = entry(&explained, "runner");
    assert_eq!(
        (&runner["type"], &runner["model"], from),
        (&"openai".into(), &"upstream-llm".into(), "--upstream-url")
    );
    assert_eq!(
        entry(&explained, "profile"),
        (&"support".into(), "--profile")
    );
    assert_eq!(
        entry(&explained, "max_retries"),
        (&1.into(), "profiles.support.max_retries")
    );
    assert_eq!(
        entry(&explained, "stream_mode"),
        (&"draft".into(), "--stream-mode")
    );
    assert_eq!(
        entry(&explained, "runner_timeout_secs"),
        (&7.0.into(), "--upstream-timeout")
    );
    let (on_unresolved, from) = entry(&explained, "on_unresolved");
    assert_eq!(on_unresolved, "error");
    assert!(from.contains("draft"), "{from}");
    assert_eq!(entry(&explained, "check_tool_calls").1, "built-in default");

    // `serve` with the same flags serves that model.
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend(flags);
    let proxy = crate::serve::Proxy::start(&args);
    let client = crate::serve::client();
    let models: Value = client
        .get(proxy.url("/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], explained["model"]);
    let response = client
        .post(proxy.url("/chat/completions"))
        .json(&serde_json::json!({"model": "upstream-llm",
            "messages": [{"role": "user", "content": "Explain it."}]}))
        .send()
        .await
        .unwrap();
    // Unresolved with on_unresolved `error`: a 422, after max_retries re-asks of the profile.
    assert_eq!(response.status(), 422);
    let max_retries = explained["contract"]["max_retries"]["value"]
        .as_u64()
        .unwrap();
    let sent = upstream.chat_requests();
    assert_eq!(sent.len() as u64, max_retries + 1);
    assert!(sent.iter().all(|r| r.body["model"] == "upstream-llm"));
    // A stream names the profile it is enforced with (the error above does not).
    let response = client
        .post(proxy.url("/chat/completions"))
        .json(&serde_json::json!({"model": "upstream-llm", "stream": true,
            "messages": [{"role": "user", "content": "Explain it."}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["x-enforce-profile"],
        explained["contract"]["profile"]["value"].as_str().unwrap()
    );
}

/// `decode`: free by default; constrained says what the runner is sent, or why it cannot be.
#[test]
fn explain_says_how_answers_are_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "enforce.yaml",
        "\
validators:
  city_json:
    type: json
    schema: {type: object, properties: {city: {type: string}}, required: [city]}
profiles:
  city:
    validators: [city_json]
    decode: constrained
  loose:
    validators: [city_json]
  rung:
    validators: [city_json]
    reask: [constrained, resample]
  prose:
    validators: [step_marker]
    reask: constrained
runner: {type: openai, base_url: \"http://127.0.0.1:9/v1\", model: m}
models:
  - {id: city, profile: city}
  - {id: loose, profile: loose}
  - {id: rung, profile: rung}
  - {id: prose, profile: prose}
  - {id: cli, profile: city, runner: {type: command, program: cat}}
  - {id: local, profile: city, runner: {type: local, model: m.gguf}}
  - {id: local-gbnf, profile: city, runner: {type: local, model: m.gguf, constraint_engine: gbnf}}
",
    );
    let explained = |model: &str| {
        let out = explain(&config, &["--model", model, "--json"], None);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        json(&out)
    };
    let city = explained("city");
    let (value, from) = entry(&city, "decode");
    assert_eq!(from, "profiles.city.decode");
    assert_eq!(value["sends"], serde_json::json!(["response_format"]));
    let notes = value["notes"].to_string();
    assert!(notes.contains("strict mode"), "{notes}");
    assert!(notes.contains("additionalProperties"), "{notes}");
    assert_eq!(value["on"], "every attempt");
    let loose = explained("loose");
    assert_eq!(entry(&loose, "decode").0, "free");
    // The rung `constrained` constrains its re-asks only; without a constraint from the
    // contract it resamples, and says so.
    let rung = explained("rung");
    let (value, from) = entry(&rung, "decode");
    assert_eq!(from, "profiles.rung.reask");
    assert_eq!(value["constrained"], true, "{value}");
    assert_eq!(value["sends"], serde_json::json!(["response_format"]));
    assert!(
        value["on"]
            .as_str()
            .unwrap()
            .contains("re-asks of the rung"),
        "{value}"
    );
    let prose = explained("prose");
    let (value, _) = entry(&prose, "decode");
    assert_eq!(value["constrained"], false, "{value}");
    assert!(value["notes"].to_string().contains("resamples"), "{value}");
    let cli = explained("cli");
    let (value, _) = entry(&cli, "decode");
    assert_eq!(value["sends"], serde_json::json!([]));
    assert!(
        value["notes"].to_string().contains("cannot constrain"),
        "{value}"
    );
    // The local runner names the engine that compiles the schema.
    let gbnf_model = explained("local-gbnf");
    let (gbnf, _) = entry(&gbnf_model, "decode");
    assert_eq!(gbnf["engine"], "gbnf", "{gbnf}");
    assert_eq!(gbnf["sends"], serde_json::json!(["response_format"]));
    let local_model = explained("local");
    let (local, _) = entry(&local_model, "decode");
    if cfg!(feature = "local") {
        assert_eq!(local["engine"], "llguidance", "{local}");
        assert_eq!(local["notes"], serde_json::json!([]), "{local}");
    } else {
        // A build without llguidance falls back to GBNF, and says why.
        assert_eq!(local["engine"], "gbnf", "{local}");
        assert!(
            local["notes"].to_string().contains("no llguidance"),
            "{local}"
        );
    }
}

/// A ladder with `escalate` shows its target, and `first_attempt` where it came from; a ladder
/// without a target says that `escalate` stays on the profile's own model.
#[test]
fn explain_shows_the_ladder_and_its_escalation_target() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "\
defaults:
  first_attempt: reason_then_format
profiles:
  small:
    validators: []
    reask: [feedback, escalate]
    escalate_to: big
  alone:
    validators: []
    reask: escalate
runner: {type: openai, base_url: \"http://127.0.0.1:9/v1\", model: m}
models:
  - {id: small, profile: small}
  - {id: big, profile: alone}
";
    let config = write(dir.path(), "enforce.yaml", yaml);
    let small = json(&explain(&config, &["--model", "small", "--json"], None));
    assert_eq!(
        entry(&small, "reask"),
        (
            &serde_json::json!(["feedback", "escalate"]),
            "profiles.small.reask"
        )
    );
    assert_eq!(
        entry(&small, "escalate_to"),
        (&"big".into(), "profiles.small.escalate_to")
    );
    assert_eq!(
        entry(&small, "first_attempt"),
        (&"reason_then_format".into(), "defaults.first_attempt")
    );
    let alone = json(&explain(&config, &["--model", "big", "--json"], None));
    let (target, _) = entry(&alone, "escalate_to");
    assert!(
        target.as_str().is_some_and(|t| t.starts_with("none")),
        "{target}"
    );
}

/// Statistics of model `m` under profile `city`: on INVALID_JSON resample made 18 of 20
/// re-asks valid, feedback 3 of 20 at the same tokens; SCHEMA_VIOLATION has too few re-asks.
const STATS: &str = r#"{"version": 1, "rows": [
  {"model": "m", "profile": "city", "code": "INVALID_JSON", "strategy": "feedback",
   "attempts": 20, "fixed": 5, "valid": 3, "tokens": 4000, "tokens_counted": 20},
  {"model": "m", "profile": "city", "code": "INVALID_JSON", "strategy": "resample",
   "attempts": 20, "fixed": 19, "valid": 18, "tokens": 4000, "tokens_counted": 20},
  {"model": "m", "profile": "city", "code": "SCHEMA_VIOLATION", "strategy": "resample",
   "attempts": 2, "valid": 2},
  {"model": "other", "profile": "city", "code": "INVALID_JSON", "strategy": "feedback",
   "attempts": 90, "valid": 90}
]}"#;

const AUTO: &str = "\
profiles:
  city:
    validators: []
    reask: auto
    reask_auto: {stats: stats.json, fallback: [feedback, resample], seed: 4}
runner: {type: openai, base_url: \"http://127.0.0.1:9/v1\", model: m}
models:
  - {id: city, profile: city}
";

#[test]
fn explain_shows_auto_its_statistics_and_what_it_would_choose_per_code() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "stats.json", STATS);
    let config = write(dir.path(), "enforce.yaml", AUTO);
    let out = json(&explain(&config, &["--model", "city", "--json"], None));
    assert_eq!(
        entry(&out, "reask"),
        (&"auto".into(), "profiles.city.reask")
    );
    let (settings, from) = entry(&out, "reask_auto");
    assert_eq!(from, "profiles.city.reask_auto");
    assert!(
        settings["stats"].as_str().unwrap().ends_with("stats.json"),
        "{settings}"
    );
    assert_eq!(
        settings["fallback"],
        serde_json::json!(["feedback", "resample"])
    );
    assert_eq!(settings["seed"], 4);
    let (choice, from) = entry(&out, "reask_auto.choices.INVALID_JSON");
    assert!(from.contains("model `m`"), "{from}");
    assert_eq!(choice["choose"], "resample", "{choice}");
    let compared = choice["compared"].as_array().unwrap();
    assert_eq!(compared.len(), 2, "{choice}");
    assert_eq!(compared[1]["valid"], 18);
    // Too few re-asks measured: the fallback's first rung.
    let (choice, _) = entry(&out, "reask_auto.choices.SCHEMA_VIOLATION");
    assert_eq!(choice["choose"], "feedback", "{choice}");
    assert_eq!(choice["by"], "no_data");
    // The text form says the same.
    let text = explain(&config, &["--model", "city"], None);
    assert!(text.status.success());
    assert!(crate::text(&text.stdout).contains("reask_auto.choices.INVALID_JSON"));
}

#[test]
fn explain_refuses_an_unreadable_statistics_file_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "enforce.yaml", AUTO);
    let missing = explain(&config, &["--model", "city"], None);
    assert_eq!(missing.status.code(), Some(2));
    let stderr = crate::text(&missing.stderr);
    assert!(
        stderr.contains("stats.json") && stderr.contains("reask_auto"),
        "{stderr}"
    );
    write(dir.path(), "stats.json", r#"{"version": 7, "rows": []}"#);
    let newer = explain(&config, &["--model", "city"], None);
    assert_eq!(newer.status.code(), Some(2));
    assert!(crate::text(&newer.stderr).contains("version 7"));
}
