use super::*;
use crate::testing::block_on;
use enforce_core::{feedback::Language, policy::AnswerFormat, Context, FailMode, Status};
use std::path::Path;

fn load(yaml: &str) -> Result<ProfileSet, ConfigError> {
    ProfileSet::load(
        &ConfigSource::from_string("t.yaml", yaml),
        &Registry::builtin(),
        None,
    )
}

#[test]
fn builtin_profiles_work_without_config() {
    let set = ProfileSet::builtin(&Registry::builtin(), None).unwrap();
    assert_eq!(
        set.get("chat").unwrap().validator_names(),
        vec!["step_marker"]
    );
    assert_eq!(
        set.get("adr").unwrap().validator_names(),
        vec!["step_marker", "adr_structure", "file_refs"]
    );
    assert_eq!(set.default_profile().unwrap().name(), "chat");
    let out = block_on(set.enforcer("chat").unwrap().check(
        "hi",
        &Context::new(),
        enforce_core::Check::Report,
    ));
    assert_eq!(out.status, Status::Unresolved);
    assert_eq!(out.codes(), vec!["MISSING_STEP_MARKER"]);
}

#[test]
fn profile_policy_layers_over_defaults() {
    let set = load(
        "defaults:\n  max_retries: 5\n  on_unavailable: open\n  feedback: { language: de }\n  fallback: 'Hallo {{company_name}}'\n\
         profiles:\n  p:\n    validators: [step_marker]\n    max_retries: 1\n    budget: { max_attempts: 2 }\n",
    )
    .unwrap();
    let p = set.get("p").unwrap();
    assert_eq!(p.policy().max_retries, 1);
    assert_eq!(p.policy().budget.max_attempts, Some(2));
    assert_eq!(p.policy().on_unavailable, FailMode::Open);
    assert_eq!(
        p.policy().fallback.as_deref(),
        Some("Hallo {{company_name}}")
    );
    assert_eq!(
        p.policy().feedback.template(),
        &enforce_core::feedback::FeedbackTemplate::for_language(Language::De)
    );
    assert_eq!(set.get("chat").unwrap().policy().max_retries, 5);
}

#[test]
fn reask_takes_a_ladder_and_stop_on_no_progress_a_switch() {
    use enforce_core::policy::Reask;
    let set = load(
        "defaults:\n  stop_on_no_progress: true\n\
         profiles:\n  p:\n    validators: [step_marker]\n    reask: [feedback, resample]\n    \
         stop_on_no_progress: false\n  q:\n    validators: [step_marker]\n",
    )
    .unwrap();
    let p = set.get("p").unwrap().policy();
    assert_eq!(p.reask.rungs(), [Reask::Feedback, Reask::Resample]);
    assert!(!p.stop_on_no_progress);
    assert!(set.get("q").unwrap().policy().stop_on_no_progress);
    let err = load("profiles:\n  p:\n    validators: [step_marker]\n    reask: []\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least one strategy"), "{err}");
}

#[test]
fn the_new_strategies_parse_as_rungs_and_first_attempt_and_escalate_to_are_kept() {
    use enforce_core::policy::{FirstAttempt, Reask};
    let set = load(
        "defaults:\n  first_attempt: reason_then_format\n\
         profiles:\n  p:\n    validators: [step_marker]\n    \
         reask: [reason_then_format, escalate, resample]\n    escalate_to: big\n  \
         q:\n    validators: [step_marker]\n    first_attempt: direct\n",
    )
    .unwrap();
    let p = set.get("p").unwrap();
    assert_eq!(
        p.policy().reask.rungs(),
        [Reask::ReasonThenFormat, Reask::Escalate, Reask::Resample]
    );
    assert_eq!(p.policy().first_attempt, FirstAttempt::ReasonThenFormat);
    assert_eq!(p.escalate_to(), Some("big"));
    let q = set.get("q").unwrap();
    assert_eq!(q.policy().first_attempt, FirstAttempt::Direct);
    assert_eq!(q.escalate_to(), None);
    let err = load("profiles:\n  p:\n    validators: [step_marker]\n    reask: escalated\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("reason_then_format") && err.contains("escalate"),
        "the valid strategies are named: {err}"
    );
}

#[test]
fn a_constrained_rung_needs_no_constraint_but_not_decode_constrained_beside_it() {
    use enforce_core::policy::Reask;
    // A contract that gives no constraint may have the rung: it resamples.
    let set = load(
        "profiles:\n  p:\n    validators: [step_marker]\n    \
         reask: [constrained, resample, feedback]\n",
    )
    .unwrap();
    let p = set.get("p").unwrap();
    assert_eq!(
        p.policy().reask.rungs(),
        [Reask::Constrained, Reask::Resample, Reask::Feedback]
    );
    assert!(p.constraint().is_none());
    let json = "validators:\n  j:\n    type: json\n    bare: true\n";
    let set = load(&format!(
        "{json}profiles:\n  p:\n    validators: [j]\n    reask: [constrained, resample]\n"
    ))
    .unwrap();
    assert!(set.get("p").unwrap().constraint().is_some());
    // With every attempt constrained, the rung would change nothing: the error names the fix,
    // also when the rung comes from `defaults`.
    let err = load(&format!(
        "{json}defaults:\n  reask: constrained\n\
         profiles:\n  p:\n    validators: [j]\n    decode: constrained\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("profiles.p.decode"), "{err}");
    assert!(err.contains("drop `decode: constrained`"), "{err}");
}

#[test]
fn reask_and_repair_keys_layer_over_defaults() {
    let set = load(
        "defaults:\n  reask: resample\n  repair: first\n  repair_first_codes: [INVALID_JSON]\n\
         profiles:\n  fresh:\n    validators: [step_marker]\n    reask: feedback_fresh\n    \
         repair: last\n    repair_first_codes: []\n  inherits:\n    validators: [step_marker]\n",
    )
    .unwrap();
    let fresh = set.get("fresh").unwrap().policy();
    assert_eq!(
        fresh.reask,
        enforce_core::policy::Reask::FeedbackFresh.into()
    );
    assert_eq!(fresh.repair, enforce_core::policy::RepairWhen::Last);
    assert!(fresh.repair_first_codes.is_empty());
    let inherits = set.get("inherits").unwrap().policy();
    assert_eq!(inherits.reask, enforce_core::policy::Reask::Resample.into());
    assert_eq!(inherits.repair, enforce_core::policy::RepairWhen::First);
    assert_eq!(
        inherits.repair_first_codes,
        vec!["INVALID_JSON".to_string()]
    );
    let plain = load("profiles:\n  p:\n    validators: [step_marker]\n").unwrap();
    assert_eq!(
        plain.get("p").unwrap().policy().reask,
        enforce_core::policy::Reask::Feedback.into()
    );
    assert!(plain.get("p").unwrap().policy().stop_on_no_progress);
    assert_eq!(
        plain.get("p").unwrap().policy().repair,
        enforce_core::policy::RepairWhen::Last
    );
    let err = load("profiles:\n  p:\n    validators: [step_marker]\n    reask: twice\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("reask"), "{err}");
    assert!(err.contains(":4:"), "file:line: {err}");
}

#[test]
fn a_bad_unavailable_status_is_an_error_at_its_file_and_line() {
    let err = load(
        "validators:\n  steps:\n    type: step_marker\n    unavailable_status: parser down\n\
         profiles:\n  p:\n    validators: [steps]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("unavailable_status"), "{err}");
    assert!(err.contains("'parser down' is not a status"), "{err}");
    assert!(err.contains(":4:"), "file:line: {err}");
}

#[test]
fn early_abort_keys_layer_over_defaults() {
    let set = load(
        "defaults:\n  early_abort: false\n  partial_check_bytes: 100\n\
         profiles:\n  on:\n    validators: [step_marker]\n    early_abort: true\n  \
         off:\n    validators: [step_marker]\n",
    )
    .unwrap();
    let on = set.get("on").unwrap().policy();
    assert!(on.early_abort);
    assert_eq!(on.partial_check_bytes, 100);
    assert!(!set.get("off").unwrap().policy().early_abort);
    let default = load("profiles:\n  p:\n    validators: [step_marker]\n").unwrap();
    assert!(
        default.get("p").unwrap().policy().early_abort,
        "on by default"
    );
}

#[test]
fn unknown_validator_names_point_at_the_list_entry() {
    let err = load("profiles:\n  p:\n    validators:\n      - step_marker\n      - stepmarker\n")
        .unwrap_err();
    assert_eq!(err.line, Some(5));
    assert_eq!(err.key.as_deref(), Some("profiles.p.validators[1]"));
    assert!(err.message.contains("'stepmarker'"), "{err}");
}

#[test]
fn validator_option_errors_point_at_the_option() {
    let err = load("validators:\n  steps:\n    type: step_marker\n    allowed: []\n").unwrap_err();
    assert_eq!(err.key.as_deref(), Some("validators.steps.allowed"));
    assert_eq!(err.line, Some(4));
    let err = load("validators:\n  steps:\n    type: step_marker\n    alowed: [a]\n").unwrap_err();
    assert_eq!(err.key.as_deref(), Some("validators.steps.alowed"));
    assert!(err.message.contains("unknown field `alowed`"), "{err}");
    assert_eq!(err.line, Some(4));
}

const RAG: &str = "validators:\n  short_question:\n    type: length\n    unit: chars\n    max: 20\nprofiles:\n  rag:\n    validators: []\n    input_validators: [short_question]\n";

#[test]
fn input_validators_reject_before_any_model_call() {
    let set = load(RAG).expect("loads");
    let profile = set.get("rag").expect("rag");
    assert_eq!(profile.input_validator_names(), vec!["short_question"]);
    let described = set.describe();
    let rag = described
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rag")
        .unwrap();
    assert_eq!(rag["input_validators"][0], "short_question");
    let runner = enforce_core::ScriptedRunner::texts(["answer"]);
    let long = enforce_core::Request::prompt("a question far longer than twenty characters");
    let outcome = block_on(profile.enforcer().run(&runner, &long, &Context::new()));
    assert_eq!(outcome.stop_reason, enforce_core::StopReason::InputRejected);
    assert!(runner.calls().is_empty());
    let short = enforce_core::Request::prompt("short?");
    let outcome = block_on(profile.enforcer().run(&runner, &short, &Context::new()));
    assert_eq!(outcome.status, Status::Passed);
}

#[test]
fn a_hint_profile_appends_its_note() {
    let yaml = format!("{RAG}    on_input_failure: hint\n    input_hint: Say if unsure.\n");
    let set = load(&yaml).expect("loads");
    let runner = enforce_core::ScriptedRunner::texts(["answer"]);
    let long = enforce_core::Request::prompt("a question far longer than twenty characters");
    let enforcer = set.get("rag").unwrap().enforcer();
    let outcome = block_on(enforcer.run(&runner, &long, &Context::new()));
    assert_eq!(outcome.status, Status::Passed);
    let enforce_core::scripted::ScriptedCall::Ask { request } = &runner.calls()[0] else {
        panic!("not an ask")
    };
    assert!(request.messages[0].content.ends_with("\n\nSay if unsure."));
}

#[test]
fn input_settings_errors_point_at_their_key() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "profiles:\n  p:\n    on_input_failure: hint\n",
            "profiles.p.on_input_failure",
            "without `input_validators`",
        ),
        (
            "    on_input_failure: reformulate\n",
            "profiles.rag.on_input_failure",
            "needs a `reformulate:` hook",
        ),
        (
            "    input_hint: x\n",
            "profiles.rag.input_hint",
            "only with `on_input_failure: hint`",
        ),
        (
            "    on_input_failure: reformulate\n    reformulate:\n      command: [x]\n      url: http://x\n",
            "profiles.rag.reformulate",
            "exactly one of",
        ),
        (
            "    on_input_failure: reformulate\n    reformulate:\n      runner: {type: openai}\n",
            "profiles.rag.reformulate.runner",
            "runners cannot be configured here",
        ),
        (
            "    on_input_failure: reformulate\n    reformulate:\n      url: ftp://x\n",
            "profiles.rag.reformulate.url",
            "not an http",
        ),
        (
            "    retrieved_context: {pointer: metadata}\n",
            "profiles.rag.retrieved_context.pointer",
            "not a JSON pointer",
        ),
        (
            "    retrieved_context: {fact: docs, section: {start: a, end: b}}\n",
            "profiles.rag.retrieved_context",
            "exactly one of `fact`, `pointer` or `section`",
        ),
        (
            "    retrieved_context: {section: {start: '', end: b}}\n",
            "profiles.rag.retrieved_context.section",
            "must not be empty",
        ),
        (
            "    input_validators: [nope]\n",
            "",
            "",
        ),
    ];
    for (tail, key, message) in cases {
        let yaml = if tail.starts_with("profiles") {
            tail.to_string()
        } else if tail.contains("input_validators") {
            "profiles:\n  rag:\n    input_validators: [nope]\n".to_string()
        } else {
            format!("{RAG}{tail}")
        };
        let err = load(&yaml).unwrap_err();
        if key.is_empty() {
            assert_eq!(err.key.as_deref(), Some("profiles.rag.input_validators[0]"));
            assert_eq!(err.line, Some(3), "{err}");
            continue;
        }
        assert_eq!(err.key.as_deref(), Some(*key), "{yaml}: {err}");
        assert!(err.line.is_some(), "{err}");
        assert!(err.message.contains(message), "{yaml}: {err}");
    }
}

#[test]
fn missing_fallback_file_and_default_profile_are_errors() {
    let err = load("profiles:\n  p:\n    fallback_file: nope.txt\n").unwrap_err();
    assert_eq!(err.key.as_deref(), Some("profiles.p.fallback_file"));
    assert_eq!(err.line, Some(3));
    assert!(err.message.contains("nope.txt"), "{err}");
    let err = load("defaults:\n  profile: ghost\n").unwrap_err();
    assert_eq!(err.line, Some(2));
}

#[test]
fn answers_are_json_with_a_whole_response_json_validator_or_when_told() {
    let set = load(
        "validators:\n  block: { type: json }\n  field: { type: json, input: { json: /a } }\n\
         profiles:\n  whole: { validators: [step_marker, block] }\n  bare: { validators: [json] }\n\
         \x20 part: { validators: [field] }\n  told: { validators: [field], answer_format: json }\n\
         \x20 plain: { validators: [block], answer_format: text }\n",
    )
    .unwrap();
    let format = |name: &str| set.get(name).unwrap().policy().answer_format;
    assert_eq!(format("whole"), AnswerFormat::Json);
    assert_eq!(format("bare"), AnswerFormat::Json);
    assert_eq!(format("part"), AnswerFormat::Text);
    assert_eq!(format("told"), AnswerFormat::Json);
    assert_eq!(format("plain"), AnswerFormat::Text);
    assert_eq!(format("chat"), AnswerFormat::Text);
    let err = load("profiles:\n  p: { answer_format: yaml }\n").unwrap_err();
    assert!(err.message.contains("yaml"), "{err}");
}

#[test]
fn validators_are_shared_between_profiles() {
    let set = load(
        "profiles:\n  a:\n    validators: [step_marker]\n  b:\n    validators: [step_marker]\n",
    )
    .unwrap();
    let a = &set.get("a").unwrap().validators()[0];
    let b = &set.get("b").unwrap().validators()[0];
    assert!(Arc::ptr_eq(a, b));
}

/// Every issue code of the built-in validators and of the loop.
const BUILTIN_CODES: &[&str] = &[
    "MISSING_STEP_MARKER",
    "INVALID_STEP",
    "STEP_NOT_ALLOWED",
    "MISSING_YAML_HEADER",
    "INVALID_YAML",
    "MISSING_ADR_FIELD",
    "MISSING_ADR_SECTION",
    "INSUFFICIENT_CRITERIA",
    "FILE_NOT_FOUND",
    "PATH_OUTSIDE_ROOT",
    "INVALID_JSON",
    "SCHEMA_VIOLATION",
    "FORBIDDEN_PATTERN",
    "MISSING_PATTERN",
    "TOO_SHORT",
    "TOO_LONG",
    "VALUE_NOT_ALLOWED",
    "MISSING_TERM",
    "FORBIDDEN_TERM",
    "PREFERRED_TERM",
    "INVALID_TOOL_ARGUMENTS",
    "UNKNOWN_TOOL",
    "EXTERNAL_CHECK_FAILED",
    "CODE_BLOCK_MISSING",
    "JUDGE_REJECTED",
    "CONTEXT_NOT_RELEVANT",
    "REQUEST_DATA_MISSING",
    "VALIDATOR_UNAVAILABLE",
    "VALIDATOR_DISABLED",
    "TRUNCATED",
    "FALLBACK_INVALID",
];

/// `feedback.messages` gives any built-in code its own words (here German), laid over the
/// defaults per code; the validator's English text is kept only through `{message}`.
#[test]
fn feedback_messages_give_every_built_in_code_its_own_words() {
    let mut yaml = String::from("defaults:\n  feedback:\n    language: de\n    messages:\n");
    for code in BUILTIN_CODES {
        yaml.push_str(&format!(
            "      {code}: {{message: 'Auf Deutsch: {code}', hint: 'Hinweis zu {code}'}}\n"
        ));
    }
    yaml.push_str(
        "profiles:\n  p:\n    validators: [step_marker]\n    feedback:\n      messages:\n        \
         TOO_LONG: {message: 'Zu lang ({message})'}\n",
    );
    let set = load(&yaml).unwrap();
    let feedback = &set.get("p").unwrap().policy().feedback;
    for code in BUILTIN_CODES {
        let issue =
            enforce_core::Issue::error("v", *code, "English words.").with_hint("An English hint.");
        let text = feedback.build(&[issue]);
        if *code == "TOO_LONG" {
            assert!(
                text.contains("- [TOO_LONG] Zu lang (English words.)"),
                "{text}"
            );
            assert!(text.contains("Hinweis: Hinweis zu TOO_LONG"), "{text}");
            continue;
        }
        assert!(
            text.contains(&format!("- [{code}] Auf Deutsch: {code}")),
            "{text}"
        );
        assert!(
            text.contains(&format!("Hinweis: Hinweis zu {code}")),
            "{text}"
        );
        assert!(!text.contains("English"), "{text}");
    }
}

#[test]
fn reask_auto_layers_its_settings_and_takes_its_fallback_ladder() {
    use enforce_core::policy::Reask;
    let set = load(
        "defaults:\n  reask: auto\n  reask_auto:\n    stats: /nowhere/stats.json\n    seed: 3\n\
         profiles:\n  p:\n    validators: [step_marker]\n    \
         reask_auto: {explore: false, fallback: [resample, feedback], strategies: [feedback, resample]}\n  \
         q:\n    validators: [step_marker]\n    reask: [feedback_fresh]\n",
    )
    .unwrap();
    let p = set.get("p").unwrap();
    let auto = p.reask_auto().expect("auto");
    assert_eq!(
        auto.stats.as_deref(),
        Some(Path::new("/nowhere/stats.json"))
    );
    assert_eq!(auto.stats_key, "defaults.reask_auto.stats");
    assert_eq!(auto.settings(false).seed, 3);
    assert!(
        !auto.settings(true).explore,
        "set to false, even where it learns"
    );
    assert_eq!(auto.settings(false).min_attempts, 5);
    assert_eq!(p.policy().reask.rungs(), [Reask::Resample, Reask::Feedback]);
    let strategies = &p.policy().reask_auto.as_ref().unwrap().strategies;
    assert_eq!(strategies, &[Reask::Feedback, Reask::Resample]);
    // A profile's own ladder is no `auto`.
    let q = set.get("q").unwrap();
    assert!(q.reask_auto().is_none() && q.policy().reask_auto.is_none());
    assert_eq!(q.policy().reask.rungs(), [Reask::FeedbackFresh]);
    // The built-in profiles take `defaults:`, with the default fallback and every strategy.
    let chat = set.get("chat").unwrap();
    assert!(chat.reask_auto().is_some());
    assert_eq!(
        chat.policy().reask.rungs(),
        [Reask::Constrained, Reask::Resample, Reask::Feedback]
    );
    assert_eq!(
        chat.policy().reask_auto.as_ref().unwrap().strategies,
        Reask::ALL
    );
}

#[test]
fn reask_auto_explores_only_where_the_chooser_learns_unless_told() {
    let set = load(
        "defaults:\n  reask: auto\nprofiles:\n  unset:\n    validators: [step_marker]\n  \
         on:\n    validators: [step_marker]\n    reask_auto: {explore: true}\n",
    )
    .unwrap();
    let unset = set.get("unset").unwrap().reask_auto().expect("auto");
    assert!(
        unset.settings(true).explore,
        "a chooser that learns explores"
    );
    assert!(
        !unset.settings(false).explore,
        "over fixed statistics it takes the best mean"
    );
    let on = set.get("on").unwrap().reask_auto().expect("auto");
    assert!(
        on.settings(false).explore,
        "explore: true holds over fixed statistics too"
    );
}

#[test]
fn reask_auto_is_no_bet_on_constrained_when_every_attempt_is_constrained() {
    use enforce_core::policy::Reask;
    let yaml = "validators:\n  j: {type: json}\nprofiles:\n  p:\n    validators: [j]\n    \
                reask: auto\n    decode: constrained\n  free:\n    validators: [j]\n    reask: auto\n";
    let set = load(yaml).unwrap();
    let strategies = |name: &str| {
        set.get(name)
            .unwrap()
            .policy()
            .reask_auto
            .as_ref()
            .unwrap()
            .strategies
            .clone()
    };
    assert!(!strategies("p").contains(&Reask::Constrained));
    assert!(strategies("free").contains(&Reask::Constrained));
    // The default fallback has no `constrained` rung where every attempt is constrained.
    let rungs = |name: &str| set.get(name).unwrap().policy().reask.rungs().to_vec();
    assert_eq!(rungs("p"), [Reask::Resample, Reask::Feedback]);
    assert_eq!(
        rungs("free"),
        [Reask::Constrained, Reask::Resample, Reask::Feedback]
    );
}

#[test]
fn reask_auto_repairs_first_unless_a_layer_says_when_to_repair() {
    use enforce_core::policy::RepairWhen;
    let yaml = [
        "validators:",
        "  j: {type: json}",
        "profiles:",
        "  auto: {validators: [j], reask: auto}",
        "  last: {validators: [j], reask: auto, repair: last}",
        "  ladder: {validators: [j]}",
    ]
    .join("\n");
    let set = load(&yaml).unwrap();
    let repair = |name: &str| set.get(name).unwrap().policy().repair;
    assert_eq!(repair("auto"), RepairWhen::First);
    assert_eq!(repair("last"), RepairWhen::Last);
    assert_eq!(repair("ladder"), RepairWhen::Last);
    let yaml = [
        "defaults: {repair: last, reask: auto}",
        "validators:",
        "  j: {type: json}",
        "profiles:",
        "  p: {validators: [j]}",
    ]
    .join("\n");
    let set = load(&yaml).unwrap();
    assert_eq!(set.get("p").unwrap().policy().repair, RepairWhen::Last);
}

#[test]
fn a_bad_reask_value_or_auto_key_is_an_error_at_its_line() {
    let err = load("profiles:\n  p:\n    validators: [step_marker]\n    reask: automatic\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains(":4:") && err.contains("`auto`"), "{err}");
    let err = load(
        "profiles:\n  p:\n    validators: [step_marker]\n    reask: auto\n    \
         reask_auto:\n      explor: false\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(":6:") && err.contains("explor"), "{err}");
}

#[test]
fn the_statistics_file_is_refused_with_its_name_when_unreadable_or_of_another_version() {
    use super::auto::read_stats;
    let dir = std::env::temp_dir().join(format!("enforce-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.json");
    let err = read_stats(&missing, "defaults.reask_auto.stats").unwrap_err();
    assert_eq!(err.key, "defaults.reask_auto.stats");
    assert!(err.message.contains("missing.json"), "{err}");
    let newer = dir.join("newer.json");
    std::fs::write(&newer, r#"{"version": 2, "rows": []}"#).unwrap();
    let err = read_stats(&newer, "k").unwrap_err();
    assert!(
        err.message.contains("newer.json") && err.message.contains("version 2"),
        "{err}"
    );
    let good = dir.join("good.json");
    let row = r#"{"model": "m", "profile": "p", "code": "X", "strategy": "resample", "attempts": 4, "valid": 1}"#;
    std::fs::write(&good, format!(r#"{{"version": 1, "rows": [{row}]}}"#)).unwrap();
    let stats = read_stats(&good, "k").unwrap();
    assert_eq!(
        stats.iter().next().map(|(_, t)| (t.attempts, t.valid)),
        Some((4, 1))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
