//! Errors raised while building validators and profiles: [`BuildError`].

use std::fmt;

/// A validator or profile could not be built from its configuration.
///
/// `key` is the dotted key path of the offending value, relative to what was being built
/// (`forbidden[0].regex` inside a pattern validator; `validators.no_scores.forbidden[0].regex`
/// once the profile builder has prefixed it). A [`ConfigSource`](crate::config::ConfigSource)
/// turns it into a file, line and key for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct BuildError {
    /// Dotted key path of the offending value; empty when the whole item is at fault.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl BuildError {
    /// An error about the item as a whole.
    pub fn new(message: impl Into<String>) -> Self {
        BuildError {
            key: String::new(),
            message: message.into(),
        }
    }

    /// An error about the value at `key`.
    pub fn at(key: impl Into<String>, message: impl Into<String>) -> Self {
        BuildError {
            key: key.into(),
            message: message.into(),
        }
    }

    /// Puts `prefix` in front of the key path (`prefix.key`, or `prefix[0]` style when the key
    /// starts with `[`).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.key = join_key(prefix, &self.key);
        self
    }
}

/// Joins two key paths with a dot, leaving out empty parts.
pub(crate) fn join_key(prefix: &str, key: &str) -> String {
    match (prefix.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) if key.starts_with('[') => format!("{prefix}{key}"),
        (false, false) => format!("{prefix}.{key}"),
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl<E: fmt::Display> From<serde_path_to_error::Error<E>> for BuildError {
    fn from(err: serde_path_to_error::Error<E>) -> Self {
        let key = err.path().to_string();
        let key = if key == "." { String::new() } else { key };
        BuildError::at(key, err.inner().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_join_with_dots_and_brackets() {
        let e = BuildError::at("forbidden[0].regex", "bad").prefixed("validators.x");
        assert_eq!(e.key, "validators.x.forbidden[0].regex");
        assert_eq!(
            BuildError::at("[2]", "m").prefixed("a.validators").key,
            "a.validators[2]"
        );
        assert_eq!(BuildError::new("m").prefixed("p").key, "p");
        assert_eq!(e.to_string(), "validators.x.forbidden[0].regex: bad");
    }
}
