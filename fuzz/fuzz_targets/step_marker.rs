#![no_main]
//! Step marker extraction and repair: no panic; a repair yields a text that passes with a step
//! from the allowed set.
use enforce_core::{Context, Severity, Validator};
use enforce_documents::step_marker::{StepMarker, DEFAULT_STEPS};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|text: &str| {
    let _ = enforce_documents::extract_step(text);
    let v = StepMarker::default();
    let ctx = Context::new();
    let Ok(issues) = common::block_on(v.validate(text, &ctx)) else { return };
    let errors: Vec<_> = issues.into_iter().filter(|i| i.severity == Severity::Error).collect();
    if errors.is_empty() {
        return;
    }
    if let Some(fixed) = v.repair(text, &ctx, &errors) {
        let after = common::block_on(v.validate(&fixed, &ctx)).unwrap_or_default();
        assert!(after.iter().all(|i| i.severity != Severity::Error), "{fixed:?}");
        let step = enforce_documents::extract_step(&fixed);
        assert!(step.as_deref().is_some_and(|s| DEFAULT_STEPS.contains(&s)));
    }
});
