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

use crate::config::{Config, ConfigError, ConfigSource};
use crate::registry::Registry;
use enforce_core::{
    enforcer::Escalation, input::ContextSource, input::InputStage, input::OnInputFailure,
    input::Reformulator, Enforcer, Policy, Runner, Validator,
};
use enforce_validators::BuildEnv;
use enforce_validators::BuildError;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

mod auto;
mod decode;
mod input;
mod policy;
#[cfg(test)]
mod tests;
pub use auto::{read_stats, ReaskAuto};
pub use decode::{Constrained, Constraint, Decode, DECODE_NOTE};
use input::build_input;
pub use input::{DEFAULT_INPUT_HINT, DEFAULT_REFORMULATE_PROMPT, DEFAULT_REFORMULATE_TIMEOUT_MS};
use policy::{answer_format_of, build_policy};

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

/// One built profile.
pub struct Profile {
    name: String,
    description: Option<String>,
    validators: Vec<Arc<dyn Validator>>,
    policy: Policy,
    input: Option<InputSpec>,
    decode: Decode,
    /// What the contract lets a decoder enforce, whether or not `decode` asks for it (an
    /// eval arm may).
    constraint: Option<Constraint>,
    /// The model the re-ask strategy `escalate` asks (`escalate_to:`), by name.
    escalate_to: Option<String>,
    /// That model's runner, once the caller connected it.
    escalation: Option<Escalation>,
    /// `reask: auto`'s settings, when the policy says `auto`.
    reask_auto: Option<ReaskAuto>,
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
            decode: Decode::Free,
            constraint: None,
            escalate_to: None,
            escalation: None,
            reask_auto: None,
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

    /// How the profile's answers are decoded (`decode:`).
    pub fn decode(&self) -> Decode {
        self.decode
    }

    /// What the profile's contract lets a decoder enforce (the `json` validator's schema, a
    /// `one_of` list), whatever `decode` says; `None` when the contract gives nothing.
    pub fn constraint(&self) -> Option<&Constraint> {
        self.constraint.as_ref()
    }

    /// The model the re-ask strategy `escalate` asks (`escalate_to:`), by name; the caller
    /// that builds runners resolves it.
    pub fn escalate_to(&self) -> Option<&str> {
        self.escalate_to.as_deref()
    }

    /// `reask: auto`'s settings (the statistics file, how to choose), when the policy says
    /// `auto`; the caller reads the file and gives each enforcer its chooser
    /// ([`Enforcer::with_chooser`]).
    pub fn reask_auto(&self) -> Option<&ReaskAuto> {
        self.reask_auto.as_ref()
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
        let mut enforcer = Enforcer::new(validators).with_policy(self.policy.clone());
        if let Some(Escalation { model, runner }) = &self.escalation {
            enforcer = enforcer.with_escalation(model.clone(), Arc::clone(runner));
        }
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

impl ProfileSet {
    /// Gives every profile `escalation`, over what its `escalate_to` names: a run's
    /// `--escalate-model`.
    pub fn escalate_all_to(&mut self, escalation: &Escalation) {
        for profile in self.profiles.values_mut() {
            profile.escalation = Some(escalation.clone());
        }
    }

    /// Gives each profile with `escalate_to` the runner `runner_of` returns for that model's
    /// name (asked once per name), so its enforcer's rung `escalate` asks it. The error of
    /// an unknown or unbuildable model is at the profile's `escalate_to`.
    pub fn connect_escalations(
        &mut self,
        mut runner_of: impl FnMut(&str) -> Result<Arc<dyn Runner>, String>,
    ) -> Result<(), BuildError> {
        let mut built: BTreeMap<String, Arc<dyn Runner>> = BTreeMap::new();
        for (name, profile) in &mut self.profiles {
            let Some(model) = profile.escalate_to.clone() else {
                continue;
            };
            let runner = match built.get(&model) {
                Some(runner) => Arc::clone(runner),
                None => {
                    let runner = runner_of(&model)
                        .map_err(|e| BuildError::at(format!("profiles.{name}.escalate_to"), e))?;
                    built.insert(model.clone(), Arc::clone(&runner));
                    runner
                }
            };
            profile.escalation = Some(Escalation { model, runner });
        }
        Ok(())
    }

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
            let names: Vec<String> = validators.iter().map(|v| v.to_string()).collect();
            let constraint = decode::derive(&names, config, &builtin_env)?;
            let (policy, reask_auto) = build_policy(&config.defaults, None, &env.base_dir)?;
            profiles.insert(
                name.to_string(),
                Profile {
                    name: name.to_string(),
                    description: Some(description.to_string()),
                    validators: list,
                    policy,
                    input: None,
                    decode: Decode::Free,
                    constraint,
                    escalate_to: None,
                    escalation: None,
                    reask_auto,
                },
            );
        }
        for (name, p) in &config.profiles {
            let prefix = format!("profiles.{name}");
            let mut list = Vec::with_capacity(p.validators.len());
            for (i, v) in p.validators.iter().enumerate() {
                list.push(get(v, &format!("{prefix}.validators[{i}]"), false)?);
            }
            let (mut policy, reask_auto) =
                build_policy(&config.defaults, Some((p, &prefix)), &env.base_dir)?;
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
                policy.fallback_by = Some(enforce_core::policy::FallbackBy {
                    fact: by.fact.trim().to_string(),
                    templates: by.templates.clone(),
                });
            }
            let mut input_list = Vec::with_capacity(p.input_validators.len());
            for (i, v) in p.input_validators.iter().enumerate() {
                input_list.push(get(v, &format!("{prefix}.input_validators[{i}]"), false)?);
            }
            let input = build_input(p, input_list, &prefix, env)?;
            let constraint = decode::derive(&p.validators, config, env)?;
            let decode = p.decode.unwrap_or_default();
            if decode == Decode::Constrained && constraint.is_none() {
                return Err(BuildError::at(
                    format!("{prefix}.decode"),
                    "`constrained` needs a constraint from the contract: a `json` validator on the whole answer or a `one_of` validator with a literal `values` list",
                ));
            }
            if decode == Decode::Constrained
                && policy
                    .reask
                    .rungs()
                    .contains(&enforce_core::policy::Reask::Constrained)
            {
                return Err(BuildError::at(
                    format!("{prefix}.decode"),
                    "`decode: constrained` constrains every attempt, the re-ask rung `constrained` only its own re-asks; pick one: drop `decode: constrained` to answer freely first and constrain that rung's re-asks, or drop the rung to constrain every attempt",
                ));
            }
            if decode == Decode::Constrained {
                auto::without_constrained(&mut policy);
            }
            profiles.insert(
                name.clone(),
                Profile {
                    name: name.clone(),
                    description: p.description.clone(),
                    validators: list,
                    policy,
                    input,
                    decode,
                    constraint,
                    escalate_to: p.escalate_to.clone(),
                    escalation: None,
                    reask_auto,
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
