#![no_main]
//! The client-side SSE parser used to read the proxy's streams.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let stream = enforce_testkit::sse::parse_sse(text);
    for event in &stream.events {
        let _ = event.data.len();
    }
});
