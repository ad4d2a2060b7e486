//! The request data judges read from the validation [`Context`] (the question, the system
//! prompt, the retrieved context, under [`keys`]), and what a judge does when the request does
//! not carry what it needs ([`OnMissing`]).

use enforce_core::{context::keys, Context, Issue, Severity, Unavailable, Validation};
use serde::Deserialize;
use serde_json::Value;

/// Code: the request lacks what the validator needs (no question, no retrieved context), so it
/// judged nothing (`on_missing: warn`).
pub const REQUEST_DATA_MISSING: &str = "REQUEST_DATA_MISSING";

/// What a validator does when the request lacks the data it reads.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnMissing {
    /// Pass with a `REQUEST_DATA_MISSING` warning: nothing was judged, and the outcome says so.
    #[default]
    Warn,
    /// Fail with the validator's own code: no context means no relevant context.
    Fail,
    /// No verdict: the validator's `fail_mode` decides.
    Unavailable,
}

/// What to tell about missing request data: `what` is missing (e.g. "the retrieved context").
pub(crate) fn missing(
    validator: &str,
    on_missing: OnMissing,
    what: &str,
    code: &str,
    severity: Severity,
) -> Validation {
    let message = format!("not judged: the request carries no {what}");
    match on_missing {
        OnMissing::Warn => Ok(vec![Issue::warning(
            validator,
            REQUEST_DATA_MISSING,
            message,
        )
        .with_hint("pass it with the request (see the input stage's retrieved context)")]),
        OnMissing::Fail => Ok(vec![Issue::error(
            validator,
            code,
            format!("the request carries no {what}"),
        )
        .with_severity(severity)]),
        OnMissing::Unavailable => Err(Unavailable::new(format!("{validator}: {message}"))),
    }
}

/// A non-blank string under `key`.
fn text_at(context: &Context, key: &str) -> Option<String> {
    context
        .get_str(key)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string)
}

/// The question (the last user message), if the request carries a non-blank one.
pub fn question(context: &Context) -> Option<String> {
    text_at(context, keys::QUESTION)
}

/// The system prompt, if the request carries a non-blank one.
pub fn system(context: &Context) -> Option<String> {
    text_at(context, keys::SYSTEM)
}

/// The retrieved context as chunks: a list gives one chunk per item, a string is split at
/// `separator` (an empty separator keeps it whole). Blank chunks are dropped; `None` when
/// nothing is left.
pub fn retrieved_chunks(context: &Context, separator: &str) -> Option<Vec<String>> {
    let chunks: Vec<String> = match context.get(keys::RETRIEVED_CONTEXT)? {
        Value::Array(items) => items.iter().map(enforce_core::input::chunk_text).collect(),
        Value::String(s) if separator.is_empty() => vec![s.clone()],
        Value::String(s) => s.split(separator).map(str::to_string).collect(),
        Value::Null => return None,
        other => vec![enforce_core::input::chunk_text(other)],
    };
    let chunks: Vec<String> = chunks
        .into_iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    (!chunks.is_empty()).then_some(chunks)
}

/// The retrieved context as one text, chunks separated by a blank line.
pub fn retrieved_text(context: &Context) -> Option<String> {
    retrieved_chunks(context, "").map(|chunks| chunks.join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chunks_from_lists_objects_and_split_strings() {
        let ctx = Context::new().with(
            keys::RETRIEVED_CONTEXT,
            json!(["a", {"text": "b"}, {"page_content": "c"}, " ", {"id": 1}]),
        );
        assert_eq!(
            retrieved_chunks(&ctx, "\n\n").unwrap(),
            vec!["a", "b", "c", "{\"id\":1}"]
        );
        let ctx = Context::new().with(keys::RETRIEVED_CONTEXT, "one\n\ntwo\n\n\n\nthree");
        assert_eq!(
            retrieved_chunks(&ctx, "\n\n").unwrap(),
            vec!["one", "two", "three"]
        );
        assert_eq!(retrieved_text(&ctx).unwrap(), "one\n\ntwo\n\n\n\nthree");
        assert!(retrieved_chunks(&Context::new(), "\n\n").is_none());
        let blank = Context::new().with(keys::RETRIEVED_CONTEXT, json!(["", "  "]));
        assert!(retrieved_chunks(&blank, "\n\n").is_none());
        assert!(question(&Context::new().with(keys::QUESTION, " ")).is_none());
    }

    #[test]
    fn missing_data_follows_on_missing() {
        let warn = missing("j", OnMissing::Warn, "question", "X", Severity::Error).unwrap();
        assert_eq!(warn[0].code, REQUEST_DATA_MISSING);
        assert!(!warn[0].is_error());
        let fail = missing("j", OnMissing::Fail, "question", "X", Severity::Error).unwrap();
        assert_eq!(fail[0].code, "X");
        assert!(fail[0].is_error());
        let gone = missing(
            "j",
            OnMissing::Unavailable,
            "question",
            "X",
            Severity::Error,
        );
        assert!(gone.unwrap_err().reason.contains("no question"));
    }
}
