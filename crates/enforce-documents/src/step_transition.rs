//! The `step_transition` validator: the step an answer declares (`<!-- STEP: x -->`) must be
//! one the configured flow allows after the chat's previous step.
//!
//! The proxy puts the step of a chat's last turn into the context as `previous_step` (or
//! `unknown` when that turn delivered no checked answer). This validator reads it and checks
//! the answer's marker against `allowed[previous_step]`:
//!
//! ```yaml
//! flow:
//!   type: step_transition
//!   allowed:              # previous step → the steps that may follow it
//!     what: [what, why]
//!     why: [why, constraints, what]
//!     constraints: [constraints, generate, why]
//!     generate: [generate, finalize, constraints]
//!     finalize: [finalize, done]
//! ```
//!
//! | code | when |
//! |---|---|
//! | `STEP_NOT_ALLOWED` | the answer's step is not among those allowed after `previous_step` |
//!
//! No verdict is needed (nothing reported) when there is no marker (the `step_marker`
//! validator reports that), no `previous_step` (the first turn), the previous step is
//! `unknown` (the flow lost track: any step may follow) or not listed in `allowed`.
//! No repair: which step the model meant is not for a rule to guess.

use crate::step_marker::find_last_marker;
use enforce_core::{async_trait, Context, Issue, Validation, Validator};
use enforce_validators::text::line_of_offset;
use enforce_validators::{BuildError, FactoryInput};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Code: the answer's step may not follow the previous step.
pub const STEP_NOT_ALLOWED: &str = "STEP_NOT_ALLOWED";

/// The context key the previous step is read from.
pub const PREVIOUS_STEP: &str = "previous_step";

/// Options of the `step_transition` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "StepTransitionOptions"))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepTransitionConfig {
    /// For each previous step, the steps allowed next (compared case-insensitively). A previous
    /// step not listed, and `unknown`, allow any step.
    allowed: BTreeMap<String, Vec<String>>,
}

/// The `step_transition` validator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct StepTransition {
    name: String,
    allowed: BTreeMap<String, Vec<String>>,
}

fn step_word(s: &str, key: &str) -> Result<String, BuildError> {
    let s = s.trim().to_lowercase();
    if s.is_empty() || s.chars().any(char::is_whitespace) || s.contains("--") {
        return Err(BuildError::at(
            key,
            "a step is one word without whitespace or '--'",
        ));
    }
    Ok(s)
}

impl StepTransition {
    /// A validator named `name` with the allowed next steps per previous step.
    pub fn new(
        name: impl Into<String>,
        allowed: impl IntoIterator<Item = (String, Vec<String>)>,
    ) -> Result<Self, BuildError> {
        let mut map = BTreeMap::new();
        for (from, next) in allowed {
            let key = format!("allowed.{from}");
            let from = step_word(&from, &key)?;
            if next.is_empty() {
                return Err(BuildError::at(key, "list at least one step"));
            }
            let next = next
                .iter()
                .enumerate()
                .map(|(i, s)| step_word(s, &format!("{key}[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            map.insert(from, next);
        }
        if map.is_empty() {
            return Err(BuildError::at("allowed", "list at least one step"));
        }
        Ok(StepTransition {
            name: name.into(),
            allowed: map,
        })
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <StepTransitionConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration: `allowed` (previous step → list of next steps).
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let config: StepTransitionConfig = input.parse()?;
        StepTransition::new(input.name, config.allowed)
    }
}

#[async_trait]
impl Validator for StepTransition {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        let Some(previous) = context.get_str(PREVIOUS_STEP).map(str::to_lowercase) else {
            return Ok(Vec::new());
        };
        let Some(next) = self.allowed.get(&previous) else {
            // `unknown`, or a step the flow does not constrain.
            return Ok(Vec::new());
        };
        let Some(marker) = find_last_marker(response) else {
            return Ok(Vec::new());
        };
        let step = marker.step.to_lowercase();
        if next.contains(&step) {
            return Ok(Vec::new());
        }
        let shown: String = step.chars().take(40).collect();
        Ok(vec![Issue::error(
            &self.name,
            STEP_NOT_ALLOWED,
            format!("The step '{shown}' cannot follow the previous step '{previous}'."),
        )
        .with_hint(format!(
            "After '{previous}' the next step is one of: {}. Continue from there and end with that step's marker.",
            next.join(", ")
        ))
        .at_line(line_of_offset(response, marker.range.start))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;

    fn flow() -> StepTransition {
        StepTransition::new(
            "flow",
            [
                (
                    "what".to_string(),
                    vec!["what".to_string(), "why".to_string()],
                ),
                ("why".to_string(), vec!["constraints".to_string()]),
            ],
        )
        .unwrap()
    }

    fn after(previous: Option<&str>) -> Context {
        let mut c = Context::new();
        if let Some(p) = previous {
            c.insert(PREVIOUS_STEP, p.to_string());
        }
        c
    }

    fn codes(text: &str, previous: Option<&str>) -> Vec<String> {
        block_on(flow().validate(text, &after(previous)))
            .unwrap()
            .into_iter()
            .map(|i| i.code)
            .collect()
    }

    #[test]
    fn the_answer_s_step_must_be_allowed_after_the_previous_one() {
        let generate = "Here is the ADR.\n<!-- STEP: generate -->";
        assert_eq!(codes(generate, Some("what")), [STEP_NOT_ALLOWED]);
        assert_eq!(codes(generate, Some("WHY")), [STEP_NOT_ALLOWED]);
        assert!(codes("Why?\n<!-- STEP: why -->", Some("what")).is_empty());
        let issues = block_on(flow().validate(generate, &after(Some("what")))).unwrap();
        assert!(issues[0].hint.as_deref().unwrap().contains("what, why"));
        assert_eq!(issues[0].line, Some(2));
    }

    #[test]
    fn no_previous_step_unknown_unlisted_or_no_marker_constrain_nothing() {
        let generate = "Here is the ADR.\n<!-- STEP: generate -->";
        assert!(codes(generate, None).is_empty());
        assert!(codes(generate, Some("unknown")).is_empty());
        assert!(codes(generate, Some("done")).is_empty());
        assert!(codes("no marker", Some("what")).is_empty());
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(StepTransition::new("f", []).is_err());
        assert!(StepTransition::new("f", [("a b".to_string(), vec!["c".to_string()])]).is_err());
        assert!(StepTransition::new("f", [("a".to_string(), vec![])]).is_err());
    }
}
