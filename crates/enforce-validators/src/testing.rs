//! Helpers for this crate's unit tests.

pub(crate) use futures_executor::block_on;

/// Builds this crate's validators from a spec with a `type` key, as enforce-config's registry
/// does (without scoping), so unit tests read like configuration.
pub(crate) struct Registry;

impl Registry {
    pub(crate) fn builtin() -> Self {
        Registry
    }

    pub(crate) fn build(
        &self,
        name: &str,
        spec: &serde_json::Value,
        _env: &crate::BuildEnv,
    ) -> Result<Box<dyn enforce_core::Validator>, crate::BuildError> {
        let mut options = spec.clone();
        let kind = options
            .as_object_mut()
            .and_then(|o| o.remove("type"))
            .and_then(|t| t.as_str().map(str::to_string))
            .unwrap_or_else(|| name.to_string());
        let input = crate::FactoryInput::new(name, &options);
        Ok(match kind.as_str() {
            "json" => Box::new(crate::json::JsonValidator::from_config(&input)?),
            "length" => Box::new(crate::length::Length::from_config(&input)?),
            "one_of" => Box::new(crate::one_of::OneOf::from_config(&input)?),
            "pattern" => Box::new(crate::pattern::Pattern::from_config(&input)?),
            "terms" => Box::new(crate::terms::Terms::from_config(&input)?),
            other => return Err(crate::BuildError::new(format!("no type '{other}' here"))),
        })
    }
}
