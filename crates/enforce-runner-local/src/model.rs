//! The llama.cpp backend (initialised once per process) and a loaded GGUF model with its chat
//! template. Every check that can be made before llama.cpp sees a file is made here, so a
//! missing, foreign or oversized file is a clear [`RunnerError::Unavailable`], not whatever
//! llama.cpp happens to do with it.

use enforce_core::{Message, Role, RunnerError};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The first bytes of every GGUF file.
const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// llama.cpp's backend. `llama_backend_init` may run once per process, and `LlamaBackend`
/// refuses a second init, so every runner shares this one.
fn backend() -> Result<&'static LlamaBackend, RunnerError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs every tensor it loads to stderr; tracing keeps them out of the
            // CLI's output and still shows them with RUST_LOG=llama-cpp-2=debug.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| unavailable(format!("cannot initialise llama.cpp: {e}")))
}

pub(crate) fn unavailable(message: impl Into<String>) -> RunnerError {
    RunnerError::Unavailable {
        message: message.into(),
    }
}

/// A GGUF model in memory, with the chat template its prompts are written in.
pub(crate) struct LoadedModel {
    pub(crate) model: LlamaModel,
    template: LlamaChatTemplate,
    pub(crate) path: PathBuf,
    /// How long loading took (reported once, in the runner's tracing).
    pub(crate) load_time: Duration,
    /// llama.cpp's context constructor writes to the model (see `LlamaModel::new_context`), so
    /// two requests must not create their contexts at the same time. Generation itself runs
    /// in parallel, one context per request.
    new_context: Mutex<()>,
    /// llguidance's parser factory over this model's vocabulary: built on the first
    /// llguidance constraint (it walks the whole vocabulary), then shared by every request.
    llguidance: OnceLock<Result<ParserFactory, String>>,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl LoadedModel {
    /// Loads `path` after checking that it exists, is a GGUF file and fits in the memory
    /// available.
    pub(crate) fn load(path: &Path) -> Result<LoadedModel, RunnerError> {
        let started = Instant::now();
        let size = check_file(path)?;
        if let Some(available) = available_memory() {
            check_fits(path, size, available)?;
        }
        let backend = backend()?;
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|e| {
                unavailable(format!(
                    "llama.cpp cannot load {} ({e}): the file is corrupt, truncated or of a \
                     model architecture this build does not know",
                    path.display()
                ))
            })?;
        // A GGUF without a template is rare; ChatML is what most instruct models use.
        let template = match model.chat_template(None) {
            Ok(template) => template,
            Err(_) => LlamaChatTemplate::new("chatml")
                .map_err(|e| unavailable(format!("chat template: {e}")))?,
        };
        Ok(LoadedModel {
            model,
            template,
            path: path.to_path_buf(),
            load_time: started.elapsed(),
            new_context: Mutex::new(()),
            llguidance: OnceLock::new(),
        })
    }

    /// The longest context the model was trained for.
    pub(crate) fn trained_context(&self) -> u32 {
        self.model.n_ctx_train()
    }

    /// The prompt text of `messages` in the model's own chat template, ending where the
    /// assistant's answer begins.
    pub(crate) fn prompt(&self, messages: &[Message]) -> Result<String, RunnerError> {
        let chat = messages
            .iter()
            .map(|m| {
                LlamaChatMessage::new(role(m.role).to_string(), message_text(m)).map_err(|_| {
                    unavailable("a message holds a NUL byte, which llama.cpp cannot take")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| {
                unavailable(format!(
                    "cannot apply the chat template of {}: {e}",
                    self.path.display()
                ))
            })
    }

    /// A sampler that keeps the answer inside `grammar`, or why llguidance rejects it.
    pub(crate) fn llguidance_sampler(
        &self,
        grammar: TopLevelGrammar,
    ) -> Result<LlamaSampler, String> {
        let factory = self
            .llguidance
            .get_or_init(|| {
                let env = LlamaSampler::llguidance_tok_env(&self.model);
                ParserFactory::new_simple(&env)
                    .map(|mut factory| {
                        factory.quiet();
                        factory
                    })
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)?;
        let matcher = Matcher::new(factory.create_parser(grammar));
        match matcher.get_error() {
            Some(e) => Err(crate::constraint::first_line(&e)),
            None => Ok(LlamaSampler::from(matcher)),
        }
    }

    /// A fresh context (its own KV cache) for one generation.
    pub(crate) fn context(
        &self,
        params: LlamaContextParams,
    ) -> Result<LlamaContext<'_>, RunnerError> {
        let backend = backend()?;
        // A poisoned lock only means another context creation panicked; the model is intact.
        let _guard = self
            .new_context
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.model.new_context(backend, params).map_err(|e| {
            unavailable(format!(
                "llama.cpp cannot create a context for {} ({e}): not enough memory for the \
                 context size?",
                self.path.display()
            ))
        })
    }
}

/// The role name chat templates know.
fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// A message's text; an assistant turn's tool calls are written out, since a local model
/// declares no tools.
fn message_text(message: &Message) -> String {
    let mut text = message.content.clone();
    for call in &message.tool_calls {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "[called tool {} with arguments {}]",
            call.name, call.arguments
        ));
    }
    text
}

/// The file's size, once it is known to be a readable file that starts like a GGUF file.
pub(crate) fn check_file(path: &Path) -> Result<u64, RunnerError> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            unavailable(format!(
                "model file {shown} not found (the local runner's `model` must name a .gguf \
                 file; `cargo xtask models` installs a small test model)"
            ))
        } else {
            unavailable(format!("cannot read model file {shown}: {e}"))
        }
    })?;
    if !meta.is_file() {
        return Err(unavailable(format!(
            "model {shown} is not a file (name the .gguf file itself)"
        )));
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(|e| unavailable(format!("cannot read model file {shown}: {e}")))?;
    if &magic != GGUF_MAGIC {
        return Err(unavailable(format!(
            "{shown} is not a GGUF model file (it does not start with \"GGUF\"; {} bytes)",
            meta.len()
        )));
    }
    Ok(meta.len())
}

/// A model is mapped into memory whole; one larger than the memory available would thrash
/// or be killed, so it is refused before loading.
pub(crate) fn check_fits(path: &Path, size: u64, available: u64) -> Result<(), RunnerError> {
    if size > available {
        return Err(unavailable(format!(
            "model {} is {} MiB, more than the {} MiB of memory available",
            path.display(),
            size >> 20,
            available >> 20
        )));
    }
    Ok(())
}

/// `MemAvailable` of /proc/meminfo, in bytes (`None` where there is no such file).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(err: RunnerError) -> String {
        match err {
            RunnerError::Unavailable { message } => message,
            other => panic!("not unavailable: {other:?}"),
        }
    }

    #[test]
    fn a_missing_file_is_unavailable_and_named() {
        let m = message(check_file(Path::new("/nonexistent/m.gguf")).unwrap_err());
        assert!(
            m.contains("/nonexistent/m.gguf") && m.contains("not found"),
            "{m}"
        );
    }

    #[test]
    fn a_file_that_is_not_gguf_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.gguf");
        std::fs::write(&path, b"this is not a model").unwrap();
        let m = message(check_file(&path).unwrap_err());
        assert!(m.contains("not a GGUF model file"), "{m}");
        std::fs::write(&path, b"GG").unwrap();
        assert!(message(check_file(&path).unwrap_err()).contains("cannot read"));
        let m = message(check_file(dir.path()).unwrap_err());
        assert!(m.contains("not a file"), "{m}");
        std::fs::write(&path, b"GGUF\x03\0\0\0").unwrap();
        assert_eq!(check_file(&path).unwrap(), 8);
    }

    #[test]
    fn a_model_larger_than_memory_is_refused() {
        let path = Path::new("big.gguf");
        let m = message(check_fits(path, 8 << 30, 2 << 30).unwrap_err());
        assert!(m.contains("8192 MiB") && m.contains("2048 MiB"), "{m}");
        assert!(check_fits(path, 1 << 20, 2 << 30).is_ok());
    }

    #[test]
    fn tool_calls_are_written_out() {
        let m = Message::assistant_calling(
            "",
            vec![enforce_core::runner::ToolCall::new(
                "c1",
                "lookup",
                r#"{"q":1}"#,
            )],
        );
        assert_eq!(
            message_text(&m),
            r#"[called tool lookup with arguments {"q":1}]"#
        );
    }
}
