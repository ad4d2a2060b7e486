//! Inputs found by the property tests (`tests/it/properties.rs`) and fuzz targets (`fuzz/`), kept
//! as regression tests.

use enforce_core::{Context, Severity, Validator};
use enforce_documents::extract_step;
use enforce_documents::step_marker::StepMarker;

use futures_executor::block_on;

/// Found by proptest: a response ending inside an unclosed code fence got its marker appended
/// inside the fence, where it does not count, so the "repaired" text still failed.
#[test]
fn step_repair_closes_an_unclosed_fence_before_the_marker() {
    let v = StepMarker::default();
    let ctx = Context::new();
    for text in [
        "```",
        "Code:\n```rust\nfn main() {}",
        "~~~~\nx\n~~~",
        "  ```\nindented",
    ] {
        let issues = block_on(v.validate(text, &ctx)).expect("verdict");
        assert!(!issues.is_empty(), "{text:?}");
        let fixed = v.repair(text, &ctx, &issues).expect("repair");
        let after = block_on(v.validate(&fixed, &ctx)).expect("verdict");
        assert!(
            after.iter().all(|i| i.severity != Severity::Error),
            "{text:?} → {fixed:?}: {after:?}"
        );
        assert!(extract_step(&fixed).is_some(), "{fixed:?}");
        assert!(
            fixed.starts_with(text.trim_end()),
            "the text is kept: {fixed:?}"
        );
    }
}
