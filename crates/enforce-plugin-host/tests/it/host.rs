//! The host against real plugin libraries built from `plugins/`.

use enforce_core::{
    Context, Enforcer, FailMode, Policy, Request, ScriptedRunner, Severity, Status, Validator,
};
use enforce_plugin_abi::PluginErrorKind;
use enforce_plugin_host::{
    load_plugin, CallOptions, CreateError, DirSource, Isolation, LoadError, PluginDir, PluginHost,
    PLUGIN_PANIC,
};
use enforce_testkit::plugins::{dir_with, library};
use serde_json::json;
use std::time::Duration;

const GERMAN: &str = "enforce-plugin-german-prose";
const DOMAIN: &str = "enforce-plugin-domain-rules";
const MISBEHAVING: &str = "enforce-test-plugin-misbehaving";

fn host_with(packages: &[&str]) -> (tempfile::TempDir, PluginHost) {
    let dir = dir_with(packages);
    let host = PluginHost::load_dirs(&[PluginDir::new(dir.path(), DirSource::Config)]);
    (dir, host)
}

#[test]
fn each_library_is_loaded_through_its_own_header() {
    // With `RootModule::load_from_file` the second library would come back as the first.
    let german = load_plugin(&library(GERMAN)).unwrap();
    let domain = load_plugin(&library(DOMAIN)).unwrap();
    assert_eq!(german.name(), "german-prose");
    assert_eq!(domain.name(), "domain-rules");
    assert_eq!(german.version(), "0.1.0");
    assert_eq!(
        german.interface_version(),
        enforce_plugin_abi::INTERFACE_VERSION
    );
    assert_eq!(german.validators()[0].name, "german_prose");
    assert_eq!(domain.validators()[0].name, "domain_rules");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn german_prose_reports_direct_address_under_the_configured_name() {
    let (_dir, host) = host_with(&[GERMAN, DOMAIN]);
    assert!(host.failures().is_empty(), "{:?}", host.failures());
    assert_eq!(host.plugins().len(), 2);
    let validator = host
        .create_validator(
            "german_prose",
            "prose",
            &json!(null),
            CallOptions::default(),
        )
        .unwrap();
    assert_eq!(validator.name(), "prose");
    let issues = validator
        .validate(
            "Gute Arbeit.\nWir danken Ihnen. Note: 9/10",
            &Context::new(),
        )
        .await
        .unwrap();
    let found: Vec<(&str, &str, Option<u32>, Option<u32>)> = issues
        .iter()
        .map(|i| (i.validator.as_str(), i.code.as_str(), i.line, i.column))
        .collect();
    assert_eq!(
        found,
        vec![
            ("prose", "DIRECT_ADDRESS", Some(2), Some(12)),
            ("prose", "SCORE_NOTATION", Some(2), Some(25)),
        ]
    );
    assert!(issues
        .iter()
        .all(|i| i.is_error() && i.repairable && i.hint.is_some()));
    assert!(validator
        .validate("Das Unternehmen liefert.", &Context::new())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_rules_take_yaml_config_read_the_context_and_repair() {
    let (_dir, host) = host_with(&[DOMAIN]);
    let config = "rules:\n  - code: NO_GUARANTEE\n    forbidden: [garantiert]\n    ignore_case: true\n    replacement: voraussichtlich\n  - code: MISSING_COMPANY\n    required: ['{{company_name}}']\n    severity: warning\n";
    let validator = host
        .create_validator_from_text(
            "domain_rules",
            "domain_rules",
            config,
            CallOptions::default(),
        )
        .unwrap();
    let context = Context::new().with("company_name", "ACME");
    let text = "Garantiert fertig bis Montag.";
    let issues = validator.validate(text, &context).await.unwrap();
    let codes: Vec<(&str, Severity)> = issues
        .iter()
        .map(|i| (i.code.as_str(), i.severity))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("NO_GUARANTEE", Severity::Error),
            ("MISSING_COMPANY", Severity::Warning)
        ]
    );
    let repaired = validator.repair(text, &context, &issues).unwrap();
    assert_eq!(repaired, "voraussichtlich fertig bis Montag.");
    let inline = host
        .create_validator_from_text(
            "domain_rules",
            "domain_rules",
            config,
            CallOptions {
                isolation: Isolation::Inline,
                ..CallOptions::default()
            },
        )
        .unwrap();
    assert_eq!(inline.repair(text, &context, &issues).unwrap(), repaired);
}

#[test]
fn bad_configs_and_unknown_validators_are_refused_with_reasons() {
    let (_dir, host) = host_with(&[DOMAIN]);
    match host.create_validator(
        "domain_rules",
        "d",
        &json!({"rules": "x"}),
        CallOptions::default(),
    ) {
        Err(CreateError::Plugin { plugin, error, .. }) => {
            assert_eq!(plugin, "domain-rules");
            assert_eq!(error.kind, PluginErrorKind::InvalidConfig);
            assert!(error.message.contains("rules"), "{error}");
        }
        other => panic!("expected a config error, got {other:?}"),
    }
    assert!(matches!(
        host.create_validator("nope", "nope", &json!(null), CallOptions::default()),
        Err(CreateError::UnknownValidator { .. })
    ));
    assert!(matches!(
        host.create_validator_from_text("domain_rules", "d", "rules: [", CallOptions::default()),
        Err(CreateError::ConfigText { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_plugin_becomes_a_plugin_panic_issue_and_the_host_goes_on() {
    let (_dir, host) = host_with(&[MISBEHAVING]);
    let validator = host
        .create_validator(
            "test_panic",
            "panicky",
            &json!(null),
            CallOptions::default(),
        )
        .unwrap();
    let issues = validator
        .validate("please PANIC now", &Context::new())
        .await
        .unwrap();
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].code, PLUGIN_PANIC);
    assert_eq!(issues[0].validator, "panicky");
    assert!(issues[0].is_error());
    assert!(!issues[0].repairable, "a plugin bug is a hard abort");
    assert!(
        issues[0].message.contains("asked to panic"),
        "{}",
        issues[0].message
    );
    // The same validator keeps working after the panic.
    assert!(validator
        .validate("calm", &Context::new())
        .await
        .unwrap()
        .is_empty());

    // Panics while building and while repairing are contained too.
    match host.create_validator(
        "test_panic",
        "p",
        &json!({"panic_on": "build"}),
        CallOptions::default(),
    ) {
        Err(CreateError::Plugin { error, .. }) => assert_eq!(error.kind, PluginErrorKind::Panic),
        other => panic!("expected a panic while building, got {other:?}"),
    }
    let repairer = host
        .create_validator(
            "test_panic",
            "p",
            &json!({"panic_on": "repair"}),
            CallOptions::default(),
        )
        .unwrap();
    let issues = repairer.validate("REPAIR", &Context::new()).await.unwrap();
    assert_eq!(issues[0].code, "NEEDS_REPAIR");
    assert_eq!(repairer.repair("REPAIR", &Context::new(), &issues), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enforcer_reports_plugin_panic_in_its_outcome() {
    let (_dir, host) = host_with(&[MISBEHAVING, GERMAN]);
    let panicky = host
        .create_validator(
            "test_panic",
            "test_panic",
            &json!(null),
            CallOptions::default(),
        )
        .unwrap();
    let prose = host
        .create_validator(
            "german_prose",
            "german_prose",
            &json!(null),
            CallOptions::default(),
        )
        .unwrap();
    let enforcer = Enforcer::new(vec![Box::new(panicky), Box::new(prose)]);
    let runner = ScriptedRunner::texts(["PANIC: Wir danken Ihnen.", "unused"]);
    let outcome = enforcer
        .run(&runner, &Request::prompt("Schreib etwas."), &Context::new())
        .await;
    assert_ne!(outcome.status, Status::Passed);
    assert!(outcome.issues.iter().any(|i| i.code == PLUGIN_PANIC));
    assert!(outcome.issues.iter().any(|i| i.code == "DIRECT_ADDRESS"));

    // And a clean answer passes both plugin validators.
    let runner = ScriptedRunner::texts(["Das Unternehmen dankt dem Team."]);
    let outcome = enforcer
        .run(&runner, &Request::prompt("Schreib etwas."), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{:?}", outcome.issues);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_plugin_times_out_as_unavailable() {
    let (_dir, host) = host_with(&[MISBEHAVING]);
    let options = CallOptions {
        timeout: Duration::from_millis(100),
        fail_mode: Some(FailMode::Closed),
        ..CallOptions::default()
    };
    let sleepy = host
        .create_validator("test_sleep", "sleepy", &json!({"sleep_ms": 2000}), options)
        .unwrap();
    assert_eq!(sleepy.fail_mode(), Some(FailMode::Closed));
    let started = std::time::Instant::now();
    let err = sleepy.validate("x", &Context::new()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(1500));
    assert!(
        err.reason.contains("did not answer within 100 ms"),
        "{}",
        err.reason
    );

    let enforcer = Enforcer::new(vec![Box::new(sleepy)]).with_policy(Policy::default());
    let outcome = enforcer
        .check("x", &Context::new(), enforce_core::Check::Report)
        .await;
    assert_eq!(outcome.status, Status::Unavailable);
}

#[test]
fn timeouts_hold_outside_a_tokio_runtime_too() {
    let (_dir, host) = host_with(&[MISBEHAVING]);
    let options = CallOptions {
        timeout: Duration::from_millis(100),
        ..CallOptions::default()
    };
    let sleepy = host
        .create_validator("test_sleep", "sleepy", &json!({"sleep_ms": 2000}), options)
        .unwrap();
    let started = std::time::Instant::now();
    let result = block_on(sleepy.validate("x", &Context::new()));
    assert!(result.is_err());
    assert!(started.elapsed() < Duration::from_millis(1500));
}

use futures_executor::block_on;

#[test]
fn every_bad_file_is_reported_with_its_reason_and_the_good_ones_load() {
    let dir = dir_with(&[
        GERMAN,
        DOMAIN,
        "enforce-test-plugin-no-root-module",
        "enforce-test-plugin-future-interface",
        "enforce-test-plugin-layout-mismatch",
        "enforce-test-plugin-init-error",
    ]);
    let ext = std::env::consts::DLL_EXTENSION;
    std::fs::write(
        dir.path().join(format!("x.{ext}")),
        "just text, not a library\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("README.txt"),
        "ignored: not a library name\n",
    )
    .unwrap();

    let host = PluginHost::load_dirs(&[PluginDir::new(dir.path(), DirSource::Config)]);
    let mut loaded: Vec<&str> = host.plugins().iter().map(|p| p.name()).collect();
    loaded.sort();
    assert_eq!(loaded, vec!["domain-rules", "german-prose"]);

    let reason = |file: &str| -> &LoadError {
        &host
            .failures()
            .iter()
            .find(|f| f.path.file_name().unwrap().to_string_lossy().contains(file))
            .unwrap_or_else(|| panic!("no failure for {file}: {:?}", host.failures()))
            .error
    };
    assert_eq!(host.failures().len(), 5, "{:?}", host.failures());
    assert!(matches!(
        reason(&format!("x.{ext}")),
        LoadError::NotALibrary { .. }
    ));
    assert_eq!(reason("no_root_module"), &LoadError::MissingRootModule);
    assert_eq!(
        reason("future_interface"),
        &LoadError::WrongInterfaceVersion {
            found: "2.0.0".into(),
            supported: enforce_plugin_abi::INTERFACE_VERSION.into(),
        }
    );
    assert!(matches!(
        reason("layout_mismatch"),
        LoadError::LayoutMismatch { .. }
    ));
    assert!(
        matches!(reason("init_error"), LoadError::InitError { reason } if reason.contains("refuses to initialise"))
    );

    // The messages say what is wrong in words.
    assert!(reason("no_root_module")
        .to_string()
        .contains("missing root module"));
    assert!(reason("future_interface")
        .to_string()
        .contains("built for interface 2.0.0, this host supports 1.1.0"));
}

#[test]
fn a_second_provider_of_a_validator_name_is_refused_and_missing_dirs_are_reported() {
    let first = dir_with(&[GERMAN]);
    let second = dir_with(&[GERMAN]);
    let host = PluginHost::load_dirs(&[
        PluginDir::new(first.path(), DirSource::Config),
        PluginDir::new(second.path(), DirSource::Environment),
        PluginDir::new("/nonexistent/enforce-plugins", DirSource::Environment),
        PluginDir::new("/nonexistent/default", DirSource::Default),
    ]);
    assert_eq!(host.plugins().len(), 1);
    assert!(host.plugins()[0].path().starts_with(first.path()));
    assert_eq!(host.failures().len(), 2, "{:?}", host.failures());
    assert!(matches!(
        &host.failures()[0].error,
        LoadError::DuplicateValidator { validator, .. } if validator == "german_prose"
    ));
    assert_eq!(host.failures()[1].error.kind(), "directory");

    // The same file reached twice is loaded once, silently.
    let again = PluginHost::load_dirs(&[
        PluginDir::new(first.path(), DirSource::Config),
        PluginDir::new(first.path().join("."), DirSource::Config),
    ]);
    assert_eq!(again.plugins().len(), 1);
    assert!(again.failures().is_empty());
}

#[test]
fn a_truncated_library_is_reported_and_the_others_load() {
    let dir = dir_with(&[GERMAN, DOMAIN]);
    let whole = std::fs::read(library(GERMAN)).expect("read the plugin");
    // Headers whole but segments cut (a copy in progress), the section table cut, the header cut.
    for (name, len) in [
        ("libpartial.so", 2000),
        ("libalmost.so", whole.len() - 1),
        ("libstub.so", 40),
    ] {
        std::fs::write(dir.path().join(name), &whole[..len]).expect("write");
    }
    let host = PluginHost::load_dirs(&[PluginDir::new(dir.path(), DirSource::Config)]);
    let mut loaded: Vec<&str> = host.plugins().iter().map(|p| p.name()).collect();
    loaded.sort_unstable();
    assert_eq!(loaded, ["domain-rules", "german-prose"]);
    assert_eq!(host.failures().len(), 3, "{:?}", host.failures());
    for failure in host.failures() {
        assert_eq!(failure.error.kind(), "not_a_library");
        let text = failure.error.to_string();
        assert!(
            text.starts_with("not a loadable library: truncated"),
            "{text}"
        );
    }
}
