//! `decode: constrained`: the constraint a profile's own contract gives the decoder.
//!
//! Read from the validators' configuration, not from the built validators: the `json`
//! validator's schema (`schema` or `schema_file`) and `bare`, a `one_of` list, or a `pattern`
//! validator's required rule anchored at both ends (`^…$`, so it matches the whole answer).
//! The first such validator on the whole answer (no `input`) wins. What a grammar cannot say stays with
//! the validators, which still check every answer.

pub use crate::config::Decode;

use crate::config::Config;
use enforce_core::{Issue, Request};
use enforce_validators::{BuildEnv, BuildError, FactoryInput};
use serde_json::{Map, Value};
use std::path::Path;

/// What a profile's contract lets a decoder enforce.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Constraint {
    /// A JSON value, of `schema` when the `json` validator has one.
    Json {
        /// The validator's JSON Schema; `None`: any JSON value.
        schema: Option<Value>,
        /// `bare: true`: the JSON alone, no fence or prose (what a constrained decoder gives
        /// in any case).
        bare: bool,
    },
    /// Exactly one of these texts (`one_of` with a literal list).
    OneOf(Vec<String>),
    /// A text this regex matches whole (a `pattern` validator's required rule `^…$`; the
    /// regex without its anchors, case folding written out).
    Regex(String),
}

/// The constraint of the validators `names` (a profile's list), `None` when none of them
/// gives one. Errors: a `schema_file` that cannot be read.
pub(crate) fn derive(
    names: &[String],
    config: &Config,
    env: &BuildEnv,
) -> Result<Option<Constraint>, BuildError> {
    for name in names {
        let spec = config.validators.get(name);
        let (kind, spec) = match spec {
            Some(Value::Object(spec)) => {
                if spec.contains_key("input") {
                    continue;
                }
                let kind = spec.get("type").and_then(Value::as_str).unwrap_or(name);
                (kind, Some(spec))
            }
            Some(Value::Null) | None => (name.as_str(), None),
            Some(_) => continue,
        };
        let option = |key: &str| spec.and_then(|s| s.get(key));
        match kind {
            "json" => {
                let schema = match (option("schema"), option("schema_file")) {
                    (Some(schema), _) => Some(schema.clone()),
                    (None, Some(Value::String(file))) => {
                        // Read as the `json` validator reads it when the registry builds it.
                        let input = FactoryInput {
                            base_dir: &env.base_dir,
                            documents: crate::JSON_OR_YAML,
                            ..FactoryInput::new(name, &Value::Null)
                        };
                        Some(input.read_document(Path::new(file)).map_err(|e| {
                            BuildError::at(format!("validators.{name}.schema_file"), e)
                        })?)
                    }
                    _ => None,
                };
                let bare = option("bare").and_then(Value::as_bool).unwrap_or(false);
                return Ok(Some(Constraint::Json { schema, bare }));
            }
            "one_of" => {
                // A `{{key}}` template is known only per request: no constraint from it.
                if let Some(Value::Array(values)) = option("values") {
                    let values: Vec<String> = values
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect();
                    if !values.is_empty() {
                        return Ok(Some(Constraint::OneOf(values)));
                    }
                }
            }
            "pattern" => {
                if let Some(regex) = option("required").and_then(whole_answer_regex) {
                    return Ok(Some(Constraint::Regex(regex)));
                }
            }
            _ => {}
        }
    }
    Ok(None)
}

/// The first of a `pattern` validator's `required` rules that is an error and anchored at the
/// start and end of the text (`^…$` or `\A…\z`, not `(?m)`), as a regex without the anchors:
/// an answer it accepts is what such a rule matches whole. `None` when no rule is.
fn whole_answer_regex(rules: &Value) -> Option<String> {
    use regex_syntax::hir::{Hir, HirKind, Look};
    rules.as_array()?.iter().find_map(|rule| {
        let severity = rule.get("severity").and_then(Value::as_str);
        if !matches!(severity, None | Some("error")) {
            return None;
        }
        let regex = rule.get("regex")?.as_str()?;
        let case_insensitive = rule.get("case_insensitive").and_then(Value::as_bool);
        let hir = regex_syntax::ParserBuilder::new()
            .case_insensitive(case_insensitive.unwrap_or(false))
            .build()
            .parse(regex)
            .ok()?;
        let HirKind::Concat(parts) = hir.kind() else {
            return None;
        };
        let (first, rest) = parts.split_first()?;
        let (last, middle) = rest.split_last()?;
        let anchored = matches!(first.kind(), HirKind::Look(Look::Start))
            && matches!(last.kind(), HirKind::Look(Look::End));
        anchored.then(|| Hir::concat(middle.to_vec()).to_string())
    })
}

/// What constraining one profile's answers on one runner amounts to: the request parameters
/// that runner understands (built by the binary, which knows the runners).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Constrained {
    /// Request parameters that carry the constraint (empty when the runner cannot take it).
    pub params: Map<String, Value>,
    /// What the user should know: the runner cannot constrain, the constraint is looser than
    /// the contract. Each says what happens instead.
    pub notes: Vec<String>,
    /// The local runner's engine for this constraint (`llguidance`, or `gbnf` as configured or
    /// as the fallback for a schema llguidance rejects); `None` for other runners.
    pub engine: Option<&'static str>,
}

impl Constrained {
    /// Adds the parameters to `request`'s; a parameter the request already has is kept (the
    /// caller's own `response_format` wins). Those added are the request's constraint
    /// (`constraint_params`), which reason-then-format's free call leaves out.
    pub fn apply_to(&self, request: &mut Request) {
        for (key, value) in &self.params {
            if !request.params.contains_key(key) {
                request.params.insert(key.clone(), value.clone());
                request.constraint_params.push(key.clone());
            }
        }
    }

    /// The notes as warnings of an outcome, so the audit says that (and how) decoding was not
    /// constrained as asked.
    pub fn warnings(&self) -> impl Iterator<Item = Issue> + '_ {
        self.notes
            .iter()
            .map(|note| Issue::warning("decode", DECODE_NOTE, note.clone()))
    }
}

/// Issue code of a decoding note in the outcome's warnings (the audit's `warnings`).
pub const DECODE_NOTE: &str = "DECODE_NOT_CONSTRAINED";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(yaml: &str) -> Config {
        serde_yaml_ng::from_str(yaml).expect("a config")
    }

    #[test]
    fn the_json_validators_schema_and_bare_are_the_constraint() {
        let c = config(
            "validators:\n  city:\n    type: json\n    bare: true\n    schema: {type: object, required: [name]}\n",
        );
        let got = derive(&["city".into()], &c, &BuildEnv::default()).unwrap();
        assert_eq!(
            got,
            Some(Constraint::Json {
                schema: Some(json!({"type": "object", "required": ["name"]})),
                bare: true
            })
        );
    }

    #[test]
    fn a_schema_file_is_read_relative_to_the_configuration() {
        let dir = std::env::temp_dir().join(format!("enforce-decode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("s.yaml"), "type: array\n").unwrap();
        let c = config("validators:\n  list:\n    type: json\n    schema_file: s.yaml\n");
        let got = derive(&["list".into()], &c, &BuildEnv::new(&dir)).unwrap();
        assert_eq!(
            got,
            Some(Constraint::Json {
                schema: Some(json!({"type": "array"})),
                bare: false
            })
        );
        let missing = config("validators:\n  list:\n    type: json\n    schema_file: nope.json\n");
        let e = derive(&["list".into()], &missing, &BuildEnv::new(&dir)).unwrap_err();
        assert!(e.to_string().contains("nope.json"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_literal_one_of_list_is_a_constraint_a_template_is_not() {
        let c = config(
            "validators:\n  tag:\n    type: one_of\n    values: [yes, no]\n  later:\n    type: one_of\n    values: '{{tags}}'\n",
        );
        assert_eq!(
            derive(&["later".into(), "tag".into()], &c, &BuildEnv::default()).unwrap(),
            Some(Constraint::OneOf(vec!["yes".into(), "no".into()]))
        );
        assert_eq!(
            derive(&["later".into()], &c, &BuildEnv::default()).unwrap(),
            None
        );
    }

    #[test]
    fn a_required_pattern_anchored_at_both_ends_is_a_regex_constraint() {
        let c = config(concat!(
            "validators:\n",
            "  inline:\n    type: pattern\n    required: [{regex: '(?m)^## Summary$'}]\n",
            "  warn:\n    type: pattern\n    required: [{regex: '^x$', severity: warning}]\n",
            "  code:\n    type: pattern\n    forbidden: [{regex: '^bad$'}]\n",
            "    required: [{regex: 'code'}, {regex: '^[A-Z]{3}-\\d{2}$', case_insensitive: true}]\n",
        ));
        let names = ["inline".into(), "warn".into(), "code".into()];
        let Some(Constraint::Regex(regex)) = derive(&names, &c, &BuildEnv::default()).unwrap()
        else {
            panic!("no regex constraint");
        };
        // The anchors are gone, the case folding is spelled out, the meaning is the same.
        assert!(!regex.contains('^') && !regex.contains('$'), "{regex}");
        let whole = regex::Regex::new(&format!("^(?:{regex})$")).unwrap();
        assert!(
            whole.is_match("abc-12") && whole.is_match("ABC-12"),
            "{regex}"
        );
        assert!(!whole.is_match("ABC-123"), "{regex}");
        // A multi-line anchor, a warning or an unanchored rule alone give none.
        assert_eq!(derive(&names[..2], &c, &BuildEnv::default()).unwrap(), None);
    }

    #[test]
    fn validators_on_a_part_of_the_answer_and_other_types_give_none() {
        let c = config(
            "validators:\n  part:\n    type: json\n    input: {field: x}\n  words:\n    type: length\n    max_words: 3\n",
        );
        assert_eq!(
            derive(&["part".into(), "words".into()], &c, &BuildEnv::default()).unwrap(),
            None
        );
        // A built-in type named directly, with its default options.
        assert_eq!(
            derive(&["json".into()], &c, &BuildEnv::default()).unwrap(),
            Some(Constraint::Json {
                schema: None,
                bare: false
            })
        );
    }
}
