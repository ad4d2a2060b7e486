//! A profile's input stage, built from its settings: the input validators, `on_input_failure`,
//! `retrieved_context` and the `reformulate:` hook.

use super::InputSpec;
use crate::config::ProfileConfig;
use crate::config::{InputFailureAction, ReformulateConfig, RetrievedContextConfig, SectionConfig};
use enforce_core::{
    input::ContextSource, input::OnInputFailure, input::Reformulator, input::RunnerReformulator,
    Validator,
};
use enforce_validators::BuildEnv;
use enforce_validators::BuildError;
use std::sync::Arc;
use std::time::Duration;

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

/// The input stage of profile `p` (keys under `prefix`), or `None` without input validators;
/// input settings without input validators are errors, as they would do nothing.
pub(super) fn build_input(
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

#[cfg(test)]
mod reformulate_prompt_tests {
    use super::DEFAULT_REFORMULATE_PROMPT;
    use enforce_core::{
        context::keys, input::Reformulator, input::RunnerReformulator, scripted::ScriptedCall,
        Context, ScriptedRunner,
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
