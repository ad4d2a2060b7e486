//! The `length` validator: the word or character count lies within bounds, each bound with its
//! own severity.
//!
//! ```yaml
//! intro_length:
//!   type: length
//!   unit: words                 # or chars
//!   min: { value: 30, severity: warning }
//!   max: 200                    # a plain number is an error bound
//! ```
//!
//! | code | when |
//! |---|---|
//! | `TOO_SHORT` | fewer than `min` |
//! | `TOO_LONG` | more than `max` |
//!
//! Either code can be renamed per bound (`max: {value: 80, code: WORD_COUNT_IN_RANGE}`), as
//! `schema_code` renames the `json` validator's code.
//!
//! Words are runs of non-whitespace; characters are Unicode scalar values.
//!
//! Early abort: `TOO_LONG` is definite as soon as the text received has more than `max` (counts
//! only grow); each check counts only the new bytes. `TOO_SHORT` is never decided early.
//!
//! ```
//! use enforce_validators::FactoryInput;
//! use enforce_validators::length::Length;
//! use enforce_core::{Context, Severity, Validator};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let spec = serde_json::json!({"min": {"value": 3, "severity": "warning"}, "max": 5});
//! let v = Length::from_config(&FactoryInput::new("size", &spec)).unwrap();
//! let issues = block_on(v.validate("too short", &Context::new())).unwrap();
//! assert_eq!((issues[0].code.as_str(), issues[0].severity), ("TOO_SHORT", Severity::Warning));
//! ```

use crate::build::FactoryInput;
use crate::error::BuildError;
use enforce_core::{async_trait, Context, Issue, PartialCheck, Severity, Validation, Validator};
use serde::Deserialize;

/// Code: below the minimum.
pub const TOO_SHORT: &str = "TOO_SHORT";
/// Code: above the maximum.
pub const TOO_LONG: &str = "TOO_LONG";

/// What is counted.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Runs of non-whitespace.
    #[default]
    Words,
    /// Unicode scalar values.
    Chars,
}

impl Unit {
    fn count(self, text: &str) -> usize {
        match self {
            Unit::Words => text.split_whitespace().count(),
            Unit::Chars => text.chars().count(),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Unit::Words => "words",
            Unit::Chars => "characters",
        }
    }
}

/// One bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The limit.
    pub value: usize,
    /// Severity of the issue when the limit is broken.
    pub severity: Severity,
    /// Message override (`{count}`, `{limit}`, `{unit}`).
    pub message: Option<String>,
    /// Hint override.
    pub hint: Option<String>,
    /// Code override (default `TOO_SHORT` for `min`, `TOO_LONG` for `max`), so a pipeline keeps
    /// its own rule names, as `schema_code` does for `json`.
    pub code: Option<String>,
}

impl Bound {
    /// An error bound at `value`.
    pub fn error(value: usize) -> Self {
        Bound {
            value,
            severity: Severity::Error,
            message: None,
            hint: None,
            code: None,
        }
    }
}

/// One bound of a `length` validator, with its own severity and texts.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "LengthBound"))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BoundConfig {
    /// The limit.
    value: usize,
    /// `error` (default) or `warning`.
    #[serde(default)]
    severity: Option<Severity>,
    /// Message override (`{count}`, `{limit}`, `{unit}`).
    message: Option<String>,
    /// Hint override.
    hint: Option<String>,
    /// Code override (default `TOO_SHORT` / `TOO_LONG`).
    code: Option<String>,
}

/// A limit: a number, or `{value, severity, message, hint}`.
// What `parse_bound` reads.
#[cfg(feature = "config-schema")]
#[derive(schemars::JsonSchema)]
#[schemars(untagged, rename = "LengthLimit")]
#[allow(dead_code)] // only its schema is used
enum BoundSpec {
    /// The limit, as an error.
    Value(usize),
    /// The limit with severity and texts.
    Full(BoundConfig),
}

/// Options of the `length` validator: `min`, `max` or both.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "config-schema",
    schemars(
        rename = "LengthOptions",
        // `key: ~` is no key to the parser: "given" means present and not null.
        extend("anyOf" = [
            {"required": ["min"], "properties": {"min": {"not": {"type": "null"}}}},
            {"required": ["max"], "properties": {"max": {"not": {"type": "null"}}}}
        ])
    )
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LengthConfig {
    /// `words` (default) or `chars`.
    #[serde(default)]
    unit: Unit,
    /// Fewest units: a number, or `{value, severity, message, hint}`.
    #[serde(default)]
    #[cfg_attr(feature = "config-schema", schemars(with = "Option<BoundSpec>"))]
    min: Option<serde_json::Value>,
    /// Most units: a number, or `{value, severity, message, hint}`.
    #[serde(default)]
    #[cfg_attr(feature = "config-schema", schemars(with = "Option<BoundSpec>"))]
    max: Option<serde_json::Value>,
}

fn parse_bound(value: &serde_json::Value, key: &str) -> Result<Bound, BuildError> {
    if let Some(n) = value.as_u64() {
        return Ok(Bound::error(usize::try_from(n).unwrap_or(usize::MAX)));
    }
    let c: BoundConfig =
        serde_path_to_error::deserialize(value).map_err(|e| BuildError::from(e).prefixed(key))?;
    Ok(Bound {
        value: c.value,
        severity: c.severity.unwrap_or(Severity::Error),
        message: c.message,
        hint: c.hint,
        code: c.code,
    })
}

/// The `length` validator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Length {
    name: String,
    unit: Unit,
    min: Option<Bound>,
    max: Option<Bound>,
}

impl Length {
    /// A validator named `name` counting `unit` between the bounds.
    pub fn new(
        name: impl Into<String>,
        unit: Unit,
        min: Option<Bound>,
        max: Option<Bound>,
    ) -> Self {
        Length {
            name: name.into(),
            unit,
            min,
            max,
        }
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads: an inline
    /// object schema; the types it refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <LengthConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration: `unit` (`words` or `chars`), `min`, `max` (a number, or
    /// `{value, severity, message, hint}`).
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let c: LengthConfig = input.parse()?;
        let min = c.min.as_ref().map(|v| parse_bound(v, "min")).transpose()?;
        let max = c.max.as_ref().map(|v| parse_bound(v, "max")).transpose()?;
        if min.is_none() && max.is_none() {
            return Err(BuildError::new(
                "a length validator needs 'min', 'max' or both",
            ));
        }
        if let (Some(lo), Some(hi)) = (&min, &max) {
            if lo.value > hi.value {
                return Err(BuildError::at("min", "'min' is larger than 'max'"));
            }
        }
        Ok(Length::new(input.name, c.unit, min, max))
    }

    fn too_long(&self, max: &Bound, count: usize) -> Issue {
        let unit = self.unit.label();
        self.issue(
            TOO_LONG,
            max,
            count,
            format!(
                "The text has {count} {unit}; at most {} are allowed.",
                max.value
            ),
            format!("Shorten the text to at most {} {unit}.", max.value),
        )
    }

    fn issue(
        &self,
        code: &str,
        bound: &Bound,
        count: usize,
        default: String,
        hint: String,
    ) -> Issue {
        let fill = |t: &str| {
            t.replace("{count}", &count.to_string())
                .replace("{limit}", &bound.value.to_string())
                .replace("{unit}", self.unit.label())
        };
        Issue::error(
            &self.name,
            bound.code.as_deref().unwrap_or(code),
            bound.message.as_deref().map_or(default, fill),
        )
        .with_severity(bound.severity)
        .with_hint(bound.hint.as_deref().map_or(hint, fill))
    }
}

#[async_trait]
impl Validator for Length {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, _context: &Context) -> Validation {
        let count = self.unit.count(response);
        let unit = self.unit.label();
        let mut issues = Vec::new();
        if let Some(min) = self.min.as_ref().filter(|b| count < b.value) {
            issues.push(self.issue(
                TOO_SHORT,
                min,
                count,
                format!(
                    "The text has {count} {unit}; at least {} are required.",
                    min.value
                ),
                format!("Write at least {} {unit}.", min.value),
            ));
        }
        if let Some(max) = self.max.as_ref().filter(|b| count > b.value) {
            issues.push(self.too_long(max, count));
        }
        Ok(issues)
    }

    fn partial_check<'a>(&'a self, _context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        let max = self.max.as_ref()?;
        Some(Box::new(LengthCheck {
            validator: self,
            max,
            checked: 0,
            count: 0,
            in_word: false,
        }))
    }
}

/// The partial check of a [`Length`] with a `max`: counts the new bytes only, and reports
/// `TOO_LONG` once the count passes the maximum (words and characters only ever add up).
struct LengthCheck<'a> {
    validator: &'a Length,
    max: &'a Bound,
    /// Bytes counted.
    checked: usize,
    count: usize,
    /// The last character counted was part of a word.
    in_word: bool,
}

#[async_trait]
impl PartialCheck for LengthCheck<'_> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        let new = prefix.get(self.checked..).unwrap_or_default();
        match self.validator.unit {
            Unit::Chars => self.count += new.chars().count(),
            Unit::Words => {
                for c in new.chars() {
                    let word = !c.is_whitespace();
                    if word && !self.in_word {
                        self.count += 1;
                    }
                    self.in_word = word;
                }
            }
        }
        self.checked = prefix.len();
        if self.count > self.max.value {
            vec![self.validator.too_long(self.max, self.count)]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;
    use crate::testing::Registry;
    use crate::BuildEnv;
    use serde_json::json;

    fn codes(v: &dyn Validator, text: &str) -> Vec<(String, Severity)> {
        block_on(v.validate(text, &Context::new()))
            .unwrap()
            .into_iter()
            .map(|i| (i.code, i.severity))
            .collect()
    }

    #[test]
    fn words_and_chars_with_per_bound_severity() {
        let r = Registry::builtin();
        let v = r
            .build(
                "l",
                &json!({"min": {"value": 3, "severity": "warning"}, "max": 5, "type": "length"}),
                &BuildEnv::default(),
            )
            .unwrap();
        assert_eq!(
            codes(&*v, "one two"),
            vec![(TOO_SHORT.into(), Severity::Warning)]
        );
        assert!(codes(&*v, " one\ttwo\nthree ").is_empty());
        assert_eq!(
            codes(&*v, "a b c d e f"),
            vec![(TOO_LONG.into(), Severity::Error)]
        );
        let v = r
            .build("l", &json!({"type": "length", "unit": "chars", "max": {"value": 3, "message": "{count}>{limit} {unit}"}}), &BuildEnv::default())
            .unwrap();
        assert!(codes(&*v, "äöü").is_empty());
        let issues = block_on(v.validate("äöüß", &Context::new())).unwrap();
        assert_eq!(issues[0].message, "4>3 characters");
    }

    #[test]
    fn each_bound_s_code_can_be_renamed() {
        let v = Registry::builtin()
            .build(
                "l",
                &json!({"type": "length", "min": {"value": 2, "code": "WORD_COUNT_IN_RANGE", "severity": "warning"},
                        "max": {"value": 3, "code": "WORD_COUNT_IN_RANGE"}}),
                &BuildEnv::default(),
            )
            .unwrap();
        assert_eq!(
            codes(&*v, "one"),
            vec![("WORD_COUNT_IN_RANGE".into(), Severity::Warning)]
        );
        assert_eq!(
            codes(&*v, "a b c d"),
            vec![("WORD_COUNT_IN_RANGE".into(), Severity::Error)]
        );
        // The early check of a streamed answer reports the renamed code too.
        let context = Context::new();
        let mut check = v.partial_check(&context).unwrap();
        let cut = block_on(check.check("a b c d e "));
        assert_eq!(cut[0].code, "WORD_COUNT_IN_RANGE");
    }

    #[test]
    fn bad_configs() {
        let r = Registry::builtin();
        let env = BuildEnv::default();
        assert!(r.build("l", &json!({"type": "length"}), &env).is_err());
        assert_eq!(
            r.build("l", &json!({"type": "length", "min": 5, "max": 2}), &env)
                .err()
                .unwrap()
                .key,
            "min"
        );
        let err = r
            .build("l", &json!({"type": "length", "max": {"valu": 2}}), &env)
            .err()
            .unwrap();
        assert!(err.key.starts_with("max"), "{err:?}");
        assert!(r
            .build(
                "l",
                &json!({"type": "length", "unit": "lines", "max": 2}),
                &env
            )
            .is_err());
        assert!(r
            .build("l", &json!({"type": "length", "max": -1}), &env)
            .is_err());
    }

    #[test]
    fn empty_and_huge_inputs() {
        let v = Length::new(
            "l",
            Unit::Words,
            Some(Bound::error(1)),
            Some(Bound::error(1_000_000)),
        );
        assert_eq!(codes(&v, "").len(), 1);
        assert_eq!(
            codes(&v, &"w ".repeat(2_000_000)),
            vec![(TOO_LONG.into(), Severity::Error)]
        );
    }
}
