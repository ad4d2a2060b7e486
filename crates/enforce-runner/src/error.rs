//! [`ConfigError`]: why a runner configuration cannot be used, and the checked conversions
//! that raise it. Every runner's constructor and [`RunnerConfig`](crate::RunnerConfig), which
//! builds them, share it, so it lives apart from all of them.

use std::time::Duration;

/// A runner configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration is negative, not a number, or too large.
    #[error("`{field}` must be a non-negative number of seconds, got {value}")]
    InvalidDuration {
        /// The config field.
        field: &'static str,
        /// The value as written.
        value: String,
    },
    /// A required field is empty.
    #[error("`{field}` must not be empty")]
    Missing {
        /// The config field.
        field: &'static str,
    },
    /// The base URL is not an `http://` or `https://` URL.
    #[error("`base_url` must start with http:// or https://, got `{0}`")]
    InvalidBaseUrl(String),
    /// `https://` was asked for but the crate was built without the `rustls` feature.
    #[error(
        "`base_url` {0} needs HTTPS, but enforce-runner was built without the `rustls` feature"
    )]
    TlsUnavailable(String),
    /// The variable named by `api_key_env` is not set.
    #[error("the API key variable `{0}` is not set")]
    MissingApiKeyEnv(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
    /// The local runner's settings cannot be used, or this build has no local runner.
    #[error("local runner: {0}")]
    Local(#[from] enforce_runner_local::LocalConfigError),
}

/// A duration in seconds from a config file, checked.
pub(crate) fn duration_from_secs(field: &'static str, secs: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(secs).map_err(|_| ConfigError::InvalidDuration {
        field,
        value: secs.to_string(),
    })
}
