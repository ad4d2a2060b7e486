//! The YAML samples of the documentation are configuration that works: every ```yaml block of
//! README.md, the book (docs/) and the plugin guides is a piece of `enforce.yaml` that the
//! schema of `enforce.yaml` (`schema/enforce.schema.json`, kept equal to the parser's types by
//! `config_schema`) accepts, and whose validators and profiles the real loader (enforce-config:
//! the parse with file:line:key errors, then every validator's and profile's build) accepts.
//! A renamed or misspelt key, a regex that does not compile or a profile naming a validator
//! that does not exist fails here.
//!
//! (The Rust samples run as enforce-core doctests; the shell samples are commands, not run.)

use crate::config_schema::{schema_verdict, validator};
use crate::repo;
use enforce_config::config::{Config, ConfigSource, ValidationSections};
use enforce_config::{BuildEnv, ProfileSet, Registry, RunnerFactory};
use enforce_core::Runner;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;

/// The Markdown files whose YAML samples are configuration.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![
        repo().join("README.md"),
        repo().join("plugins/README.md"),
        repo().join("plugins/template/README.md"),
    ];
    let book = std::fs::read_dir(repo().join("docs")).expect("docs/");
    files.extend(
        book.flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    files.sort();
    files
}

/// The ```yaml blocks of a Markdown text: (line of the fence, body).
fn yaml_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(lang)) if lang.trim() == "yaml" => current = Some((n + 1, String::new())),
            (Some(_), Some("")) => blocks.extend(current.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

#[test]
fn every_yaml_sample_of_the_docs_is_valid_configuration() {
    let validator = validator();
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(repo()).unwrap().display().to_string();
        for (line, yaml) in yaml_blocks(&text) {
            checked += 1;
            if serde_yaml_ng::from_str::<serde_json::Value>(&yaml).is_err() {
                failures.push(format!("{shown}:{line}: not YAML"));
                continue;
            }
            if let Err(why) = schema_verdict(&validator, &yaml) {
                failures.push(format!("{shown}:{line}:\n{why}"));
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} YAML samples found: is the book where it was?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The runners of `llm_judge` samples, built as the binary builds them (no request is sent).
struct SampleRunners;

impl RunnerFactory for SampleRunners {
    fn runner(&self, config: &serde_json::Value) -> Result<Arc<dyn Runner>, String> {
        let config =
            enforce_runner::RunnerConfig::deserialize(config).map_err(|e| e.to_string())?;
        config.build().map(Arc::from).map_err(|e| e.to_string())
    }
}

/// What the real loader says of one sample: parsed (unknown keys, wrong types: file:line:key),
/// then every validator and profile built, as `enforce check`, `serve` and the Python package
/// build them. `${VAR}` references read `sample-value` (the docs name variables the reader sets).
fn loader_verdict(shown: &str, yaml: &str) -> Result<(), String> {
    let source = ConfigSource::from_string_with_env(shown, yaml, &|_| Some("sample-value".into()));
    // The binary's own sections (`runner`, `models`, `server`) are the schema test's.
    let sample: ValidationSections = source.parse().map_err(|e| e.to_string())?;
    let config = Config::from(sample);
    // Relative paths in samples (schemas, glossaries) are the repository's.
    let env = BuildEnv::new(repo()).with_runners(Arc::new(SampleRunners));
    ProfileSet::from_config(&config, &Registry::builtin(), &env)
        .map(drop)
        .map_err(|e| source.build_error(e).to_string())
}

/// Samples that name what only the reader has, with the loader's error they must give (and
/// no other): (document, text of the error). The schema test still checks them whole.
const READERS_OWN: &[(&str, &str)] = &[
    // The plugin the guide builds (plugins/template, built outside the workspace by
    // `cargo xtask plugin-template`, which checks it with the binary).
    ("plugins/README.md", "unknown validator type 'no_hedging'"),
    (
        "plugins/template/README.md",
        "unknown validator type 'no_hedging'",
    ),
    // The reader's own gRPC service definition.
    ("docs/validators.md", "protos/parser.proto: no such file"),
];

#[test]
fn every_yaml_sample_of_the_docs_loads_with_the_real_loader() {
    let mut checked = 0;
    let mut failures = Vec::new();
    let mut allowed_seen = vec![false; READERS_OWN.len()];
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(repo()).unwrap().display().to_string();
        for (line, yaml) in yaml_blocks(&text) {
            checked += 1;
            let Err(why) = loader_verdict(&format!("{shown}#L{line}"), &yaml) else {
                continue;
            };
            match READERS_OWN
                .iter()
                .position(|(doc, error)| *doc == shown && why.contains(error))
            {
                Some(i) => allowed_seen[i] = true,
                None => failures.push(why),
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} YAML samples found: is the book where it was?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    for ((doc, error), seen) in READERS_OWN.iter().zip(allowed_seen) {
        assert!(
            seen,
            "{doc}: no sample gives `{error}` any more: remove it from READERS_OWN"
        );
    }
}

#[test]
fn the_loader_catches_what_the_schema_lets_through() {
    // Valid against the schema (a string, a known validator type), refused by the loader.
    let cases = [
        (
            "validators:\n  no_email:\n    type: pattern\n    forbidden:\n      - regex: '[a-z'\n        code: EMAIL\n",
            "validators.no_email",
        ),
        (
            "profiles:\n  p:\n    validators: [no_such_validator]\n",
            "profiles.p.validators",
        ),
    ];
    for (yaml, key) in cases {
        let blocks = yaml_blocks(&format!("```yaml\n{yaml}```\n"));
        assert!(schema_verdict(&validator(), &blocks[0].1).is_ok(), "{yaml}");
        let why = loader_verdict("sample.md#L1", &blocks[0].1).unwrap_err();
        assert!(why.contains(key), "{key} not in: {why}");
    }
}

#[test]
fn a_misspelt_key_in_a_sample_is_caught() {
    let blocks = yaml_blocks("text\n```yaml\ndefaults:\n  early_abrt: true\n```\n");
    assert_eq!(blocks.len(), 1);
    assert!(schema_verdict(&validator(), &blocks[0].1).is_err());
    let why = loader_verdict("sample.md#L1", &blocks[0].1).unwrap_err();
    assert!(
        why.contains("sample.md#L1:2") && why.contains("early_abrt"),
        "{why}"
    );
}
