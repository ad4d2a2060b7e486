//! # enforce-documents
//!
//! Validators of [enforce](enforce_core) for Markdown documents with YAML front matter and
//! workflow markers, as an ADR-writing assistant produces them.
//!
//! | validator | module | codes |
//! |---|---|---|
//! | [`StepMarker`](step_marker::StepMarker) | [`step_marker`] | `MISSING_STEP_MARKER`, `INVALID_STEP` |
//! | [`StepTransition`](step_transition::StepTransition) | [`step_transition`] | `STEP_NOT_ALLOWED` |
//! | [`AdrStructure`](adr::AdrStructure) | [`adr`] | `MISSING_YAML_HEADER`, `INVALID_YAML`, `MISSING_ADR_FIELD`, `MISSING_ADR_SECTION`, `INSUFFICIENT_CRITERIA` |
//! | [`FileRefs`](file_refs::FileRefs) | [`file_refs`] | `FILE_NOT_FOUND`, `PATH_OUTSIDE_ROOT` |
//!
//! No async runtime and no configuration layer: front matter is parsed as YAML because it is
//! this crate's subject. The `file_refs` repair edits the front matter's text in place
//! (comments, order and line endings kept).
//!
//! ```
//! use enforce_core::{Context, Validator};
//! use enforce_documents::step_marker::StepMarker;
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let steps = StepMarker::default();
//! let issues = block_on(steps.validate("Which database do you use?", &Context::new())).unwrap();
//! assert_eq!(issues[0].code, "MISSING_STEP_MARKER");
//! let repaired = steps.repair("Which database do you use?", &Context::new(), &issues).unwrap();
//! assert!(repaired.ends_with("<!-- STEP: what -->"));
//! assert_eq!(enforce_documents::extract_step(&repaired).as_deref(), Some("what"));
//! ```
#![deny(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod adr;
pub mod file_refs;
pub mod step_marker;
pub mod step_transition;
mod yaml_edit;

#[cfg(test)]
mod testing;

pub use step_marker::{extract_step, find_last_marker};
