#![no_main]
//! The OpenAI-compatible completion, error-body and Retry-After parsers.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = enforce_runner::parse_completion(text);
    let _ = enforce_runner::error_message(text);
    let _ = enforce_runner::parse_retry_after(text);
});
