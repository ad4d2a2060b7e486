//! Plugin validators registered in enforce-config's registry and used in profiles.

use enforce_config::{ConfigSource, ProfileSet, Registry, RegistryError};
use enforce_core::{Context, Status};
use enforce_plugin_host::{DirSource, PluginDir, PluginHost, PLUGIN_PANIC};
use enforce_testkit::plugins::dir_with;

fn host() -> (tempfile::TempDir, PluginHost) {
    let dir = dir_with(&[
        "enforce-plugin-german-prose",
        "enforce-plugin-domain-rules",
        "enforce-test-plugin-misbehaving",
    ]);
    let host = PluginHost::load_dirs(&[PluginDir::new(dir.path(), DirSource::Config)]);
    assert!(host.failures().is_empty(), "{:?}", host.failures());
    (dir, host)
}

const CONFIG: &str = r#"
validators:
  prose:
    type: german_prose
    check_scores: false
    plugin:
      timeout_ms: 2000
  house_rules:
    type: domain_rules
    rules:
      - code: NO_GUARANTEE
        forbidden: [garantiert]
        replacement: voraussichtlich
profiles:
  letter:
    validators: [prose, house_rules, step_marker]
  crashy:
    validators: [test_panic]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_use_plugin_validators_like_built_ins() {
    let (_dir, host) = host();
    let mut registry = Registry::builtin();
    assert!(host.register_into(&mut registry).is_empty());
    assert!(registry.contains("german_prose") && registry.contains("domain_rules"));
    assert!(registry.contains("step_marker"));

    let source = ConfigSource::from_string("enforce.yaml", CONFIG);
    let profiles = ProfileSet::load(&source, &registry, None).unwrap();
    let letter = profiles.get("letter").unwrap();
    assert_eq!(
        letter.validator_names(),
        vec!["prose", "house_rules", "step_marker"]
    );

    let text = "Wir danken Ihnen, Note 8/10, garantiert.\n<!-- STEP: done -->";
    let outcome = letter
        .enforcer()
        .check(text, &Context::new(), enforce_core::Check::Report)
        .await;
    let mut found: Vec<(String, String)> = outcome
        .issues
        .iter()
        .map(|i| (i.validator.clone(), i.code.clone()))
        .collect();
    found.sort();
    // check_scores: false reached the plugin: no SCORE_NOTATION.
    assert_eq!(
        found,
        vec![
            ("house_rules".to_string(), "NO_GUARANTEE".to_string()),
            ("prose".to_string(), "DIRECT_ADDRESS".to_string()),
        ]
    );

    // The plugin's repair runs through the profile like a built-in's.
    let clean = "Das Team liefert garantiert.\n<!-- STEP: done -->";
    let outcome = letter
        .enforcer()
        .check(clean, &Context::new(), enforce_core::Check::Repair)
        .await;
    assert_eq!(outcome.status, Status::Repaired);
    assert_eq!(
        outcome.response.as_deref(),
        Some("Das Team liefert voraussichtlich.\n<!-- STEP: done -->")
    );

    let crashy = profiles.get("crashy").unwrap();
    let outcome = crashy
        .enforcer()
        .check("PANIC", &Context::new(), enforce_core::Check::Report)
        .await;
    assert!(outcome.issues.iter().any(|i| i.code == PLUGIN_PANIC));
}

#[test]
fn config_errors_of_plugin_validators_name_the_key() {
    let (_dir, host) = host();
    let mut registry = Registry::builtin();
    host.register_into(&mut registry);
    for (yaml, key, words) in [
        (
            "validators:\n  p:\n    type: german_prose\n    plugin:\n      timeout_ms: 0\n",
            "validators.p.plugin.timeout_ms",
            "milliseconds",
        ),
        (
            "validators:\n  d:\n    type: domain_rules\n    rules: nope\n",
            "validators.d",
            "plugin `domain-rules`: invalid config",
        ),
    ] {
        let source = ConfigSource::from_string("enforce.yaml", yaml);
        let config: enforce_config::Config = source.parse().unwrap();
        let err = ProfileSet::from_config(&config, &registry, &Default::default()).unwrap_err();
        assert_eq!(err.key, key, "{err}");
        assert!(err.message.contains(words), "{err}");
    }
}

#[test]
fn a_name_already_registered_is_reported_not_replaced() {
    let (_dir, host) = host();
    let mut registry = Registry::builtin();
    assert!(host.register_into(&mut registry).is_empty());
    let conflicts = host.register_into(&mut registry);
    let names: Vec<&str> = conflicts.iter().map(|c| c.validator.as_str()).collect();
    assert_eq!(
        names,
        vec!["domain_rules", "german_prose", "test_panic", "test_sleep"]
    );
    assert!(matches!(conflicts[0].error, RegistryError::Duplicate(_)));
    assert!(conflicts[0].to_string().contains("is not registered"));
}
