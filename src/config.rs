//! The `enforce.yaml` the binary reads: the validation sections of `enforce-config`, plus
//! (later) the binary's own sections.

use enforce_config::config::{Config, ConfigError, ConfigSource, Defaults, ProfileConfig};
use enforce_config::{BuildEnv, ProfileSet, Registry, RunnerFactory};
use enforce_core::Runner;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File looked for in the current directory when no `--config` is given.
pub const DEFAULT_CONFIG_FILE: &str = "enforce.yaml";

/// The whole configuration file. Every section is optional; unknown keys are errors.
///
/// To add a section (`runner`, `models`, `server`, ...), add a field here: the file's errors
/// keep their line numbers because the struct is parsed directly (no `flatten`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(
    title = "enforce.yaml",
    description = "Configuration of enforce: validators, profiles and their policy, the runner \
                   of `enforce run`, the models and settings of `enforce serve`. Every section \
                   is optional; unknown keys are errors."
)]
pub struct RootConfig {
    /// Directories validator plugins are loaded from (relative to the file).
    pub plugin_dirs: Vec<PathBuf>,
    /// Policy defaults and the default profile.
    pub defaults: Defaults,
    /// Named validator configurations.
    #[schemars(schema_with = "enforce_config::schema::validators")]
    pub validators: BTreeMap<String, serde_json::Value>,
    /// Named profiles.
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// The runner `enforce run` asks (`type: claude | openai | command`).
    pub runner: Option<enforce_runner::RunnerConfig>,
    /// The public models `enforce serve` offers, each a runner plus a profile.
    pub models: Vec<ServedModelConfig>,
    /// Settings of `enforce serve`: listen address, keys, limits, sessions, audit log.
    pub server: Option<enforce_server::ServerSection>,
}

// The runner options are `enforce_runner`'s, which enforce-server does not depend on: its
// `models:` entries are generic over them, and the binary names the runner it builds.
pub use enforce_server::{RouteConfig, WhenConfig};
/// One entry of `models:` with the binary's runner options.
pub type ServedModelConfig = enforce_server::ServedModelConfig<enforce_runner::RunnerConfig>;
/// A model's `classify:` with the binary's runner options.
pub type ClassifyConfig = enforce_server::ClassifyConfig<enforce_runner::RunnerConfig>;

/// The JSON Schema of the whole file (what `enforce config schema` prints).
pub fn schema() -> schemars::Schema {
    enforce_config::schema::settings()
        .into_generator()
        .into_root_schema_for::<RootConfig>()
}

impl RootConfig {
    /// The validation sections, as `enforce-config` takes them.
    pub fn validation(&self) -> Config {
        Config {
            plugin_dirs: self.plugin_dirs.clone(),
            defaults: self.defaults.clone(),
            validators: self.validators.clone(),
            profiles: self.profiles.clone(),
        }
    }
}

/// A configuration as loaded: the parsed file (if any) and its text for error locations.
#[derive(Debug, Clone, Default)]
pub struct LoadedConfig {
    /// The file's text; `None` when running without a configuration file.
    pub source: Option<ConfigSource>,
    /// The parsed configuration (all defaults without a file).
    pub config: RootConfig,
}

impl LoadedConfig {
    /// Loads `explicit`, else `./enforce.yaml` when it exists, else nothing (built-in profiles).
    pub fn load(explicit: Option<&Path>) -> Result<Self, ConfigError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => {
                let p = PathBuf::from(DEFAULT_CONFIG_FILE);
                if !p.exists() {
                    return Ok(LoadedConfig::default());
                }
                p
            }
        };
        let source = ConfigSource::read(&path)?;
        let config = source.parse::<RootConfig>()?;
        Ok(LoadedConfig {
            source: Some(source),
            config,
        })
    }

    /// `path` resolved against the config file's directory (the current directory without a
    /// file); absolute paths stay as they are.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            return path.to_path_buf();
        }
        match &self.source {
            Some(source) => source.base_dir().join(path),
            None => path.to_path_buf(),
        }
    }

    /// An error about the value at the dotted key path `key`, located in the file (when there
    /// is one).
    pub fn error_at(&self, key: &str, message: impl Into<String>) -> ConfigError {
        match &self.source {
            Some(source) => source.error_at(key, message),
            None => ConfigError {
                file: None,
                line: None,
                column: None,
                key: Some(key.to_string()),
                message: message.into(),
            },
        }
    }

    /// Plugin directories, resolved against the file's directory.
    pub fn plugin_dirs(&self) -> Vec<PathBuf> {
        self.config
            .plugin_dirs
            .iter()
            .map(|d| self.resolve(d))
            .collect()
    }

    /// Builds every profile with `registry`; `root` overrides path-checking roots.
    pub fn profiles(
        &self,
        registry: &Registry,
        root: Option<PathBuf>,
    ) -> Result<ProfileSet, ConfigError> {
        match &self.source {
            None => ProfileSet::builtin(registry, root).map_err(|e| ConfigError {
                file: None,
                line: None,
                column: None,
                key: Some(e.key),
                message: e.message,
            }),
            Some(source) => {
                let env = BuildEnv::new(source.base_dir())
                    .with_root(root)
                    .with_runners(Arc::new(ConfiguredRunners));
                ProfileSet::from_config(&self.config.validation(), registry, &env)
                    .map_err(|e| source.build_error(e))
            }
        }
    }
}

/// Builds the runners of validators that ask a model (`llm_judge`) from the same
/// `type:`-tagged configuration as `runner:`.
struct ConfiguredRunners;

impl RunnerFactory for ConfiguredRunners {
    fn runner(&self, config: &serde_json::Value) -> Result<Arc<dyn Runner>, String> {
        let config: enforce_runner::RunnerConfig =
            enforce_runner::RunnerConfig::deserialize(config).map_err(|e| e.to_string())?;
        config.build().map(Arc::from).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name)
    }

    #[test]
    fn every_shipped_example_loads_and_builds_its_profiles() {
        for name in ["enforce.yaml", "prose.yaml", "serve.yaml", "per-type.yaml"] {
            let loaded =
                LoadedConfig::load(Some(&example(name))).unwrap_or_else(|e| panic!("{name}: {e}"));
            let profiles = loaded
                .profiles(&Registry::builtin(), None)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for model in &loaded.config.models {
                let profile = model.profile.as_deref().unwrap_or("chat");
                assert!(
                    profiles.get(profile).is_some(),
                    "{name}: model {} names unknown profile {profile}",
                    model.id
                );
            }
        }
    }

    /// An `llm_judge` whose runner is configured in enforce.yaml like `runner:` is built with
    /// the binary's runner factory and asks that runner.
    #[tokio::test]
    async fn an_llm_judge_builds_its_runner_from_the_config() {
        use enforce_core::{Check, Context, Status};
        use enforce_testkit::{MockOpenAi, MockReply, MockScript};
        let judge = MockOpenAi::start(
            MockScript::new()
                .reply(MockReply::text("NO. It invents a price."))
                .reply(MockReply::text("YES")),
        )
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("enforce.yaml");
        std::fs::write(
            &file,
            format!(
                "validators:\n  grounded:\n    type: llm_judge\n    runner: {{type: openai, base_url: \"{}\", model: judge}}\n    prompt: \"Is {{{{response}}}} free of invented prices?\"\n    fail_mode: closed\nprofiles:\n  judged:\n    validators: [grounded]\n",
                judge.url()
            ),
        )
        .unwrap();
        let loaded = LoadedConfig::load(Some(&file)).unwrap();
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let enforcer = profiles.enforcer("judged").unwrap();
        let rejected = enforcer
            .check("It costs 99 EUR.", &Context::new(), Check::Report)
            .await;
        assert_eq!(rejected.status, Status::Unresolved, "{rejected:?}");
        let issue = &rejected.issues[0];
        assert_eq!(issue.code, "JUDGE_REJECTED");
        assert_eq!(issue.hint.as_deref(), Some("It invents a price."));
        let passed = enforcer
            .check("It costs 20 EUR.", &Context::new(), Check::Report)
            .await;
        assert_eq!(passed.status, Status::Passed, "{passed:?}");
        let asked = judge.chat_requests();
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[0].body["model"], "judge");
        assert!(asked[0]
            .last_user()
            .unwrap()
            .contains("<response>\nIt costs 99 EUR.\n</response>"));
    }

    /// An `llm_judge` can ask a local GGUF model (a small judge with nothing to install). With
    /// the feature `local` and the test model, the judge really asks it; a grammar keeps the
    /// small model's verdict to YES or NO. Without the feature, the profile does not build and
    /// the error says how to get the runner.
    #[tokio::test]
    async fn an_llm_judge_can_ask_a_local_model() {
        #[cfg(feature = "local")]
        use enforce_core::{Check, Context, Status};
        let gguf = enforce_testkit::models::test_gguf();
        let model = gguf.clone().unwrap_or_else(|| "absent.gguf".into());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("enforce.yaml");
        std::fs::write(
            &file,
            format!(
                "validators:\n  polite:\n    type: llm_judge\n    runner: {{type: local, model: \"{}\", temperature: 0, max_tokens: 4, grammar: 'root ::= \"YES\" | \"NO\"'}}\n    prompt: \"Is this answer polite? {{{{response}}}} Answer YES or NO.\"\n    fail_mode: closed\nprofiles:\n  judged:\n    validators: [polite]\n",
                model.display()
            ),
        )
        .unwrap();
        let loaded = LoadedConfig::load(Some(&file)).unwrap();
        let profiles = loaded.profiles(&Registry::builtin(), None);
        #[cfg(not(feature = "local"))]
        {
            let Err(err) = profiles else {
                panic!("no local runner in this build")
            };
            let err = err.to_string();
            assert!(err.contains("--features local"), "{err}");
        }
        #[cfg(feature = "local")]
        if gguf.is_some() {
            let enforcer = profiles.unwrap().enforcer("judged").unwrap();
            let outcome = enforcer
                .check("Thank you, happy to help.", &Context::new(), Check::Report)
                .await;
            // Either verdict is the model's to give; no verdict at all would be `unavailable`.
            match outcome.status {
                Status::Passed => {}
                Status::Unresolved => assert_eq!(outcome.issues[0].code, "JUDGE_REJECTED"),
                other => panic!("the judge gave no verdict: {other:?} {outcome:?}"),
            }
        }
    }

    /// `embedding_relevance` as an input validator: irrelevant retrieved context rejects the
    /// request before the model is asked; relevant context lets it through.
    #[tokio::test]
    async fn embedding_relevance_gates_the_input_stage() {
        use enforce_core::{Context, Request, ScriptedRunner, Status, StopReason};
        use enforce_testkit::{MockOpenAi, MockScript};
        let embeddings = MockOpenAi::start(MockScript::new().embedding_dimensions(256))
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("enforce.yaml");
        std::fs::write(
            &file,
            format!(
                "validators:\n  context_relevant:\n    type: embedding_relevance\n    base_url: \"{}\"\n    model: embed\n    threshold: 0.3\nprofiles:\n  rag:\n    validators: []\n    input_validators: [context_relevant]\n    on_input_failure: reject\n    retrieved_context: {{fact: docs}}\n",
                embeddings.url()
            ),
        )
        .unwrap();
        let loaded = LoadedConfig::load(Some(&file)).unwrap();
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let enforcer = profiles.enforcer("rag").unwrap();
        let request = Request::prompt("What does the Pro plan cost per month?");
        let runner = ScriptedRunner::texts(["20 EUR."]);
        let off_topic = Context::new().with(
            "docs",
            serde_json::json!(["Our office dogs are named Rex.", "Lunch is at noon."]),
        );
        let rejected = enforcer.run(&runner, &request, &off_topic).await;
        assert_eq!(
            rejected.stop_reason,
            StopReason::InputRejected,
            "{rejected:?}"
        );
        assert!(runner.calls().is_empty(), "no model call");
        let on_topic = Context::new().with(
            "docs",
            serde_json::json!(["The Pro plan costs 20 EUR per month."]),
        );
        let passed = enforcer.run(&runner, &request, &on_topic).await;
        assert_eq!(passed.status, Status::Passed, "{passed:?}");
        assert_eq!(passed.response.as_deref(), Some("20 EUR."));
        assert_eq!(embeddings.embedding_requests().len(), 2);
    }

    #[test]
    fn serve_example_declares_models_runners_and_server() {
        let loaded = LoadedConfig::load(Some(&example("serve.yaml"))).unwrap();
        let ids: Vec<&str> = loaded.config.models.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            ids,
            ["consultant", "adr-writer", "tasks", "agent", "assistant"]
        );
        let assistant = &loaded.config.models[4];
        assert_eq!(assistant.routes.len(), 4);
        assert!(assistant.classify.is_some());
        let consultant = &loaded.config.models[0];
        assert!(consultant.hide_step_marker && consultant.check_tool_calls);
        assert!(loaded.config.models.iter().all(|m| m.runner.is_some()));
        let server = loaded.config.server.clone().expect("server section");
        assert_eq!(server.listen.as_deref(), Some("127.0.0.1:8080"));
        assert!(server.to_config().is_ok());
        assert_eq!(
            loaded.resolve(Path::new("sessions")),
            example("sessions"),
            "relative paths resolve against the file"
        );
    }
}
