//! The names of the headers the proxy reads and writes, made once: looking a header up or
//! inserting it by a `&str` checks and hashes the name again on every request. A leaf module:
//! every stage may use it.

use axum::http::HeaderName;

/// The response header carrying the enforcement status of a non-streaming answer.
pub const ENFORCE_STATUS_HEADER: &str = "x-enforce-status";

/// A request header naming the profile to enforce instead of the model's own (and the response
/// header naming the profile enforced).
pub(crate) const PROFILE_HEADER: &str = "x-enforce-profile";

/// The response header carrying the per-type layer's `validation_status` (`""`,
/// `INVALID_UNRESOLVED`, `<VALIDATOR>_UNAVAILABLE` or the validator's `unavailable_status`), as
/// in the `enforcement` object.
pub const VALIDATION_STATUS_HEADER: &str = "x-enforce-validation-status";

/// How many headers an answer carries: its content type, the enforcement headers, the
/// profile, the request ids and the warnings (a stream's three of its own come on top).
pub(crate) const ANSWER_HEADERS: usize = 11;

/// The header Open WebUI sends with `ENABLE_FORWARD_USER_INFO_HEADERS`.
pub(crate) const CHAT_ID_HEADER: &str = "x-openwebui-chat-id";
/// A response header: milliseconds the proxy itself spent on the request (the request's time
/// minus the time spent waiting for the model).
pub(crate) const OVERHEAD_HEADER: &str = "x-enforce-overhead-ms";
/// A response header naming what the proxy did not carry out of the request, by warning code:
/// `fields_ignored=include,truncation`.
pub(crate) const WARNINGS_HEADER: &str = "x-enforce-warnings";
/// The response header carrying the request's id (the completion id, the audit's `request_id`),
/// which the OpenAI SDKs show as `_request_id` / `request_id`.
pub(crate) const REQUEST_ID_HEADER: &str = "x-request-id";
/// The request header that may carry facts.
pub(crate) const CONTEXT_HEADER: &str = "x-enforce-context";
/// A request header lowering the re-asks of this request (at most the profile's own).
pub(crate) const MAX_RETRIES_HEADER: &str = "x-enforce-max-retries";
/// A request header capping the tokens (input + output, summed over every attempt) this
/// request may spend; the loop stops re-asking once they are spent (at most the profile's own
/// `budget.max_tokens`).
pub(crate) const TOKEN_BUDGET_HEADER: &str = "x-enforce-token-budget";

// The response headers every answer carries.
pub(crate) const STATUS: HeaderName = HeaderName::from_static(ENFORCE_STATUS_HEADER);
pub(crate) const VALIDATION_STATUS: HeaderName = HeaderName::from_static(VALIDATION_STATUS_HEADER);
pub(crate) const ATTEMPTS: HeaderName = HeaderName::from_static("x-enforce-attempts");
pub(crate) const PROFILE: HeaderName = HeaderName::from_static(PROFILE_HEADER);
pub(crate) const OVERHEAD: HeaderName = HeaderName::from_static(OVERHEAD_HEADER);
pub(crate) const WARNINGS: HeaderName = HeaderName::from_static(WARNINGS_HEADER);
pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static(REQUEST_ID_HEADER);
/// Anthropic's SDKs read the request id from `request-id`.
pub(crate) const ANTHROPIC_REQUEST_ID: HeaderName = HeaderName::from_static("request-id");

// Request headers the stages read.
pub(crate) const CHAT_ID: HeaderName = HeaderName::from_static(CHAT_ID_HEADER);
pub(crate) const CONTEXT: HeaderName = HeaderName::from_static(CONTEXT_HEADER);
pub(crate) const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
pub(crate) const MAX_RETRIES: HeaderName = HeaderName::from_static(MAX_RETRIES_HEADER);
pub(crate) const TOKEN_BUDGET: HeaderName = HeaderName::from_static(TOKEN_BUDGET_HEADER);
/// Whether an answer came from the answer cache: `hit`, `miss` or `bypass` (a request's
/// `Cache-Control: no-cache`); absent for a model without `cache:`.
pub(crate) const CACHE: HeaderName = HeaderName::from_static("x-enforce-cache");
