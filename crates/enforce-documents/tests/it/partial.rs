//! Partial checks of the document validators (early abort): decided once the front matter is
//! closed, never before, and never wrong on any continuation.

use enforce_core::{Context, Issue, Severity, Validator};
use enforce_documents::adr::AdrStructure;
use enforce_documents::file_refs::FileRefs;
use enforce_documents::step_marker::StepMarker;
use proptest::prelude::*;

use futures_executor::block_on;

/// The errors the partial check reports when `text` arrives in the given pieces (over all
/// calls, each once: a checker may repeat what it found).
fn definite_in_pieces(v: &dyn Validator, pieces: &[&str]) -> Vec<Issue> {
    let context = Context::new();
    let Some(mut check) = v.partial_check(&context) else {
        return Vec::new();
    };
    let mut text = String::new();
    let mut found = Vec::new();
    for piece in pieces {
        text.push_str(piece);
        for issue in block_on(check.check(&text)) {
            if !found.contains(&issue) {
                found.push(issue);
            }
        }
    }
    found.retain(|i| i.severity == Severity::Error);
    found
}

fn codes(issues: &[Issue]) -> Vec<&str> {
    issues.iter().map(|i| i.code.as_str()).collect()
}

#[test]
fn missing_fields_are_decided_when_the_front_matter_closes() {
    let v = AdrStructure::default();
    let open = ["Here it is:\n---\nadr_id: 7\n", "title: X\n", "---"];
    assert!(
        definite_in_pieces(&v, &open).is_empty(),
        "`---` could still become `----`"
    );
    let closed = ["Here it is:\n---\nadr_id: 7\n", "title: X\n", "---\n## Kon"];
    let found = definite_in_pieces(&v, &closed);
    assert_eq!(codes(&found), ["MISSING_ADR_FIELD"]);
    assert!(found[0].message.contains("status"), "{found:?}");
    let complete = [
        "---\nadr_id: 7\ntitle: X\nstatus: Proposed\n---\n",
        "## Kontext\n",
    ];
    assert!(
        definite_in_pieces(&v, &complete).is_empty(),
        "sections are judged at the end"
    );
    let chat = ["Just a chat answer.\n", "--- not a delimiter\n", "More.\n"];
    assert!(definite_in_pieces(&v, &chat).is_empty());
}

#[test]
fn file_refs_cut_for_escapes_but_leave_missing_files_to_the_repair() {
    let v = FileRefs::new("file_refs", env!("CARGO_MANIFEST_DIR"));
    let adr = "---\nadr_id: 1\nfiles:\n  modify:\n    - Cargo.toml\n    - src/new.rs\n    - ../../etc/passwd\n---\n";
    let found = definite_in_pieces(&v, &[&adr[..20], &adr[20..], "## Kontext"]);
    assert_eq!(codes(&found), ["FILE_NOT_FOUND", "PATH_OUTSIDE_ROOT"]);
    assert!(v.repair_fixes(&found[0]), "the repair moves a missing file");
    assert!(!v.repair_fixes(&found[1]));
}

#[test]
fn step_markers_are_never_decided_early() {
    // The last marker counts, and it may always still come.
    assert!(StepMarker::default()
        .partial_check(&Context::new())
        .is_none());
}

fn piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "---",
        "\n",
        "adr_id: 3",
        "title: T",
        "status: ok",
        "status:",
        "```markdown",
        "```",
        "## Kontext",
        " ",
        "-",
        "x",
        "[",
        "{",
        "\r\n",
        "\u{feff}",
        "files:\n  modify: [../x]",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The partial-check invariant: an error decided on a prefix is an error of every text
    /// that starts with it.
    #[test]
    fn a_definite_front_matter_error_stays_an_error(
        prefix in prop::collection::vec(piece(), 0..16),
        rest in prop::collection::vec(piece(), 0..10),
    ) {
        let adr = AdrStructure::default();
        let refs = FileRefs::new("file_refs", env!("CARGO_MANIFEST_DIR"));
        let whole = format!("{}{}", prefix.concat(), rest.concat());
        for v in [&adr as &dyn Validator, &refs] {
            if !definite_in_pieces(v, &prefix).is_empty() {
                let errors: Vec<Issue> = block_on(v.validate(&whole, &Context::new()))
                    .unwrap()
                    .into_iter()
                    .filter(Issue::is_error)
                    .collect();
                prop_assert!(!errors.is_empty(), "{}: {:?} + {:?}", v.name(), prefix, rest);
            }
        }
    }
}
