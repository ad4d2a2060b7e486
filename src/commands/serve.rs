//! `enforce serve`: the OpenAI-compatible enforcement proxy.

use super::model_flags::ModelFlags;
use crate::auto::Choosers;
use crate::config::{ClassifyConfig, LoadedConfig, RouteConfig, ServedModelConfig};
use crate::live_stats::{StatsKeeper, WRITE_PERIOD};
use crate::runner_options::model_of;
use clap::Args as ClapArgs;
use enforce_config::ProfileSet;
use enforce_core::Runner;
use enforce_external::breaker::{BreakerState, SharedBreakers, SharedError};
use enforce_runner::{ClaudeConfig, RunnerConfig, ANTHROPIC_API_KEY_ENV};
use enforce_server::{
    Classifier, Model, Route, RouteError, Routes, Server, ServerSection, StepMark, Upstream,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Address used when neither `--listen` nor `server.listen` is given: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Serve the enforcement proxy (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`,
/// `/v1/models`).
///
/// Without a config file: `enforce serve --upstream-url http://localhost:11434/v1
/// --upstream-model llama3.2 --profile chat`, or `--runner claude`, or `--runner anthropic
/// --upstream-model claude-sonnet-4-5` (key from `ANTHROPIC_API_KEY`). With `--config`, the
/// `models:` list maps each public model id to a runner and a profile, and `server:` sets
/// limits, sessions and the audit log.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Address to listen on [default: server.listen, else 127.0.0.1:8080].
    #[arg(long)]
    pub listen: Option<String>,
    /// Configuration file (profiles, `models:`, `server:`); default `./enforce.yaml` when it
    /// exists.
    #[arg(long, short = 'c', env = "ENFORCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The command-line model.
    #[command(flatten)]
    pub model: ModelFlags,
    /// Accepted bearer key (repeatable; also `ENFORCE_API_KEYS`, comma-separated). An empty
    /// key is refused (`--api-key "$KEY"` with `KEY` unset).
    #[arg(long = "api-key", value_parser = non_blank_key)]
    pub api_keys: Vec<String>,
    /// Directory for per-chat `status.json` files [default: server.session_dir, else memory].
    #[arg(long)]
    pub session_dir: Option<PathBuf>,
    /// Append one audit line per request to this file.
    #[arg(long)]
    pub audit_log: Option<PathBuf>,
    /// Root for path-checking validators (default: the current directory).
    #[arg(long)]
    pub root: Option<PathBuf>,
}

/// An `--api-key` value: refused when empty or blank, since a request presenting no key would
/// otherwise match it.
fn non_blank_key(value: &str) -> Result<String, String> {
    match value.trim() {
        "" => Err("the key is empty (is the variable it came from set?)".into()),
        key => Ok(key.to_string()),
    }
}

/// Log filter when `RUST_LOG` is not set: the proxy's requests and warnings.
const DEFAULT_LOG_FILTER: &str = "warn,enforce_server=info";

/// Logs to stderr; `RUST_LOG` (e.g. `enforce_server=debug`) overrides the default filter.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    // A second init (tests calling `serve` twice) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Runs the proxy until Ctrl-C or SIGTERM.
pub fn run(args: Args) -> ExitCode {
    init_logging();
    // On one core (a container limit, `taskset`) a work-stealing scheduler has no one to
    // steal from and only adds bookkeeping per task: use the single-threaded one.
    let one_core = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let mut builder = if one_core {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let served = (builder.enable_all().build())
        .map_err(|e| format!("cannot start the async runtime: {e}"))
        .and_then(|runtime| runtime.block_on(serve(args, enforce_server::shutdown_signal())));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

/// Everything `serve` needs, resolved from flags and the config file.
pub struct Prepared {
    /// Where to listen.
    pub listen: String,
    /// Where the file sets `listen`, when the address comes from `server.listen`: a failure to
    /// listen there names the file and line.
    pub listen_in_file: Option<enforce_config::ConfigError>,
    /// The built server.
    pub server: Server,
    /// Shares the `reask: auto` statistics and writes them back, when a profile names a file.
    pub stats: Option<Arc<StatsKeeper>>,
}

/// Builds the server from flags and configuration. Without `--upstream-model`, asks the
/// upstream's `/models` for its first model.
pub async fn prepare(args: &Args) -> Result<Prepared, String> {
    let loaded = LoadedConfig::load(args.config.as_deref()).map_err(|e| e.to_string())?;
    let (registry, host) = crate::plugin_host::registry_with_plugins(&loaded);
    let mut profiles = loaded
        .profiles(&registry, args.root.clone())
        .map_err(|e| e.to_string())?;
    crate::escalation::connect(&mut profiles, &loaded, None)?;
    let choosers =
        Choosers::load(&profiles).map_err(|e| loaded.error_at(&e.key, e.message).to_string())?;

    let section: ServerSection = loaded.config.server.clone().unwrap_or_default();
    let mut config = section.to_config().map_err(|e| section_error(&loaded, e))?;
    // Paths in the file are relative to the file, like plugin_dirs.
    config.session_dir = config.session_dir.map(|p| loaded.resolve(&p));
    config.audit_log = config.audit_log.map(|p| loaded.resolve(&p));
    config.api_keys.extend(args.api_keys.iter().cloned());
    config = config.with_env_api_keys().map_err(|e| e.to_string())?;
    config = config
        .with_env_otlp(section.otlp.as_ref())
        .map_err(|e| e.to_string())?;
    if config.otlp.is_some() && !cfg!(feature = "otel") && section.otlp.is_none() {
        // Only a variable asks for traces: a build without them serves on, and says so.
        eprintln!("warning: OTEL_EXPORTER_OTLP_ENDPOINT is set, but this enforce was built without the `otel` feature: no traces");
        config.otlp = None;
    }
    if let Some(dir) = &args.session_dir {
        config.session_dir = Some(dir.clone());
    }
    if let Some(path) = &args.audit_log {
        config.audit_log = Some(path.clone());
    }
    let listen = args
        .listen
        .clone()
        .or(section.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string());

    let mut models = Vec::new();
    for (index, entry) in loaded.config.models.iter().enumerate() {
        if let Some(first) = loaded.config.models[..index]
            .iter()
            .position(|earlier| earlier.id == entry.id)
        {
            let message = format!("model id `{}` is already used by models[{first}]", entry.id);
            return Err(loaded
                .error_at(&format!("models[{index}].id"), message)
                .to_string());
        }
        let model = model_from_config(
            entry,
            loaded.config.runner.as_ref(),
            (&profiles, &choosers),
            section.allow_request_limits.unwrap_or(false),
        )
        .map_err(|e| e.located(&loaded, index))?;
        let asks = entry.runner.as_ref().or(loaded.config.runner.as_ref());
        let model_name = asks.and_then(model_of);
        let routes =
            routes_from_config(entry, (&profiles, &choosers), model_name).map_err(|e| {
                loaded
                    .error_at(&format!("models[{index}].{}", e.key), e.message)
                    .to_string()
            })?;
        models.push(model.with_routes(routes));
    }
    let upstream_model = args.model.upstream_model().await?;
    if let Some(entry) = args.model.entry(upstream_model, profiles.default_name())? {
        models.push(
            model_from_config(
                &entry,
                None,
                (&profiles, &choosers),
                section.allow_request_limits.unwrap_or(false),
            )
            .map_err(|e| e.to_string())?,
        );
    }
    let served: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
    check_key_grants(&loaded, &section, &served, &profiles)?;
    if models.is_empty() {
        return Err(
            "no model to serve: give --upstream-url URL [--upstream-model NAME], or --runner claude, or --runner anthropic --upstream-model NAME, or a config with a `models:` list".into(),
        );
    }
    let mut builder = Server::builder(config)
        .models(models)
        .step_extractor(|text: &str| {
            let marker = enforce_documents::find_last_marker(text)?;
            let step = marker.step.to_lowercase();
            (!step.is_empty()).then_some(StepMark {
                step,
                range: marker.range,
            })
        })
        .on_scrape(export_breaker_states);
    // Every profile can be picked per request with `X-Enforce-Profile`.
    let names: Vec<String> = profiles.names().map(str::to_string).collect();
    for name in names {
        builder = builder.profile(name.clone(), enforcer_for(&profiles, &name)?);
        if let Some(profile) = profiles.get(&name) {
            let contract = contract_of(&loaded, profile, &host);
            builder = builder.contract(name, enforce_server::contract_fingerprint(&contract));
        }
    }
    let server = builder.build().map_err(|e| e.to_string())?;
    if let Some(shared) = server.shared_state() {
        enforce_external::breaker::share_state(Arc::new(SharedBreakerLink(shared)));
    }
    let stats = StatsKeeper::of(&choosers, server.shared_state()).map(Arc::new);
    let listen_in_file = (args.listen.is_none() && section.listen.is_some())
        .then(|| loaded.error_at("server.listen", ""));
    Ok(Prepared {
        listen,
        listen_in_file,
        server,
        stats,
    })
}

/// What a profile checks answers against, for the answer cache's key (`cache:` on a model):
/// this enforce's version, the profile's configuration and the policy built from it, each of
/// its validators' options, and the version of every plugin loaded. Any change to one of
/// them is another contract, whose cache is empty.
fn contract_of(
    loaded: &LoadedConfig,
    profile: &enforce_config::Profile,
    host: &enforce_plugin_host::PluginHost,
) -> serde_json::Value {
    let config = &loaded.config;
    let own = config.profiles.get(profile.name());
    let names: Vec<String> = match own {
        Some(own) => own
            .validators
            .iter()
            .chain(&own.input_validators)
            .cloned()
            .collect(),
        None => profile
            .validator_names()
            .into_iter()
            .map(str::to_string)
            .collect(),
    };
    let validators: serde_json::Map<String, serde_json::Value> = names
        .into_iter()
        .map(|name| {
            let spec = config.validators.get(&name).cloned();
            (name, spec.unwrap_or_default())
        })
        .collect();
    let plugins: Vec<String> = host
        .plugins()
        .iter()
        .map(|p| format!("{}@{}", p.name(), p.version()))
        .collect();
    serde_json::json!({
        "enforce": env!("CARGO_PKG_VERSION"),
        "profile": profile.name(),
        "config": own,
        "defaults": config.defaults,
        "validators": validators,
        // The policy as built (defaults layered, files read): its `Debug` form, which the
        // enforce version above pins.
        "policy": format!("{:?}", profile.policy()),
        "plugins": plugins,
    })
}

/// Lets the external validators' circuit breakers share their state through the proxy's
/// shared state (Redis), so enforce-external knows no store and enforce-server no breaker.
struct SharedBreakerLink(Arc<enforce_server::ReplicaState>);

fn breaker_error(e: enforce_server::StateError) -> SharedError {
    SharedError(e.0)
}

#[enforce_core::async_trait]
impl SharedBreakers for SharedBreakerLink {
    async fn opened_at(&self, name: &str) -> Result<Option<u64>, SharedError> {
        self.0.breaker_opened_at(name).await.map_err(breaker_error)
    }
    async fn open(&self, name: &str, at_ms: u64) -> Result<(), SharedError> {
        self.0
            .breaker_open(name, at_ms)
            .await
            .map_err(breaker_error)
    }
    async fn try_probe(&self, name: &str, lease: Duration) -> Result<bool, SharedError> {
        self.0
            .breaker_try_probe(name, lease)
            .await
            .map_err(breaker_error)
    }
    async fn close(&self, name: &str) -> Result<(), SharedError> {
        self.0.breaker_close(name).await.map_err(breaker_error)
    }
}

/// Exports every external validator's circuit breaker as a gauge at each `/metrics` scrape.
fn export_breaker_states(metrics: &enforce_server::Metrics) {
    for (validator, state) in enforce_external::breaker::states() {
        let value = match state {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        };
        metrics.set_gauge(
            "enforce_breaker_state",
            "Circuit breaker of an external validator: 0 closed, 1 half-open, 2 open.",
            &[("validator", &validator)],
            value,
        );
    }
}

fn enforcer_for(profiles: &ProfileSet, name: &str) -> Result<Arc<enforce_core::Enforcer>, String> {
    profiles.enforcer(name).map(Arc::new).ok_or_else(|| {
        format!(
            "no profile named '{name}' (profiles: {})",
            profiles.names().collect::<Vec<_>>().join(", ")
        )
    })
}

/// The enforcer of profile `name` for the model `model` (its `reask: auto` chooses by that
/// model's statistics).
fn enforcer_asking(
    profiles: &ProfileSet,
    choosers: &Choosers,
    name: &str,
    model: Option<&str>,
) -> Result<Arc<enforce_core::Enforcer>, String> {
    let profile = profiles.get(name).ok_or_else(|| {
        format!(
            "no profile named '{name}' (profiles: {})",
            profiles.names().collect::<Vec<_>>().join(", ")
        )
    })?;
    Ok(Arc::new(choosers.attach(
        profile.enforcer(),
        profile,
        model,
    )))
}

/// A `server:` error, located in the file (`server.api_keys[1].key_env`).
pub(crate) fn section_error(loaded: &LoadedConfig, e: enforce_server::SectionError) -> String {
    loaded
        .error_at(&format!("server.{}", e.field), e.message)
        .to_string()
}

/// Every model and profile a `server.api_keys` entry lists exists (a typo would lock the key
/// out of what it was meant to use, silently).
pub(crate) fn check_key_grants(
    loaded: &LoadedConfig,
    section: &ServerSection,
    served: &[&str],
    profiles: &ProfileSet,
) -> Result<(), String> {
    for (index, entry) in section.api_keys.iter().enumerate() {
        let enforce_server::ApiKeyEntry::Scoped(spec) = entry else {
            continue;
        };
        let known: Vec<&str> = profiles.names().collect();
        for (list, what, kind, names) in [
            (&spec.models, "models", "served model", served),
            (&spec.profiles, "profiles", "profile", known.as_slice()),
        ] {
            for (i, name) in list.iter().flatten().enumerate() {
                if !names.contains(&name.as_str()) {
                    let key = format!("server.api_keys[{index}].{what}[{i}]");
                    let message = format!("no {kind} `{name}` (known: {})", names.join(", "));
                    return Err(loaded.error_at(&key, message).to_string());
                }
            }
        }
    }
    Ok(())
}

/// What is wrong with a `models:` entry (or the model the flags describe), and where: `key`
/// is below the entry (`runner.timeout_secs`, `profile`; empty for the entry as a whole), or
/// below the file's root when it starts with `/` (the top-level `runner:` the entry uses).
#[derive(Debug)]
pub(crate) struct EntryError {
    model: String,
    key: String,
    message: String,
}

impl EntryError {
    /// The error located in the file, for the entry at `index` of `models:`.
    fn located(self, loaded: &LoadedConfig, index: usize) -> String {
        let key = match self.key.strip_prefix('/') {
            Some(root) => root.to_string(),
            None if self.key.is_empty() => format!("models[{index}]"),
            None => format!("models[{index}].{}", self.key),
        };
        let message = format!("model '{}': {}", self.model, self.message);
        loaded.error_at(&key, message).to_string()
    }
}

impl std::fmt::Display for EntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "model '{}': ", self.model)?;
        match self.key.trim_start_matches('/') {
            "" => f.write_str(&self.message),
            key => write!(f, "{key}: {}", self.message),
        }
    }
}

/// The runner `config` describes, configured at key `at`; else the key of the field at fault
/// (`at` itself when none is named) and the message.
fn build_runner(config: &RunnerConfig, at: &str) -> Result<Arc<dyn Runner>, (String, String)> {
    config.build().map(Arc::from).map_err(|e| {
        let key = match e.field() {
            Some(field) => format!("{at}.{field}"),
            None => at.to_string(),
        };
        (key, e.to_string())
    })
}

/// The served model of a `models:` entry; `server_allows_limits` is
/// `server.allow_request_limits`, which the entry's own setting overrides.
pub(crate) fn model_from_config(
    entry: &ServedModelConfig,
    default_runner: Option<&RunnerConfig>,
    (profiles, choosers): (&ProfileSet, &Choosers),
    server_allows_limits: bool,
) -> Result<Model, EntryError> {
    let error = |key: String, message: String| EntryError {
        model: entry.id.clone(),
        key,
        message,
    };
    let (runner_config, runner_key) = match (&entry.runner, default_runner) {
        (Some(own), _) => (own, "runner"),
        (None, Some(shared)) => (shared, "/runner"),
        (None, None) => {
            let message = "has no `runner:` and the config has no top-level `runner:`";
            return Err(error(String::new(), message.into()));
        }
    };
    let runner = build_runner(runner_config, runner_key).map_err(|(key, e)| error(key, e))?;
    let profile = entry
        .profile
        .clone()
        .unwrap_or_else(|| profiles.default_name().to_string());
    let enforcer = enforcer_asking(profiles, choosers, &profile, model_of(runner_config))
        .map_err(|e| error("profile".into(), e))?;
    let constrained = profiles
        .get(&profile)
        .and_then(|p| crate::decode::for_profile(p, p.policy(), runner_config, false))
        .unwrap_or_default();
    for note in &constrained.notes {
        eprintln!(
            "enforce serve: model '{}': decode: constrained: {note}",
            entry.id
        );
    }
    let model = Model::new(entry.id.clone(), runner, enforcer);
    let model = match passthrough_of(runner_config) {
        Some(upstream) => model.with_passthrough(upstream),
        None => model,
    };
    Ok(with_upstream_model(
        model
            .with_decode_params(constrained.params)
            .with_profile(profile)
            .with_runner_kind(runner_config.kind())
            .with_options(entry.options(server_allows_limits)),
        runner_config,
    ))
}

/// The routes of a model entry. Errors carry the key below the entry (`routes[1].profile`).
fn routes_from_config(
    entry: &ServedModelConfig,
    (profiles, choosers): (&ProfileSet, &Choosers),
    model: Option<&str>,
) -> Result<Routes, RouteError> {
    let classifier = entry
        .classify
        .as_ref()
        .map(classifier_from_config)
        .transpose()?;
    let mut routes = Vec::with_capacity(entry.routes.len());
    for (index, config) in entry.routes.iter().enumerate() {
        let within = |e: RouteError| RouteError {
            key: format!("routes[{index}].{}", e.key),
            message: e.message,
        };
        let RouteConfig {
            name,
            profile,
            when,
        } = config;
        let enforcer = enforcer_asking(profiles, choosers, profile, model).map_err(|message| {
            within(RouteError {
                key: "profile".into(),
                message,
            })
        })?;
        let when = when.to_when().map_err(within)?;
        let name = name.clone().unwrap_or_else(|| profile.clone());
        routes.push(Route::new(name, profile.clone(), enforcer, when));
    }
    Routes::new(routes, classifier)
}

fn classifier_from_config(config: &ClassifyConfig) -> Result<Classifier, RouteError> {
    let runner = build_runner(&config.runner, "classify.runner")
        .map_err(|(key, message)| RouteError { key, message })?;
    Classifier::new(
        runner,
        config.prompt.clone(),
        config.labels.clone(),
        Duration::from_millis(config.timeout_ms),
        config.max_question_chars,
    )
}

/// Where the endpoints the proxy does not enforce go for a model of this runner: its HTTP API
/// with its key (`api_key`, else the variable `api_key_env` names, else Anthropic's default
/// variable); `None` for runners without one (the Claude CLI, a local model, a command).
fn passthrough_of(runner: &RunnerConfig) -> Option<Upstream> {
    let key = |key: &Option<String>, env: Option<&str>| {
        key.clone()
            .or_else(|| env.and_then(|var| std::env::var(var).ok()))
    };
    match runner {
        RunnerConfig::OpenAi(c) => Some(Upstream::openai(
            c.base_url.clone(),
            key(&c.api_key, c.api_key_env.as_deref()).as_deref(),
        )),
        RunnerConfig::Anthropic(c) => {
            let env = c.api_key_env.as_deref().or(Some(ANTHROPIC_API_KEY_ENV));
            let key = key(&c.api_key, env);
            Some(Upstream::anthropic(
                &c.base_url,
                key.as_deref(),
                &c.anthropic_version,
            ))
        }
        _ => None,
    }
}

/// Names the model the runner asks, for the `gen_ai.request.model` of trace spans.
fn with_upstream_model(model: Model, runner: &RunnerConfig) -> Model {
    match runner {
        RunnerConfig::OpenAi(c) => model.with_upstream_model(c.model.clone()),
        RunnerConfig::Anthropic(c) => model.with_upstream_model(c.model.clone()),
        RunnerConfig::Claude(ClaudeConfig { model: Some(m), .. }) => {
            model.with_upstream_model(m.clone())
        }
        RunnerConfig::Local(c) => match c.model.file_name().and_then(|n| n.to_str()) {
            Some(file) => model.with_upstream_model(file.to_string()),
            None => model,
        },
        _ => model,
    }
}

/// Serves until `shutdown` completes.
pub async fn serve(
    args: Args,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let prepared = prepare(&args).await?;
    let listener = tokio::net::TcpListener::bind(&prepared.listen)
        .await
        .map_err(|e| {
            let message = format!("cannot listen on {}: {e}", prepared.listen);
            match prepared.listen_in_file.clone() {
                Some(located) => enforce_config::ConfigError { message, ..located }.to_string(),
                None => message,
            }
        })?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("enforce serve: listening on http://{addr}/v1");
    if let Some(stats) = &prepared.stats {
        // Before any request: the shared counters start from the files' counts.
        stats.keep().await;
    }
    let keeping = (prepared.stats.clone()).map(|stats| tokio::spawn(stats.every(WRITE_PERIOD)));
    let served = prepared.server.serve(listener, shutdown).await;
    if let (Some(keeping), Some(stats)) = (keeping, &prepared.stats) {
        keeping.abort();
        // After the last request: the file holds every outcome served.
        stats.keep().await;
    }
    served.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_config::Registry;
    use enforce_server::FailureResponse;

    /// A `models:` entry with a local runner: built into a served model (which answers, when
    /// the test model is installed) with the feature `local`; a configuration error saying how
    /// to build it without.
    #[tokio::test]
    async fn a_served_model_can_run_a_local_gguf() {
        let gguf = enforce_testkit::models::test_gguf();
        let model = gguf.clone().unwrap_or_else(|| "absent.gguf".into());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("enforce.yaml");
        std::fs::write(
            &file,
            format!(
                "models:\n  - id: smol\n    runner: {{type: local, model: \"{}\", max_tokens: 8, seed: 1}}\n",
                model.display()
            ),
        )
        .unwrap();
        let loaded = LoadedConfig::load(Some(&file)).unwrap();
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let built = model_from_config(
            &loaded.config.models[0],
            None,
            (&profiles, &Choosers::default()),
            false,
        );
        #[cfg(not(feature = "local"))]
        {
            let Err(err) = built else {
                panic!("no local runner in this build")
            };
            assert!(
                err.to_string().contains("model 'smol'")
                    && err.to_string().contains("--features local"),
                "{err}"
            );
        }
        #[cfg(feature = "local")]
        {
            let served = built.expect("builds without touching the file");
            assert_eq!(served.runner_kind.as_deref(), Some("local"));
            if gguf.is_some() {
                let request = enforce_core::Request::prompt("Say hello.");
                let reply = served
                    .runner
                    .ask(enforce_core::Ask::new(&request))
                    .reply()
                    .await
                    .expect("the model answers");
                assert_eq!(reply.usage.map(|u| u.output_tokens <= 8), Some(true));
                assert!(!reply.text.is_empty());
            }
        }
    }

    fn serve_args(args: &[&str]) -> Args {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: Args,
        }
        <Cli as clap::Parser>::parse_from(std::iter::once("enforce").chain(args.iter().copied()))
            .serve
    }

    #[test]
    fn openai_runners_forward_with_their_key_and_the_claude_cli_does_not() {
        let openai = RunnerConfig::OpenAi(enforce_runner::OpenAiConfig {
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: Some("sk-runner".into()),
            ..Default::default()
        });
        let upstream = passthrough_of(&openai).expect("an OpenAI runner forwards");
        assert_eq!(upstream.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(
            upstream.headers,
            vec![("authorization".to_string(), "Bearer sk-runner".to_string())]
        );
        let claude = RunnerConfig::Claude(ClaudeConfig::default());
        assert!(passthrough_of(&claude).is_none());
    }

    #[test]
    fn serve_takes_the_anthropic_runner_from_the_flags() {
        let profiles = ProfileSet::builtin(&Registry::builtin(), None).unwrap();
        let args = serve_args(&[
            "--runner",
            "anthropic",
            "--upstream-model",
            "claude-x",
            "--upstream-url",
            "http://127.0.0.1:9",
            "--upstream-key",
            "k",
        ]);
        let entry = args
            .model
            .entry(args.model.upstream_model.clone(), profiles.default_name())
            .expect("builds")
            .expect("a model");
        let model = model_from_config(&entry, None, (&profiles, &Choosers::default()), false)
            .expect("builds");
        assert_eq!(model.runner_kind.as_deref(), Some("anthropic"));
        assert_eq!(model.id, "claude-x");
        assert_eq!(model.upstream_model.as_deref(), Some("claude-x"));
        let upstream = model.passthrough.expect("an Anthropic runner forwards");
        assert_eq!(upstream.base_url, "http://127.0.0.1:9/v1");
        assert!(upstream.headers.contains(&("x-api-key".into(), "k".into())));
        assert!(upstream
            .headers
            .iter()
            .any(|(name, _)| name == "anthropic-version"));
        let args = serve_args(&["--runner", "anthropic"]);
        let Err(err) = args.model.entry(None, profiles.default_name()) else {
            panic!("a model without a name")
        };
        assert!(err.contains("--upstream-model"), "{err}");
    }

    /// Each model entry's enforcer chooses by its own model's statistics: the entry's
    /// profile and its routes get a chooser, read once from the profile's file.
    #[test]
    fn a_served_model_with_reask_auto_gets_the_chooser_of_its_model() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("stats.json"),
            r#"{"version": 1, "rows": []}"#,
        )
        .unwrap();
        let yaml = "profiles:\n  a:\n    validators: []\n    reask: auto\n    \
                    reask_auto: {stats: stats.json}\n  plain:\n    validators: []\n\
                    runner: {type: openai, base_url: 'http://127.0.0.1:9/v1', model: m}\n\
                    models:\n  - id: one\n    profile: a\n    routes:\n      \
                    - {profile: plain, when: {header: X-Kind, equals: p}}\n  \
                    - {id: two, profile: plain}\n";
        let path = dir.path().join("enforce.yaml");
        std::fs::write(&path, yaml).unwrap();
        let loaded = LoadedConfig::load(Some(&path)).unwrap();
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let choosers = Choosers::load(&profiles).unwrap();
        let runner = loaded.config.runner.as_ref();
        let models = &loaded.config.models;
        let one = model_from_config(&models[0], runner, (&profiles, &choosers), false).unwrap();
        assert!(one.enforcer.chooser().is_some());
        let two = model_from_config(&models[1], runner, (&profiles, &choosers), false).unwrap();
        assert!(two.enforcer.chooser().is_none(), "`plain` says no `auto`");
        // Without the file, loading refuses it by name.
        std::fs::remove_file(dir.path().join("stats.json")).unwrap();
        let err = Choosers::load(&profiles).unwrap_err();
        assert!(err.message.contains("stats.json"), "{err}");
        assert_eq!(err.key, "profiles.a.reask_auto.stats");
    }

    #[test]
    fn the_example_s_routes_build() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/serve.yaml");
        let loaded = LoadedConfig::load(Some(&path)).unwrap();
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let mut routed = 0;
        for entry in &loaded.config.models {
            let routes = routes_from_config(entry, (&profiles, &Choosers::default()), None)
                .unwrap_or_else(|e| panic!("{}: {}: {}", entry.id, e.key, e.message));
            routed += usize::from(!routes.is_empty());
        }
        assert_eq!(routed, 1);
    }

    #[test]
    fn draft_models_default_to_an_error_for_unresolved_answers_and_hold_models_to_return() {
        let yaml = "models:\n  - {id: ui, stream_mode: draft}\n  - {id: api}\n  - {id: ui_return, stream_mode: draft, on_unresolved: return}\nrunner: {type: openai, base_url: 'http://127.0.0.1:9/v1', model: m}\n";
        let dir =
            std::env::temp_dir().join(format!("enforce-draft-default-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("serve.yaml");
        std::fs::write(&path, yaml).unwrap();
        let loaded = LoadedConfig::load(Some(&path)).unwrap();
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let on_unresolved: Vec<FailureResponse> = loaded
            .config
            .models
            .iter()
            .map(|e| {
                model_from_config(
                    e,
                    loaded.config.runner.as_ref(),
                    (&profiles, &Choosers::default()),
                    false,
                )
                .unwrap()
                .options
                .on_unresolved
            })
            .collect();
        assert_eq!(
            on_unresolved,
            [
                FailureResponse::Error,
                FailureResponse::Return,
                FailureResponse::Return
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn request_limits_follow_the_model_else_the_server_else_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.yaml");
        std::fs::write(&path, "models:\n  - {id: inherits}\n  - {id: closed, allow_request_limits: false}\n  - {id: open, allow_request_limits: true}\nrunner: {type: openai, base_url: 'http://127.0.0.1:9/v1', model: m}\n").unwrap();
        let loaded = LoadedConfig::load(Some(&path)).unwrap();
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let allowed = |server: bool| -> Vec<bool> {
            loaded
                .config
                .models
                .iter()
                .map(|e| {
                    model_from_config(
                        e,
                        loaded.config.runner.as_ref(),
                        (&profiles, &Choosers::default()),
                        server,
                    )
                    .unwrap()
                    .options
                    .request_limits
                })
                .collect()
        };
        assert_eq!(allowed(false), [false, false, true]);
        assert_eq!(allowed(true), [true, false, true]);
    }
}
