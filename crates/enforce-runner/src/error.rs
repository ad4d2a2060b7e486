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
    /// A timeout or a size limit is 0, which would fail every call.
    #[error("`{field}` must be more than 0")]
    Zero {
        /// The config field.
        field: &'static str,
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

impl ConfigError {
    /// The config field at fault, when the error is about one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ConfigError::InvalidDuration { field, .. }
            | ConfigError::Zero { field }
            | ConfigError::Missing { field } => Some(field),
            ConfigError::InvalidBaseUrl(_) | ConfigError::TlsUnavailable(_) => Some("base_url"),
            ConfigError::MissingApiKeyEnv(_) => Some("api_key_env"),
            ConfigError::HttpClient(_) | ConfigError::Local(_) => None,
        }
    }
}

/// A timeout in seconds from a config file, checked: 0 is refused, since every call would
/// time out at once.
pub(crate) fn timeout_from_secs(field: &'static str, secs: f64) -> Result<Duration, ConfigError> {
    match duration_from_secs(field, secs)? {
        zero if zero.is_zero() => Err(ConfigError::Zero { field }),
        timeout => Ok(timeout),
    }
}

/// A duration in seconds from a config file, checked.
pub(crate) fn duration_from_secs(field: &'static str, secs: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(secs).map_err(|_| ConfigError::InvalidDuration {
        field,
        value: secs.to_string(),
    })
}
