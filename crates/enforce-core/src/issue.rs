//! What a validator reports: [`Issue`] and its [`Severity`].

use serde::{Deserialize, Serialize};
use std::fmt;

/// How much an issue matters.
///
/// Errors fail a response and trigger a re-ask; warnings travel with the outcome and never trigger
/// a retry.
// Exhaustive on purpose: the loop's rules are defined over exactly these two.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The response breaks the contract.
    Error,
    /// Worth knowing, but the response is acceptable.
    Warning,
}

impl Severity {
    /// The stable lowercase name (`error` or `warning`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding of one validator about one response.
///
/// `code` is a stable, upper-case identifier (`MISSING_STEP_MARKER`, ...): users grep for it and
/// dashboards count it, so it never changes once published. `message` says what is wrong, `hint`
/// what to do about it; both end up in the feedback sent to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// Name of the validator that raised the issue; the loop fills it in when it is empty.
    pub validator: String,
    /// Stable issue code.
    pub code: String,
    /// What is wrong, in words a person understands.
    pub message: String,
    /// How to fix it, if the validator knows.
    #[serde(default)]
    pub hint: Option<String>,
    /// Error or warning.
    pub severity: Severity,
    /// `false` marks a hard abort: asking the model again cannot help.
    pub repairable: bool,
    /// 1-based line in the response, when the issue has a place.
    #[serde(default)]
    pub line: Option<u32>,
    /// 1-based column (in characters) within `line`, when known.
    #[serde(default)]
    pub column: Option<u32>,
}

impl Issue {
    /// An issue without validator name, hint or location; repairable.
    ///
    /// The loop fills in the name of the validator that returned it (see
    /// [`Validator`](crate::Validator)), so a validator need not spell its own name out.
    pub fn new(severity: Severity, code: impl Into<String>, message: impl Into<String>) -> Self {
        Issue {
            validator: String::new(),
            code: code.into(),
            message: message.into(),
            hint: None,
            severity,
            repairable: true,
            line: None,
            column: None,
        }
    }

    /// A repairable error without hint or location.
    pub fn error(
        validator: impl Into<String>,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Issue::new(Severity::Error, code, message).with_validator(validator)
    }

    /// A warning without hint or location.
    pub fn warning(
        validator: impl Into<String>,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Issue {
            severity: Severity::Warning,
            ..Issue::error(validator, code, message)
        }
    }

    /// Names the validator the issue belongs to (one reporting on another's behalf).
    pub fn with_validator(mut self, validator: impl Into<String>) -> Self {
        self.validator = validator.into();
        self
    }

    /// Names the validator `name` unless the issue already names one: how the loop stamps.
    pub(crate) fn or_validator(mut self, name: &str) -> Self {
        if self.validator.is_empty() {
            self.validator.push_str(name);
        }
        self
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Sets the 1-based line.
    pub fn at_line(mut self, line: u32) -> Self {
        self.line = Some(line);
        self
    }

    /// Sets the 1-based line and column.
    pub fn at(mut self, line: u32, column: u32) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// Sets the severity.
    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    /// Sets whether asking again can help.
    pub fn with_repairable(mut self, repairable: bool) -> Self {
        self.repairable = repairable;
        self
    }

    /// Marks the issue as a hard abort (asking again cannot help).
    pub fn hard_abort(self) -> Self {
        self.with_repairable(false)
    }

    /// `true` for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}] {}", self.severity, self.code, self.message)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// The error codes of `issues`, sorted, without repeats.
pub(crate) fn error_codes(issues: &[Issue]) -> Vec<&str> {
    let mut codes: Vec<&str> = issues
        .iter()
        .filter(|i| i.is_error())
        .map(|i| i.code.as_str())
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_flat_with_lowercase_severity() {
        let issue = Issue::error("step_marker", "MISSING_STEP_MARKER", "no marker")
            .with_hint("end with <!-- STEP: done -->")
            .at_line(3);
        let json = serde_json::to_value(&issue).unwrap();
        assert_eq!(json["severity"], "error");
        assert_eq!(json["line"], 3);
        assert_eq!(json["column"], serde_json::Value::Null);
        assert_eq!(json["repairable"], true);
        let back: Issue = serde_json::from_value(json).unwrap();
        assert_eq!(back, issue);
    }
}
