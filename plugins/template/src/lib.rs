use enforce_plugin_abi::sdk::{Context, PluginSpec, PluginValidator, ValidatorSpec};
use enforce_plugin_abi::{export_plugin, PluginError, PluginIssue};
use serde_json::Value;

/// Flags hedging words ("vielleicht", "eventuell", ...) line by line.
struct NoHedging {
    words: Vec<String>,
}

impl NoHedging {
    /// `config` is the validator's options from enforce.yaml, as JSON (`{}` when none).
    fn from_config(config: &Value) -> Result<Self, String> {
        let words = match config.get("words") {
            None => vec!["vielleicht".to_string(), "eventuell".to_string()],
            Some(list) => list
                .as_array()
                .and_then(|a| a.iter().map(|w| w.as_str().map(String::from)).collect())
                .ok_or("`words` must be a list of strings")?,
        };
        Ok(NoHedging { words })
    }
}

impl PluginValidator for NoHedging {
    fn validate(&self, response: &str, _context: &Context<'_>) -> Result<Vec<PluginIssue>, PluginError> {
        let mut issues = Vec::new();
        for (n, line) in response.lines().enumerate() {
            for word in &self.words {
                if let Some(col) = line.find(word.as_str()) {
                    issues.push(
                        PluginIssue::error("HEDGING", format!("`{word}` weakens the statement."))
                            .with_hint("State the fact, or say what it depends on.")
                            .at(n as u32 + 1, line[..col].chars().count() as u32 + 1),
                    );
                }
            }
        }
        Ok(issues)
    }
}

export_plugin!(PluginSpec {
    name: "no-hedging",
    version: env!("CARGO_PKG_VERSION"),
    validators: &[ValidatorSpec {
        name: "no_hedging",
        description: "Flags hedging words.",
        build: |config| Ok(Box::new(NoHedging::from_config(config)?)),
    }],
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_hedging_with_its_column() {
        let v = NoHedging::from_config(&serde_json::json!({})).unwrap();
        let issues = v.validate("Das klappt vielleicht.", &Context::new("{}")).unwrap();
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].code.as_str(), "HEDGING");
        assert_eq!(issues[0].line.into_option(), Some(1));
        assert_eq!(issues[0].column.into_option(), Some(12));
    }

    #[test]
    fn words_come_from_the_config() {
        let v = NoHedging::from_config(&serde_json::json!({"words": ["womöglich"]})).unwrap();
        let context = Context::new("{}");
        assert!(v.validate("Das klappt vielleicht.", &context).unwrap().is_empty());
        assert_eq!(v.validate("Womöglich.\nDas klappt womöglich.", &context).unwrap().len(), 1);
        assert!(NoHedging::from_config(&serde_json::json!({"words": "vielleicht"})).is_err());
    }
}
