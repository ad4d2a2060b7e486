//! A profile's decoding constraint in the request parameters each runner understands.
//!
//! One place for `decode: constrained`, the re-ask rung `constrained` (and the `constrained`
//! arm of `enforce eval`): the local runner gets the JSON Schema (`response_format`, compiled
//! by its `constraint_engine`), a `regex` for a whole-answer `pattern` rule, or a GBNF
//! `grammar` for a `one_of` list; the openai runner a `json_schema` response format (strict
//! when the schema fits OpenAI's strict mode), the anthropic runner the same response format,
//! which it sends as `output_config.format`. Runners without such a control get nothing and a
//! note.

use enforce_config::profile::{Constrained, Constraint, Decode};
use enforce_config::Profile;
use enforce_core::{policy::Reask, Policy};
use enforce_runner::RunnerConfig;
use enforce_runner_local::{choices_to_gbnf, plan_regex, plan_schema, ConstraintEngine};
use serde_json::{json, Value};

/// The schema's name in a `json_schema` response format (OpenAI requires one).
const SCHEMA_NAME: &str = "contract";

/// What `profile` asks of `runner` when its answers are enforced with `policy` (the profile's
/// own, or an eval arm's): `None` when nothing is constrained (the profile decodes freely,
/// `forced`, the eval arm `constrained`, is off, and no re-ask rung of `policy` is
/// `constrained`) or its contract gives no constraint. With the rung, the loop sends the
/// constraint only on that rung's attempts.
pub fn for_profile(
    profile: &Profile,
    policy: &Policy,
    runner: &RunnerConfig,
    forced: bool,
) -> Option<Constrained> {
    let wanted = forced || profile.decode() == Decode::Constrained || has_constrained_rung(policy);
    if !wanted {
        return None;
    }
    profile.constraint().map(|c| for_runner(runner, c))
}

/// Whether a re-ask of `policy` may be `constrained`: a rung of its ladder, or a strategy
/// `reask: auto` may take.
pub fn has_constrained_rung(policy: &Policy) -> bool {
    policy.reask.rungs().contains(&Reask::Constrained)
        || policy
            .reask_auto
            .as_ref()
            .is_some_and(|auto| auto.strategies.contains(&Reask::Constrained))
}

/// The engine that compiles the local runner's JSON Schemas (`None` for other runners).
pub fn engine(runner: &RunnerConfig) -> Option<ConstraintEngine> {
    match runner {
        RunnerConfig::Local(c) => Some(c.constraint_engine),
        _ => None,
    }
}

/// The parameters and notes for `constraint` on `runner`.
pub fn for_runner(runner: &RunnerConfig, constraint: &Constraint) -> Constrained {
    let mut out = Constrained::default();
    let runner = match engine(runner) {
        Some(engine) => return for_local(engine, constraint),
        None => runner.kind(),
    };
    match (runner, constraint) {
        ("openai", Constraint::Json { schema: None, .. }) => {
            // JSON mode: a JSON object, the closest a schema-less request gets.
            out.params
                .insert("response_format".into(), json!({"type": "json_object"}));
        }
        ("openai", Constraint::Json {
            schema: Some(schema),
            ..
        }) => {
            let gaps = strict_mode_gaps(schema);
            let strict = gaps.is_empty();
            if !strict {
                out.notes.push(format!(
                    "the schema does not fit OpenAI's strict mode ({}); it is sent with strict: false, as guidance the server need not enforce",
                    gaps.join("; ")
                ));
            }
            out.params.insert(
                "response_format".into(),
                json_schema_format(schema.clone(), Some(strict)),
            );
        }
        ("anthropic", Constraint::Json {
            schema: Some(schema),
            ..
        }) => {
            // The anthropic runner sends it as `output_config.format`.
            out.params.insert(
                "response_format".into(),
                json_schema_format(schema.clone(), None),
            );
        }
        ("anthropic", Constraint::Json { schema: None, .. }) => out.notes.push(
            "the anthropic runner constrains only to a JSON Schema, and the json validator has none; answers are decoded freely".into(),
        ),
        ("openai" | "anthropic", Constraint::OneOf(_)) => out.notes.push(format!(
            "the {runner} runner constrains only to a JSON Schema, not to a one_of list; answers are decoded freely"
        )),
        ("openai" | "anthropic", Constraint::Regex(_)) => out.notes.push(format!(
            "the {runner} runner constrains only to a JSON Schema, not to a regex; answers are decoded freely"
        )),
        (other, _) => out.notes.push(format!(
            "the {other} runner cannot constrain decoding; answers are decoded freely"
        )),
    }
    out
}

/// The local runner's parameters: the schema for its engine (what that engine leaves looser
/// is a note), the regex for llguidance, a GBNF grammar of the choices.
fn for_local(engine: ConstraintEngine, constraint: &Constraint) -> Constrained {
    let mut out = Constrained::default();
    match constraint {
        Constraint::Json { schema, .. } => {
            let schema = schema.clone().unwrap_or(Value::Bool(true));
            let plan = plan_schema(engine, &schema);
            out.engine = Some(plan.engine.as_str());
            out.notes = plan.notes;
            out.params
                .insert("response_format".into(), json_schema_format(schema, None));
        }
        Constraint::OneOf(values) => {
            out.engine = Some(ConstraintEngine::Gbnf.as_str());
            out.params
                .insert("grammar".into(), Value::String(choices_to_gbnf(values)));
        }
        Constraint::Regex(regex) => match plan_regex(regex) {
            Ok(()) => {
                out.engine = Some(ConstraintEngine::Llguidance.as_str());
                out.params
                    .insert("regex".into(), Value::String(regex.clone()));
            }
            Err(why) => out.notes.push(format!(
                "llguidance cannot take the regex ({why}); answers are decoded freely"
            )),
        },
        _ => out.notes.push(
            "the local runner cannot take this constraint; answers are decoded freely".into(),
        ),
    }
    out
}

/// `{type: json_schema, json_schema: {name, schema[, strict]}}`.
fn json_schema_format(schema: Value, strict: Option<bool>) -> Value {
    let mut inner = json!({"name": SCHEMA_NAME, "schema": schema});
    if let Some(strict) = strict {
        inner["strict"] = Value::Bool(strict);
    }
    json!({"type": "json_schema", "json_schema": inner})
}

/// Why `schema` is not accepted by OpenAI's strict structured outputs, one line per place:
/// the root must be an object, and every object must list all its properties in `required`
/// and set `additionalProperties: false`. Empty when it fits.
pub fn strict_mode_gaps(schema: &Value) -> Vec<String> {
    let mut gaps = Vec::new();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        gaps.push("the root is not `type: object`".to_string());
    }
    objects_gaps(schema, "root", &mut gaps, 0);
    gaps
}

/// Nesting followed by the strict-mode check (deeper is reported as a gap, not recursed).
const MAX_STRICT_DEPTH: usize = 32;

fn objects_gaps(schema: &Value, at: &str, gaps: &mut Vec<String>, depth: usize) {
    let Some(map) = schema.as_object() else {
        return;
    };
    if depth > MAX_STRICT_DEPTH {
        gaps.push(format!(
            "`{at}` is nested deeper than {MAX_STRICT_DEPTH} levels"
        ));
        return;
    }
    let properties = map.get("properties").and_then(Value::as_object);
    let is_object =
        properties.is_some() || map.get("type").and_then(Value::as_str) == Some("object");
    if is_object {
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            gaps.push(format!("`{at}` lacks `additionalProperties: false`"));
        }
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let optional: Vec<&str> = properties
            .into_iter()
            .flat_map(|p| p.keys())
            .map(String::as_str)
            .filter(|k| !required.contains(k))
            .collect();
        if !optional.is_empty() {
            gaps.push(format!("`{at}` does not require {}", optional.join(", ")));
        }
    }
    for (key, value) in map {
        match key.as_str() {
            "properties" | "$defs" | "definitions" => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    objects_gaps(sub, &format!("{at}.{name}"), gaps, depth + 1);
                }
            }
            "items" | "additionalProperties" => {
                objects_gaps(value, &format!("{at}.{key}"), gaps, depth + 1)
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                for (i, sub) in value.as_array().into_iter().flatten().enumerate() {
                    objects_gaps(sub, &format!("{at}.{key}[{i}]"), gaps, depth + 1);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_core::Request;

    fn city() -> Value {
        json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["city", "population"],
            "additionalProperties": false
        })
    }

    /// A runner of `kind` with its defaults (`local-gbnf`: the local runner on GBNF).
    fn runner(kind: &str) -> RunnerConfig {
        use enforce_runner::{AnthropicConfig, ClaudeConfig, CommandConfig, OpenAiConfig};
        use enforce_runner_local::LocalConfig;
        match kind {
            "claude" => RunnerConfig::Claude(ClaudeConfig::default()),
            "openai" => RunnerConfig::OpenAi(OpenAiConfig::default()),
            "anthropic" => RunnerConfig::Anthropic(AnthropicConfig::default()),
            "command" => RunnerConfig::Command(CommandConfig::default()),
            "local" => RunnerConfig::Local(LocalConfig::default()),
            _ => RunnerConfig::Local(LocalConfig {
                constraint_engine: ConstraintEngine::Gbnf,
                ..LocalConfig::default()
            }),
        }
    }

    fn json_constraint(schema: Value) -> Constraint {
        Constraint::Json {
            schema: Some(schema),
            bare: true,
        }
    }

    #[test]
    fn openai_gets_a_strict_json_schema_when_the_schema_fits() {
        let got = for_runner(&runner("openai"), &json_constraint(city()));
        assert_eq!(
            Value::Object(got.params),
            json!({"response_format": {"type": "json_schema", "json_schema":
                {"name": "contract", "schema": city(), "strict": true}}})
        );
        assert!(got.notes.is_empty(), "{:?}", got.notes);
    }

    #[test]
    fn a_schema_outside_strict_mode_is_sent_non_strict_and_said() {
        let loose = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "object", "properties": {"c": {"type": "integer"}}}},
            "required": ["a"]
        });
        let got = for_runner(&runner("openai"), &json_constraint(loose));
        assert_eq!(
            got.params["response_format"]["json_schema"]["strict"],
            json!(false)
        );
        let note = got.notes.join("\n");
        for gap in [
            "`root` lacks `additionalProperties: false`",
            "`root` does not require b",
            "`root.b` lacks",
            "`root.b` does not require c",
        ] {
            assert!(note.contains(gap), "{gap} in {note}");
        }
        assert_eq!(
            strict_mode_gaps(&json!({"type": "array"})),
            vec!["the root is not `type: object`".to_string()]
        );
    }

    #[test]
    fn the_local_runner_gets_the_schema_or_a_grammar_of_the_choices() {
        let got = for_runner(&runner("local"), &json_constraint(city()));
        assert_eq!(
            got.params["response_format"]["json_schema"]["schema"],
            city()
        );
        let any = for_runner(
            &runner("local"),
            &Constraint::Json {
                schema: None,
                bare: false,
            },
        );
        assert_eq!(
            any.params["response_format"]["json_schema"]["schema"],
            json!(true)
        );
        let choices = for_runner(
            &runner("local"),
            &Constraint::OneOf(vec!["yes".into(), "no".into()]),
        );
        let grammar = choices.params["grammar"].as_str().unwrap();
        assert!(
            grammar.contains(r#""yes""#) && grammar.contains(r#""no""#),
            "{grammar}"
        );
    }

    #[test]
    fn what_the_local_grammar_loosens_is_a_note() {
        let got = for_runner(
            &runner("local-gbnf"),
            &json_constraint(json!({"type": "string", "maxLength": 10000})),
        );
        assert!(
            got.notes.iter().any(|n| n.contains("maxLength` 10000")),
            "{:?}",
            got.notes
        );
        assert_eq!(got.engine, Some("gbnf"));
    }

    /// llguidance is in the binary with the local runner only.
    #[cfg(feature = "local")]
    #[test]
    fn llguidance_takes_the_whole_schema_and_a_regex() {
        let schema = json!({"type": "string", "maxLength": 10000, "pattern": "^[a-z]+$"});
        let got = for_runner(&runner("local"), &json_constraint(schema.clone()));
        assert!(got.notes.is_empty(), "{:?}", got.notes);
        assert_eq!(got.engine, Some("llguidance"));
        assert_eq!(
            got.params["response_format"]["json_schema"]["schema"],
            schema
        );
        let regex = for_runner(
            &runner("local"),
            &Constraint::Regex("[A-Z]{3}-[0-9]{2}".into()),
        );
        assert_eq!(regex.params["regex"], "[A-Z]{3}-[0-9]{2}");
        assert!(regex.notes.is_empty(), "{:?}", regex.notes);
        // A regex llguidance cannot compile is said, and nothing is sent.
        let refused = for_runner(&runner("local-gbnf"), &Constraint::Regex("a(?=b)".into()));
        assert!(refused.params.is_empty(), "{:?}", refused.params);
        assert!(
            refused.notes[0].contains("decoded freely"),
            "{:?}",
            refused.notes
        );
    }

    #[test]
    fn runners_that_cannot_constrain_say_so_and_send_nothing() {
        for (kind, constraint) in [
            ("claude", json_constraint(city())),
            ("command", json_constraint(city())),
            ("openai", Constraint::OneOf(vec!["a".into()])),
            ("anthropic", Constraint::OneOf(vec!["a".into()])),
            ("openai", Constraint::Regex("a+".into())),
            ("anthropic", Constraint::Regex("a+".into())),
            (
                "anthropic",
                Constraint::Json {
                    schema: None,
                    bare: true,
                },
            ),
        ] {
            let got = for_runner(&runner(kind), &constraint);
            assert!(got.params.is_empty(), "{kind}: {:?}", got.params);
            assert_eq!(got.notes.len(), 1, "{kind}");
            assert!(got.notes[0].contains("freely"), "{}", got.notes[0]);
        }
    }

    /// Profiles of one file: `json` decodes freely, `rung` has the re-ask rung `constrained`,
    /// `prose` has the rung and a contract without a constraint.
    fn profiles() -> enforce_config::ProfileSet {
        let yaml = "validators:\n  j:\n    type: json\n    bare: true\n\
                    profiles:\n  json:\n    validators: [j]\n  \
                    rung:\n    validators: [j]\n    reask: [constrained, resample]\n  \
                    prose:\n    validators: [step_marker]\n    reask: constrained\n";
        enforce_config::ProfileSet::load(
            &enforce_config::ConfigSource::from_string("t.yaml", yaml),
            &enforce_config::Registry::builtin(),
            None,
        )
        .expect("profiles")
    }

    #[test]
    fn a_constrained_rung_in_the_policy_asks_for_the_constraint() {
        let set = profiles();
        let local = runner("local");
        let sends = |profile: &str, policy: Option<&Policy>, forced: bool| {
            let profile = set.get(profile).expect("profile");
            let policy = policy.unwrap_or(profile.policy());
            for_profile(profile, policy, &local, forced)
                .is_some_and(|c| c.params.contains_key("response_format"))
        };
        assert!(!sends("json", None, false), "free decoding, no rung");
        assert!(sends("json", None, true), "the eval arm `constrained`");
        assert!(sends("rung", None, false), "the profile's own rung");
        // An eval arm's ladder decides, not the profile's.
        let ladder = Policy::builder()
            .reask(
                enforce_core::policy::Ladder::new(vec![Reask::Constrained, Reask::Feedback])
                    .unwrap(),
            )
            .build();
        assert!(sends("json", Some(&ladder), false));
        assert!(!sends("rung", Some(&Policy::default()), false));
        // A rung whose contract gives no constraint has nothing to send: it resamples.
        assert!(!sends("prose", None, false));
    }

    #[test]
    fn the_requests_own_parameters_win() {
        let got = for_runner(&runner("openai"), &json_constraint(city()));
        let mut own = Request::default();
        own.params
            .insert("response_format".into(), json!({"type": "text"}));
        own.params.insert("seed".into(), json!(4));
        got.apply_to(&mut own);
        assert_eq!(own.params["response_format"], json!({"type": "text"}));
        assert!(
            own.constraint_params.is_empty(),
            "the caller's own is no constraint"
        );
        let mut empty = Request::default();
        got.apply_to(&mut empty);
        assert_eq!(empty.params["response_format"]["type"], "json_schema");
        assert_eq!(empty.constraint_params, ["response_format"]);
    }
}
