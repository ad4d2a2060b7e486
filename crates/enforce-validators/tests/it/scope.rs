//! A scope is an adapter: what it does not change is the wrapped validator's.

use enforce_core::{FailMode, Validator, ValidatorExt};
use enforce_validators::length::{Length, Unit};
use enforce_validators::{Scope, Scoped};
use serde_json::json;

fn scope() -> Scope {
    let spec = json!({"when": {"context": "kind", "equals": "intro"}});
    Scope::from_spec(spec.as_object().unwrap())
        .unwrap()
        .expect("a scope")
}

#[test]
fn a_scope_keeps_the_fail_mode_and_status_of_what_it_wraps_and_is_never_opened_up() {
    let words = Length::new("words", Unit::Words, None, None);
    let group = vec![words.boxed()]
        .with_fail_mode(FailMode::Open)
        .with_unavailable_status("LENGTH_DOWN");
    assert!(group.members().is_some(), "the wrapped group is a group");
    let scoped = Scoped::new(group.boxed(), scope());
    assert_eq!(scoped.fail_mode(), Some(FailMode::Open));
    assert_eq!(scoped.unavailable_status(), Some("LENGTH_DOWN"));
    assert!(
        scoped.members().is_none(),
        "opened up, the members would run outside the scope"
    );
    assert_eq!(scoped.wrapped().map(|v| v.members().is_some()), Some(true));
}
