//! The `models:` entries of a config file as written ([`ServedModelConfig`]): a public model id,
//! its runner and profile, the options of [`ModelOptions`], and the `routes:` ([`RouteConfig`],
//! [`WhenConfig`]) and `classify:` ([`ClassifyConfig`]) that pick a profile per request.
//! Generic over the runner's configuration `R`: this crate is given runners, it builds none.

use super::{CacheConfig, FailureResponse, ModelOptions, StreamMode};
use crate::routes::{RouteError, When};
use serde::Deserialize;

/// One entry of `models:`: a public model id of `enforce serve`.
///
/// ```yaml
/// models:
///   - id: consultant
///     runner: {type: claude}
///     profile: chat
///     status_events: true
///   - id: adr-writer
///     runner: {type: openai, base_url: "http://localhost:11434/v1", model: llama3.2}
///     profile: adr
///     on_unresolved: error
///   - id: assistant
///     runner: {type: openai, base_url: "http://localhost:11434/v1", model: llama3.2}
///     profile: chat                  # when no route matches
///     routes:                        # first match wins, before the model is asked
///       - {profile: adr, when: {field: /metadata/type, equals: adr}}
///       - {profile: json, when: {header: X-Request-Type, one_of: [json, api]}}
///       - {name: code, profile: code, when: {label: CODE_GENERATION}}
///     classify:                      # asked only when a `label` route is reached
///       runner: {type: openai, base_url: "http://localhost:11434/v1", model: llama3.2}
///       labels: [CODE_GENERATION, RETRIEVAL, CONVERSATIONAL]
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "ServedModelConfig"))]
#[derive(Debug, Clone, Deserialize)]
// `R` needs no `Default`: the `default` of `Option<R>` is `None`.
#[serde(deny_unknown_fields, bound(deserialize = "R: Deserialize<'de>"))]
pub struct ServedModelConfig<R> {
    /// The id clients send as `model`.
    pub id: String,
    /// Its runner; the top-level `runner:` when absent.
    #[serde(default)]
    pub runner: Option<R>,
    /// Its profile; the default profile when absent.
    #[serde(default)]
    pub profile: Option<String>,
    /// `return` or `error`: what a client (streaming or not) gets for an unresolved answer.
    /// Default by audience: `error` with `stream_mode: draft` (a chat UI shows the enforcement
    /// error, not the failed text), `return` with `hold` (the answer and its status, for API
    /// clients).
    #[serde(default)]
    pub on_unresolved: Option<FailureResponse>,
    /// `return` (default) or `error`: the same for an unavailable validator.
    #[serde(default)]
    pub on_unavailable: FailureResponse,
    /// Send Open WebUI status events in streams.
    #[serde(default)]
    pub status_events: bool,
    /// Check tool calls against the request's `tools` and re-ask when they fail (default true).
    #[serde(default = "yes")]
    pub check_tool_calls: bool,
    /// Remove the step marker from what the client receives; it is still recorded, and put back
    /// on the assistant turns the client sends back (default false).
    #[serde(default)]
    pub hide_step_marker: bool,
    /// What a streaming client sees while the loop works: `hold` (default: nothing unchecked)
    /// or `draft` (attempts live as reasoning, only the checked answer as content).
    #[serde(default)]
    pub stream_mode: StreamMode,
    /// Routes picking the profile per request, tried in order before the model is asked; the
    /// first that matches wins, none matching leaves `profile`. A request naming its profile
    /// in `X-Enforce-Profile` is not routed.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// Let requests lower this model's limits with `X-Enforce-Max-Retries` and
    /// `X-Enforce-Token-Budget` (never above the profile's); default: `server.allow_request_limits`,
    /// else false (such a request gets a 400).
    #[serde(default)]
    pub allow_request_limits: Option<bool>,
    /// The classifier `label`/`labels` routes ask: a runner given the last user message,
    /// answering one of `labels`. Asked at most once per request, and only when such a route
    /// is reached; a failure, a timeout or an unknown answer matches no label route.
    #[serde(default)]
    pub classify: Option<ClassifyConfig<R>>,
    /// Replay checked answers (`passed`, `repaired`) to the same request under the same
    /// contract: `{ttl_secs: 600, max_bytes: 67108864, store: memory | redis}`. Off by default.
    #[serde(default)]
    pub cache: Option<CacheConfig>,
}

/// One entry of a model's `routes:`.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The route's name in the audit and the `enforcement` object (default: its profile).
    #[serde(default)]
    pub name: Option<String>,
    /// The profile enforced when the route matches.
    pub profile: String,
    /// When it matches: exactly one of `field`, `header`, `matches`, `label`/`labels`.
    pub when: WhenConfig,
}

/// The condition of a route. `field` and `header` take `equals` or `one_of` (strings, or
/// numbers and booleans, compared as JSON writes them).
///
/// ```yaml
/// when: {field: /metadata/type, equals: code}          # JSON pointer into the request body
/// when: {header: X-Request-Type, one_of: [code, sql]}  # header name in any case
/// when: {matches: '(?i)\b(select|insert)\b'}          # regex on the last user message
/// when: {label: CODE_GENERATION}                       # or labels: [A, B]: the classifier's
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhenConfig {
    /// A JSON pointer (RFC 6901) into the request body, e.g. `/metadata/type`.
    pub field: Option<String>,
    /// A request header (case-insensitive name).
    pub header: Option<String>,
    /// The value `field` or `header` must have.
    pub equals: Option<serde_json::Value>,
    /// Values `field` or `header` may have.
    pub one_of: Option<Vec<serde_json::Value>>,
    /// A regex the last user message must match (Rust `regex` syntax).
    pub matches: Option<String>,
    /// The classifier's label (one of `classify.labels`).
    pub label: Option<String>,
    /// Labels, any of which matches.
    pub labels: Option<Vec<String>>,
}

/// A model's `classify:`: the runner that labels requests for `label` routes.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "ClassifyConfig"))]
#[derive(Debug, Clone, Deserialize)]
// `R` needs no `Default`: the `default` of `Option<R>` is `None`.
#[serde(deny_unknown_fields, bound(deserialize = "R: Deserialize<'de>"))]
pub struct ClassifyConfig<R> {
    /// The runner asked (same options as `models[].runner`).
    pub runner: R,
    /// The prompt: `{{question}}` is the last user message (capped, between delimiters the
    /// message cannot close), `{{labels}}` the labels. Default: a prompt asking for the label
    /// only and telling the model the request is data.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The labels it may answer; anything else matches no route.
    pub labels: Vec<String>,
    /// How long to wait for the label, in milliseconds (default 5000).
    #[serde(default = "default_classify_timeout_ms")]
    pub timeout_ms: u64,
    /// Most characters of the question quoted in the prompt (default 2000).
    #[serde(default = "default_classify_question_chars")]
    pub max_question_chars: usize,
}

fn default_classify_timeout_ms() -> u64 {
    5000
}

fn default_classify_question_chars() -> usize {
    2000
}

fn yes() -> bool {
    true
}

impl<R> ServedModelConfig<R> {
    /// The options of the served model; `server_allows_limits` is `server.allow_request_limits`,
    /// which the entry's own `allow_request_limits` overrides.
    pub fn options(&self, server_allows_limits: bool) -> ModelOptions {
        ModelOptions {
            on_unresolved: self
                .on_unresolved
                .unwrap_or_else(|| self.stream_mode.default_on_unresolved()),
            on_unavailable: self.on_unavailable,
            status_events: self.status_events,
            check_tool_calls: self.check_tool_calls,
            hide_step_marker: self.hide_step_marker,
            stream_mode: self.stream_mode,
            request_limits: self.allow_request_limits.unwrap_or(server_allows_limits),
            cache: self.cache,
        }
    }
}

impl WhenConfig {
    /// The route condition this names; error keys are below the route (`when.matches`).
    pub fn to_when(&self) -> Result<When, RouteError> {
        let labels = match (&self.label, &self.labels) {
            (Some(_), Some(_)) => {
                return Err(RouteError::at("when", "give `label` or `labels`, not both"))
            }
            (Some(label), None) => Some(vec![label.clone()]),
            (None, labels) => labels.clone(),
        };
        let kinds = [
            self.field.is_some(),
            self.header.is_some(),
            self.matches.is_some(),
            labels.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(RouteError::at(
                "when",
                "needs exactly one of `field`, `header`, `matches`, `label`/`labels`",
            ));
        }
        if (self.equals.is_some() || self.one_of.is_some())
            && self.field.is_none()
            && self.header.is_none()
        {
            return Err(RouteError::at(
                "when",
                "`equals` and `one_of` go with `field` or `header`",
            ));
        }
        if let Some(pointer) = &self.field {
            When::field(pointer, self.values()?)
        } else if let Some(name) = &self.header {
            When::header(name, self.values()?)
        } else if let Some(pattern) = &self.matches {
            When::matches(pattern)
        } else {
            When::labels(labels.unwrap_or_default())
        }
    }

    /// `equals` or `one_of` as strings (numbers and booleans as JSON writes them).
    fn values(&self) -> Result<Vec<String>, RouteError> {
        let listed = match (&self.equals, &self.one_of) {
            (Some(one), None) => std::slice::from_ref(one),
            (None, Some(many)) => many.as_slice(),
            _ => {
                return Err(RouteError::at(
                    "when",
                    "`field` and `header` take `equals` or `one_of`",
                ))
            }
        };
        listed
            .iter()
            .map(|v| match v {
                serde_json::Value::String(s) => Ok(s.clone()),
                serde_json::Value::Number(n) => Ok(n.to_string()),
                serde_json::Value::Bool(b) => Ok(b.to_string()),
                _ => Err(RouteError::at(
                    "when",
                    "values are strings, numbers or booleans",
                )),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_takes_exactly_one_kind_and_scalar_values() {
        let when = |json: &str| {
            let config: WhenConfig = serde_json::from_str(json).unwrap();
            config.to_when().map(|_| ()).map_err(|e| e.message)
        };
        assert!(when(r#"{"field": "/a", "equals": 1}"#).is_ok());
        assert!(when(r#"{"header": "X-A", "one_of": ["a", true]}"#).is_ok());
        assert!(when(r#"{"labels": ["A", "B"]}"#).is_ok());
        for (json, says) in [
            ("{}", "exactly one of"),
            (
                r#"{"field": "/a", "matches": "x", "equals": 1}"#,
                "exactly one of",
            ),
            (r#"{"field": "/a"}"#, "`equals` or `one_of`"),
            (
                r#"{"field": "/a", "equals": 1, "one_of": [2]}"#,
                "`equals` or `one_of`",
            ),
            (
                r#"{"field": "/a", "equals": [1]}"#,
                "strings, numbers or booleans",
            ),
            (
                r#"{"matches": "x", "equals": 1}"#,
                "go with `field` or `header`",
            ),
            (r#"{"label": "A", "labels": ["B"]}"#, "not both"),
        ] {
            let err = when(json).unwrap_err();
            assert!(err.contains(says), "{json}: {err}");
        }
    }
}
