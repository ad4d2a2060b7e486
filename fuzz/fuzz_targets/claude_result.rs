#![no_main]
//! The Claude CLI `--output-format json` parser (object and verbose array forms).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(result) = enforce_runner::parse_result(text) {
        let _ = result.into_reply();
    }
});
