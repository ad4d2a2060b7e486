#![no_main]
//! The proxy's request readers of the three surfaces (chat completions, responses, messages):
//! any body gives a request naming a model or a 4xx error, never a panic.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    enforce_server::fuzzing::read_requests(body);
});
