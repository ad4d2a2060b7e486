//! What a checker learns about the case it checks: `{context.KEY}` placeholders in a command's
//! arguments and an HTTP URL, and the whole request context as JSON (an environment variable
//! of a command, a field of an HTTP body). An eval dataset's case `context` (its tests, its
//! facts) reaches the checker this way.

use enforce_core::Context;
use std::fmt::Write as _;

/// The environment variable that holds the request context as JSON for a command.
pub const CONTEXT_ENV: &str = "ENFORCE_CONTEXT";

/// The environment variable naming a file that holds the context, instead of
/// [`CONTEXT_ENV`], when the JSON is longer than [`MAX_CONTEXT_ENV_BYTES`].
pub const CONTEXT_FILE_ENV: &str = "ENFORCE_CONTEXT_FILE";

/// Longest context passed in the environment itself: Linux refuses to start a program with
/// one environment string above 128 KiB.
pub const MAX_CONTEXT_ENV_BYTES: usize = 96 * 1024;

const OPEN: &str = "{context.";

/// Walks `text`'s `{context.KEY}` placeholders in order, calling `each(before, key)` with the
/// text before each one and its key; returns the text after the last. One scanner for
/// [`placeholder_keys`] and [`fill`], so the two always agree on what a placeholder is.
fn scan<'t, E>(
    text: &'t str,
    mut each: impl FnMut(&'t str, &'t str) -> Result<(), E>,
) -> Result<&'t str, E> {
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let Some(end) = after.find('}') else { break };
        each(&rest[..start], &after[..end])?;
        rest = &after[end + 1..];
    }
    Ok(rest)
}

/// The keys `text` names in `{context.KEY}` placeholders, in order.
pub fn placeholder_keys(text: &str) -> Vec<&str> {
    let mut keys = Vec::new();
    let Ok(_) = scan::<std::convert::Infallible>(text, |_, key| {
        keys.push(key);
        Ok(())
    });
    keys
}

/// `text` with each `{context.KEY}` replaced by the context's value, passed through
/// `encode`: a string as it is, any other JSON value as JSON text.
///
/// # Errors
/// The first key the context does not have (a check that cannot be run as configured).
pub fn fill(
    text: &str,
    context: &Context,
    encode: impl Fn(&str) -> String,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let rest = scan(text, |before, key| -> Result<(), String> {
        let value = context.get_text(key).ok_or_else(|| {
            format!("the request context has no `{key}` for the placeholder {{context.{key}}}")
        })?;
        out.push_str(before);
        out.push_str(&encode(&value));
        Ok(())
    })?;
    out.push_str(rest);
    Ok(out)
}

/// `text` percent-encoded for a URL path segment or query value: everything but RFC 3986's
/// unreserved characters, so a value cannot add a path, a query or a host.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            // Written in place: no string allocated per escaped byte.
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The context as one line of JSON.
pub fn context_json(context: &Context) -> String {
    serde_json::to_string(context).unwrap_or_else(|_| "{}".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn context() -> Context {
        Context::new()
            .with("tests", "assert f(1) == 2")
            .with("n", json!([1, 2]))
    }

    #[test]
    fn placeholders_are_filled_strings_as_they_are_other_values_as_json() {
        let filled = fill(
            "run {context.tests} on {context.n}!",
            &context(),
            str::to_string,
        );
        assert_eq!(filled.unwrap(), "run assert f(1) == 2 on [1,2]!");
        assert_eq!(
            placeholder_keys("a {context.x} b {context.y} {file}"),
            vec!["x", "y"]
        );
        assert_eq!(
            fill("{file} {context", &context(), str::to_string).unwrap(),
            "{file} {context"
        );
    }

    #[test]
    fn a_missing_key_is_an_error_that_names_it() {
        let e = fill("{context.nope}", &context(), str::to_string).unwrap_err();
        assert!(e.contains("`nope`"), "{e}");
    }

    #[test]
    fn url_values_cannot_escape_their_segment() {
        assert_eq!(
            percent_encode("a b/c?d=e&f@g#h"),
            "a%20b%2Fc%3Fd%3De%26f%40g%23h"
        );
        assert_eq!(percent_encode("é"), "%C3%A9");
        assert_eq!(percent_encode("Az0-._~"), "Az0-._~");
    }
}
