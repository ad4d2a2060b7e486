//! The YAML samples of the documentation are configuration that works: every ```yaml block of
//! README.md, the book (docs/) and the plugin guides is a piece of `enforce.yaml` that the
//! schema of `enforce.yaml` (`schema/enforce.schema.json`, kept equal to the parser's types by
//! `config_schema`) accepts. A renamed or misspelt key in a sample fails here.
//!
//! (The Rust samples run as enforce-core doctests; the shell samples are commands, not run.)

use crate::config_schema::{schema_verdict, validator};
use crate::repo;
use std::path::PathBuf;

/// The Markdown files whose YAML samples are configuration.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![
        repo().join("README.md"),
        repo().join("plugins/README.md"),
        repo().join("plugins/template/README.md"),
    ];
    let book = std::fs::read_dir(repo().join("docs")).expect("docs/");
    files.extend(
        book.flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    files.sort();
    files
}

/// The ```yaml blocks of a Markdown text: (line of the fence, body).
fn yaml_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(lang)) if lang.trim() == "yaml" => current = Some((n + 1, String::new())),
            (Some(_), Some("")) => blocks.extend(current.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

#[test]
fn every_yaml_sample_of_the_docs_is_valid_configuration() {
    let validator = validator();
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(repo()).unwrap().display().to_string();
        for (line, yaml) in yaml_blocks(&text) {
            checked += 1;
            if serde_yaml_ng::from_str::<serde_json::Value>(&yaml).is_err() {
                failures.push(format!("{shown}:{line}: not YAML"));
                continue;
            }
            if let Err(why) = schema_verdict(&validator, &yaml) {
                failures.push(format!("{shown}:{line}:\n{why}"));
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} YAML samples found: is the book where it was?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_misspelt_key_in_a_sample_is_caught() {
    let blocks = yaml_blocks("text\n```yaml\ndefaults:\n  early_abrt: true\n```\n");
    assert_eq!(blocks.len(), 1);
    assert!(schema_verdict(&validator(), &blocks[0].1).is_err());
}
