//! Builds validators from configuration by type name: [`Registry`].
//!
//! The registry maps a type name (`step_marker`, `pattern`, ...) to a factory that turns a
//! JSON configuration object into a boxed [`Validator`]. [`Registry::builtin`] knows every
//! validator of this crate; other code adds more types at run time with
//! [`Registry::register`] — the plugin host registers one factory per plugin validator before
//! the configuration is built, so plugin types are used in `enforce.yaml` exactly like
//! built-in ones.
//!
//! ```
//! use enforce_config::{BuildEnv, BuildError, FactoryInput, Registry};
//! use enforce_core::{async_trait, Context, Issue, Validation, Validator};
//!
//! /// Fails responses that contain a configured word.
//! struct NoWord { name: String, word: String }
//!
//! #[async_trait]
//! impl Validator for NoWord {
//!     fn name(&self) -> &str { &self.name }
//!     async fn validate(&self, response: &str, _: &Context) -> Validation {
//!         Ok(if response.contains(&self.word) {
//!             vec![Issue::error(&self.name, "NO_WORD", format!("'{}' is not allowed", self.word))]
//!         } else { vec![] })
//!     }
//! }
//!
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct NoWordConfig { word: String }
//!
//! let mut registry = Registry::builtin();
//! registry.register("no_word", |input: &FactoryInput<'_>| {
//!     let config: NoWordConfig = input.parse()?;
//!     Ok(Box::new(NoWord { name: input.name.to_string(), word: config.word }) as Box<dyn Validator>)
//! }).unwrap();
//!
//! let spec = serde_json::json!({"type": "no_word", "word": "maybe"});
//! let validator = registry.build("hedging", &spec, &BuildEnv::default()).unwrap();
//! assert_eq!(validator.name(), "hedging");
//!
//! // Unknown keys are errors that name the key.
//! let bad = serde_json::json!({"type": "no_word", "wrod": "x"});
//! let err: BuildError = registry.build("hedging", &bad, &BuildEnv::default()).err().unwrap();
//! assert!(err.message.contains("unknown field"), "{err}");
//! ```

use enforce_core::{validator::is_status_name, Validator, ValidatorExt};
use enforce_validators::scope::{Scope, Scoped};
use enforce_validators::{BuildEnv, BuildError, FactoryInput};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// A validator factory: builds a validator from its configuration, or says what is wrong
/// with it.
pub type Factory =
    Box<dyn Fn(&FactoryInput<'_>) -> Result<Box<dyn Validator>, BuildError> + Send + Sync>;

/// A type name could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The name is already taken (built-in types cannot be shadowed by accident).
    #[error("validator type '{0}' is already registered")]
    Duplicate(String),
    /// The name is empty or holds characters other than ASCII letters, digits, `_`, `-`, `.`.
    #[error("'{0}' is not a valid validator type name (use letters, digits, '_', '-', '.')")]
    InvalidName(String),
}

/// Keys of a validator spec that the registry handles itself.
pub const RESERVED_KEYS: &[&str] = &["type", "description", "input", "when", "unavailable_status"];

/// Maps validator type names to factories. See the [module docs](self).
pub struct Registry {
    factories: BTreeMap<String, Factory>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.kinds().collect::<Vec<_>>())
            .finish()
    }
}

impl Default for Registry {
    /// Same as [`Registry::builtin`].
    fn default() -> Self {
        Registry::builtin()
    }
}

fn valid_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl Registry {
    /// A registry without any type.
    pub fn empty() -> Self {
        Registry {
            factories: BTreeMap::new(),
        }
    }

    /// A registry with every built-in validator type of this crate.
    pub fn builtin() -> Self {
        let mut registry = Registry::empty();
        for (kind, factory) in crate::builtin_factories() {
            // Built-in names are distinct and valid; a clash would be a bug caught by tests.
            let _ = registry.register_boxed(kind, factory);
        }
        registry
    }

    /// Registers `factory` under the type name `kind`.
    ///
    /// Fails when the name is taken or malformed, so a plugin cannot silently replace a
    /// built-in validator.
    pub fn register<F>(&mut self, kind: &str, factory: F) -> Result<(), RegistryError>
    where
        F: Fn(&FactoryInput<'_>) -> Result<Box<dyn Validator>, BuildError> + Send + Sync + 'static,
    {
        self.register_boxed(kind, Box::new(factory))
    }

    /// [`register`](Self::register) for an already boxed [`Factory`].
    pub fn register_boxed(&mut self, kind: &str, factory: Factory) -> Result<(), RegistryError> {
        if !valid_kind(kind) {
            return Err(RegistryError::InvalidName(kind.to_string()));
        }
        if self.factories.contains_key(kind) {
            return Err(RegistryError::Duplicate(kind.to_string()));
        }
        self.factories.insert(kind.to_string(), factory);
        Ok(())
    }

    /// `true` when `kind` is registered.
    pub fn contains(&self, kind: &str) -> bool {
        self.factories.contains_key(kind)
    }

    /// The registered type names, sorted.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    /// Builds the validator `name` from `spec`.
    ///
    /// `spec` is a JSON object (or `null` for "all defaults"): `type` picks the factory and
    /// defaults to `name`; `description` is ignored; `input` and `when` scope the validator
    /// to a part of the response or make it conditional (see [`enforce_validators::scope`]);
    /// `unavailable_status` names the literal status reported when the validator gives no
    /// verdict ([`Validator::unavailable_status`]); every other key goes to the factory. Errors carry the key path relative to `spec`.
    pub fn build(
        &self,
        name: &str,
        spec: &Value,
        env: &BuildEnv,
    ) -> Result<Box<dyn Validator>, BuildError> {
        let empty = Map::new();
        let object = match spec {
            Value::Null => &empty,
            Value::Object(map) => map,
            other => {
                return Err(BuildError::new(format!(
                    "a validator is configured with a mapping of options, found {}",
                    json_kind(other)
                )))
            }
        };
        let kind = match object.get("type") {
            None => name,
            Some(Value::String(kind)) => kind.as_str(),
            Some(other) => {
                return Err(BuildError::at(
                    "type",
                    format!("expected a type name, found {}", json_kind(other)),
                ))
            }
        };
        let Some(factory) = self.factories.get(kind) else {
            let known: Vec<&str> = self.kinds().collect();
            let key = if object.contains_key("type") {
                "type"
            } else {
                ""
            };
            return Err(BuildError::at(
                key,
                format!(
                    "unknown validator type '{kind}' (known: {})",
                    known.join(", ")
                ),
            ));
        };
        if let Some(Value::String(_)) | None = object.get("description") {
        } else {
            return Err(BuildError::at("description", "expected a string"));
        }
        let scope = Scope::from_spec(object)?;
        let unavailable_status = unavailable_status(object)?;
        let options: Map<String, Value> = object
            .iter()
            .filter(|(k, _)| !RESERVED_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let options = Value::Object(options);
        let input = FactoryInput {
            name,
            kind,
            config: &options,
            base_dir: &env.base_dir,
            root: env.root.as_deref(),
            documents: crate::JSON_OR_YAML,
            runners: env.runners.as_deref(),
        };
        let validator = factory(&input)?;
        let validator: Box<dyn Validator> = match scope {
            Some(scope) => Box::new(Scoped::new(validator, scope)),
            None => validator,
        };
        Ok(match unavailable_status {
            Some(status) => validator.with_unavailable_status(status).boxed(),
            None => validator,
        })
    }
}

/// The spec's `unavailable_status`: the literal status reported when the validator gives no
/// verdict, in the shape of the proxy's statuses.
fn unavailable_status(spec: &Map<String, Value>) -> Result<Option<String>, BuildError> {
    const KEY: &str = "unavailable_status";
    match spec.get(KEY) {
        None => Ok(None),
        Some(Value::String(status)) if is_status_name(status) => Ok(Some(status.clone())),
        Some(Value::String(status)) => Err(BuildError::at(
            KEY,
            format!(
                "'{status}' is not a status: use upper-case letters, digits and '_' \
                 (e.g. PARSER_UNAVAILABLE)"
            ),
        )),
        Some(other) => Err(BuildError::at(
            KEY,
            format!("expected a status name, found {}", json_kind(other)),
        )),
    }
}

/// "a string", "a number", ... for error messages.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_registry_knows_the_step_marker_and_rejects_duplicates() {
        let mut r = Registry::builtin();
        assert!(r.contains("step_marker"));
        let err = r
            .register("step_marker", |_: &FactoryInput<'_>| {
                Err(BuildError::new("never"))
            })
            .unwrap_err();
        assert_eq!(err, RegistryError::Duplicate("step_marker".into()));
        assert!(matches!(
            r.register("bad name", |_: &FactoryInput<'_>| Err(BuildError::new("x"))),
            Err(RegistryError::InvalidName(_))
        ));
    }

    #[test]
    fn type_defaults_to_the_name_and_unknown_types_are_listed() {
        let r = Registry::builtin();
        let v = r
            .build("step_marker", &Value::Null, &BuildEnv::default())
            .unwrap();
        assert_eq!(v.name(), "step_marker");
        let err = r
            .build("x", &json!({"type": "nope"}), &BuildEnv::default())
            .err()
            .unwrap();
        assert_eq!(err.key, "type");
        assert!(
            err.message.contains("unknown validator type 'nope'"),
            "{err}"
        );
        assert!(err.message.contains("step_marker"), "{err}");
        let err = r
            .build("x", &json!([1]), &BuildEnv::default())
            .err()
            .unwrap();
        assert!(err.message.contains("found a list"), "{err}");
    }

    /// `file_existence`, the seed's name, builds the `file_refs` validator under the name
    /// it is given.
    #[tokio::test]
    async fn file_existence_is_an_alias_of_file_refs() {
        use enforce_core::Context;
        let env = BuildEnv {
            root: Some(env!("CARGO_MANIFEST_DIR").into()),
            ..BuildEnv::default()
        };
        let r = Registry::builtin();
        assert_eq!(crate::alias_of("file_existence"), Some("file_refs"));
        let v = r.build("file_existence", &Value::Null, &env).unwrap();
        assert_eq!(v.name(), "file_existence");
        let answer = "---\nadr_id: 3\ntitle: T\nfiles:\n  modify:\n    - src/lib.rs\n    - src/missing.rs\n---\n";
        let issues = v.validate(answer, &Context::new()).await.unwrap();
        let codes: Vec<&str> = issues.iter().map(|i| i.code.as_str()).collect();
        assert_eq!(codes, ["FILE_NOT_FOUND"], "{issues:?}");
    }

    #[test]
    fn unavailable_status_names_the_status_and_rejects_other_shapes() {
        let r = Registry::builtin();
        let build = |status: Value| {
            r.build(
                "steps",
                &json!({"type": "step_marker", "unavailable_status": status}),
                &BuildEnv::default(),
            )
        };
        let v = build(json!("STEPS_DOWN_2")).unwrap();
        assert_eq!(v.unavailable_status(), Some("STEPS_DOWN_2"));
        assert_eq!(v.name(), "steps");
        // Scoped, it still names its status.
        let scoped = r
            .build(
                "steps",
                &json!({"type": "step_marker", "input": {"json": "/text"},
                        "unavailable_status": "STEPS_DOWN"}),
                &BuildEnv::default(),
            )
            .unwrap();
        assert_eq!(scoped.unavailable_status(), Some("STEPS_DOWN"));
        let plain = r
            .build(
                "steps",
                &json!({"type": "step_marker"}),
                &BuildEnv::default(),
            )
            .unwrap();
        assert_eq!(plain.unavailable_status(), None);
        for bad in [
            json!(""),
            json!("parser_down"),
            json!("PARSER-DOWN"),
            json!("ÄÖ"),
        ] {
            let err = build(bad.clone()).expect_err("refused");
            assert_eq!(err.key, "unavailable_status", "{bad}");
            assert!(err.message.contains("upper-case letters"), "{err}");
        }
        let err = build(json!(3)).expect_err("refused");
        assert_eq!(err.key, "unavailable_status");
        assert!(err.message.contains("found a number"), "{err}");
    }

    #[test]
    fn factory_errors_carry_the_key_path() {
        let r = Registry::builtin();
        let err = r
            .build(
                "steps",
                &json!({"type": "step_marker", "allowed": ["a", 3]}),
                &BuildEnv::default(),
            )
            .err()
            .unwrap();
        assert_eq!(err.key, "allowed[1]");
    }

    #[tokio::test]
    async fn a_validator_scoped_to_a_tool_checks_each_call_of_it_and_no_text() {
        use enforce_core::{runner::ToolCall, Context, Reply};
        let r = Registry::builtin();
        let v = r
            .build(
                "safe_sql",
                &json!({"type": "pattern", "input": {"tool": "run_sql", "json": "/query"},
                        "forbidden": [{"regex": "(?i)\\bdrop\\b", "code": "DANGEROUS_SQL"}]}),
                &BuildEnv::default(),
            )
            .unwrap();
        let reply = |text: &str, calls: &[(&str, &str)]| Reply {
            text: text.into(),
            tool_calls: calls
                .iter()
                .enumerate()
                .map(|(i, (n, a))| ToolCall::new(format!("call_{i}"), *n, *a))
                .collect(),
            ..Reply::default()
        };
        let ctx = Context::new();
        let codes = |reply: Reply| {
            let v = &v;
            let ctx = &ctx;
            async move {
                v.validate_reply(&reply, ctx)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|i| i.code)
                    .collect::<Vec<String>>()
            }
        };
        let bad = reply(
            "I will DROP nothing in the text.",
            &[
                ("run_sql", r#"{"query": "select 1"}"#),
                ("run_sql", r#"{"query": "DROP TABLE users"}"#),
                ("other", r#"{"query": "drop"}"#),
            ],
        );
        assert_eq!(codes(bad.clone()).await, ["DANGEROUS_SQL"]);
        let issues = v.validate_reply(&bad, &ctx).await.unwrap();
        assert!(
            issues[0].message.contains("call_1 to `run_sql`"),
            "{}",
            issues[0].message
        );
        // The text is not this validator's input, and neither is a call it cannot parse.
        assert!(codes(reply("drop it", &[("run_sql", "not json")]))
            .await
            .is_empty());
        assert!(v.validate("DROP", &ctx).await.unwrap().is_empty());

        for (spec, key) in [
            (json!({"tool": "", "json": "/q"}), "input.tool"),
            (json!({"tool": "t", "json": "q"}), "input.json"),
            (json!({"tool": "t", "context": "c"}), "input"),
        ] {
            let err = r
                .build(
                    "x",
                    &json!({"type": "length", "max": 3, "input": spec}),
                    &BuildEnv::default(),
                )
                .err()
                .unwrap();
            assert_eq!(err.key, key, "{err:?}");
        }
    }
}
