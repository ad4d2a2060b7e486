//! Running an eval: an enforcer per (profile, arm), the output directory (resumed when it holds
//! trials of the same eval), the trials, and the summary.

use crate::arms::Arm;
use crate::dataset::{self, Case};
use crate::manifest::{self, Manifest};
use crate::outputs::{self, ANSWERS, ATTEMPTS};
use crate::provenance::{Machine, Provenance, RunnerProvenance, Seeds};
use crate::shard::Shard;
use crate::split::SplitSide;
use crate::strategy_stats::{self, Added};
use crate::summary::{Setup, Summary};
use crate::trials::{self, Job, Plan, Sink, Trial};
use crate::EvalError;
use enforce_config::profile::{Constrained, Decode};
use enforce_config::{Profile, ProfileSet};
use enforce_core::policy::Reask;
use enforce_core::strategy::{StrategyStats, ThompsonChooser};
use enforce_core::{Enforcer, Policy, Runner};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The configuration file the profiles come from, for the records: the answers' lines name
/// it, and `eval.json` keeps a digest of its text (parts of one sharded eval must agree on it).
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// The path, as given.
    pub path: String,
    /// The text as read.
    pub text: String,
}

/// One eval: what to run, with what, and where its results go.
#[derive(Debug, Clone)]
pub struct Eval {
    /// The dataset: JSONL, or promptfoo-style YAML (`.yaml`, `.yml`).
    pub dataset: PathBuf,
    /// The profile of the cases that name none.
    pub profile: String,
    /// The arms compared, in this order.
    pub arms: Vec<Arm>,
    /// Runs per case and arm, each with its own seed.
    pub repeats: u32,
    /// The first seed: each (case, repeat) asks with this plus its index, in every arm.
    pub seed: u64,
    /// Sampling parameters sent with every request (`temperature`, `max_tokens`...); the seed
    /// is added per request.
    pub params: Map<String, Value>,
    /// Trials run at once.
    pub concurrency: usize,
    /// The part of the dataset this run takes ([`Shard::WHOLE`]: all of it).
    pub shard: Shard,
    /// Where the results go (created; one holding trials of this eval is resumed). `None`:
    /// nothing is written, the summary is only returned.
    pub output: Option<PathBuf>,
    /// The runner's kind, for the records (`openai`, `local`, `python`...).
    pub runner_kind: String,
    /// The model, for the records.
    pub model: Option<String>,
    /// The runner and model as the front end knows them (settings, base URL, model file), for
    /// the provenance; `None`: only `runner_kind` and `model`.
    pub runner_provenance: Option<RunnerProvenance>,
    /// The configuration file, when the profiles come from one.
    pub config: Option<ConfigFile>,
    /// Add the re-asks the trials measured to this statistics file once the eval is done
    /// (created when missing; see [`strategy_stats`](crate::strategy_stats)).
    pub stats: Option<PathBuf>,
    /// The side of a train/test split this eval takes (`None`: every case): the learning
    /// side's arms write the statistics (`stats`) the measuring side's `auto` reads
    /// (`stats_from`), so `auto` is never measured on a case it learned from.
    pub split: Option<SplitSide>,
    /// The statistics the arm `auto` chooses by (learned by another eval: other seeds or
    /// cases); an eval with the arm `auto` and none is an input error.
    pub stats_from: Option<Arc<StrategyStats>>,
}

/// What an eval reports while it runs, for a front end to show.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A profile's decoding constraint is not sent as asked (once per profile and note).
    ConstraintNote {
        /// The profile.
        profile: &'a str,
        /// What happens instead.
        note: &'a str,
    },
    /// This run is one part of a sharded eval.
    Shard {
        /// The part.
        part: Shard,
        /// The cases it holds.
        held: usize,
        /// The dataset's cases.
        cases: usize,
    },
    /// Records in the output's `attempts.jsonl` that belong to another eval (other arms, cases
    /// or seeds): left out of this summary.
    OtherRecords {
        /// How many.
        count: usize,
        /// The file.
        path: &'a Path,
    },
    /// The output directory already holds trials of this eval: they are not run again.
    Resuming {
        /// Trials already recorded.
        done: usize,
        /// Trials left to run.
        pending: usize,
        /// The file they are recorded in.
        path: &'a Path,
    },
    /// The trials start.
    Started {
        /// Trials to run.
        pending: usize,
    },
    /// A trial finished (and is recorded).
    Trial(&'a Trial),
    /// The statistics of `--stats-from` have nothing measured for this model and profile: the
    /// arm `auto` re-asks as the profile's ladder does (once per profile).
    AutoWithoutData {
        /// The profile.
        profile: &'a str,
        /// The model's name (empty when the runner names none).
        model: &'a str,
    },
    /// The trials' re-asks were added to the statistics file.
    StatsAdded {
        /// The file.
        path: &'a Path,
        /// What was added.
        added: Added,
    },
}

impl fmt::Display for Event<'_> {
    /// The event in words, as `enforce eval` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::ConstraintNote { profile, note } => {
                write!(f, "profile `{profile}`: constrained decoding: {note}")
            }
            Event::Shard { part, held, cases } => {
                write!(f, "shard {part}: {held} of the dataset's {cases} case(s)")
            }
            Event::OtherRecords { count, path } => write!(
                f,
                "{count} record(s) in {} belong to another eval (other arms, cases or seeds) \
                 and are left out of this summary",
                path.display()
            ),
            Event::Resuming {
                done,
                pending,
                path,
            } => write!(
                f,
                "resuming: {done} trial(s) already in {}, {pending} to run",
                path.display()
            ),
            Event::Started { pending } => write!(f, "{pending} trial(s) to run"),
            Event::Trial(trial) => write!(
                f,
                "trial {}/{}/{} done",
                trial.key.arm, trial.key.case, trial.key.repeat
            ),
            Event::AutoWithoutData { profile, model } => write!(
                f,
                "arm `auto`: the statistics have nothing for model `{model}` under profile \
                 `{profile}`; its re-asks take the profile's ladder"
            ),
            Event::StatsAdded { path, added } => {
                write!(
                    f,
                    "added the re-asks of {} trial(s) to {}",
                    added.added,
                    path.display()
                )?;
                if added.already > 0 {
                    write!(
                        f,
                        " ({} trial(s) left out: added before from this -o or its parts)",
                        added.already
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// Receives an eval's [`Event`]s, from the thread that runs the eval or a worker of its
/// runtime.
pub type Observer = Arc<dyn Fn(Event<'_>) + Send + Sync>;

/// The decoding constraint the caller's runner gets for a profile's requests under an arm's
/// policy; `forced` when the arm is `constrained`. `None`: decode freely. The runner's kind
/// decides the parameters (the CLI's `decode` module); a runner without such a control gives
/// `None`.
pub type Constrain<'a> = &'a (dyn Fn(&Profile, &Policy, bool) -> Option<Constrained> + Sync);

impl Eval {
    /// Runs the eval on an async runtime of its own and returns its summary (and writes the
    /// outputs, when it has an output directory).
    pub fn run(
        self,
        profiles: &ProfileSet,
        runner: Arc<dyn Runner>,
        constrain: Constrain<'_>,
        observer: Observer,
    ) -> Result<Summary, EvalError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(EvalError::Runtime)?;
        runtime.block_on(self.run_async(profiles, runner, constrain, observer))
    }

    /// [`Eval::run`] on the caller's tokio runtime (the trials are spawned on it).
    pub async fn run_async(
        self,
        profiles: &ProfileSet,
        runner: Arc<dyn Runner>,
        constrain: Constrain<'_>,
        observer: Observer,
    ) -> Result<Summary, EvalError> {
        if let Some(path) = &self.stats {
            // An unreadable file is refused before any trial runs.
            strategy_stats::read(path).map_err(EvalError::Input)?;
        }
        let cases = dataset::read(&self.dataset).map_err(EvalError::Input)?;
        let plan = Arc::new(self.plan(cases, profiles, constrain, &observer)?);
        let manifest = self.manifest_of(&plan)?;
        let output = match &self.output {
            Some(dir) => Some(Output::open(dir, &manifest, &observer)?),
            None => None,
        };
        if let Some(part) = self.shard.part() {
            let held = (0..plan.cases.len())
                .filter(|&c| self.shard.holds(c))
                .count();
            let cases = plan.cases.len();
            observer(Event::Shard { part, held, cases });
        }
        let mut trials = output.as_ref().map_or_else(Vec::new, |o| o.resumed.clone());
        let done = trials::done(&trials);
        let pending: Vec<_> = plan
            .jobs()
            .into_iter()
            .filter(|&job| self.holds(job.case) && !done.contains(&plan.key(job)))
            .collect();
        if let Some(output) = output.as_ref().filter(|o| !o.resumed.is_empty()) {
            observer(Event::Resuming {
                done: output.resumed.len(),
                pending: pending.len(),
                path: &output.attempts,
            });
        }
        observer(Event::Started {
            pending: pending.len(),
        });
        let new = self
            .run_trials(plan, runner, pending, output, Arc::clone(&observer))
            .await?;
        trials.extend(new);
        let summary = self.finish(manifest, &trials)?;
        if let Some(path) = &self.stats {
            let model = self.model.as_deref().unwrap_or_default();
            let added = strategy_stats::add_trials(path, &trials, model, self.output.as_deref())?;
            observer(Event::StatsAdded { path, added });
        }
        Ok(summary)
    }

    /// Runs `pending`, each trial recorded in `output` as it ends.
    async fn run_trials(
        &self,
        plan: Arc<Plan>,
        runner: Arc<dyn Runner>,
        pending: Vec<Job>,
        output: Option<Output>,
        observer: Observer,
    ) -> Result<Vec<Trial>, EvalError> {
        let (file, answers, attempts) = match output {
            Some(o) => (
                Some(o.attempts_file),
                Some(o.answers_file),
                Some(o.attempts),
            ),
            None => (None, None, None),
        };
        let sink = Sink {
            file,
            answers,
            on_trial: Box::new(move |trial: &Trial| observer(Event::Trial(trial))),
        };
        trials::run_all(plan, runner, pending, self.concurrency, sink)
            .await
            .map_err(|source| match attempts {
                Some(path) => EvalError::Record { path, source },
                None => EvalError::Output(source.to_string()),
            })
    }

    /// What every trial shares: an enforcer per (case, arm) (one per (profile, arm), shared by
    /// the cases) and the decoding constraint of each.
    fn plan(
        &self,
        cases: Vec<Case>,
        profiles: &ProfileSet,
        constrain: Constrain<'_>,
        observer: &Observer,
    ) -> Result<Plan, EvalError> {
        let names: Vec<String> = cases
            .iter()
            .map(|c| c.profile.clone().unwrap_or_else(|| self.profile.clone()))
            .collect();
        let mut built: HashMap<(String, usize), Arc<Enforcer>> = HashMap::new();
        let mut enforcers = Vec::with_capacity(cases.len());
        let mut constrained = Vec::with_capacity(cases.len());
        let mut noted = HashSet::new();
        self.note_auto_without_data(&names, observer)?;
        for (case, name) in cases.iter().zip(&names) {
            let profile = self.profile_of(profiles, case, name)?;
            let per_arm = (0..self.arms.len())
                .map(|a| {
                    let enforcer = built
                        .entry((name.clone(), a))
                        .or_insert_with(|| Arc::new(self.enforcer(profile, &self.arms[a])));
                    Arc::clone(enforcer)
                })
                .collect();
            enforcers.push(per_arm);
            let per_arm: Vec<_> = self
                .arms
                .iter()
                .map(|arm| constrain(profile, &policy_of(profile, arm), arm.constrained))
                .collect();
            for note in per_arm.iter().flatten().flat_map(|c| &c.notes) {
                if noted.insert((name.clone(), note.clone())) {
                    observer(Event::ConstraintNote {
                        profile: name,
                        note,
                    });
                }
            }
            constrained.push(per_arm);
        }
        Ok(Plan {
            cases,
            arms: self.arms.clone(),
            enforcers,
            constrained,
            profiles: names,
            repeats: self.repeats,
            seed: self.seed,
            params: self.params.clone(),
            runner_kind: self.runner_kind.clone(),
            model: self.model.clone(),
            config: self.config.as_ref().map(|c| c.path.clone()),
        })
    }

    /// Whether this run takes the case at `position`: in its shard, on its side of a split.
    fn holds(&self, position: usize) -> bool {
        self.shard.holds(position) && self.split.is_none_or(|side| side.holds(position))
    }

    /// With the arm `auto`: an input error without statistics to choose by, and a note for
    /// each profile of `names` the statistics have nothing on for the runner's model.
    fn note_auto_without_data(
        &self,
        names: &[String],
        observer: &Observer,
    ) -> Result<(), EvalError> {
        let Some(arm) = self.arms.iter().find(|arm| arm.auto) else {
            return Ok(());
        };
        let Some(stats) = &self.stats_from else {
            return Err(EvalError::Input(format!(
                "arm `{}` chooses each re-ask's strategy from statistics learned by another \
                 eval: give them with --stats-from FILE (a file `enforce eval --stats FILE` \
                 wrote; in Python, stats_from=)",
                arm.name
            )));
        };
        let model = self.model.as_deref().unwrap_or_default();
        let mut noted = HashSet::new();
        for name in names {
            let known = stats
                .iter()
                .any(|(key, _)| key.model == model && key.profile == *name);
            if !known && noted.insert(name) {
                observer(Event::AutoWithoutData {
                    profile: name,
                    model,
                });
            }
        }
        Ok(())
    }

    /// `profile`'s enforcer with `arm`'s policy; for the arm `auto`, with the chooser over
    /// the statistics of the runner's model under the profile.
    fn enforcer(&self, profile: &Profile, arm: &Arm) -> Enforcer {
        let enforcer = profile.enforcer().with_policy(policy_of(profile, arm));
        match (&self.stats_from, arm.auto) {
            (Some(stats), true) => {
                // Fixed statistics: the chooser learns nothing during the run, so it explores
                // only when the profile says `explore: true`.
                let settings = profile
                    .reask_auto()
                    .map(|auto| auto.settings(false))
                    .unwrap_or_default();
                let model = self.model.as_deref().unwrap_or_default();
                let chooser = ThompsonChooser::new(stats, model, profile.name(), settings);
                enforcer.with_chooser(Arc::new(chooser))
            }
            _ => enforcer,
        }
    }

    /// The profile `name` of `case`; an error when there is none, or when an arm escalates and
    /// it has no escalation model.
    fn profile_of<'p>(
        &self,
        profiles: &'p ProfileSet,
        case: &Case,
        name: &str,
    ) -> Result<&'p Profile, EvalError> {
        let profile = profiles.get(name).ok_or_else(|| {
            let whose = match case.profile {
                Some(_) => format!(" (case `{}`)", case.id),
                None => String::new(),
            };
            let known: Vec<&str> = profiles.names().collect();
            EvalError::Input(format!(
                "no profile named `{name}`{whose} (known: {})",
                known.join(", ")
            ))
        })?;
        if let Some(arm) = self.arms.iter().find(|arm| arm.escalates()) {
            if profile.enforcer().escalation().is_none() {
                return Err(EvalError::Input(format!(
                    "arm `{}` escalates, but profile `{name}` has no escalation model: give the profile's `escalate_to` (or, to `enforce eval`, --escalate-model MODEL)",
                    arm.name
                )));
            }
        }
        Ok(profile)
    }

    /// What this run runs, for `eval.json` and the summary.
    fn manifest_of(&self, plan: &Plan) -> Result<Manifest, EvalError> {
        let dataset_digest = manifest::file_digest(&self.dataset).map_err(EvalError::Input)?;
        let config_digest = self
            .config
            .as_ref()
            .map(|c| enforce_core::outcome::fnv1a_hex(&c.text));
        let runner = self
            .runner_provenance
            .clone()
            .unwrap_or_else(|| RunnerProvenance {
                kind: plan.runner_kind.clone(),
                model: plan.model.clone(),
                base_url: None,
                model_file: None,
                settings: Map::new(),
            });
        let provenance = Provenance {
            enforce_version: env!("CARGO_PKG_VERSION").to_string(),
            runner,
            sampling: plan.params.clone(),
            seeds: Seeds::of(plan.seed, plan.cases.len(), plan.repeats),
            dataset_digest: dataset_digest.clone(),
            config_digest: config_digest.clone(),
            machines: vec![Machine::this()],
        };
        Ok(Manifest {
            setup: Setup {
                dataset: self.dataset.display().to_string(),
                cases: plan.cases.len(),
                repeats: plan.repeats,
                seed: plan.seed,
                profile: self.profile.clone(),
                runner: plan.runner_kind.clone(),
                model: plan.model.clone(),
                params: plan.params.clone(),
                shard: self.shard.part(),
                split: self.split,
            },
            arms: plan.arms.iter().map(|a| a.name.clone()).collect(),
            cases: plan.cases.iter().map(|c| c.id.clone()).collect(),
            dataset_digest,
            config_digest,
            provenance: Some(provenance),
        })
    }

    /// The summary of `trials`, and the output files when there is an output directory.
    fn finish(&self, manifest: Manifest, trials: &[Trial]) -> Result<Summary, EvalError> {
        match &self.output {
            Some(dir) => outputs::finish(dir, manifest, trials).map_err(EvalError::Output),
            None => Ok(manifest.summarise(trials)),
        }
    }
}

/// `arm`'s policy on `profile`. Under `decode: constrained` every attempt is constrained by
/// rule, so `auto` bets not on `constrained` (a plain resample there), as a profile's own
/// `reask: auto` does not.
fn policy_of(profile: &Profile, arm: &Arm) -> Policy {
    let mut policy = arm.policy(profile.policy());
    if profile.decode() == Decode::Constrained {
        if let Some(auto) = policy.reask_auto.as_mut() {
            auto.strategies.retain(|s| *s != Reask::Constrained);
        }
    }
    policy
}

/// An output directory opened for an eval: its `attempts.jsonl` (checked writable, torn lines
/// dropped) and `answers.jsonl`, both appended to, and the trials of this eval recorded there.
struct Output {
    attempts: PathBuf,
    attempts_file: File,
    answers_file: File,
    resumed: Vec<Trial>,
}

impl Output {
    /// Creates `dir`, claims it for this eval (`eval.json`) and reads back its trials.
    fn open(dir: &Path, manifest: &Manifest, observer: &Observer) -> Result<Output, EvalError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            EvalError::Input(format!(
                "cannot create the output directory {}: {e}",
                dir.display()
            ))
        })?;
        let attempts = dir.join(ATTEMPTS);
        append_to(&attempts)?;
        manifest.claim(dir).map_err(EvalError::Input)?;
        let recorded = trials::resume(&attempts)
            .map_err(|e| EvalError::Input(format!("cannot read {}: {e}", attempts.display())))?;
        let wanted: HashSet<_> = manifest.keys().into_iter().collect();
        let (kept, ignored) = trials::select(recorded, &wanted);
        if ignored > 0 {
            observer(Event::OtherRecords {
                count: ignored,
                path: &attempts,
            });
        }
        Ok(Output {
            attempts_file: append_to(&attempts)?,
            answers_file: append_to(&dir.join(ANSWERS))?,
            attempts,
            resumed: kept.into_iter().map(|(_, trial)| trial).collect(),
        })
    }
}

/// `path` opened to append to (created when missing).
fn append_to(path: &Path) -> Result<File, EvalError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| EvalError::Input(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_config::config::Config;
    use enforce_config::{BuildEnv, Registry};

    #[test]
    fn auto_bets_on_constrained_only_where_not_every_attempt_is_constrained() {
        let yaml = "
validators:
  j: {type: json, bare: true}
profiles:
  free: {validators: [j]}
  grammar: {validators: [j], decode: constrained}
";
        let config: Config = serde_yaml_ng::from_str(yaml).expect("a configuration");
        let profiles = ProfileSet::from_config(&config, &Registry::builtin(), &BuildEnv::default())
            .expect("the profiles");
        let auto = &Arm::parse_list("auto").expect("the arm")[0];
        let strategies = |name: &str| {
            let profile = profiles.get(name).expect("the profile");
            policy_of(profile, auto)
                .reask_auto
                .expect("auto")
                .strategies
        };
        assert!(strategies("free").contains(&Reask::Constrained));
        let grammar = strategies("grammar");
        assert!(!grammar.contains(&Reask::Constrained), "{grammar:?}");
        assert!(grammar.contains(&Reask::Resample), "{grammar:?}");
    }
}
