//! A Python callable as the loop's [`Runner`]: `model(messages)` returns the answer as a
//! string, or an iterator of string chunks that the loop consumes as a stream and stops
//! consuming (calling its `close()`) when an early abort cuts the answer.
//!
//! The loop runs with the GIL released; each call of the callable and each chunk taken from
//! its iterator holds it only for that call.

use enforce_core::runner::ToolFeedback;
use enforce_core::{Ask, Message, Reply, ReplyStream, Runner, RunnerError, StreamEvent};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyList, PyString};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

/// The model of one `Profile.run`.
pub struct PyModel {
    call: Py<PyAny>,
    /// A `KeyboardInterrupt` or `SystemExit` raised by the callable: the run ends as an
    /// attempt that failed, and `run` raises it again instead of returning the outcome.
    interrupt: Arc<Mutex<Option<PyErr>>>,
}

impl PyModel {
    /// A runner asking `call`.
    pub fn new(call: Py<PyAny>) -> Self {
        PyModel {
            call,
            interrupt: Arc::default(),
        }
    }

    /// The interrupt the callable raised, if any.
    pub fn take_interrupt(&self) -> Option<PyErr> {
        self.interrupt.lock().ok().and_then(|mut i| i.take())
    }

    fn stream<'a>(&self, messages: Vec<Message>) -> ReplyStream<'a> {
        let call = Python::attach(|py| self.call.clone_ref(py));
        ReplyStream::new(Answer {
            start: Some((call, messages)),
            chunks: None,
            text: String::new(),
            done: false,
            interrupt: Arc::clone(&self.interrupt),
        })
    }
}

impl Runner for PyModel {
    /// The callable's answer as a stream, whether or not the ask reads the chunks: a whole
    /// ask reads the same stream to its end.
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        self.stream(ask.messages(ToolFeedback::ToolMessages).into_owned())
    }
}

/// The iterator an answer is read from; dropping it before its end closes it (a generator
/// then runs its `finally`, an HTTP stream closes its connection).
struct Chunks(Py<PyIterator>);

impl Drop for Chunks {
    fn drop(&mut self) {
        Python::attach(|py| {
            if let Ok(Some(close)) = self.0.bind(py).getattr_opt("close") {
                if let Err(e) = close.call0() {
                    e.write_unraisable(py, Some(self.0.bind(py).as_any()));
                }
            }
        });
    }
}

/// One answer: the call (not made until first polled), then its chunks.
struct Answer {
    start: Option<(Py<PyAny>, Vec<Message>)>,
    chunks: Option<Chunks>,
    text: String,
    done: bool,
    interrupt: Arc<Mutex<Option<PyErr>>>,
}

impl Answer {
    fn step(&mut self, py: Python<'_>) -> Result<StreamEvent, RunnerError> {
        if let Some((call, messages)) = self.start.take() {
            let messages = messages_to_py(py, &messages).map_err(|e| self.failed(py, e))?;
            let result = call
                .bind(py)
                .call1((messages,))
                .map_err(|e| self.failed(py, e))?;
            if let Ok(text) = result.cast::<PyString>() {
                self.done = true;
                let text = text.to_cow().map_err(|e| self.failed(py, e))?;
                return Ok(StreamEvent::Done(Reply::text(text)));
            }
            let iter = result.try_iter().map_err(|_| {
                self.done = true;
                RunnerError::Protocol {
                    message: format!(
                        "the model returned {}, not a string or an iterator of strings",
                        type_name(&result)
                    ),
                }
            })?;
            self.chunks = Some(Chunks(iter.unbind()));
        }
        let Some(chunks) = &self.chunks else {
            self.done = true;
            return Err(RunnerError::Protocol {
                message: "the model's answer ended without a reply".into(),
            });
        };
        let mut iter = chunks.0.bind(py).clone();
        match iter.next() {
            None => {
                self.done = true;
                Ok(StreamEvent::Done(Reply::text(std::mem::take(
                    &mut self.text,
                ))))
            }
            Some(Err(e)) => Err(self.failed(py, e)),
            Some(Ok(chunk)) => match chunk.cast::<PyString>() {
                Ok(chunk) => {
                    let chunk = chunk.to_cow().map_err(|e| self.failed(py, e))?;
                    self.text.push_str(&chunk);
                    Ok(StreamEvent::Text(chunk.into_owned()))
                }
                Err(_) => {
                    self.done = true;
                    Err(RunnerError::Protocol {
                        message: format!(
                            "the model's iterator yielded {}, not a string",
                            type_name(&chunk)
                        ),
                    })
                }
            },
        }
    }

    /// The callable's exception as the runner's failure; an interrupt is kept to be raised.
    fn failed(&mut self, py: Python<'_>, error: PyErr) -> RunnerError {
        self.done = true;
        let message = error.to_string();
        if !error.is_instance_of::<PyException>(py) {
            if let Ok(mut slot) = self.interrupt.lock() {
                slot.get_or_insert(error);
            }
        }
        RunnerError::Upstream {
            status: None,
            message,
        }
    }
}

impl futures_util::Stream for Answer {
    type Item = Result<StreamEvent, RunnerError>;

    fn poll_next(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Python::attach(|py| this.step(py))))
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "an object".into())
}

/// The conversation as a list of `{"role", "content"}` dicts (`tool_call_id` on tool results,
/// `tool_calls` in OpenAI's shape on assistant turns that call tools).
fn messages_to_py<'py>(py: Python<'py>, messages: &[Message]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for message in messages {
        let dict = PyDict::new(py);
        let role = serde_json::to_value(message.role)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        dict.set_item("role", role)?;
        dict.set_item("content", &message.content)?;
        if let Some(id) = &message.tool_call_id {
            dict.set_item("tool_call_id", id)?;
        }
        if !message.tool_calls.is_empty() {
            let calls = PyList::empty(py);
            for call in &message.tool_calls {
                let function = PyDict::new(py);
                function.set_item("name", &call.name)?;
                function.set_item("arguments", &call.arguments)?;
                let item = PyDict::new(py);
                item.set_item("id", &call.id)?;
                item.set_item("type", "function")?;
                item.set_item("function", function)?;
                calls.append(item)?;
            }
            dict.set_item("tool_calls", calls)?;
        }
        list.append(dict)?;
    }
    Ok(list)
}
