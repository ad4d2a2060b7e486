//! The answers themselves: every attempt's text as the model wrote it (before any repair), one
//! JSON line each in `answers.jsonl`. The audit records keep only a digest of each attempt;
//! these lines keep the text, in the format of `tests/fixtures/real-answers/`, so an answer that
//! surprised a validator becomes a regression test by copying its line there.

use enforce_core::{
    runner::FinishReason, Ask, ReplyStream, Request, Role, Runner, RunnerError, StreamEvent,
};
use futures_core::Stream;
use serde_json::{json, Value};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

/// One attempt's answer as the runner returned it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The text: whole, or the part received before early abort cut it.
    pub text: String,
    /// Why the model stopped, when the runner said.
    pub finish_reason: Option<FinishReason>,
    /// Cut short by early abort.
    pub cut: bool,
}

/// A runner that keeps every answer the runner it wraps returns, streamed or not, in the
/// order the loop asked for them (one per attempt).
pub struct Recorder {
    inner: Arc<dyn Runner>,
    answers: Mutex<Vec<Recorded>>,
}

impl Recorder {
    /// Records what `inner` answers.
    pub fn new(inner: Arc<dyn Runner>) -> Self {
        Recorder {
            inner,
            answers: Mutex::new(Vec::new()),
        }
    }

    /// The answers so far, oldest first.
    pub fn answers(&self) -> Vec<Recorded> {
        self.answers.lock().map(|a| a.clone()).unwrap_or_default()
    }

    fn keep(&self, answer: Recorded) {
        if let Ok(mut answers) = self.answers.lock() {
            answers.push(answer);
        }
    }
}

impl Runner for Recorder {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::new(Tap {
            recorder: self,
            inner: self.inner.ask(ask),
            streamed: ask.stream,
            received: String::new(),
            ended: false,
        })
    }
}

/// A reply stream passed through unchanged, whose text is kept: whole when the reply ends,
/// as received when the loop drops a streamed answer first (a cut).
struct Tap<'a> {
    recorder: &'a Recorder,
    inner: ReplyStream<'a>,
    /// Asked for as a stream: only such an answer can be cut.
    streamed: bool,
    received: String,
    ended: bool,
}

impl Stream for Tap<'_> {
    type Item = Result<StreamEvent, RunnerError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(StreamEvent::Text(text)))) => self.received.push_str(text),
            Poll::Ready(Some(Ok(StreamEvent::Done(reply)))) => {
                self.ended = true;
                self.recorder.keep(Recorded {
                    text: reply.text.clone(),
                    finish_reason: reply.finish_reason.clone(),
                    cut: false,
                });
            }
            // A failed call has no answer to keep.
            Poll::Ready(Some(Err(_)) | None) => self.ended = true,
            _ => {}
        }
        polled
    }
}

impl Drop for Tap<'_> {
    fn drop(&mut self) {
        if self.streamed && !self.ended {
            self.recorder.keep(Recorded {
                text: std::mem::take(&mut self.received),
                finish_reason: None,
                cut: true,
            });
        }
    }
}

/// Where a trial's answers came from, for their lines.
pub struct Provenance<'a> {
    /// The trial's id (`arm/case/repeat`).
    pub trial: &'a str,
    /// The profile the answers were checked against.
    pub profile: &'a str,
    /// The configuration file the profile is in, as given.
    pub config: Option<&'a str>,
    /// The runner, model and sampling, in words.
    pub source: &'a str,
}

/// The lines of `answers` (one per attempt, numbered from 1) for `answers.jsonl`.
pub fn lines(answers: &[Recorded], request: &Request, from: &Provenance<'_>) -> String {
    let prompt = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map_or("", |m| m.content.as_str());
    let mut out = String::new();
    for (i, answer) in answers.iter().enumerate() {
        let finish_reason = match (&answer.finish_reason, answer.cut) {
            (_, true) => "cut",
            (Some(reason), false) => reason.as_str(),
            (None, false) => "unknown",
        };
        let mut line = json!({
            "id": format!("{}/{}", from.trial, i + 1),
            "contract": from.profile,
            "prompt": prompt,
            "answer": answer.text,
            "finish_reason": finish_reason,
            "source": from.source,
        });
        if let Some(config) = from.config {
            line["config"] = Value::from(config);
        }
        if answer.cut {
            line["cut"] = Value::Bool(true);
        }
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_core::{Message, Reply, ScriptedRunner};

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    fn request() -> Request {
        Request {
            messages: vec![
                Message::system("be brief"),
                Message::user("Give Paris as JSON."),
            ],
            ..Request::default()
        }
    }

    #[test]
    fn a_stream_read_to_its_end_is_kept_whole_and_a_dropped_one_as_received_and_cut() {
        let scripted: Arc<dyn Runner> = Arc::new(
            ScriptedRunner::texts(["```json\n{}\n```", "{\"name\": \"Paris\"}"]).streamed(4),
        );
        let recorder = Recorder::new(scripted);
        let request = request();
        block_on(async {
            let mut whole = recorder.ask(Ask::new(&request).streamed());
            while whole.next_event().await.is_some() {}
            drop(whole);
            let previous = Reply::default();
            let mut cut = recorder.ask(Ask::follow_up(&request, &previous, "fix it").streamed());
            // Two chunks, then the loop would cut.
            let mut received = String::new();
            for _ in 0..2 {
                if let Some(Ok(StreamEvent::Text(text))) = cut.next_event().await {
                    received.push_str(&text);
                }
            }
            drop(cut);
            let answers = recorder.answers();
            assert_eq!(answers.len(), 2);
            assert_eq!(answers[0].text, "```json\n{}\n```");
            assert!(!answers[0].cut);
            assert!(answers[1].cut);
            assert_eq!(answers[1].text, received);
            assert!(!received.is_empty() && received.len() < "{\"name\": \"Paris\"}".len());
        });
    }

    #[test]
    fn the_lines_are_fixture_lines_naming_the_attempt_prompt_and_provenance() {
        let answers = [
            Recorded {
                text: "{\"name\": \"Par".into(),
                finish_reason: Some(FinishReason::Length),
                cut: false,
            },
            Recorded {
                text: "```json".into(),
                finish_reason: None,
                cut: true,
            },
        ];
        let from = Provenance {
            trial: "feedback/city-paris/0",
            profile: "city_json",
            config: Some("examples/eval/enforce.yaml"),
            source: "local runner, model m.gguf, seed 42 (enforce eval)",
        };
        let text = lines(&answers, &request(), &from);
        let parsed: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0]["id"], "feedback/city-paris/0/1");
        assert_eq!(parsed[0]["contract"], "city_json");
        assert_eq!(parsed[0]["config"], "examples/eval/enforce.yaml");
        assert_eq!(parsed[0]["prompt"], "Give Paris as JSON.");
        assert_eq!(parsed[0]["answer"], "{\"name\": \"Par");
        assert_eq!(parsed[0]["finish_reason"], "length");
        assert!(parsed[0].get("cut").is_none());
        assert_eq!(parsed[1]["id"], "feedback/city-paris/0/2");
        assert_eq!(parsed[1]["finish_reason"], "cut");
        assert_eq!(parsed[1]["cut"], true);
        assert_eq!(parsed[1]["source"], from.source);
    }
}
