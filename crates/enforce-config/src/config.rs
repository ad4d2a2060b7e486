//! The `enforce.yaml` configuration: [`Config`] and its sections, and [`ConfigSource`], which
//! loads YAML with errors that name the file, line and key.
//!
//! ```yaml
//! plugin_dirs: [plugins]          # directories the plugin host loads validator libraries from
//! defaults:                        # policy for every profile unless the profile says otherwise
//!   profile: chat
//!   max_retries: 2
//! validators:                      # named, configured validators; `type` defaults to the name
//!   no_scores:
//!     type: pattern
//!     forbidden: [{ regex: '\d+\s*%', code: NO_NUMERIC_SCORES }]
//! profiles:
//!   prose:
//!     validators: [no_scores, step_marker]
//!     fallback: "Sorry, {{company_name}}."
//! ```
//!
//! Loading is bounded: files above [`MAX_CONFIG_BYTES`] are refused, and the YAML parser caps
//! nesting depth and alias expansion, so a "billion laughs" file fails fast instead of eating
//! memory.
//!
//! A program with more sections (the `enforce` binary adds `runner`, `models`, `server`)
//! declares its own top-level struct with these four fields plus its own, parses it with
//! [`ConfigSource::parse`], and hands the four to [`Config`] — see `Config`'s docs.
//!
//! ```
//! use enforce_config::config::{Config, ConfigSource};
//! let source = ConfigSource::from_string("enforce.yaml", "profiles:\n  p:\n    validatorz: []\n");
//! let err = source.parse::<Config>().unwrap_err();
//! assert_eq!(err.line, Some(3));
//! assert_eq!(err.key.as_deref(), Some("profiles.p.validatorz"));
//! assert!(err.to_string().starts_with("enforce.yaml:3:"), "{err}");
//! ```

use enforce_core::{
    feedback::FeedbackTemplate, feedback::IssueText, feedback::Language, policy::AnswerFormat,
    Budget, FailMode,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

mod reask;
mod source;
pub use reask::{ReaskAutoConfig, ReaskConfig};
pub use source::{locate_key, ConfigError, ConfigSource};

/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// The validation part of `enforce.yaml`.
///
/// Every section is optional. Unknown keys are errors. To embed these sections in a larger
/// file, copy the four fields into your own `#[serde(deny_unknown_fields)]` struct (serde's
/// `flatten` would lose unknown-key detection and line numbers) and build a `Config` from them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directories the plugin host loads validator libraries from, relative to the file.
    pub plugin_dirs: Vec<PathBuf>,
    /// Policy every profile starts from.
    pub defaults: Defaults,
    /// Named validator configurations: name → options (`type` defaults to the name). See
    /// [`Registry::build`](crate::Registry::build).
    #[schemars(schema_with = "crate::schema::validators")]
    pub validators: BTreeMap<String, serde_json::Value>,
    /// Named profiles; a profile named like a built-in one (`chat`, `adr`) replaces it.
    pub profiles: BTreeMap<String, ProfileConfig>,
}

/// A whole `enforce.yaml` read for its validation sections alone: the four sections of
/// [`Config`] (unknown keys stay errors with their line), and the `enforce` binary's own
/// sections (`runner`, `models`, `server`) accepted and not read, so that one file serves the
/// CLI, the proxy and a reader that only validates (the Python package, the docs' sample test).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ValidationSections {
    plugin_dirs: Vec<PathBuf>,
    defaults: Defaults,
    validators: BTreeMap<String, serde_json::Value>,
    profiles: BTreeMap<String, ProfileConfig>,
    runner: serde::de::IgnoredAny,
    models: serde::de::IgnoredAny,
    server: serde::de::IgnoredAny,
}

impl From<ValidationSections> for Config {
    fn from(file: ValidationSections) -> Self {
        Config {
            plugin_dirs: file.plugin_dirs,
            defaults: file.defaults,
            validators: file.validators,
            profiles: file.profiles,
        }
    }
}

/// Declares a configuration struct with its own fields followed by the policy keys that
/// `defaults:` and every profile take, and `lay_policy_over()`, which layers them into a
/// [`Policy`](enforce_core::Policy): one list of the keys, so a new one is added in one place.
/// A macro rather than a `#[serde(flatten)]` struct: flatten would cost the unknown-key
/// refusal, the file:line:key of errors in those keys, and YAML's reading of `fallback: 123`
/// as a string.
macro_rules! with_policy_keys {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $( $(#[$field_attr:meta])* pub $field:ident: $ty:ty, )*
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $( $(#[$field_attr])* pub $field: $ty, )*
            /// Re-asks after the first attempt.
            pub max_retries: Option<u32>,
            /// Feedback language and template (a profile's is laid over the defaults' field by
            /// field).
            pub feedback: Option<FeedbackConfig>,
            /// Limits on attempts, tokens, cost and time.
            pub budget: Option<Budget>,
            /// What an unavailable validator means (`open` or `closed`).
            pub on_unavailable: Option<FailMode>,
            /// Cut a streamed answer short at an error no continuation can remove, and re-ask at
            /// once (default `true`).
            pub early_abort: Option<bool>,
            /// New bytes of a streamed answer between two partial checks (default 32).
            pub partial_check_bytes: Option<usize>,
            /// How each re-ask asks: `feedback` (default: the conversation, the failed answer and
            /// feedback naming every error), `resample` (the original request again),
            /// `feedback_fresh` (the original request plus the feedback, without the failed
            /// answer), `reason_then_format` (two calls: a free answer without the decoding
            /// constraint, then that answer in the contract's format, with it), `escalate`
            /// (feedback, asked of the profile's `escalate_to` model) or `constrained` (a
            /// resample with the contract's decoding constraint, which the other attempts then
            /// leave out); or a list, one per re-ask, the last repeating (`[feedback, resample]`).
            /// Every re-ask advances the seed by one per attempt. `auto`: each re-ask takes the
            /// strategy measured statistics favour for the answer's issue codes (`reask_auto:`).
            pub reask: Option<ReaskConfig>,
            /// How `reask: auto` chooses: the statistics file, the fallback ladder, the
            /// strategies, exploration, the seed.
            pub reask_auto: Option<ReaskAutoConfig>,
            /// How the first attempt asks: `direct` (default: the request as it is) or
            /// `reason_then_format` (as that re-ask strategy does: a free answer, then the format).
            pub first_attempt: Option<enforce_core::policy::FirstAttempt>,
            /// End the loop when an attempt makes no progress on the last strategy of `reask`
            /// (default `true`; before it, the next re-ask climbs); `false` makes every attempt, as
            /// the seed documents' loop does.
            pub stop_on_no_progress: Option<bool>,
            /// When the validators' deterministic repairs run: `last` (default: after the re-asks;
            /// `first` with `reask: auto`) or `first` (before spending a re-ask: a repair that
            /// makes the answer clean is returned as `repaired` at once).
            pub repair: Option<enforce_core::policy::RepairWhen>,
            /// Issue codes whose repair runs before a re-ask even with `repair: last`: an attempt
            /// whose every error has one of these codes, and which a repair makes clean, is
            /// returned as `repaired` at once (e.g. `[INVALID_JSON]`: a fence around JSON is not
            /// worth a model call, a missing field still is).
            pub repair_first_codes: Option<Vec<String>>,
            /// Re-asks allowed per issue code, below `max_retries`: an answer with such an error is
            /// not re-asked once that many re-asks were made (e.g. `{INVALID_JSON: 1}`: one
            /// regeneration of an answer that is no JSON, then the fallback). A profile's are laid
            /// over the defaults' code by code.
            pub max_retries_for: Option<BTreeMap<String, u32>>,
            /// Text returned when a response stays unresolved; `{{key}}` is filled from the
            /// context. It must pass the profile's validators itself, else it is not used.
            pub fallback: Option<String>,
            /// File holding the fallback text, relative to the configuration file.
            pub fallback_file: Option<PathBuf>,
        }

        impl $name {
            /// Sets in `policy` what these keys set; `max_retries_for` is laid over per code.
            /// The feedback and the fallback are the caller's to layer (they merge, and read a
            /// file).
            pub(crate) fn lay_policy_over(&self, policy: &mut enforce_core::Policy) {
                if let Some(n) = self.max_retries {
                    policy.max_retries = n;
                }
                if let Some(b) = self.budget {
                    policy.budget = b;
                }
                if let Some(m) = self.on_unavailable {
                    policy.on_unavailable = m;
                }
                if let Some(yes) = self.early_abort {
                    policy.early_abort = yes;
                }
                if let Some(bytes) = self.partial_check_bytes {
                    policy.partial_check_bytes = bytes;
                }
                match &self.reask {
                    Some(ReaskConfig::Ladder(ladder)) => {
                        policy.reask = ladder.clone();
                        policy.reask_auto = None;
                    }
                    // The fallback ladder and the strategies come from `reask_auto`, layered.
                    Some(ReaskConfig::Auto) => policy.reask_auto = Some(Default::default()),
                    None => {}
                }
                if let Some(first) = self.first_attempt {
                    policy.first_attempt = first;
                }
                if let Some(yes) = self.stop_on_no_progress {
                    policy.stop_on_no_progress = yes;
                }
                if let Some(when) = self.repair {
                    policy.repair = when;
                }
                if let Some(codes) = &self.repair_first_codes {
                    policy.repair_first_codes = codes.clone();
                }
                if let Some(budgets) = &self.max_retries_for {
                    policy.max_retries_for.extend(budgets.clone());
                }
            }
        }
    };
}

with_policy_keys! {
    /// Policy defaults shared by all profiles, and the default profile's name.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[serde(default, deny_unknown_fields)]
    pub struct Defaults {
        /// Profile used when none is named (default `chat`).
        pub profile: Option<String>,
    }
}

/// A profile's fallback templates per kind of request.
///
/// ```yaml
/// fallback_by:
///   fact: block_type
///   templates:
///     introduction: 'Die {{company_name}} dokumentiert ...'
///     transition: 'Auf Grundlage der vorstehenden Daten ...'
/// fallback: '...'   # any other block_type, or none given
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FallbackByConfig {
    /// The request fact (context key) whose value picks the template.
    pub fact: String,
    /// The template for each value of the fact; filled and validated like `fallback`.
    pub templates: BTreeMap<String, String>,
}

with_policy_keys! {
    /// One profile: an ordered list of validators plus policy. Its policy keys override
    /// `defaults`' (`feedback` and `max_retries_for` are laid over them).
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[serde(default, deny_unknown_fields)]
    pub struct ProfileConfig {
        /// What the profile is for (shown by tools).
        pub description: Option<String>,
        /// Validator names, in the order they run: a key of the `validators` section, or a
        /// registered type used with its default options.
        pub validators: Vec<String>,
        /// The model the re-ask strategy `escalate` asks: the name of a `models:` entry in
        /// `enforce serve`; in `enforce run` and `enforce eval`, `--escalate-model` gives it.
        /// Without one, `escalate` asks the profile's own model and the outcome warns
        /// `ESCALATION_NO_TARGET`.
        pub escalate_to: Option<String>,
        /// Fallback templates per kind of request: the request fact `fact` (e.g. `block_type`)
        /// picks a template from `templates`; `fallback` is the default for any other value.
        pub fallback_by: Option<FallbackByConfig>,
        /// What the answers are: `json` fills the fallback's placeholders JSON-escaped, `text` as
        /// they are. Default: `json` when the profile has a `json` validator on the whole
        /// response (no `input`), else `text`.
        pub answer_format: Option<AnswerFormat>,
        /// Validators run on the request before the first model call, like `validators`. They
        /// validate the question (the last user message) and read the system prompt and the
        /// retrieved context from the context (`enforce.system`, `enforce.retrieved_context`,
        /// `enforce.history`).
        pub input_validators: Vec<String>,
        /// What an error of an input validator leads to: `reject` (default: no model call, the
        /// outcome is `aborted` with stop reason `input_rejected`), `hint` (append `input_hint` to
        /// the question, then generate) or `reformulate` (call the `reformulate` hook once, then
        /// generate with its question and/or context, or with the original if it fails).
        pub on_input_failure: Option<InputFailureAction>,
        /// The note `on_input_failure: hint` appends to the question.
        pub input_hint: Option<String>,
        /// Where requests carry their retrieved context: `{fact: KEY}` (a fact of the request),
        /// `{pointer: /metadata/context}` (a JSON pointer into the request body) or
        /// `{section: {start: "<context>", end: "</context>"}}` (delimited, in the system prompt or
        /// the last user message).
        pub retrieved_context: Option<RetrievedContextConfig>,
        /// The hook `on_input_failure: reformulate` calls.
        pub reformulate: Option<ReformulateConfig>,
        /// How answers are decoded: `free` (default) or `constrained`, which asks the runner to
        /// constrain decoding to the contract: the `json` validator's schema (a llama.cpp
        /// grammar, OpenAI's strict `json_schema`, Anthropic's `output_config.format`) or a
        /// `one_of` list (a grammar). A runner that cannot constrain says so once and answers
        /// freely; the validators check every answer either way.
        pub decode: Option<Decode>,
    }
}

/// How a profile's answers are decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decode {
    /// The model writes freely; the validators and re-asks make the answer fit (default).
    #[default]
    Free,
    /// The runner is asked to constrain decoding to the contract (a grammar, a strict JSON
    /// Schema); a runner that cannot says so and answers freely.
    Constrained,
}

/// What an error of an input validator leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputFailureAction {
    /// No model call: the request is answered with an error.
    Reject,
    /// Append `input_hint` to the question, then generate.
    Hint,
    /// Call the `reformulate` hook once, then generate unconditionally.
    Reformulate,
}

/// Where requests carry their retrieved context: exactly one of the three keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetrievedContextConfig {
    /// A fact of the request (body `enforce` object or `X-Enforce-Context` header): a string
    /// or a list of strings.
    pub fact: Option<String>,
    /// A JSON pointer into the request body, e.g. `/metadata/context`.
    pub pointer: Option<String>,
    /// The text between two delimiters.
    pub section: Option<SectionConfig>,
}

/// Delimiters of the retrieved context in the prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SectionConfig {
    /// Opening delimiter, e.g. `<context>`.
    pub start: String,
    /// Closing delimiter, e.g. `</context>`.
    pub end: String,
}

/// The reformulation hook: exactly one of `runner` (a model asked with `prompt`), `command`
/// or `url`.
///
/// A command gets the request as JSON on stdin, an endpoint as a POST body:
/// `{question, system, context, history, issues: [{code, message}], facts}`; either answers
/// `{"question": "…", "context": "…" | ["…"]}` (each optional, at least one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ReformulateConfig {
    /// A runner (`type: openai | claude | command`, as under `runner:`) asked with `prompt`;
    /// its answer is the new question.
    pub runner: Option<serde_json::Value>,
    /// The runner's prompt: `{{question}}`, `{{context}}`, `{{issues}}` and facts are filled
    /// in. Default: asks for the question rewritten with broader terms.
    pub prompt: Option<String>,
    /// A command (program and arguments).
    pub command: Option<Vec<String>>,
    /// An `http://` or `https://` endpoint, e.g. the caller's retrieval service.
    pub url: Option<String>,
    /// Time limit of a command or endpoint, in milliseconds (default 10000).
    pub timeout_ms: Option<u64>,
}

/// Feedback settings: a built-in language, and template pieces overriding it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FeedbackConfig {
    /// `en` (default) or `de`.
    pub language: Option<Language>,
    /// Template pieces replacing the language's (placeholders as in
    /// [`FeedbackTemplate`]).
    pub template: Option<FeedbackTemplatePatch>,
    /// The words of some issue codes in the feedback, replacing the validator's message and
    /// hint (e.g. in German): `{CODE: {message, hint}}`. `{message}` and `{hint}` keep the
    /// validator's own text; `{answer}` in `message` quotes the failed answer's first 500
    /// characters.
    pub messages: Option<BTreeMap<String, IssueText>>,
}

/// Some fields of a [`FeedbackTemplate`]; the rest come from the language.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FeedbackTemplatePatch {
    /// Opening paragraph (`{count}`).
    pub intro: Option<String>,
    /// One line per error (`{code}`, `{message}`, `{validator}`).
    pub item: Option<String>,
    /// Appended when the issue has a line (`{line}`, `{column}`).
    pub location: Option<String>,
    /// Appended when the issue has a hint (`{hint}`).
    pub hint: Option<String>,
    /// Closing paragraph.
    pub outro: Option<String>,
    /// Opening paragraph after an answer was cut short (`{count}`).
    pub cut_intro: Option<String>,
    /// Appended to an item after a cut: the text around the error (`{excerpt}`).
    pub excerpt: Option<String>,
}

impl FeedbackConfig {
    /// `self` laid over `base` (fields set here win).
    pub fn over(&self, base: &FeedbackConfig) -> FeedbackConfig {
        let patch = match (&self.template, &base.template) {
            (Some(a), Some(b)) => Some(FeedbackTemplatePatch {
                intro: a.intro.clone().or_else(|| b.intro.clone()),
                item: a.item.clone().or_else(|| b.item.clone()),
                location: a.location.clone().or_else(|| b.location.clone()),
                hint: a.hint.clone().or_else(|| b.hint.clone()),
                outro: a.outro.clone().or_else(|| b.outro.clone()),
                cut_intro: a.cut_intro.clone().or_else(|| b.cut_intro.clone()),
                excerpt: a.excerpt.clone().or_else(|| b.excerpt.clone()),
            }),
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        let messages = match (&self.messages, &base.messages) {
            (Some(own), Some(base)) => {
                // Per code and per field: a profile may reword only a message.
                let mut merged = base.clone();
                for (code, text) in own {
                    let entry = merged.entry(code.clone()).or_default();
                    entry.message = text.message.clone().or_else(|| entry.message.take());
                    entry.hint = text.hint.clone().or_else(|| entry.hint.take());
                }
                Some(merged)
            }
            (own, base) => own.clone().or_else(|| base.clone()),
        };
        FeedbackConfig {
            language: self.language.or(base.language),
            template: patch,
            messages,
        }
    }

    /// The complete template: the language's, with the patch applied.
    pub fn template(&self) -> FeedbackTemplate {
        let mut t = FeedbackTemplate::for_language(self.language.unwrap_or_default());
        if let Some(p) = &self.template {
            let set = |field: &mut String, value: &Option<String>| {
                if let Some(v) = value {
                    field.clone_from(v);
                }
            };
            set(&mut t.intro, &p.intro);
            set(&mut t.item, &p.item);
            set(&mut t.location, &p.location);
            set(&mut t.hint, &p.hint);
            set(&mut t.outro, &p.outro);
            set(&mut t.cut_intro, &p.cut_intro);
            set(&mut t.excerpt, &p.excerpt);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "# comment\nplugin_dirs: [a]\nvalidators:\n  no_scores:\n    type: pattern\n    forbidden:\n      - regex: 'x'\n      - regex: '('\n        code: X\nprofiles:\n  adr:\n    validators:\n      - step_marker\n      - nope\n";

    #[test]
    fn locate_key_follows_indentation_and_lists() {
        assert_eq!(locate_key(YAML, "validators"), Some((3, 1)));
        assert_eq!(locate_key(YAML, "validators.no_scores.type"), Some((5, 5)));
        assert_eq!(
            locate_key(YAML, "validators.no_scores.forbidden[1].regex"),
            Some((8, 9))
        );
        assert_eq!(
            locate_key(YAML, "validators.no_scores.forbidden[1].code"),
            Some((9, 9))
        );
        assert_eq!(
            locate_key(YAML, "profiles.adr.validators[1]"),
            Some((14, 7))
        );
        // Unknown deeper segments fall back to the deepest known one.
        assert_eq!(locate_key(YAML, "profiles.adr.nothing"), Some((11, 3)));
        assert_eq!(locate_key(YAML, "plugin_dirs[0]"), Some((2, 1)));
    }

    #[test]
    fn unknown_keys_are_errors_with_line_and_key() {
        let src =
            ConfigSource::from_string("c.yaml", "defaults:\n  max_retries: 2\n  colour: red\n");
        let err = src.parse::<Config>().unwrap_err();
        assert_eq!(err.line, Some(3));
        assert_eq!(err.key.as_deref(), Some("defaults.colour"));
        assert!(err.message.contains("unknown field `colour`"), "{err}");
        assert!(err.to_string().starts_with("c.yaml:3:"), "{err}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let src = ConfigSource::from_string("c.yaml", "profiles:\n  x:\n    max_retries: lots\n");
        let err = src.parse::<Config>().unwrap_err();
        assert_eq!(err.key.as_deref(), Some("profiles.x.max_retries"));
        assert_eq!(err.line, Some(3));
    }

    #[test]
    fn empty_and_comment_only_files_are_default() {
        for text in ["", "\n# nothing\n", "---\n"] {
            let c = ConfigSource::from_string("c.yaml", text)
                .parse::<Config>()
                .unwrap();
            assert_eq!(c, Config::default());
        }
    }

    #[test]
    fn alias_bombs_and_deep_nesting_fail_fast() {
        let mut bomb = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        for i in 0..9 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("l{}", i - 1)
            };
            let refs = vec![format!("*{prev}"); 9].join(",");
            bomb.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        let started = std::time::Instant::now();
        let err = ConfigSource::from_string(
            "bomb.yaml",
            format!("validators:\n  x:\n    {}", bomb.replace('\n', "\n    ")),
        )
        .parse::<Config>()
        .unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(
            err.message.contains("repetition limit") || err.message.contains("recursion"),
            "{err}"
        );

        let deep = format!("validators:\n  x: {}", "[".repeat(50_000));
        let started = std::time::Instant::now();
        let err = ConfigSource::from_string("deep.yaml", deep)
            .parse::<Config>()
            .unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(err.message.contains("nesting deeper"), "{err}");
        assert_eq!(err.line, Some(2));
    }

    fn with_env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn environment_references_expand_before_parsing() {
        let yaml = "# ${NOT_NEEDED} in a comment\ndefaults:\n  max_retries: ${RETRIES:-2}\n  partial_check_bytes: ${BYTES}\n  fallback: \"${FALLBACK}\"\n";
        let env = with_env(&[("BYTES", "64"), ("FALLBACK", "Sorry: \"down\"")]);
        let c = ConfigSource::from_string_with_env("c.yaml", yaml, &env)
            .parse::<Config>()
            .unwrap();
        assert_eq!(c.defaults.max_retries, Some(2), "numbers stay numbers");
        assert_eq!(c.defaults.partial_check_bytes, Some(64));
        assert_eq!(c.defaults.fallback.as_deref(), Some("Sorry: \"down\""));
    }

    #[test]
    fn an_unset_variable_is_an_error_at_its_reference() {
        let yaml = "defaults:\n  max_retries: 2\n  partial_check_bytes: ${BYTES}\n";
        let src = ConfigSource::from_string_with_env("c.yaml", yaml, &with_env(&[]));
        let err = src.parse::<Config>().unwrap_err();
        assert_eq!((err.line, err.column), (Some(3), Some(24)));
        assert!(err.message.contains("`BYTES` is not set"), "{err}");
        assert!(err.to_string().starts_with("c.yaml:3:24: "), "{err}");
    }

    #[test]
    fn errors_after_an_expansion_keep_the_file_s_lines_and_columns() {
        // The value is long, so the later error's column differs between texts.
        let yaml = "defaults:\n  fallback: ${LONG_VALUE_NAME}\n  max_retries: [${N}, x]\n";
        let env = with_env(&[("LONG_VALUE_NAME", "x"), ("N", "1")]);
        let err = ConfigSource::from_string_with_env("c.yaml", yaml, &env)
            .parse::<Config>()
            .unwrap_err();
        assert_eq!(err.line, Some(3));
        assert_eq!(err.key.as_deref(), Some("defaults.max_retries"));
        // A value expanded to a wrong type is reported at the reference as written.
        let yaml = "defaults:\n  max_retries: ${RETRIES}\n";
        let env = with_env(&[("RETRIES", "many")]);
        let err = ConfigSource::from_string_with_env("c.yaml", yaml, &env)
            .parse::<Config>()
            .unwrap_err();
        assert_eq!(err.line, Some(2));
        assert_eq!(err.key.as_deref(), Some("defaults.max_retries"));
        assert!(err.message.contains("many"), "{err}");
    }

    #[test]
    fn feedback_patches_layer_over_defaults_and_language() {
        let base = FeedbackConfig {
            language: Some(Language::De),
            template: Some(FeedbackTemplatePatch {
                outro: Some("Danke.".into()),
                ..Default::default()
            }),
            messages: None,
        };
        let profile = FeedbackConfig {
            language: None,
            template: Some(FeedbackTemplatePatch {
                item: Some("* {code}".into()),
                ..Default::default()
            }),
            messages: None,
        };
        let t = profile.over(&base).template();
        assert_eq!(t.item, "* {code}");
        assert_eq!(t.outro, "Danke.");
        assert!(t.intro.starts_with("Deine"), "{}", t.intro);
    }

    #[test]
    fn missing_and_non_utf8_files_are_clear_errors() {
        let err =
            ConfigSource::read(std::path::Path::new("/nonexistent/enforce.yaml")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/nonexistent/enforce.yaml: cannot read"),
            "{err}"
        );
        let dir = std::env::temp_dir().join(format!("enforce-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.yaml");
        std::fs::write(&p, b"a: \xff\n").unwrap();
        let err = ConfigSource::read(&p).unwrap_err();
        assert!(err.message.contains("not UTF-8"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
