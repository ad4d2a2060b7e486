//! Every adapter answers every method of [`Validator`] as the validator it wraps does, except
//! what it exists to change: a method an adapter forgot would show here as not reached.

use enforce_core::validator::{WithFailMode, WithUnavailableStatus};
use enforce_core::{
    async_trait, Context, FailMode, Issue, PartialCheck, Reply, Validation, Validator, ValidatorExt,
};
use std::sync::{Arc, Mutex};

/// Overrides every method, answers none of them as the default does, and notes each call.
#[derive(Default)]
struct Probe {
    reached: Mutex<Vec<&'static str>>,
}

impl Probe {
    fn reach(&self, method: &'static str) {
        self.reached.lock().unwrap().push(method);
    }
}

struct NoFindings;

#[async_trait]
impl PartialCheck for NoFindings {
    async fn check(&mut self, _: &str) -> Vec<Issue> {
        Vec::new()
    }
}

#[async_trait]
impl Validator for Probe {
    fn name(&self) -> &str {
        self.reach("name");
        "probe"
    }
    async fn validate(&self, _: &str, _: &Context) -> Validation {
        self.reach("validate");
        Ok(vec![Issue::error("probe", "VALIDATE", "from validate")])
    }
    fn wrapped(&self) -> Option<&dyn Validator> {
        self.reach("wrapped");
        None
    }
    async fn validate_reply(&self, _: &Reply, _: &Context) -> Validation {
        self.reach("validate_reply");
        Ok(vec![Issue::error(
            "probe",
            "VALIDATE_REPLY",
            "from validate_reply",
        )])
    }
    fn repair(&self, _: &str, _: &Context, _: &[Issue]) -> Option<String> {
        self.reach("repair");
        Some("repaired".to_string())
    }
    fn partial_check<'a>(&'a self, _: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        self.reach("partial_check");
        Some(Box::new(NoFindings))
    }
    fn repair_fixes(&self, _: &Issue) -> bool {
        self.reach("repair_fixes");
        true
    }
    fn fail_mode(&self) -> Option<FailMode> {
        self.reach("fail_mode");
        Some(FailMode::Open)
    }
    fn unavailable_status(&self) -> Option<&str> {
        self.reach("unavailable_status");
        Some("PROBE_DOWN")
    }
    fn members(&self) -> Option<Vec<&dyn Validator>> {
        self.reach("members");
        None
    }
    fn reads_response(&self) -> bool {
        self.reach("reads_response");
        false
    }
    fn reads_request(&self) -> bool {
        self.reach("reads_request");
        true
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

/// Every method of the trait, by name, with a call of it.
#[allow(clippy::type_complexity)]
fn every_method() -> Vec<(&'static str, Box<dyn Fn(&dyn Validator)>)> {
    let issue = Issue::error("probe", "VALIDATE", "from validate");
    vec![
        ("name", Box::new(|v| assert_eq!(v.name(), "probe"))),
        (
            "validate",
            Box::new(|v| {
                let issues = block_on(v.validate("text", &Context::new())).unwrap();
                assert_eq!(issues[0].code, "VALIDATE");
            }),
        ),
        (
            "wrapped",
            Box::new(|v| {
                let _ = v.wrapped();
            }),
        ),
        (
            "validate_reply",
            Box::new(|v| {
                let reply = Reply::text("text");
                let issues = block_on(v.validate_reply(&reply, &Context::new())).unwrap();
                assert_eq!(issues[0].code, "VALIDATE_REPLY");
            }),
        ),
        (
            "repair",
            Box::new(move |v| {
                let repaired = v.repair("text", &Context::new(), std::slice::from_ref(&issue));
                assert_eq!(repaired.as_deref(), Some("repaired"));
            }),
        ),
        (
            "partial_check",
            Box::new(|v| assert!(v.partial_check(&Context::new()).is_some())),
        ),
        (
            "repair_fixes",
            Box::new(|v| assert!(v.repair_fixes(&Issue::error("probe", "X", "x")))),
        ),
        (
            "fail_mode",
            Box::new(|v| {
                let _ = v.fail_mode();
            }),
        ),
        (
            "unavailable_status",
            Box::new(|v| {
                let _ = v.unavailable_status();
            }),
        ),
        ("members", Box::new(|v| assert!(v.members().is_none()))),
        ("reads_response", Box::new(|v| assert!(!v.reads_response()))),
        ("reads_request", Box::new(|v| assert!(v.reads_request()))),
    ]
}

/// The methods of `adapter` (built over `probe`) that did not reach the probe.
fn not_reached(probe: &Probe, adapter: &dyn Validator) -> Vec<&'static str> {
    let mut missed = Vec::new();
    for (method, call) in every_method() {
        probe.reached.lock().unwrap().clear();
        call(adapter);
        if !probe.reached.lock().unwrap().contains(&method) {
            missed.push(method);
        }
    }
    missed
}

/// A probe shared between the test and the adapter under test.
#[derive(Clone, Default)]
struct Shared(Arc<Probe>);

#[async_trait]
impl Validator for Shared {
    fn name(&self) -> &str {
        self.0.name()
    }
    async fn validate(&self, response: &str, context: &Context) -> Validation {
        self.0.validate(response, context).await
    }
    fn wrapped(&self) -> Option<&dyn Validator> {
        Some(self.0.as_ref())
    }
}

#[test]
fn the_probe_itself_answers_every_method() {
    let probe = Probe::default();
    assert_eq!(not_reached(&probe, &probe), Vec::<&str>::new());
}

#[test]
fn a_validator_that_names_what_it_wraps_answers_as_it_in_every_provided_method() {
    let shared = Shared::default();
    assert_eq!(not_reached(&shared.0, &shared), ["wrapped"]);
}

#[test]
fn box_and_arc_forward_every_method() {
    let shared = Shared::default();
    let boxed: Box<dyn Validator> = Box::new(Arc::clone(&shared.0));
    assert_eq!(not_reached(&shared.0, &boxed), Vec::<&str>::new());
    let arc: Arc<dyn Validator> = Arc::clone(&shared.0) as Arc<dyn Validator>;
    assert_eq!(not_reached(&shared.0, &arc), Vec::<&str>::new());
}

#[test]
fn with_fail_mode_changes_only_the_fail_mode() {
    let shared = Shared::default();
    let adapter: WithFailMode<_> = Arc::clone(&shared.0).with_fail_mode(FailMode::Closed);
    assert_eq!(adapter.fail_mode(), Some(FailMode::Closed));
    assert_eq!(adapter.wrapped().map(|v| v.name()), Some("probe"));
    assert_eq!(not_reached(&shared.0, &adapter), ["wrapped", "fail_mode"]);
}

#[test]
fn with_unavailable_status_changes_only_the_status() {
    let shared = Shared::default();
    let adapter: WithUnavailableStatus<_> =
        Arc::clone(&shared.0).with_unavailable_status("PARSER_DOWN");
    assert_eq!(adapter.unavailable_status(), Some("PARSER_DOWN"));
    assert_eq!(
        not_reached(&shared.0, &adapter),
        ["wrapped", "unavailable_status"]
    );
}

#[test]
fn stacked_adapters_change_only_their_own_answers() {
    let shared = Shared::default();
    let adapter = Arc::clone(&shared.0)
        .with_fail_mode(FailMode::Closed)
        .with_unavailable_status("PARSER_DOWN")
        .boxed();
    assert_eq!(
        (adapter.fail_mode(), adapter.unavailable_status()),
        (Some(FailMode::Closed), Some("PARSER_DOWN"))
    );
    assert_eq!(
        not_reached(&shared.0, &adapter),
        ["wrapped", "fail_mode", "unavailable_status"]
    );
}
