//! What cannot work fails with a typed, clear error, never a crash.

use crate::{model_path, own_runner, unavailable_message};
use enforce_core::Ask;
use enforce_core::{Request, Runner};
use enforce_runner_local::{LocalConfig, LocalRunner};
use std::io::Read;

#[tokio::test]
async fn a_missing_model_file_is_unavailable() {
    let runner = LocalRunner::new(LocalConfig::new("/nonexistent/dir/model.gguf")).unwrap();
    let message = unavailable_message(runner.ask(Ask::new(&Request::prompt("hi"))).reply().await);
    assert!(message.contains("/nonexistent/dir/model.gguf"), "{message}");
    assert!(message.contains("not found"), "{message}");
}

/// A file that is not a model, one that only starts like one, and a real model cut off after
/// its first megabyte: llama.cpp refuses each, and the runner says which file.
#[tokio::test]
async fn corrupt_model_files_are_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.gguf");
    std::fs::write(&text, "not a model at all").unwrap();
    let header_only = dir.path().join("header.gguf");
    let mut bytes = b"GGUF".to_vec();
    bytes.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    std::fs::write(&header_only, bytes).unwrap();
    let mut files = vec![(text, "not a GGUF"), (header_only, "cannot load")];
    if let Some(model) = model_path() {
        let truncated = dir.path().join("truncated.gguf");
        let mut head = Vec::new();
        std::fs::File::open(model)
            .unwrap()
            .take(1 << 20)
            .read_to_end(&mut head)
            .unwrap();
        std::fs::write(&truncated, head).unwrap();
        files.push((truncated, "cannot load"));
    }
    for (path, says) in files {
        let runner = LocalRunner::new(LocalConfig::new(&path)).unwrap();
        let message =
            unavailable_message(runner.ask(Ask::new(&Request::prompt("hi"))).reply().await);
        assert!(
            message.contains(&path.display().to_string()) && message.contains(says),
            "{message}"
        );
        // The failure is not remembered as a loaded model: the next request tries again.
        unavailable_message(runner.ask(Ask::new(&Request::prompt("hi"))).reply().await);
    }
}

/// A prompt longer than the context is refused before generating, naming both sizes.
#[tokio::test]
async fn a_prompt_that_overflows_the_context_is_unavailable() {
    let Some(runner) = own_runner(|c| LocalConfig {
        context_size: 64,
        ..c
    }) else {
        return;
    };
    let prompt = "Please summarise this. ".repeat(40);
    let message = unavailable_message(runner.ask(Ask::new(&Request::prompt(prompt))).reply().await);
    assert!(
        message.contains("context") && message.contains("64"),
        "{message}"
    );
    assert_eq!(runner.tokens_generated(), 0);
    // A prompt that fits, on the same runner, still works; the answer ends at the context.
    let reply = runner
        .ask(Ask::new(&Request::prompt("Hi")))
        .reply()
        .await
        .expect("a reply");
    assert!(reply.usage.expect("usage").total() <= 64);
}

/// A grammar llama.cpp cannot parse is a typed error too.
#[tokio::test]
async fn a_broken_grammar_is_unavailable() {
    let Some(runner) = own_runner(|c| LocalConfig {
        grammar: Some("start ::= \"a\"".into()),
        ..c
    }) else {
        return;
    };
    let message = unavailable_message(runner.ask(Ask::new(&Request::prompt("hi"))).reply().await);
    assert!(message.contains("grammar"), "{message}");
}
