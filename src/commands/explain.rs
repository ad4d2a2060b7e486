//! `enforce config explain --model M [--key K]`: the contract a served model enforces, as
//! `enforce serve` would resolve it from the same file and the same model flags, and where
//! each value comes from (a built-in default, `defaults:`, the profile, the model entry or the
//! flag, a route, `server:`).
//!
//! Exit codes: 0 explained, 1 the key may not use the model (the contract is still printed),
//! 2 the configuration, the model or the key is wrong.

use super::model_flags::ModelFlags;
use crate::config::{LoadedConfig, ServedModelConfig, WhenConfig};
use crate::decode;
use crate::runner_options::model_of;
use enforce_config::profile::{Decode, ReaskAuto};
use enforce_config::Profile;
use enforce_core::strategy::{Choice, ChoiceInput};
use enforce_runner::RunnerConfig;
use enforce_server::{ApiKeyEntry, FailureResponse, ServerSection, StreamMode};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `enforce config explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The public model id (an `id` of `models:`).
    #[arg(long, short = 'm')]
    model: String,
    /// Also say what this API key may use: its `name` in `server.api_keys`, or the key itself
    /// (a key from `ENFORCE_API_KEYS` too).
    #[arg(long, short = 'k')]
    key: Option<String>,
    /// Configuration file; default `./enforce.yaml` when it exists.
    #[arg(long, short = 'c', env = "ENFORCE_CONFIG")]
    config: Option<PathBuf>,
    /// Print JSON (`{"model", "contract": {KEY: {"value", "from"}}, "access"}`) instead of text.
    #[arg(long)]
    json: bool,
    /// The command-line model, given as to `enforce serve` (`--upstream-url`,
    /// `--upstream-model`, `--runner`, `--profile`, `--model-id`, ...).
    #[command(flatten)]
    flags: ModelFlags,
}

pub const EXPLAIN_ABOUT: &str = "\
Print the contract a served model enforces, resolved as `enforce serve` resolves it from the \
same file and the same model flags: its runner, profile and routes, the validators with their options, the limits \
(re-asks, budgets, timeouts, per-request limits), on_unresolved / on_unavailable, the \
streaming mode, and for each value where it came from: a built-in default, `defaults:`, the \
profile (`profiles.NAME`), the model entry (`models[N]`) or the flag that set it, a route, or \
`server:`.

The model `enforce serve` builds from its flags (--upstream-url, --upstream-model, --runner, \
--profile, --model-id, --stream-mode, ...) is explained when the same flags are given here; \
without --upstream-model, the upstream is asked for its first model, as `enforce serve` does.

With --key, also what that key may use (its models and profiles in `server.api_keys`); the \
exit code is 1 when it may not use this model or its profile.

  enforce config explain --model support
  enforce config explain --model support --key support-app --json
  enforce config explain -m local --model-id local --upstream-url http://localhost:8080/v1";

/// One resolved value and where it came from.
struct Item {
    key: String,
    value: Value,
    from: String,
}

/// The resolved contract, in printing order.
#[derive(Default)]
struct Contract {
    items: Vec<Item>,
}

impl Contract {
    fn push(&mut self, key: impl Into<String>, value: impl Into<Value>, from: impl Into<String>) {
        self.items.push(Item {
            key: key.into(),
            value: value.into(),
            from: from.into(),
        });
    }
}

const BUILT_IN: &str = "built-in default";

/// Where the explained model is defined.
enum Origin<'a> {
    /// `models[N]` of the file.
    Entry(usize),
    /// The model flags `enforce serve` takes.
    Flags(&'a ModelFlags),
}

impl Origin<'_> {
    /// How the contract names the definition (`models[0]`, `command line`).
    fn name(&self) -> String {
        match self {
            Origin::Entry(index) => format!("models[{index}]"),
            Origin::Flags(_) => "command line".to_string(),
        }
    }

    /// Where the model's own `key` came from, when its definition sets it (`models[0].profile`,
    /// `--profile`); `raw` is the file as written.
    fn sets(&self, key: &str, raw: &Value) -> Option<String> {
        match self {
            Origin::Entry(index) => raw
                .pointer(&format!("/models/{index}/{key}"))
                .map(|_| format!("models[{index}].{key}")),
            Origin::Flags(flags) => flags.flag_of(key).map(str::to_string),
        }
    }
}

/// Runs `enforce config explain`.
pub fn run(args: ExplainArgs) -> ExitCode {
    match explain(&args) {
        Ok((text, allowed)) => {
            print!("{text}");
            if allowed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

/// The explanation as printed, and whether the key (if any) may use the model.
fn explain(args: &ExplainArgs) -> Result<(String, bool), String> {
    let loaded = LoadedConfig::load(args.config.as_deref()).map_err(|e| e.to_string())?;
    let (registry, _host) = crate::plugin_host::registry_with_plugins(&loaded);
    let profiles = loaded
        .profiles(&registry, None)
        .map_err(|e| e.to_string())?;
    let section = loaded.config.server.clone().unwrap_or_default();
    let server = section
        .to_config()
        .map_err(|e| super::serve::section_error(&loaded, e))?;
    // The command-line model, resolved by the function `enforce serve` uses.
    let upstream_model = super::current_thread_runtime()?.block_on(args.flags.upstream_model())?;
    let flags_entry = args.flags.entry(upstream_model, profiles.default_name())?;
    let served: Vec<&str> = loaded
        .config
        .models
        .iter()
        .chain(&flags_entry)
        .map(|m| m.id.as_str())
        .collect();
    super::serve::check_key_grants(&loaded, &section, &served, &profiles)?;
    // What the file itself sets (a value equal to the default still came from the file).
    let raw: Value = match &loaded.source {
        Some(source) => source.parse().map_err(|e| e.to_string())?,
        None => Value::Null,
    };
    let found = match loaded.config.models.iter().position(|m| m.id == args.model) {
        Some(index) => Some((Origin::Entry(index), &loaded.config.models[index])),
        None => flags_entry
            .as_ref()
            .filter(|m| m.id == args.model)
            .map(|m| (Origin::Flags(&args.flags), m)),
    };
    let Some((origin, entry)) = found else {
        return Err(format!(
            "no model `{}` in the configuration's `models:` or the model flags (models: {}). A model `enforce serve` builds from its flags (--upstream-url, --upstream-model, --runner, --profile, --model-id) is explained when the same flags are given.",
            args.model,
            if served.is_empty() { "none".to_string() } else { served.join(", ") }
        ));
    };
    let at = origin.name();
    let set = |pointer: &str| raw.pointer(pointer).is_some();
    let mut c = Contract::default();

    // The runner, without its secrets.
    let (runner, runner_from) = match (&entry.runner, &loaded.config.runner) {
        (Some(r), _) => (Some(r), origin.sets("runner", &raw).unwrap_or_default()),
        (None, Some(r)) => (Some(r), "runner".to_string()),
        (None, None) => (None, "none: `enforce serve` refuses this model".to_string()),
    };
    let runner_json = runner.map(|r| redact(serde_json::to_value(r).unwrap_or(Value::Null)));
    c.push(
        "runner",
        runner_json.clone().unwrap_or(Value::Null),
        &runner_from,
    );

    // The profile.
    let (profile, profile_from) = match (&entry.profile, &loaded.config.defaults.profile) {
        (Some(p), _) => (p.clone(), origin.sets("profile", &raw).unwrap_or_default()),
        (None, Some(p)) => (p.clone(), "defaults.profile".to_string()),
        (None, None) => (profiles.default_name().to_string(), BUILT_IN.to_string()),
    };
    c.push("profile", profile.as_str(), profile_from);
    for (i, route) in entry.routes.iter().enumerate() {
        let name = route.name.clone().unwrap_or_else(|| route.profile.clone());
        c.push(
            format!("routes[{i}]"),
            json!({"name": name, "profile": route.profile, "when": describe_when(&route.when)}),
            format!("{at}.routes[{i}]"),
        );
    }
    c.push(
        "profile_header",
        "X-Enforce-Profile may name any profile instead (limited by the key's `profiles`)",
        "enforce serve (every profile can be named)",
    );
    let built = profiles
        .get(&profile)
        .ok_or_else(|| format!("{at}: no profile named `{profile}`"))?;
    let in_file = set(&format!("/profiles/{profile}"));
    let list_from = if in_file {
        format!("profiles.{profile}.validators")
    } else {
        format!("built-in profile `{profile}`")
    };
    for name in built.validator_names() {
        let (options, from) = match loaded.config.validators.get(name) {
            Some(spec) => (
                spec.clone(),
                format!("validators.{name} (listed in {list_from})"),
            ),
            None => (
                json!({"type": name}),
                format!("built-in type, default options (listed in {list_from})"),
            ),
        };
        c.push(format!("validators.{name}"), options, from);
    }
    for name in built.input_validator_names() {
        c.push(
            format!("input_validators.{name}"),
            loaded
                .config
                .validators
                .get(name)
                .cloned()
                .unwrap_or_else(|| json!({"type": name})),
            format!("profiles.{profile}.input_validators"),
        );
    }

    // The policy: the profile's value over `defaults:` over the built-in default.
    let policy = built.policy();
    let layer = |key: &str| {
        if in_file && set(&format!("/profiles/{profile}/{key}")) {
            format!("profiles.{profile}.{key}")
        } else if set(&format!("/defaults/{key}")) {
            format!("defaults.{key}")
        } else {
            BUILT_IN.to_string()
        }
    };
    c.push("max_retries", policy.max_retries, layer("max_retries"));
    let budget = serde_json::to_value(policy.budget).unwrap_or(Value::Null);
    c.push("budget", budget, layer("budget"));
    let reask = match policy.reask_auto {
        Some(_) => Ok(Value::from("auto")),
        None => serde_json::to_value(&policy.reask),
    };
    for (key, value) in [
        ("reask", reask),
        ("first_attempt", serde_json::to_value(policy.first_attempt)),
        (
            "stop_on_no_progress",
            Ok(Value::from(policy.stop_on_no_progress)),
        ),
        ("repair", serde_json::to_value(policy.repair)),
        ("early_abort", Ok(Value::from(policy.early_abort))),
        (
            "on_unavailable_validator",
            serde_json::to_value(policy.on_unavailable),
        ),
    ] {
        let file_key = key.trim_end_matches("_validator");
        c.push(key, value.unwrap_or(Value::Null), layer(file_key));
    }

    auto_lines(&mut c, built, runner, &layer)?;
    let escalates = policy
        .reask
        .rungs()
        .contains(&enforce_core::policy::Reask::Escalate);
    if escalates || built.escalate_to().is_some() {
        let target = built.escalate_to().map_or_else(
            || Value::from("none: `escalate` asks the profile's own model"),
            Value::from,
        );
        c.push("escalate_to", target, layer("escalate_to"));
    }
    // A `constrained` rung on a freely decoding profile is what constrains: say where it is.
    let decode_from = match (built.decode(), decode::has_constrained_rung(policy)) {
        (Decode::Free, true) => layer("reask"),
        _ => layer("decode"),
    };
    decode_line(&mut c, built, runner, decode_from);

    // Timeouts and per-request limits.
    let secs = server.request_timeout.as_secs_f64();
    let server_or_default = |key: &str| {
        if set(&format!("/server/{key}")) {
            format!("server.{key}")
        } else {
            BUILT_IN.to_string()
        }
    };
    c.push(
        "request_timeout_secs",
        secs,
        server_or_default("request_timeout_secs"),
    );
    if let Some(timeout) = runner_json.as_ref().and_then(|r| r.get("timeout_secs")) {
        let here = match &origin {
            Origin::Flags(flags) => flags.flag_of("runner.timeout_secs").map(str::to_string),
            // The entry's runner or the top-level one.
            Origin::Entry(_) => set(&format!(
                "/{}/timeout_secs",
                runner_from.replace(['[', '.'], "/").replace(']', "")
            ))
            .then(|| format!("{runner_from}.timeout_secs")),
        };
        let from = here.unwrap_or_else(|| {
            format!(
                "{BUILT_IN} of the {} runner",
                runner.map_or("", |r| r.kind())
            )
        });
        c.push("runner_timeout_secs", timeout.clone(), from);
    }
    let (limits, limits_from) = match (entry.allow_request_limits, section.allow_request_limits) {
        (Some(yes), _) => (yes, format!("{at}.allow_request_limits")),
        (None, Some(yes)) => (yes, "server.allow_request_limits".to_string()),
        (None, None) => (false, BUILT_IN.to_string()),
    };
    c.push(
        "request_limits",
        if limits {
            "X-Enforce-Max-Retries and X-Enforce-Token-Budget may lower max_retries and budget.max_tokens per request"
        } else {
            "none: X-Enforce-Max-Retries / X-Enforce-Token-Budget are refused (400)"
        },
        limits_from,
    );

    // How answers reach the client.
    model_options(&mut c, entry, &origin, &raw);

    let access = args
        .key
        .as_deref()
        .map(|key| access(key, &section, &server, &args.model, &profile, entry))
        .transpose()?;
    let allowed = access.as_ref().is_none_or(|a| a["allowed"] == true);
    let text = if args.json {
        let mut contract = serde_json::Map::new();
        for item in &c.items {
            contract.insert(
                item.key.clone(),
                json!({"value": item.value, "from": item.from}),
            );
        }
        let mut out = json!({"model": args.model, "contract": contract});
        if let Some(access) = access {
            out["access"] = access;
        }
        format!(
            "{}\n",
            serde_json::to_string_pretty(&out).unwrap_or_default()
        )
    } else {
        render_text(&args.model, &c, access.as_ref())
    };
    Ok((text, allowed))
}

/// `explore` as `enforce config explain` shows it: set, or, by default, on only where the
/// chooser learns from its outcomes.
fn explore_line(auto: &ReaskAuto) -> Value {
    let (learning, fixed) = (auto.settings(true).explore, auto.settings(false).explore);
    if learning == fixed {
        json!(fixed)
    } else {
        json!("in `enforce serve`, which learns from its outcomes; not over the fixed file (`enforce run`, `enforce eval`, Python)")
    }
}

/// `reask: auto`: its settings, and what the statistics file says it would choose for the
/// profile's model per issue code, with the rates compared (exploration off: the best
/// expected valid answers per token; exploring, a request may draw another). An unreadable
/// statistics file is an error, as it is for `enforce serve`.
fn auto_lines(
    c: &mut Contract,
    profile: &Profile,
    runner: Option<&RunnerConfig>,
    layer: &dyn Fn(&str) -> String,
) -> Result<(), String> {
    let (Some(auto), Some(reask_auto)) = (profile.reask_auto(), &profile.policy().reask_auto)
    else {
        return Ok(());
    };
    let fallback = &profile.policy().reask;
    let settings = auto.settings(false);
    let stats_file = auto.stats.as_ref().map(|p| p.display().to_string());
    let value = json!({
        "stats": stats_file,
        "fallback": fallback,
        "strategies": reask_auto.strategies,
        "explore": explore_line(auto),
        "seed": settings.seed,
        "min_attempts": settings.min_attempts,
    });
    c.push("reask_auto", value, layer("reask_auto"));
    let Some(stats) = auto.read_stats().map_err(|e| e.to_string())? else {
        let none = "no statistics file (`reask_auto.stats`): every re-ask takes the fallback ladder, and the outcome warns REASK_AUTO_NO_CHOOSER";
        c.push("reask_auto.choices", none, BUILT_IN);
        return Ok(());
    };
    let model = runner.and_then(model_of).unwrap_or_default();
    let chooser = auto.chooser(&stats, model, profile.name());
    let constraint = runner
        .and_then(|r| decode::for_profile(profile, profile.policy(), r, false))
        .is_some_and(|c| !c.params.is_empty());
    let candidates = reask_auto.candidates(
        fallback.rung(0),
        constraint,
        profile.escalate_to().is_some(),
    );
    let from = format!(
        "{} for model `{model}`, profile `{}`",
        stats_file.unwrap_or_default(),
        profile.name()
    );
    let codes = chooser.codes();
    if codes.is_empty() {
        let none = "no re-asks measured for this model and profile: every re-ask takes the fallback ladder";
        c.push("reask_auto.choices", none, from);
        return Ok(());
    }
    for code in codes {
        let codes = [code];
        let choice = chooser.by_means(&ChoiceInput::new(&codes, &candidates, fallback.rung(0)));
        c.push(
            format!("reask_auto.choices.{code}"),
            choice_json(&choice),
            from.clone(),
        );
    }
    Ok(())
}

/// A choice as `explain` shows it: the strategy, how, and the strategies compared, their
/// figures rounded (what a reader compares, not a float's last digits).
fn choice_json(choice: &Choice) -> Value {
    let round = |x: f64| (x * 1e4).round() / 1e4;
    let compared: Vec<Value> = choice
        .reason
        .compared
        .iter()
        .map(|c| {
            json!({
                "strategy": c.strategy,
                "attempts": c.attempts,
                "valid": c.valid,
                "mean": round(c.mean),
                "tokens": c.tokens.map(round),
                "score": round(c.score),
            })
        })
        .collect();
    json!({"choose": choice.strategy, "by": choice.reason.by, "compared": compared})
}

/// `decode`: how answers are decoded and, when constrained (every attempt with `decode:
/// constrained`, the re-asks of the rung `constrained`), what the runner is sent or why it
/// cannot constrain.
fn decode_line(c: &mut Contract, profile: &Profile, runner: Option<&RunnerConfig>, from: String) {
    let rung = decode::has_constrained_rung(profile.policy());
    let value = match (profile.decode(), rung, runner) {
        (Decode::Free, false, _) => json!("free"),
        (Decode::Constrained, _, None) => json!("constrained (no runner)"),
        (Decode::Free, true, None) => {
            json!("free; the re-ask rung `constrained` constrains its re-asks (no runner)")
        }
        (_, _, Some(runner)) => constrained_on(profile, runner, rung),
    };
    c.push("decode", value, from);
}

/// What constraining `profile`'s answers sends `runner`, on which attempts (`rung`: only the
/// re-asks of the rung `constrained`), with the notes; a rung whose contract gives no
/// constraint resamples, and says so.
fn constrained_on(profile: &Profile, runner: &RunnerConfig, rung: bool) -> Value {
    let on = if rung {
        "the re-asks of the rung `constrained`; other attempts answer freely"
    } else {
        "every attempt"
    };
    let Some(constrained) = decode::for_profile(profile, profile.policy(), runner, false) else {
        return json!({
            "constrained": false,
            "on": on,
            "runner": runner.kind(),
            "sends": [],
            "notes": ["the contract gives no constraint (a `json` validator on the whole answer, a `one_of` list, a whole-answer `pattern`): the rung `constrained` resamples without one"],
        });
    };
    let sends: Vec<&String> = constrained.params.keys().collect();
    let mut value = json!({
        "constrained": true,
        "on": on,
        "runner": runner.kind(),
        "sends": sends,
        "notes": constrained.notes,
    });
    if let Some(engine) = constrained.engine {
        value["engine"] = json!(engine);
    }
    value
}

/// The entry's presentation options and where they come from.
fn model_options(c: &mut Contract, entry: &ServedModelConfig, origin: &Origin<'_>, raw: &Value) {
    let from = |key: &str| {
        origin
            .sets(key, raw)
            .unwrap_or_else(|| BUILT_IN.to_string())
    };
    let word = |v: FailureResponse| serde_json::to_value(v).unwrap_or(Value::Null);
    let mode = match entry.stream_mode {
        StreamMode::Draft => "draft",
        _ => "hold",
    };
    c.push("stream_mode", mode, from("stream_mode"));
    let on_unresolved = entry
        .on_unresolved
        .unwrap_or_else(|| entry.stream_mode.default_on_unresolved());
    let unresolved_from = origin
        .sets("on_unresolved", raw)
        .unwrap_or_else(|| format!("{BUILT_IN} for stream_mode {mode}"));
    c.push("on_unresolved", word(on_unresolved), unresolved_from);
    c.push(
        "on_unavailable",
        word(entry.on_unavailable),
        from("on_unavailable"),
    );
    c.push("status_events", entry.status_events, from("status_events"));
    c.push(
        "check_tool_calls",
        entry.check_tool_calls,
        from("check_tool_calls"),
    );
    c.push(
        "hide_step_marker",
        entry.hide_step_marker,
        from("hide_step_marker"),
    );
}

/// What key `key` (a name in `server.api_keys`, or the key itself) may use, and whether that
/// covers this model and its profiles.
fn access(
    key: &str,
    section: &ServerSection,
    server: &enforce_server::ServerConfig,
    model: &str,
    profile: &str,
    entry: &ServedModelConfig,
) -> Result<Value, String> {
    let grant = server
        .key_grants
        .iter()
        .find(|g| g.name == key || g.key == key);
    let plain_index = section
        .api_keys
        .iter()
        .position(|e| matches!(e, ApiKeyEntry::Key(k) if k.trim() == key));
    let from_env = std::env::var(enforce_server::API_KEYS_ENV)
        .ok()
        .and_then(|v| enforce_server::parse_key_list(&v).ok())
        .is_some_and(|keys| keys.iter().any(|k| k == key));
    let Some(grant) = grant else {
        let from = match plain_index {
            Some(i) => format!("server.api_keys[{i}]"),
            None if from_env => enforce_server::API_KEYS_ENV.to_string(),
            None => {
                let configured = !section.api_keys.is_empty() || from_env;
                return Err(if configured {
                    format!("no key `{key}` in server.api_keys or {} (give its `name` or the key itself)", enforce_server::API_KEYS_ENV)
                } else {
                    format!("no keys are configured (server.api_keys, {}): this proxy accepts every request without a key", enforce_server::API_KEYS_ENV)
                });
            }
        };
        return Ok(
            json!({"key": key_label(key), "from": from, "models": "all", "profiles": "all", "allowed": true}),
        );
    };
    let index = section
        .api_keys
        .iter()
        .position(|e| matches!(e, ApiKeyEntry::Scoped(s) if s.name.as_deref() == Some(grant.name.as_str())))
        .map(|i| format!("server.api_keys[{i}]"))
        .unwrap_or_else(|| grant.name.clone());
    let mut denied = Vec::new();
    if !grant.allows_model(model) {
        denied.push(format!("the model `{model}` (403 model_not_allowed)"));
    }
    if !grant.allows_profile(profile) {
        denied.push(format!("the profile `{profile}` (403 profile_not_allowed)"));
    }
    let routed: Vec<&str> = entry
        .routes
        .iter()
        .map(|r| r.profile.as_str())
        .filter(|p| !grant.allows_profile(p))
        .collect();
    Ok(json!({
        "key": grant.name,
        "from": index,
        "models": grant.models.clone().map_or(json!("all"), Value::from),
        "profiles": grant.profiles.clone().map_or(json!("all"), Value::from),
        "allowed": denied.is_empty(),
        "denied": denied,
        "routes_denied": routed,
    }))
}

/// An anonymous key, shown by its first characters, never whole.
fn key_label(key: &str) -> String {
    let shown: String = key.chars().take(4).collect();
    format!("{shown}…")
}

/// A route's condition in one line.
fn describe_when(when: &WhenConfig) -> String {
    let values = match (&when.equals, &when.one_of) {
        (Some(v), _) => format!("equals {v}"),
        (None, Some(vs)) => format!("one of {}", Value::from(vs.clone())),
        _ => String::new(),
    };
    if let Some(field) = &when.field {
        format!("field {field} {values}")
    } else if let Some(header) = &when.header {
        format!("header {header} {values}")
    } else if let Some(pattern) = &when.matches {
        format!("last user message matches {pattern}")
    } else if let Some(label) = &when.label {
        format!("classifier label {label}")
    } else {
        format!(
            "classifier label one of {}",
            when.labels.clone().unwrap_or_default().join(", ")
        )
    }
}

/// Runner options with secrets replaced (any field whose name ends in `key`).
fn redact(mut value: Value) -> Value {
    if let Value::Object(fields) = &mut value {
        for (name, v) in fields.iter_mut() {
            if name.ends_with("key") && !v.is_null() {
                *v = json!("(set)");
            }
        }
        fields.retain(|_, v| !v.is_null());
    }
    value
}

fn render_text(model: &str, c: &Contract, access: Option<&Value>) -> String {
    let mut out = format!("model {model}\n");
    let width = c.items.iter().map(|i| i.key.len()).max().unwrap_or(0);
    for item in &c.items {
        let value = match &item.value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!(
            "  {:width$}  {value}\n  {:width$}    from: {}\n",
            item.key, "", item.from
        ));
    }
    if let Some(access) = access {
        out.push_str(&format!(
            "key {} ({})\n  models: {}\n  profiles: {}\n",
            access["key"].as_str().unwrap_or(""),
            access["from"].as_str().unwrap_or(""),
            list(&access["models"]),
            list(&access["profiles"]),
        ));
        if access["allowed"] == true {
            out.push_str(&format!("  may use {model}\n"));
        } else {
            for denied in access["denied"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "  may NOT use {}\n",
                    denied.as_str().unwrap_or("")
                ));
            }
        }
        for profile in access["routes_denied"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  a request routed to the profile `{}` is refused (403)\n",
                profile.as_str().unwrap_or("")
            ));
        }
    }
    out
}

fn list(value: &Value) -> String {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect::<Vec<_>>()
            .join(", "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
