#![no_main]
//! ADR front matter detection and the ADR structure checks: no panic, valid ranges.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Some(fm) = enforce_documents::adr::find_adr(text) {
        assert!(text.get(fm.yaml.clone()).is_some());
        assert!(text.get(fm.body.clone()).is_some());
        let _ = fm.field_value(text, "adr_id");
    }
});
