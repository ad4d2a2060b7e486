//! One line of an audit log: [`AuditRecord`], shared by every writer (`enforce run --audit`,
//! the proxy's audit log) so that all of them write the same shape.

use crate::Outcome;
use serde::Serialize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One audit line: when, which request, model, profile, chat and runner, then the outcome with
/// every attempt (the fields of [`Outcome`]'s record, flattened after these).
///
/// `ts` (RFC 3339, UTC, milliseconds), `request_id`, `model` and `profile` are always there
/// (`null` when unknown); `chat_id`, `key`, `runner`, `route`, `request_limits` and `step`
/// only when known.
///
/// ```
/// use enforce_core::{AuditRecord, Outcome};
///
/// let outcome: Outcome = serde_json::from_str(
///     r#"{"status":"passed","stop_reason":{"reason":"clean"},"response":"ok","issues":[],
///         "warnings":[],"attempts":[],"total_us":5,"runner_us":3}"#).unwrap();
/// let line = AuditRecord::new("req-1", &outcome)
///     .model("llama3.2")
///     .profile("chat")
///     .runner("openai")
///     .to_json_line();
/// assert!(line.starts_with(r#"{"ts":""#));
/// assert!(line.contains(r#""request_id":"req-1","model":"llama3.2","profile":"chat","runner":"openai","status":"passed""#));
/// // The outcome reads back from the line.
/// let back: Outcome = serde_json::from_str(&line).unwrap();
/// assert_eq!(back, outcome);
/// ```
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AuditRecord<'a> {
    #[serde(serialize_with = "serialize_ts")]
    ts: SystemTime,
    request_id: &'a str,
    model: Option<&'a str>,
    profile: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runner: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_limits: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache: Option<&'a serde_json::Value>,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

/// The record's `ts`, as [`rfc3339_millis`] writes it.
fn serialize_ts<S: serde::Serializer>(ts: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&rfc3339_millis(*ts))
}

impl<'a> AuditRecord<'a> {
    /// A record of `outcome` for request `request_id`, stamped now.
    pub fn new(request_id: &'a str, outcome: &'a Outcome) -> Self {
        AuditRecord {
            ts: SystemTime::now(),
            request_id,
            model: None,
            profile: None,
            chat_id: None,
            key: None,
            runner: None,
            route: None,
            request_limits: None,
            step: None,
            cache: None,
            outcome,
        }
    }

    /// The time stamp (default: when the record was made).
    pub fn at(mut self, ts: SystemTime) -> Self {
        self.ts = ts;
        self
    }

    /// The model asked (`null` in the record when unknown).
    pub fn model(mut self, model: impl Into<Option<&'a str>>) -> Self {
        self.model = model.into();
        self
    }

    /// The profile enforced (`null` in the record when unknown).
    pub fn profile(mut self, profile: impl Into<Option<&'a str>>) -> Self {
        self.profile = profile.into();
        self
    }

    /// The chat the request belongs to (left out of the record when unknown).
    pub fn chat_id(mut self, chat_id: impl Into<Option<&'a str>>) -> Self {
        self.chat_id = chat_id.into();
        self
    }

    /// The name of the API key that made the request (its configured name, never the key
    /// itself; left out when the request presented no named key).
    pub fn key(mut self, key: impl Into<Option<&'a str>>) -> Self {
        self.key = key.into();
        self
    }

    /// The limits the request set for itself (the proxy's `X-Enforce-Max-Retries` and
    /// `X-Enforce-Token-Budget`: what it asked, what applied, and whether the request or the
    /// profile set the applied value; left out when the request set none).
    pub fn request_limits(mut self, limits: impl Into<Option<&'a serde_json::Value>>) -> Self {
        self.request_limits = limits.into();
        self
    }

    /// The kind of runner that asked (`claude`, `openai`, `command`; left out when unknown).
    pub fn runner(mut self, runner: impl Into<Option<&'a str>>) -> Self {
        self.runner = runner.into();
        self
    }

    /// How the request was routed to its profile (the proxy's `routes:`: route name, profile,
    /// what matched, the classifier's verdict; left out when the model has no routes).
    pub fn route(mut self, route: impl Into<Option<&'a serde_json::Value>>) -> Self {
        self.route = route.into();
        self
    }

    /// The workflow step the turn recorded for its chat (the answer's step marker, or
    /// `unknown` for a turn that delivered no checked answer; left out when none).
    pub fn step(mut self, step: impl Into<Option<&'a str>>) -> Self {
        self.step = step.into();
        self
    }

    /// Whether the answer came from an answer cache (`{"status": "hit", "tokens_saved": 812}`;
    /// left out when the request was not looked up).
    pub fn cache(mut self, cache: impl Into<Option<&'a serde_json::Value>>) -> Self {
        self.cache = cache.into();
        self
    }

    /// The record as one line of JSON (no newline).
    pub fn to_json_line(&self) -> String {
        // Strings, numbers and enums only: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// `t` as RFC 3339 in UTC with milliseconds, as the audit record's `ts`, e.g.
/// `2026-11-23T22:10:00.123Z`. Times before 1970 are written as the epoch and times past 9999
/// as its last second (a clock that far off is not worth a sign or a fifth digit).
pub fn rfc3339_millis(t: SystemTime) -> String {
    let last = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    humantime::format_rfc3339_millis(t.clamp(UNIX_EPOCH, last)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, millis: u64) -> String {
        rfc3339_millis(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
    }

    #[test]
    fn known_dates() {
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_795_471_800, 123), "2026-11-23T22:10:00.123Z");
        assert_eq!(at(86_399, 999), "1970-01-01T23:59:59.999Z");
        // Leap years: divisible by 400 (2000) and by 4 (2024); 2100 is not one.
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(951_868_800, 0), "2000-03-01T00:00:00.000Z");
        assert_eq!(at(1_709_251_199, 7), "2024-02-29T23:59:59.007Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
        assert_eq!(at(4_107_542_400 - 86_400, 0), "2100-02-28T00:00:00.000Z");
        assert_eq!(at(253_402_300_799, 0), "9999-12-31T23:59:59.000Z");
        assert_eq!(at(253_402_300_800, 0), "9999-12-31T23:59:59.000Z");
    }

    #[test]
    fn the_route_follows_the_runner_and_is_left_out_when_unknown() {
        let outcome: Outcome = serde_json::from_str(
            r#"{"status":"passed","stop_reason":{"reason":"clean"},"response":"ok","issues":[],
                "warnings":[],"attempts":[],"total_us":5,"runner_us":3}"#,
        )
        .unwrap();
        let route = serde_json::json!({"name": "code", "profile": "avap", "by": "field"});
        let line = AuditRecord::new("r", &outcome)
            .runner("openai")
            .route(&route)
            .to_json_line();
        assert!(line.contains(r#""runner":"openai","route":{"#), "{line}");
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["route"], route);
        assert_eq!(back["status"], "passed");
        let line = AuditRecord::new("r", &outcome).to_json_line();
        assert!(!line.contains("route"), "{line}");
    }

    #[test]
    fn the_key_and_the_request_limits_are_written_where_documented_and_only_when_known() {
        let outcome: Outcome = serde_json::from_str(
            r#"{"status":"passed","stop_reason":{"reason":"clean"},"response":"ok","issues":[],
                "warnings":[],"attempts":[],"total_us":5,"runner_us":3}"#,
        )
        .unwrap();
        let limits =
            serde_json::json!({"max_retries": {"asked": 1, "applied": 1, "from": "request"}});
        let line = AuditRecord::new("r", &outcome)
            .chat_id("c")
            .key("support-app")
            .runner("openai")
            .request_limits(&limits)
            .step("done")
            .to_json_line();
        assert!(
            line.contains(
                r#""chat_id":"c","key":"support-app","runner":"openai","request_limits":{"#
            ),
            "{line}"
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["request_limits"], limits);
        assert_eq!(back["step"], "done");
        let line = AuditRecord::new("r", &outcome).to_json_line();
        assert!(
            !line.contains("\"key\"") && !line.contains("request_limits"),
            "{line}"
        );
    }

    #[test]
    fn before_the_epoch_is_the_epoch() {
        let early = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(rfc3339_millis(early), "1970-01-01T00:00:00.000Z");
    }
}
