//! Bearer-key checks in constant time.

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

/// `true` when `presented` equals one of `keys`. Every key is compared, so the time does not
/// reveal which one matched.
pub fn key_matches(keys: &[String], presented: &str) -> bool {
    let mut found = false;
    for key in keys {
        found |= constant_time_eq(key.as_bytes(), presented.as_bytes());
    }
    found
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
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
        let keys = vec!["k1".to_string(), "k2".to_string()];
        assert!(key_matches(&keys, "k2"));
        assert!(!key_matches(&keys, "k3"));
    }

    #[test]
    fn parses_bearer_header() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }
}
