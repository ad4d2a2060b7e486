//! Interface minor versions: a plugin built for 1.0 (before partial checks) loads and works in
//! this 1.1 host without a partial check; a 1.1 plugin's partial check cuts a streamed answer.

use enforce_core::{
    scripted::ScriptedCall, Context, Enforcer, Policy, Request, ScriptedRunner, Status, Validator,
};
use enforce_plugin_host::{load_plugin, CallOptions, DirSource, PluginDir, PluginHost};
use enforce_testkit::plugins::{dir_with, library};
use serde_json::json;

const OLD: &str = "enforce-test-plugin-interface-1-0";
const DOMAIN: &str = "enforce-plugin-domain-rules";

const ANSWER: &str =
    "First line.\nThis line says OLD and garantiert fertig.\nA long tail the model \
                      would go on writing for a while, line after line.\nEnd.";

fn validator(package: &str, name: &str, config: serde_json::Value) -> Box<dyn Validator> {
    let dir = dir_with(&[package]);
    let host = PluginHost::load_dirs(&[PluginDir::new(dir.path(), DirSource::Config)]);
    assert!(host.failures().is_empty(), "{:?}", host.failures());
    Box::new(
        host.create_validator(name, name, &config, CallOptions::default())
            .unwrap(),
    )
}

fn domain_rules() -> Box<dyn Validator> {
    validator(
        DOMAIN,
        "domain_rules",
        json!({"rules": [{"code": "NO_GUARANTEE", "forbidden": ["garantiert"]}]}),
    )
}

#[test]
fn a_plugin_built_for_interface_1_0_loads_in_this_host() {
    let old = load_plugin(&library(OLD)).unwrap();
    assert_eq!(old.interface_version(), "1.0.0");
    assert_ne!(
        old.interface_version(),
        enforce_plugin_abi::INTERFACE_VERSION
    );
    assert_eq!(old.validators()[0].name, "old_forbid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_plugin_validates_as_before_and_has_no_partial_check() {
    let old = validator(OLD, "old_forbid", json!(null));
    let issues = old.validate(ANSWER, &Context::new()).await.unwrap();
    assert_eq!(issues.len(), 1);
    assert_eq!(
        (issues[0].code.as_str(), issues[0].line),
        ("OLD_WORD", Some(2))
    );

    // Its vtable ends before `validate_partial`: the host gets the default "no partial check".
    let context = Context::new();
    {
        let mut check = old.partial_check(&context).unwrap();
        assert!(check.check(ANSWER).await.is_empty());
    }

    // So the loop never cuts its answers, and re-asks after the whole answer as before.
    let runner = ScriptedRunner::texts([ANSWER, "Fine now."]).streamed(8);
    let enforcer =
        Enforcer::new(vec![old]).with_policy(Policy::builder().partial_check_bytes(8).build());
    let outcome = enforcer
        .run(&runner, &Request::prompt("Go"), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert!(outcome.attempts[0].cut.is_none());
    assert_eq!(runner.delivered()[0], ANSWER.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_partial_check_cuts_the_answer_at_a_definite_error() {
    let rules = domain_rules();
    let context = Context::new();
    {
        let mut check = rules.partial_check(&context).unwrap();
        let open = check.check("This line says garantiert").await;
        assert!(open.is_empty(), "the line has not ended");
        let found = check.check("This line says garantiert.\nNext").await;
        assert_eq!(found[0].code, "NO_GUARANTEE");
        assert_eq!(found[0].validator, "domain_rules");
    }

    let runner = ScriptedRunner::texts([ANSWER, "Fine now."]).streamed(8);
    let enforcer =
        Enforcer::new(vec![rules]).with_policy(Policy::builder().partial_check_bytes(8).build());
    let outcome = enforcer
        .run(&runner, &Request::prompt("Go"), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let cut = outcome.attempts[0].cut.as_ref().expect("cut");
    assert_eq!(cut.codes, ["NO_GUARANTEE"]);
    assert!(runner.delivered()[0] < ANSWER.len());
    let ScriptedCall::FollowUp { feedback, .. } = &runner.calls()[1] else {
        panic!("a follow-up")
    };
    assert!(
        feedback.contains("[NO_GUARANTEE]") && feedback.contains("garantiert fertig"),
        "{feedback}"
    );
}
