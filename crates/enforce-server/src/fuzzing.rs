//! The entry point of the fuzz target `request_readers` (`fuzz/`): built only under
//! `--cfg fuzzing`, which cargo-fuzz sets, and in this crate's tests.

use crate::messages::Messages;
use crate::openai::Chat;
use crate::pipeline::Surface;
use crate::responses::Responses;

/// Reads `body` as a request of each surface (chat completions, responses, messages), the
/// way the proxy reads a request body before anything else. Any bytes give a request or a
/// 4xx error, never a panic; a request read names a model.
pub fn read_requests(body: &[u8]) {
    check::<Chat>(body);
    check::<Responses>(body);
    check::<Messages>(body);
}

fn check<S: Surface>(body: &[u8]) {
    match S::parse(bytes::Bytes::copy_from_slice(body)) {
        Ok((ask, _)) => assert!(!ask.model.is_empty(), "a request without a model was read"),
        Err(error) => assert!(
            error.status.is_client_error(),
            "a request body gave a {} error: {}",
            error.status,
            error.message
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::read_requests;

    /// What the fuzz target runs, on a few bodies of each kind (it panics on a finding).
    #[test]
    fn the_fuzz_entry_point_reads_good_and_bad_bodies() {
        for body in [
            &br#"{"model":"m","messages":[{"role":"user","content":"q"}],"input":"q","stream":true}"#[..],
            br#"{"model":"m","messages":[{"role":3}],"stream":"yes"}"#,
            br#"{"model":"","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]}]}"#,
            b"",
            b"\xff\xfe{",
            b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        ] {
            read_requests(body);
        }
    }
}
