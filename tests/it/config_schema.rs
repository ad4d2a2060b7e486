//! The JSON Schema of `enforce.yaml` (`enforce config schema`, committed as
//! `schema/enforce.schema.json`) and the parser agree: the committed file is what the binary
//! prints, every example validates against it and loads, and bad specs are rejected by both.
//!
//! "The parser" is what users run: `enforce check --config FILE` (which parses every section and
//! builds every validator and profile), plus `ServerSection::to_config` for the values of
//! `server:` that only `enforce serve` interprets.

use crate::{repo, BIN};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The first line of every example: editors take the schema from it.
const MODELINE: &str = "# yaml-language-server: $schema=../schema/enforce.schema.json";

fn committed_schema_path() -> PathBuf {
    repo().join("schema/enforce.schema.json")
}

fn committed_schema() -> Value {
    let text = std::fs::read_to_string(committed_schema_path()).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub(crate) fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&committed_schema()).unwrap()
}

/// The schema's violations in a YAML text: (JSON pointer, message).
fn schema_errors(validator: &jsonschema::Validator, yaml: &str) -> Vec<(String, String)> {
    let value: Value = serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("not YAML: {e}"));
    // An empty file is an empty configuration, for the parser as for editors.
    let value = if value.is_null() {
        serde_json::json!({})
    } else {
        value
    };
    validator
        .iter_errors(&value)
        .map(|e| (e.instance_path().to_string(), e.to_string()))
        .collect()
}

/// The schema's verdict on a YAML text: `Err` lists the violations.
pub(crate) fn schema_verdict(validator: &jsonschema::Validator, yaml: &str) -> Result<(), String> {
    let errors = schema_errors(validator, yaml);
    if errors.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = errors.iter().map(|(at, e)| format!("{at}: {e}")).collect();
    Err(lines.join("\n"))
}

/// The JSON pointer of a key path as the parser writes it (`models[0].id` → `/models/0/id`).
fn pointer_of(key: &str) -> String {
    key.replace('[', ".")
        .replace(']', "")
        .split('.')
        .filter(|s| !s.is_empty())
        .map(|s| format!("/{s}"))
        .collect()
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "enforce-schema-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `enforce check --config FILE` on an empty input: `Err` with its message when the
/// configuration is refused (exit code 2).
fn check_verdict(config: &Path) -> Result<(), String> {
    let mut child = Command::new(BIN)
        .args(["check", "--format", "json", "--config"])
        .arg(config)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"").unwrap();
    let out = child.wait_with_output().unwrap();
    match out.status.code() {
        Some(0 | 1) => Ok(()),
        Some(2) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        other => panic!(
            "enforce check exited with {other:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The parser's verdict on a YAML text: `enforce check`, then the `server:` values.
fn parser_verdict(yaml: &str) -> Result<(), String> {
    let scratch = Scratch::new();
    let path = scratch.0.join("enforce.yaml");
    std::fs::write(&path, yaml).unwrap();
    check_verdict(&path)?;
    let value: Value = serde_yaml_ng::from_str(yaml).unwrap_or(Value::Null);
    if let Some(server) = value.get("server").filter(|s| !s.is_null()) {
        let section: enforce_server::ServerSection =
            serde_json::from_value(server.clone()).map_err(|e| e.to_string())?;
        section.to_config().map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[test]
fn committed_schema_is_what_enforce_config_schema_prints() {
    let out = Command::new(BIN)
        .args(["config", "schema"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let committed = std::fs::read_to_string(committed_schema_path()).unwrap_or_default();
    // A build with the local runner writes the keys in another order (llguidance turns on
    // serde_json's `preserve_order`); the committed file is the default build's.
    let same_keys_in_any_order = cfg!(feature = "local")
        && serde_json::from_str::<serde_json::Value>(&printed).ok()
            == serde_json::from_str::<serde_json::Value>(&committed).ok();
    assert!(
        printed == committed || same_keys_in_any_order,
        "schema/enforce.schema.json is out of date with the configuration types; regenerate it \
         with\n\n    cargo run -q -- config schema > schema/enforce.schema.json\n"
    );
}

#[test]
fn the_schema_is_a_valid_draft_7_schema() {
    let schema = committed_schema();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    jsonschema::meta::validate(&schema).unwrap();
}

#[test]
fn every_example_names_the_schema_validates_against_it_and_loads() {
    let validator = validator();
    let mut examples: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 3, "{examples:?}");
    for path in &examples {
        let name = path.display();
        let text = std::fs::read_to_string(path).unwrap();
        assert_eq!(
            text.lines().next(),
            Some(MODELINE),
            "{name} must start with the schema line"
        );
        schema_verdict(&validator, &text)
            .unwrap_or_else(|e| panic!("{name} breaks the schema:\n{e}"));
        check_verdict(path).unwrap_or_else(|e| panic!("{name} does not load:\n{e}"));
    }
}

/// Configurations both must accept: edge cases of the schema's shape.
const GOOD: &[(&str, &str)] = &[
    ("empty file", ""),
    ("comments only", "# nothing\n"),
    ("null options", "validators:\n  step_marker:\n"),
    (
        "environment references in number and boolean fields",
        "defaults:\n  max_retries: ${ENFORCE_TEST_RETRIES:-2}\n  early_abort: ${ENFORCE_TEST_EARLY:-true}\n",
    ),
    (
        "named like a type, no `type`",
        "validators:\n  pattern:\n    forbidden: [{regex: x}]\n",
    ),
    (
        "named like a type, another `type`",
        "validators:\n  pattern:\n    type: length\n    max: 3\n",
    ),
    (
        "options of every kind",
        "validators:\n  steps:\n    type: step_marker\n    allowed: [a, b]\n    require_at_end: true\n  \
         adr:\n    type: adr_structure\n    sections: [A]\n    aliases: {A: [B]}\n    min_criteria: 0\n  \
         refs:\n    type: file_refs\n    key: files.modify\n  \
         j:\n    type: json\n    schema: {type: object}\n    bare: true\n  \
         len:\n    type: length\n    unit: chars\n    min: 1\n    max: {value: 9, severity: warning}\n  \
         words:\n    type: terms\n    required: ['{{company}}', {term: x, skip_if: ['']}]\n    \
         forbidden: [{term: y, replacement: z}]\n    preferred: [{use: a, instead_of: [b]}]\n  \
         lint:\n    type: external\n    command: [sh, -n]\n    fail_mode: open\n    failure_threshold: 1\n",
    ),
    (
        "input and when",
        "validators:\n  intro:\n    type: length\n    max: 3\n    description: Short intros.\n    \
         input: {json: /text}\n    when: [{json: /kind, equals: intro}, {context: lang, one_of: [de, en]}]\n  \
         whole:\n    type: length\n    max: 3\n    input: response\n    when: {context: x, present: false}\n",
    ),
    (
        "a null key is no key",
        "validators:\n  l:\n    type: length\n    min: 1\n    max: ~\n    input: {json: /a, context: ~}\n    \
         when: {context: a, equals: ~, present: true}\n  x:\n    type: external\n    command: [sh]\n    url: ~\n",
    ),
    (
        "nulls where options are optional",
        "defaults:\n  max_retries: ~\n  feedback: ~\nprofiles:\n  p:\n    budget: ~\n",
    ),
    (
        "profiles and policy",
        "defaults:\n  profile: p\n  on_unavailable: open\n  feedback: {language: de, template: {item: '- {code}'}}\n  \
         budget: {max_attempts: 3, max_cost_usd: 0.5}\nprofiles:\n  p:\n    validators: [step_marker]\n    max_retries: 0\n",
    ),
    (
        "runner, models, server",
        "runner: {type: openai, base_url: 'http://127.0.0.1:1/v1', model: m, retry: {max_retries: 1}}\n\
         models:\n  - id: a\n    runner: {type: command, program: cat}\n    on_unresolved: error\n  - id: b\n\
         server: {listen: '127.0.0.1:0', audit_fsync: interval, audit_fsync_interval_secs: 2}\n",
    ),
];

/// Configurations both must refuse: unknown keys, wrong types, bad values the schema can state;
/// each with the key both must blame (the parser's message names it, the schema reports an
/// error at or below it).
const BAD: &[(&str, &str, &str)] = &[
    ("unknown top-level key", "", "colour: red\n"),
    ("unknown key in defaults", "defaults", "defaults:\n  max_retriez: 2\n"),
    ("wrong type in defaults", "defaults.max_retries", "defaults:\n  max_retries: lots\n"),
    ("negative count", "defaults.max_retries", "defaults:\n  max_retries: -1\n"),
    ("unknown fail mode", "defaults.on_unavailable", "defaults:\n  on_unavailable: maybe\n"),
    ("unknown language", "defaults.feedback", "defaults:\n  feedback: {language: fr}\n"),
    (
        "unknown template piece",
        "defaults.feedback",
        "defaults:\n  feedback: {template: {footer: x}}\n",
    ),
    ("unknown budget key", "defaults.budget", "defaults:\n  budget: {max_turns: 3}\n"),
    ("unknown profile key", "profiles.p", "profiles:\n  p:\n    validatorz: []\n"),
    (
        "profile validators not a list",
        "profiles.p.validators",
        "profiles:\n  p:\n    validators: step_marker\n",
    ),
    ("validators not a mapping", "validators", "validators: [step_marker]\n"),
    ("spec not a mapping", "validators.x", "validators:\n  x: [1]\n"),
    (
        "unknown key under a validator",
        "validators.rules",
        "validators:\n  rules:\n    type: pattern\n    forbidden: [{regex: x}]\n    colour: red\n",
    ),
    (
        "unknown key under a validator named like its type",
        "validators.step_marker",
        "validators:\n  step_marker:\n    allowedd: [a]\n",
    ),
    (
        "unknown key in a nested rule",
        "validators.rules.forbidden[0]",
        "validators:\n  rules:\n    type: pattern\n    forbidden: [{regex: x, colour: red}]\n",
    ),
    (
        "wrong type of an option",
        "validators.steps.require_at_end",
        "validators:\n  steps:\n    type: step_marker\n    require_at_end: [yes]\n",
    ),
    (
        "wrong type of a bound",
        "validators.len.max",
        "validators:\n  len:\n    type: length\n    max: lots\n",
    ),
    (
        "unknown key in a bound",
        "validators.len.max",
        "validators:\n  len:\n    type: length\n    max: {value: 3, colour: red}\n",
    ),
    (
        "unknown unit",
        "validators.len.unit",
        "validators:\n  len:\n    type: length\n    unit: lines\n    max: 3\n",
    ),
    (
        "length with null bounds",
        "validators.l",
        "validators:\n  l:\n    type: length\n    min: ~\n",
    ),
    ("length without bounds", "validators.len", "validators:\n  len:\n    type: length\n"),
    ("pattern without rules", "validators.rules", "validators:\n  rules:\n    type: pattern\n"),
    (
        "pattern with empty rules",
        "validators.rules",
        "validators:\n  rules:\n    type: pattern\n    forbidden: []\n",
    ),
    ("pattern without options", "validators.pattern", "validators:\n  pattern:\n"),
    (
        "rule without regex",
        "validators.rules.required[0]",
        "validators:\n  rules:\n    type: pattern\n    required: [{code: X}]\n",
    ),
    (
        "unknown severity",
        "validators.rules.required[0]",
        "validators:\n  rules:\n    type: pattern\n    required: [{regex: x, severity: fatal}]\n",
    ),
    (
        "no allowed steps",
        "validators.steps.allowed",
        "validators:\n  steps:\n    type: step_marker\n    allowed: []\n",
    ),
    (
        "schema and schema_file",
        "validators.j",
        "validators:\n  j:\n    type: json\n    schema: {}\n    schema_file: s.json\n",
    ),
    ("external without target", "validators.x", "validators:\n  x:\n    type: external\n"),
    (
        "external with two targets",
        "validators.x",
        "validators:\n  x:\n    type: external\n    command: [sh]\n    url: 'http://127.0.0.1:1/'\n",
    ),
    (
        "external with an ftp url",
        "validators.x.url",
        "validators:\n  x:\n    type: external\n    url: 'ftp://example.invalid/'\n",
    ),
    (
        "external grpc without a method",
        "validators.x.grpc",
        "validators:\n  x:\n    type: external\n    grpc:\n      url: 'http://127.0.0.1:1'\n      proto: p.proto\n      request: {code_field: code}\n      response: {valid_field: valid}\n",
    ),
    (
        "external with an empty command",
        "validators.x.command",
        "validators:\n  x:\n    type: external\n    command: []\n",
    ),
    (
        "external breaker threshold 0",
        "validators.x.failure_threshold",
        "validators:\n  x:\n    type: external\n    command: [sh]\n    failure_threshold: 0\n",
    ),
    ("terms without terms", "validators.t", "validators:\n  t:\n    type: terms\n"),
    (
        "required term with a replacement",
        "validators.t.required[0]",
        "validators:\n  t:\n    type: terms\n    required: [{term: a, replacement: b}]\n",
    ),
    (
        "unknown key in a term",
        "validators.t.forbidden[0]",
        "validators:\n  t:\n    type: terms\n    forbidden: [{term: a, colour: red}]\n",
    ),
    (
        "preferred term without alternatives",
        "validators.t.preferred[0].instead_of",
        "validators:\n  t:\n    type: terms\n    preferred: [{use: a, instead_of: []}]\n",
    ),
    (
        "input with two sources",
        "validators.l.input",
        "validators:\n  l:\n    type: length\n    max: 3\n    input: {json: /a, context: b}\n",
    ),
    (
        "input pointer without slash",
        "validators.l.input",
        "validators:\n  l:\n    type: length\n    max: 3\n    input: {json: a}\n",
    ),
    (
        "input keyword misspelt",
        "validators.l.input",
        "validators:\n  l:\n    type: length\n    max: 3\n    input: whole\n",
    ),
    (
        "condition with two tests",
        "validators.l.when",
        "validators:\n  l:\n    type: length\n    max: 3\n    when: {json: /a, equals: 1, present: true}\n",
    ),
    (
        "unknown key in a condition",
        "validators.l.when",
        "validators:\n  l:\n    type: length\n    max: 3\n    when: [{context: a, colour: red}]\n",
    ),
    (
        "description not a string",
        "validators.l.description",
        "validators:\n  l:\n    type: length\n    max: 3\n    description: [a]\n",
    ),
    ("type not a string", "validators.l.type", "validators:\n  l:\n    type: 3\n"),
    ("type not a valid name", "validators.l.type", "validators:\n  l:\n    type: 'no spaces'\n"),
    ("unknown runner type", "runner", "runner: {type: gpt}\n"),
    ("unknown runner key", "runner", "runner: {type: claude, nope: 1}\n"),
    ("wrong runner value type", "runner", "runner: {type: command, program: cat, args: cat}\n"),
    ("model without id", "models[0]", "models:\n  - runner: {type: claude}\n"),
    ("unknown model key", "models[0]", "models:\n  - id: a\n    colour: red\n"),
    (
        "unknown failure response",
        "models[0].on_unresolved",
        "models:\n  - id: a\n    on_unresolved: retry\n",
    ),
    ("unknown server key", "server", "server: {colour: red}\n"),
    ("unknown fsync policy", "server", "server: {audit_fsync: sometimes}\n"),
];

#[test]
fn schema_and_parser_accept_the_same_good_configurations() {
    let validator = validator();
    for (name, yaml) in GOOD {
        schema_verdict(&validator, yaml)
            .unwrap_or_else(|e| panic!("{name}: the schema refuses it:\n{e}\n---\n{yaml}"));
        parser_verdict(yaml)
            .unwrap_or_else(|e| panic!("{name}: the parser refuses it:\n{e}\n---\n{yaml}"));
    }
}

#[test]
fn schema_and_parser_refuse_the_same_bad_configurations() {
    let validator = validator();
    for (name, key, yaml) in BAD {
        let pointer = pointer_of(key);
        let errors = schema_errors(&validator, yaml);
        assert!(
            errors
                .iter()
                .any(|(at, _)| at == &pointer || at.starts_with(&format!("{pointer}/"))),
            "{name}: the schema reports nothing at {pointer:?}: {errors:?}\n---\n{yaml}"
        );
        let message = parser_verdict(yaml)
            .err()
            .unwrap_or_else(|| panic!("{name}: the parser accepts it\n---\n{yaml}"));
        assert!(
            message.contains(key),
            "{name}: the parser blames another key than {key:?}: {message}\n---\n{yaml}"
        );
    }
}

/// Where they knowingly differ: a type the schema cannot know (a plugin registers it at run
/// time) is any object for the schema, and the parser refuses it when no plugin provides it.
#[test]
fn unknown_types_are_left_to_the_parser() {
    let yaml = "validators:\n  mine:\n    type: my_plugin.check\n    anything: [1, 2]\n";
    schema_verdict(&validator(), yaml).unwrap();
    let err = parser_verdict(yaml).unwrap_err();
    assert!(
        err.contains("unknown validator type 'my_plugin.check'"),
        "{err}"
    );
}
