//! The key check: which configured key a request presents, compared in constant time.

use crate::error::ApiError;
use crate::state::App;
use axum::http::{header, HeaderMap, StatusCode};

/// `true` when `a == b`, taking time that depends only on the lengths, not on where the bytes
/// differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    // Compare over the longer length so that a prefix match takes as long as a miss.
    let n = a.len().max(b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// The index of the key in `keys` that `presented` equals, if any. Every key is compared
/// whole, whether one matched before or not, so the time does not reveal which one matched.
pub fn matching_key<'k>(keys: impl IntoIterator<Item = &'k str>, presented: &str) -> Option<usize> {
    let mut found = None;
    for (index, key) in keys.into_iter().enumerate() {
        let equal = constant_time_eq(key.as_bytes(), presented.as_bytes());
        found = if equal { Some(index) } else { found };
    }
    found
}

/// The request extension naming the [`KeyGrant`](crate::KeyGrant) (by its index in
/// `ServerConfig::key_grants`) whose key the request presented; absent for a key that may
/// use everything, or when there are no keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granted(pub usize);

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Checks the key a request presents (`Authorization: Bearer` from OpenAI clients, `x-api-key`
/// from Anthropic's) when keys are configured: the grant of a key that has one, `None` for a
/// key that may use everything or when no keys are configured, else the 401 (counted as an
/// `unauthorized` rejection).
pub(crate) fn authenticate(
    app: &App,
    headers: &HeaderMap,
) -> Result<Option<Granted>, Box<ApiError>> {
    let (plain, grants) = (&app.config.api_keys, &app.config.key_grants);
    if plain.is_empty() && grants.is_empty() {
        return Ok(None);
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .or_else(|| {
            headers
                .get(crate::headers::API_KEY)
                .and_then(|v| v.to_str().ok())
        });
    let keys = plain
        .iter()
        .map(String::as_str)
        .chain(grants.iter().map(|g| g.key.as_str()));
    match presented.and_then(|key| matching_key(keys, key)) {
        Some(found) => Ok(found.checked_sub(plain.len()).map(Granted)),
        None => {
            let mut error = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "invalid_api_key",
                "Missing or wrong API key. Send `Authorization: Bearer <key>` (or `x-api-key: <key>`) with a key this proxy accepts.",
            );
            error.param = None;
            app.refuse(crate::audit::Refusal {
                reason: "unauthorized",
                status: error.status.as_u16(),
                model: None,
                key: None,
            });
            Err(Box::new(error))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_keys() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        let keys = ["k1", "k2", "k3"];
        assert_eq!(matching_key(keys, "k2"), Some(1));
        assert_eq!(matching_key(keys, "k3"), Some(2));
        assert_eq!(matching_key(keys, "k"), None);
    }

    #[test]
    fn parses_bearer_header() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }
}
