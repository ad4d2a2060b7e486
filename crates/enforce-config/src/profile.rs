//! Profiles: named, ordered validator lists with a policy, turned into
//! [`Enforcer`](enforce_core::Enforcer)s.
//!
//! Two profiles are built in and need no configuration:
//!
//! | profile | validators |
//! |---|---|
//! | `chat` | `step_marker` |
//! | `adr` | `step_marker`, `adr_structure`, `file_refs` (root = the current directory, or `--root`) |
//!
//! A [`ProfileSet`] builds every validator once; its profiles share them (an `external`
//! validator's circuit breaker is shared by every request that uses it), and
//! [`Profile::enforcer`] makes a cheap [`Enforcer`] per request or per check.
//!
//! ```
//! use enforce_config::{config::ConfigSource, BuildEnv, ProfileSet, Registry};
//! use enforce_core::{Context, Status};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let yaml = "validators:\n  steps:\n    type: step_marker\n    allowed: [ask, answer]\n\
//!             profiles:\n  support:\n    validators: [steps]\n    max_retries: 1\n";
//! let source = ConfigSource::from_string("enforce.yaml", yaml);
//! let profiles = ProfileSet::load(&source, &Registry::builtin(), None).unwrap();
//! let enforcer = profiles.get("support").unwrap().enforcer();
//! assert_eq!(enforcer.policy().max_retries, 1);
//! let outcome = block_on(enforcer.check("Done.\n<!-- STEP: answer -->", &Context::new(), enforce_core::Check::Report));
//! assert_eq!(outcome.status, Status::Passed);
//! // Built-in profiles are always there.
//! assert!(profiles.get("chat").is_some() && profiles.get("adr").is_some());
//! ```

use crate::config::{Config, ConfigError, ConfigSource, Defaults, FeedbackConfig, ProfileConfig};
use crate::config::{InputFailureAction, ReformulateConfig, RetrievedContextConfig, SectionConfig};
use crate::registry::Registry;
use enforce_core::{
    AnswerFormat, ContextSource, Enforcer, Feedback, InputStage, OnInputFailure, Policy,
    Reformulator, RunnerReformulator, Validator,
};
use enforce_validators::BuildEnv;
use enforce_validators::BuildError;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Name of the profile used when none is named and the configuration sets no default.
pub const DEFAULT_PROFILE: &str = "chat";

/// The built-in profiles and their validators (each used with its default options).
pub const BUILTIN_PROFILES: &[(&str, &str, &[&str])] = &[
    (
        "chat",
        "A chat answer that declares its workflow step.",
        &["step_marker"],
    ),
    (
        "adr",
        "An architecture decision record: step marker, ADR structure, real file paths.",
        &["step_marker", "adr_structure", "file_refs"],
    ),
];

/// The note `on_input_failure: hint` appends when the profile names none.
pub const DEFAULT_INPUT_HINT: &str = "The retrieved context may not answer this question. \
If it does not, say so instead of guessing.";

/// The reformulation prompt of a `reformulate: {runner}` hook that names none. It opens with
/// the explicit `[CONTEXT_INSUFFICIENT]` hint, so the rewrite differs in substance (broader
/// terms, other phrasing) instead of repeating the question.
pub const DEFAULT_REFORMULATE_PROMPT: &str = "[CONTEXT_INSUFFICIENT]\n\
The retrieval did not return relevant context for the question below. Rewrite the question \
so that a search finds it: use broader terms, synonyms or other phrasing, and keep its \
meaning. Answer with the rewritten question only.\n\n\
Question:\n{{question}}";

/// Time limit of a command or HTTP reformulation hook without `timeout_ms`.
pub const DEFAULT_REFORMULATE_TIMEOUT_MS: u64 = 10_000;

/// One built profile.
pub struct Profile {
    name: String,
    description: Option<String>,
    validators: Vec<Arc<dyn Validator>>,
    policy: Policy,
    input: Option<InputSpec>,
}

/// A profile's input stage, built: what [`InputStage`] is made of, shareable.
struct InputSpec {
    validators: Vec<Arc<dyn Validator>>,
    on_failure: OnInputFailure,
    source: Option<ContextSource>,
    reformulator: Option<Arc<dyn Reformulator>>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("name", &self.name)
            .field("validators", &self.validator_names())
            .field("max_retries", &self.policy.max_retries)
            .finish()
    }
}

impl Profile {
    /// A profile from already built validators.
    pub fn new(
        name: impl Into<String>,
        validators: Vec<Arc<dyn Validator>>,
        policy: Policy,
    ) -> Self {
        Profile {
            name: name.into(),
            description: None,
            validators,
            policy,
            input: None,
        }
    }

    /// The profile's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the profile is for.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The validators, in the order they run.
    pub fn validators(&self) -> &[Arc<dyn Validator>] {
        &self.validators
    }

    /// The validators' names, in order.
    pub fn validator_names(&self) -> Vec<&str> {
        self.validators.iter().map(|v| v.name()).collect()
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The input validators' names, in order (empty without an input stage).
    pub fn input_validator_names(&self) -> Vec<&str> {
        self.input
            .iter()
            .flat_map(|i| i.validators.iter().map(|v| v.name()))
            .collect()
    }

    /// An [`Enforcer`] running this profile's validators with its policy. Cheap: the
    /// validators are shared, not rebuilt.
    pub fn enforcer(&self) -> Enforcer {
        let validators: Vec<Box<dyn Validator>> = self
            .validators
            .iter()
            .map(|v| Box::new(Arc::clone(v)) as Box<dyn Validator>)
            .collect();
        let enforcer = Enforcer::new(validators).with_policy(self.policy.clone());
        match &self.input {
            None => enforcer,
            Some(input) => {
                let validators = input
                    .validators
                    .iter()
                    .map(|v| Box::new(Arc::clone(v)) as Box<dyn Validator>)
                    .collect();
                let mut stage = InputStage::new(validators).on_failure(input.on_failure.clone());
                if let Some(source) = &input.source {
                    stage = stage.context_source(source.clone());
                }
                if let Some(hook) = &input.reformulator {
                    stage = stage.reformulator(Arc::clone(hook));
                }
                enforcer.with_input(stage)
            }
        }
    }
}

/// Every profile of a configuration (built-in ones included), built and ready.
#[derive(Debug)]
pub struct ProfileSet {
    profiles: BTreeMap<String, Profile>,
    default: String,
}

/// The policy fields of defaults or a profile, for layering.
struct PolicyFields<'a> {
    max_retries: Option<u32>,
    feedback: Option<&'a FeedbackConfig>,
    budget: Option<enforce_core::Budget>,
    on_unavailable: Option<enforce_core::FailMode>,
    early_abort: Option<bool>,
    partial_check_bytes: Option<usize>,
    reask: Option<enforce_core::Reask>,
    repair: Option<enforce_core::RepairWhen>,
    repair_first_codes: Option<&'a Vec<String>>,
    fallback: Option<&'a String>,
    fallback_file: Option<&'a PathBuf>,
}

impl<'a> From<&'a Defaults> for PolicyFields<'a> {
    fn from(d: &'a Defaults) -> Self {
        PolicyFields {
            max_retries: d.max_retries,
            feedback: d.feedback.as_ref(),
            budget: d.budget,
            on_unavailable: d.on_unavailable,
            early_abort: d.early_abort,
            partial_check_bytes: d.partial_check_bytes,
            reask: d.reask,
            repair: d.repair,
            repair_first_codes: d.repair_first_codes.as_ref(),
            fallback: d.fallback.as_ref(),
            fallback_file: d.fallback_file.as_ref(),
        }
    }
}

impl<'a> From<&'a ProfileConfig> for PolicyFields<'a> {
    fn from(p: &'a ProfileConfig) -> Self {
        PolicyFields {
            max_retries: p.max_retries,
            feedback: p.feedback.as_ref(),
            budget: p.budget,
            on_unavailable: p.on_unavailable,
            early_abort: p.early_abort,
            partial_check_bytes: p.partial_check_bytes,
            reask: p.reask,
            repair: p.repair,
            repair_first_codes: p.repair_first_codes.as_ref(),
            fallback: p.fallback.as_ref(),
            fallback_file: p.fallback_file.as_ref(),
        }
    }
}

fn read_fallback(base_dir: &Path, file: &Path, key: &str) -> Result<String, BuildError> {
    let path = if file.is_absolute() {
        file.to_path_buf()
    } else {
        base_dir.join(file)
    };
    std::fs::read_to_string(&path)
        .map_err(|e| BuildError::at(key, format!("cannot read {}: {e}", path.display())))
}

/// Lays `profile` over `defaults` into a [`Policy`]. `key` prefixes error keys.
/// The input stage of profile `p` (keys under `prefix`), or `None` without input validators;
/// input settings without input validators are errors, as they would do nothing.
fn build_input(
    p: &ProfileConfig,
    validators: Vec<Arc<dyn Validator>>,
    prefix: &str,
    env: &BuildEnv,
) -> Result<Option<InputSpec>, BuildError> {
    if validators.is_empty() {
        let stray = [
            ("on_input_failure", p.on_input_failure.is_some()),
            ("input_hint", p.input_hint.is_some()),
            ("retrieved_context", p.retrieved_context.is_some()),
            ("reformulate", p.reformulate.is_some()),
        ];
        if let Some((key, _)) = stray.iter().find(|(_, set)| *set) {
            return Err(BuildError::at(
                format!("{prefix}.{key}"),
                "has no effect without `input_validators`",
            ));
        }
        return Ok(None);
    }
    let action = p.on_input_failure.unwrap_or(InputFailureAction::Reject);
    let on_failure = match action {
        InputFailureAction::Reject => OnInputFailure::Reject,
        InputFailureAction::Hint => OnInputFailure::Hint(
            p.input_hint
                .clone()
                .unwrap_or_else(|| DEFAULT_INPUT_HINT.to_string()),
        ),
        InputFailureAction::Reformulate => OnInputFailure::Reformulate,
    };
    if action != InputFailureAction::Hint && p.input_hint.is_some() {
        return Err(BuildError::at(
            format!("{prefix}.input_hint"),
            "is used only with `on_input_failure: hint`",
        ));
    }
    let reformulator = match (action, &p.reformulate) {
        (InputFailureAction::Reformulate, Some(hook)) => Some(build_reformulator(
            hook,
            &format!("{prefix}.reformulate"),
            env,
        )?),
        (InputFailureAction::Reformulate, None) => {
            return Err(BuildError::at(
                format!("{prefix}.on_input_failure"),
                "`reformulate` needs a `reformulate:` hook (runner, command or url)",
            ))
        }
        (_, Some(_)) => {
            return Err(BuildError::at(
                format!("{prefix}.reformulate"),
                "is used only with `on_input_failure: reformulate`",
            ))
        }
        (_, None) => None,
    };
    let source = match &p.retrieved_context {
        None => None,
        Some(RetrievedContextConfig {
            fact: Some(key),
            pointer: None,
            section: None,
        }) => Some(ContextSource::Fact(key.clone())),
        Some(RetrievedContextConfig {
            fact: None,
            pointer: Some(pointer),
            section: None,
        }) => {
            if !pointer.starts_with('/') {
                return Err(BuildError::at(
                    format!("{prefix}.retrieved_context.pointer"),
                    format!("'{pointer}' is not a JSON pointer (it starts with '/')"),
                ));
            }
            Some(ContextSource::Pointer(pointer.clone()))
        }
        Some(RetrievedContextConfig {
            fact: None,
            pointer: None,
            section: Some(SectionConfig { start, end }),
        }) => {
            if start.is_empty() || end.is_empty() {
                return Err(BuildError::at(
                    format!("{prefix}.retrieved_context.section"),
                    "`start` and `end` must not be empty",
                ));
            }
            Some(ContextSource::Section {
                start: start.clone(),
                end: end.clone(),
            })
        }
        Some(_) => {
            return Err(BuildError::at(
                format!("{prefix}.retrieved_context"),
                "give exactly one of `fact`, `pointer` or `section`",
            ))
        }
    };
    Ok(Some(InputSpec {
        validators,
        on_failure,
        source,
        reformulator,
    }))
}

/// The hook of `reformulate:` (at `key`).
fn build_reformulator(
    hook: &ReformulateConfig,
    key: &str,
    env: &BuildEnv,
) -> Result<Arc<dyn Reformulator>, BuildError> {
    let timeout = Duration::from_millis(
        hook.timeout_ms
            .unwrap_or(DEFAULT_REFORMULATE_TIMEOUT_MS)
            .max(1),
    );
    let at = |sub: &str, message: String| BuildError::at(format!("{key}.{sub}"), message);
    match (&hook.runner, &hook.command, &hook.url) {
        (Some(runner), None, None) => {
            if hook.timeout_ms.is_some() {
                return Err(at(
                    "timeout_ms",
                    "applies to `command` and `url`; a runner has its own timeout".into(),
                ));
            }
            let factory = env.runners.as_ref().ok_or_else(|| {
                at(
                    "runner",
                    "runners cannot be configured here (no runner factory)".into(),
                )
            })?;
            let runner = factory.runner(runner).map_err(|e| at("runner", e))?;
            let prompt = hook
                .prompt
                .clone()
                .unwrap_or_else(|| DEFAULT_REFORMULATE_PROMPT.to_string());
            Ok(Arc::new(RunnerReformulator::new(runner, prompt)))
        }
        (None, Some(argv), None) => {
            if hook.prompt.is_some() {
                return Err(at("prompt", "is used only with `runner`".into()));
            }
            enforce_external::CommandReformulator::new(argv.clone(), timeout)
                .map(|h| Arc::new(h) as Arc<dyn Reformulator>)
                .map_err(|e| at("command", e))
        }
        (None, None, Some(url)) => {
            if hook.prompt.is_some() {
                return Err(at("prompt", "is used only with `runner`".into()));
            }
            enforce_external::HttpReformulator::new(url, timeout)
                .map(|h| Arc::new(h) as Arc<dyn Reformulator>)
                .map_err(|e| at("url", e))
        }
        _ => Err(BuildError::at(
            key,
            "give exactly one of `runner`, `command` or `url`",
        )),
    }
}

fn build_policy(
    defaults: PolicyFields<'_>,
    profile: Option<(PolicyFields<'_>, &str)>,
    base_dir: &Path,
) -> Result<Policy, BuildError> {
    let mut policy = Policy::default();
    let empty = FeedbackConfig::default();
    let mut feedback = defaults.feedback.cloned().unwrap_or_default();
    if let Some(n) = defaults.max_retries {
        policy.max_retries = n;
    }
    if let Some(b) = defaults.budget {
        policy.budget = b;
    }
    if let Some(m) = defaults.on_unavailable {
        policy.on_unavailable = m;
    }
    if let Some(yes) = defaults.early_abort {
        policy.early_abort = yes;
    }
    if let Some(bytes) = defaults.partial_check_bytes {
        policy.partial_check_bytes = bytes;
    }
    if let Some(reask) = defaults.reask {
        policy.reask = reask;
    }
    if let Some(when) = defaults.repair {
        policy.repair = when;
    }
    if let Some(codes) = defaults.repair_first_codes {
        policy.repair_first_codes = codes.clone();
    }
    policy.fallback = match (defaults.fallback, defaults.fallback_file) {
        (Some(_), Some(_)) => {
            return Err(BuildError::at(
                "defaults.fallback_file",
                "give either 'fallback' or 'fallback_file', not both",
            ))
        }
        (Some(t), None) => Some(t.clone()),
        (None, Some(f)) => Some(read_fallback(base_dir, f, "defaults.fallback_file")?),
        (None, None) => None,
    };
    if let Some((p, prefix)) = profile {
        if let Some(n) = p.max_retries {
            policy.max_retries = n;
        }
        if let Some(b) = p.budget {
            policy.budget = b;
        }
        if let Some(m) = p.on_unavailable {
            policy.on_unavailable = m;
        }
        if let Some(yes) = p.early_abort {
            policy.early_abort = yes;
        }
        if let Some(bytes) = p.partial_check_bytes {
            policy.partial_check_bytes = bytes;
        }
        if let Some(reask) = p.reask {
            policy.reask = reask;
        }
        if let Some(when) = p.repair {
            policy.repair = when;
        }
        if let Some(codes) = p.repair_first_codes {
            policy.repair_first_codes = codes.clone();
        }
        feedback = p.feedback.unwrap_or(&empty).over(&feedback);
        match (p.fallback, p.fallback_file) {
            (Some(_), Some(_)) => {
                return Err(BuildError::at(
                    format!("{prefix}.fallback_file"),
                    "give either 'fallback' or 'fallback_file', not both",
                ))
            }
            (Some(t), None) => policy.fallback = Some(t.clone()),
            (None, Some(f)) => {
                policy.fallback = Some(read_fallback(
                    base_dir,
                    f,
                    &format!("{prefix}.fallback_file"),
                )?)
            }
            (None, None) => {}
        }
    }
    policy.feedback = Feedback::new(feedback.template());
    Ok(policy)
}

/// What a profile's answers are when it does not say: JSON when one of its validators is a
/// `json` check of the whole response (no `input` pointing it at a part), else text.
fn answer_format_of(validators: &[String], config: &Config) -> AnswerFormat {
    let whole_json = |name: &String| match config.validators.get(name) {
        Some(Value::Object(spec)) => {
            let kind = spec.get("type").and_then(Value::as_str).unwrap_or(name);
            kind == "json" && !spec.contains_key("input")
        }
        Some(Value::Null) | None => name == "json",
        Some(_) => false,
    };
    if validators.iter().any(whole_json) {
        AnswerFormat::Json
    } else {
        AnswerFormat::Text
    }
}

impl ProfileSet {
    /// Only the built-in profiles, with default policy. `root` overrides the `file_refs` root
    /// (default: the current directory).
    pub fn builtin(registry: &Registry, root: Option<PathBuf>) -> Result<Self, BuildError> {
        Self::from_config(
            &Config::default(),
            registry,
            &BuildEnv::default().with_root(root),
        )
    }

    /// Reads, parses and builds a configuration file in one go; every error names the file,
    /// line and key. `root` overrides the roots of path-checking validators.
    pub fn load(
        source: &ConfigSource,
        registry: &Registry,
        root: Option<PathBuf>,
    ) -> Result<Self, ConfigError> {
        let config: Config = source.parse()?;
        let env = BuildEnv::new(source.base_dir()).with_root(root);
        Self::from_config(&config, registry, &env).map_err(|e| source.build_error(e))
    }

    /// Builds every profile of `config` plus the built-in ones it does not replace.
    ///
    /// Error keys are relative to the configuration's root (`validators.x.min`,
    /// `profiles.p.validators[1]`), ready for [`ConfigSource::build_error`].
    pub fn from_config(
        config: &Config,
        registry: &Registry,
        env: &BuildEnv,
    ) -> Result<Self, BuildError> {
        let mut built: BTreeMap<String, Arc<dyn Validator>> = BTreeMap::new();
        // Validators of built-in profiles resolve paths against the current directory.
        let builtin_env = BuildEnv::default().with_root(env.root.clone());
        let mut get = |name: &str,
                       key: &str,
                       in_builtin: bool|
         -> Result<Arc<dyn Validator>, BuildError> {
            if let Some(v) = built.get(name) {
                return Ok(Arc::clone(v));
            }
            let v: Arc<dyn Validator> = match config.validators.get(name) {
                Some(spec) => Arc::from(
                    registry
                        .build(name, spec, env)
                        .map_err(|e| e.prefixed(&format!("validators.{name}")))?,
                ),
                None if registry.contains(name) => {
                    let env = if in_builtin { &builtin_env } else { env };
                    Arc::from(registry.build(name, &Value::Null, env).map_err(|e| e.prefixed(key))?)
                }
                None => {
                    return Err(BuildError::at(
                        key,
                        format!(
                            "'{name}' is neither a validator defined under 'validators' nor a validator type (types: {})",
                            registry.kinds().collect::<Vec<_>>().join(", ")
                        ),
                    ))
                }
            };
            built.insert(name.to_string(), Arc::clone(&v));
            Ok(v)
        };

        // Every configured validator is built, used or not, so that typos surface at startup.
        for name in config.validators.keys() {
            get(name, &format!("validators.{name}"), false)?;
        }

        let mut profiles = BTreeMap::new();
        for (name, description, validators) in BUILTIN_PROFILES {
            if config.profiles.contains_key(*name) {
                continue;
            }
            let list = validators
                .iter()
                .map(|v| get(v, "", true))
                .collect::<Result<Vec<_>, _>>()?;
            let policy = build_policy((&config.defaults).into(), None, &env.base_dir)?;
            profiles.insert(
                name.to_string(),
                Profile {
                    name: name.to_string(),
                    description: Some(description.to_string()),
                    validators: list,
                    policy,
                    input: None,
                },
            );
        }
        for (name, p) in &config.profiles {
            let prefix = format!("profiles.{name}");
            let mut list = Vec::with_capacity(p.validators.len());
            for (i, v) in p.validators.iter().enumerate() {
                list.push(get(v, &format!("{prefix}.validators[{i}]"), false)?);
            }
            let mut policy = build_policy(
                (&config.defaults).into(),
                Some((p.into(), &prefix)),
                &env.base_dir,
            )?;
            policy.answer_format = p
                .answer_format
                .unwrap_or_else(|| answer_format_of(&p.validators, config));
            if let Some(by) = &p.fallback_by {
                if by.fact.trim().is_empty() || by.templates.is_empty() {
                    return Err(BuildError::at(
                        format!("{prefix}.fallback_by"),
                        "name the `fact` and give at least one template",
                    ));
                }
                policy.fallback_by = Some(enforce_core::FallbackBy {
                    fact: by.fact.trim().to_string(),
                    templates: by.templates.clone(),
                });
            }
            let mut input_list = Vec::with_capacity(p.input_validators.len());
            for (i, v) in p.input_validators.iter().enumerate() {
                input_list.push(get(v, &format!("{prefix}.input_validators[{i}]"), false)?);
            }
            let input = build_input(p, input_list, &prefix, env)?;
            profiles.insert(
                name.clone(),
                Profile {
                    name: name.clone(),
                    description: p.description.clone(),
                    validators: list,
                    policy,
                    input,
                },
            );
        }
        let default = config
            .defaults
            .profile
            .clone()
            .unwrap_or_else(|| DEFAULT_PROFILE.to_string());
        if !profiles.contains_key(&default) {
            return Err(BuildError::at(
                "defaults.profile",
                format!("no profile named '{default}'"),
            ));
        }
        Ok(ProfileSet { profiles, default })
    }

    /// The profile `name`.
    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.profiles.get(name)
    }

    /// The profile used when none is named (`defaults.profile`, else `chat`).
    pub fn default_profile(&self) -> Option<&Profile> {
        self.profiles.get(&self.default)
    }

    /// The default profile's name.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// Profile names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }

    /// An [`Enforcer`] for profile `name`, or `None` when there is no such profile.
    pub fn enforcer(&self, name: &str) -> Option<Enforcer> {
        self.get(name).map(Profile::enforcer)
    }

    /// The profiles as JSON (name, description, validators, max_retries), for listings.
    pub fn describe(&self) -> Value {
        Value::Array(
            self.profiles
                .values()
                .map(|p| {
                    json!({
                        "name": p.name,
                        "description": p.description,
                        "validators": p.validator_names(),
                        "input_validators": p.input_validator_names(),
                        "max_retries": p.policy.max_retries,
                    })
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod reformulate_prompt_tests {
    use super::DEFAULT_REFORMULATE_PROMPT;
    use enforce_core::{
        keys, Context, Reformulator, RunnerReformulator, ScriptedCall, ScriptedRunner,
    };
    use std::sync::Arc;

    #[tokio::test]
    async fn the_default_reformulation_says_the_context_was_insufficient() {
        let runner = Arc::new(ScriptedRunner::texts(["AVAP loops and iteration commands"]));
        let hook = RunnerReformulator::new(runner.clone(), DEFAULT_REFORMULATE_PROMPT.to_string());
        let context = Context::new().with(keys::QUESTION, "How do I loop in AVAP?");
        let done = hook.reformulate(&context, &[]).await.unwrap();
        assert_eq!(
            done.question.as_deref(),
            Some("AVAP loops and iteration commands")
        );
        let ScriptedCall::Ask { request, .. } = &runner.calls()[0] else {
            panic!("a first ask");
        };
        let prompt = &request.messages[0].content;
        assert!(prompt.starts_with("[CONTEXT_INSUFFICIENT]\n"), "{prompt}");
        assert!(prompt.contains("How do I loop in AVAP?"), "{prompt}");
        assert!(prompt.contains("broader terms"), "{prompt}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;
    use enforce_core::{Context, FailMode, Language, Status};

    fn load(yaml: &str) -> Result<ProfileSet, ConfigError> {
        ProfileSet::load(
            &ConfigSource::from_string("t.yaml", yaml),
            &Registry::builtin(),
            None,
        )
    }

    #[test]
    fn builtin_profiles_work_without_config() {
        let set = ProfileSet::builtin(&Registry::builtin(), None).unwrap();
        assert_eq!(
            set.get("chat").unwrap().validator_names(),
            vec!["step_marker"]
        );
        assert_eq!(
            set.get("adr").unwrap().validator_names(),
            vec!["step_marker", "adr_structure", "file_refs"]
        );
        assert_eq!(set.default_profile().unwrap().name(), "chat");
        let out = block_on(set.enforcer("chat").unwrap().check(
            "hi",
            &Context::new(),
            enforce_core::Check::Report,
        ));
        assert_eq!(out.status, Status::Unresolved);
        assert_eq!(out.codes(), vec!["MISSING_STEP_MARKER"]);
    }

    #[test]
    fn profile_policy_layers_over_defaults() {
        let set = load(
            "defaults:\n  max_retries: 5\n  on_unavailable: open\n  feedback: { language: de }\n  fallback: 'Hallo {{company_name}}'\n\
             profiles:\n  p:\n    validators: [step_marker]\n    max_retries: 1\n    budget: { max_attempts: 2 }\n",
        )
        .unwrap();
        let p = set.get("p").unwrap();
        assert_eq!(p.policy().max_retries, 1);
        assert_eq!(p.policy().budget.max_attempts, Some(2));
        assert_eq!(p.policy().on_unavailable, FailMode::Open);
        assert_eq!(
            p.policy().fallback.as_deref(),
            Some("Hallo {{company_name}}")
        );
        assert_eq!(
            p.policy().feedback.template(),
            &enforce_core::FeedbackTemplate::for_language(Language::De)
        );
        assert_eq!(set.get("chat").unwrap().policy().max_retries, 5);
    }

    #[test]
    fn reask_and_repair_keys_layer_over_defaults() {
        let set = load(
            "defaults:\n  reask: resample\n  repair: first\n  repair_first_codes: [INVALID_JSON]\n\
             profiles:\n  fresh:\n    validators: [step_marker]\n    reask: feedback_fresh\n    \
             repair: last\n    repair_first_codes: []\n  inherits:\n    validators: [step_marker]\n",
        )
        .unwrap();
        let fresh = set.get("fresh").unwrap().policy();
        assert_eq!(fresh.reask, enforce_core::Reask::FeedbackFresh);
        assert_eq!(fresh.repair, enforce_core::RepairWhen::Last);
        assert!(fresh.repair_first_codes.is_empty());
        let inherits = set.get("inherits").unwrap().policy();
        assert_eq!(inherits.reask, enforce_core::Reask::Resample);
        assert_eq!(inherits.repair, enforce_core::RepairWhen::First);
        assert_eq!(
            inherits.repair_first_codes,
            vec!["INVALID_JSON".to_string()]
        );
        let plain = load("profiles:\n  p:\n    validators: [step_marker]\n").unwrap();
        assert_eq!(
            plain.get("p").unwrap().policy().reask,
            enforce_core::Reask::Feedback
        );
        assert_eq!(
            plain.get("p").unwrap().policy().repair,
            enforce_core::RepairWhen::Last
        );
        let err = load("profiles:\n  p:\n    validators: [step_marker]\n    reask: twice\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("reask"), "{err}");
        assert!(err.contains(":4:"), "file:line: {err}");
    }

    #[test]
    fn early_abort_keys_layer_over_defaults() {
        let set = load(
            "defaults:\n  early_abort: false\n  partial_check_bytes: 100\n\
             profiles:\n  on:\n    validators: [step_marker]\n    early_abort: true\n  \
             off:\n    validators: [step_marker]\n",
        )
        .unwrap();
        let on = set.get("on").unwrap().policy();
        assert!(on.early_abort);
        assert_eq!(on.partial_check_bytes, 100);
        assert!(!set.get("off").unwrap().policy().early_abort);
        let default = load("profiles:\n  p:\n    validators: [step_marker]\n").unwrap();
        assert!(
            default.get("p").unwrap().policy().early_abort,
            "on by default"
        );
    }

    #[test]
    fn unknown_validator_names_point_at_the_list_entry() {
        let err =
            load("profiles:\n  p:\n    validators:\n      - step_marker\n      - stepmarker\n")
                .unwrap_err();
        assert_eq!(err.line, Some(5));
        assert_eq!(err.key.as_deref(), Some("profiles.p.validators[1]"));
        assert!(err.message.contains("'stepmarker'"), "{err}");
    }

    #[test]
    fn validator_option_errors_point_at_the_option() {
        let err =
            load("validators:\n  steps:\n    type: step_marker\n    allowed: []\n").unwrap_err();
        assert_eq!(err.key.as_deref(), Some("validators.steps.allowed"));
        assert_eq!(err.line, Some(4));
        let err =
            load("validators:\n  steps:\n    type: step_marker\n    alowed: [a]\n").unwrap_err();
        assert_eq!(err.key.as_deref(), Some("validators.steps.alowed"));
        assert!(err.message.contains("unknown field `alowed`"), "{err}");
        assert_eq!(err.line, Some(4));
    }

    const RAG: &str = "validators:\n  short_question:\n    type: length\n    unit: chars\n    max: 20\nprofiles:\n  rag:\n    validators: []\n    input_validators: [short_question]\n";

    #[test]
    fn input_validators_reject_before_any_model_call() {
        let set = load(RAG).expect("loads");
        let profile = set.get("rag").expect("rag");
        assert_eq!(profile.input_validator_names(), vec!["short_question"]);
        let described = set.describe();
        let rag = described
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "rag")
            .unwrap();
        assert_eq!(rag["input_validators"][0], "short_question");
        let runner = enforce_core::ScriptedRunner::texts(["answer"]);
        let long = enforce_core::Request::prompt("a question far longer than twenty characters");
        let outcome = block_on(profile.enforcer().run(&runner, &long, &Context::new()));
        assert_eq!(outcome.stop_reason, enforce_core::StopReason::InputRejected);
        assert!(runner.calls().is_empty());
        let short = enforce_core::Request::prompt("short?");
        let outcome = block_on(profile.enforcer().run(&runner, &short, &Context::new()));
        assert_eq!(outcome.status, Status::Passed);
    }

    #[test]
    fn a_hint_profile_appends_its_note() {
        let yaml = format!("{RAG}    on_input_failure: hint\n    input_hint: Say if unsure.\n");
        let set = load(&yaml).expect("loads");
        let runner = enforce_core::ScriptedRunner::texts(["answer"]);
        let long = enforce_core::Request::prompt("a question far longer than twenty characters");
        let enforcer = set.get("rag").unwrap().enforcer();
        let outcome = block_on(enforcer.run(&runner, &long, &Context::new()));
        assert_eq!(outcome.status, Status::Passed);
        let enforce_core::ScriptedCall::Ask { request } = &runner.calls()[0] else {
            panic!("not an ask")
        };
        assert!(request.messages[0].content.ends_with("\n\nSay if unsure."));
    }

    #[test]
    fn input_settings_errors_point_at_their_key() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "profiles:\n  p:\n    on_input_failure: hint\n",
                "profiles.p.on_input_failure",
                "without `input_validators`",
            ),
            (
                "    on_input_failure: reformulate\n",
                "profiles.rag.on_input_failure",
                "needs a `reformulate:` hook",
            ),
            (
                "    input_hint: x\n",
                "profiles.rag.input_hint",
                "only with `on_input_failure: hint`",
            ),
            (
                "    on_input_failure: reformulate\n    reformulate:\n      command: [x]\n      url: http://x\n",
                "profiles.rag.reformulate",
                "exactly one of",
            ),
            (
                "    on_input_failure: reformulate\n    reformulate:\n      runner: {type: openai}\n",
                "profiles.rag.reformulate.runner",
                "runners cannot be configured here",
            ),
            (
                "    on_input_failure: reformulate\n    reformulate:\n      url: ftp://x\n",
                "profiles.rag.reformulate.url",
                "not an http",
            ),
            (
                "    retrieved_context: {pointer: metadata}\n",
                "profiles.rag.retrieved_context.pointer",
                "not a JSON pointer",
            ),
            (
                "    retrieved_context: {fact: docs, section: {start: a, end: b}}\n",
                "profiles.rag.retrieved_context",
                "exactly one of `fact`, `pointer` or `section`",
            ),
            (
                "    retrieved_context: {section: {start: '', end: b}}\n",
                "profiles.rag.retrieved_context.section",
                "must not be empty",
            ),
            (
                "    input_validators: [nope]\n",
                "",
                "",
            ),
        ];
        for (tail, key, message) in cases {
            let yaml = if tail.starts_with("profiles") {
                tail.to_string()
            } else if tail.contains("input_validators") {
                "profiles:\n  rag:\n    input_validators: [nope]\n".to_string()
            } else {
                format!("{RAG}{tail}")
            };
            let err = load(&yaml).unwrap_err();
            if key.is_empty() {
                assert_eq!(err.key.as_deref(), Some("profiles.rag.input_validators[0]"));
                assert_eq!(err.line, Some(3), "{err}");
                continue;
            }
            assert_eq!(err.key.as_deref(), Some(*key), "{yaml}: {err}");
            assert!(err.line.is_some(), "{err}");
            assert!(err.message.contains(message), "{yaml}: {err}");
        }
    }

    #[test]
    fn missing_fallback_file_and_default_profile_are_errors() {
        let err = load("profiles:\n  p:\n    fallback_file: nope.txt\n").unwrap_err();
        assert_eq!(err.key.as_deref(), Some("profiles.p.fallback_file"));
        assert_eq!(err.line, Some(3));
        assert!(err.message.contains("nope.txt"), "{err}");
        let err = load("defaults:\n  profile: ghost\n").unwrap_err();
        assert_eq!(err.line, Some(2));
    }

    #[test]
    fn answers_are_json_with_a_whole_response_json_validator_or_when_told() {
        let set = load(
            "validators:\n  block: { type: json }\n  field: { type: json, input: { json: /a } }\n\
             profiles:\n  whole: { validators: [step_marker, block] }\n  bare: { validators: [json] }\n\
             \x20 part: { validators: [field] }\n  told: { validators: [field], answer_format: json }\n\
             \x20 plain: { validators: [block], answer_format: text }\n",
        )
        .unwrap();
        let format = |name: &str| set.get(name).unwrap().policy().answer_format;
        assert_eq!(format("whole"), AnswerFormat::Json);
        assert_eq!(format("bare"), AnswerFormat::Json);
        assert_eq!(format("part"), AnswerFormat::Text);
        assert_eq!(format("told"), AnswerFormat::Json);
        assert_eq!(format("plain"), AnswerFormat::Text);
        assert_eq!(format("chat"), AnswerFormat::Text);
        let err = load("profiles:\n  p: { answer_format: yaml }\n").unwrap_err();
        assert!(err.message.contains("yaml"), "{err}");
    }

    #[test]
    fn validators_are_shared_between_profiles() {
        let set = load(
            "profiles:\n  a:\n    validators: [step_marker]\n  b:\n    validators: [step_marker]\n",
        )
        .unwrap();
        let a = &set.get("a").unwrap().validators()[0];
        let b = &set.get("b").unwrap().validators()[0];
        assert!(Arc::ptr_eq(a, b));
    }
}
