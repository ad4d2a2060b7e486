//! Partial checks (early abort): definite errors on prefixes, and the invariant that a definite
//! error on a prefix is an error of every text that starts with it, and one the validator's
//! repair does not fix.

use crate::block_on;
use enforce_core::{Context, Issue, Severity, Validator};
use enforce_validators::json::JsonValidator;
use enforce_validators::length::{Bound, Length, Unit};
use enforce_validators::pattern::{Pattern, Rule};
use enforce_validators::terms::{Term, Terms};
use proptest::prelude::*;

/// The definite errors a fresh partial check finds in `prefix`.
fn definite(v: &dyn Validator, prefix: &str) -> Vec<Issue> {
    let context = Context::new();
    let Some(mut check) = v.partial_check(&context) else {
        return Vec::new();
    };
    block_on(check.check(prefix))
        .into_iter()
        .filter(|i| i.severity == Severity::Error)
        .collect()
}

/// The codes of the definite errors found when `text` arrives in pieces ending at `cuts` (a
/// checker may report an error once only).
fn definite_in_pieces(v: &dyn Validator, text: &str, cuts: &[usize]) -> Vec<String> {
    let context = Context::new();
    let Some(mut check) = v.partial_check(&context) else {
        return Vec::new();
    };
    let mut ends: Vec<usize> = cuts
        .iter()
        .map(|&c| c % (text.len() + 1))
        .filter(|&c| text.is_char_boundary(c))
        .collect();
    ends.sort_unstable();
    ends.push(text.len());
    let mut found = Vec::new();
    for end in ends {
        let issues = block_on(check.check(&text[..end]));
        found.extend(
            issues
                .into_iter()
                .filter(|i| i.severity == Severity::Error)
                .map(|i| i.code),
        );
    }
    found.sort();
    found.dedup();
    found
}

fn errors(v: &dyn Validator, text: &str) -> Vec<Issue> {
    block_on(v.validate(text, &Context::new()))
        .unwrap()
        .into_iter()
        .filter(|i| i.severity == Severity::Error)
        .collect()
}

/// The errors of `text` that remain after the validator's own repair (if it has one for
/// them): what the loop could not deliver without a re-ask.
fn errors_after_repair(v: &dyn Validator, text: &str) -> Vec<Issue> {
    let found = errors(v, text);
    if found.is_empty() {
        return found;
    }
    match v.repair(text, &Context::new(), &found) {
        Some(repaired) => errors(v, &repaired),
        None => found,
    }
}

fn codes(issues: &[Issue]) -> Vec<String> {
    issues.iter().map(|i| i.code.clone()).collect()
}

fn acme() -> Terms {
    Terms::builder("wording")
        .forbid(Term::new("Acme").code("NO_ACME"))
        .forbid(Term::new("Widget Co").case_sensitive(true))
        .build()
        .unwrap()
}

fn patterns() -> Pattern {
    Pattern::new(
        "patterns",
        vec![
            Rule::new(r"\d+\s*%", "NO_PERCENT").unwrap(),
            Rule::new(r"\bL[1-4]\b", "NO_LEVEL").unwrap(),
        ],
        vec![],
    )
}

fn strict_json() -> JsonValidator {
    JsonValidator::new("answer")
        .bare(true)
        .with_schema(&serde_json::json!({
            "type": "object",
            "properties": {"age": {"type": "integer"}, "tags": {"type": "array"}}
        }))
        .unwrap()
}

#[test]
fn terms_decide_a_forbidden_term_once_a_character_settles_the_word() {
    let v = acme();
    assert!(
        definite(&v, "We recommend Acme").is_empty(),
        "could still be Acmeology"
    );
    assert!(definite(&v, "We recommend Acmeology").is_empty());
    let found = definite(&v, "We recommend ACME,");
    assert_eq!(codes(&found), ["NO_ACME"]);
    assert_eq!((found[0].line, found[0].column), (Some(1), Some(14)));
    assert_eq!(codes(&definite(&v, "by Widget Co.")), ["FORBIDDEN_TERM"]);
    assert!(
        definite(&v, "by widget co.").is_empty(),
        "case-sensitive term"
    );
}

#[test]
fn terms_with_a_replacement_or_a_warning_never_cut() {
    let v = Terms::builder("wording")
        .forbid(Term::new("Acme").replacement("a supplier"))
        .forbid(Term::new("Foo").severity(Severity::Warning))
        .build()
        .unwrap();
    assert!(v.partial_check(&Context::new()).is_none());
    let issue = errors(&v, "Acme!").remove(0);
    assert!(v.repair_fixes(&issue));
    assert!(!acme().repair_fixes(&errors(&acme(), "Acme!")[0]));
}

#[test]
fn terms_from_the_context_are_watched_too() {
    let v = Terms::builder("wording")
        .forbid(Term::new("{{rival}}"))
        .build()
        .unwrap();
    let context = Context::new().with("rival", "Globex");
    let mut check = v.partial_check(&context).unwrap();
    assert!(block_on(check.check("We beat Globex")).is_empty());
    assert_eq!(block_on(check.check("We beat Globex.")).len(), 1);
    assert!(
        v.partial_check(&Context::new()).is_none(),
        "an unknown term is not checked"
    );
}

#[test]
fn patterns_decide_a_match_that_no_later_byte_can_undo() {
    let v = patterns();
    assert!(definite(&v, "Growth was 12").is_empty());
    assert!(
        definite(&v, "Growth was 12 %").is_empty(),
        "the match ends at the end"
    );
    assert_eq!(codes(&definite(&v, "Growth was 12 % ")), ["NO_PERCENT"]);
    assert!(definite(&v, "Reached L3").is_empty(), "L3 could become L34");
    assert_eq!(codes(&definite(&v, "Reached L3 ")), ["NO_LEVEL"]);
}

#[test]
fn length_decides_too_long_only() {
    let v = Length::new(
        "size",
        Unit::Words,
        Some(Bound::error(3)),
        Some(Bound::error(4)),
    );
    assert!(
        definite(&v, "one").is_empty(),
        "too short is never definite"
    );
    assert!(definite(&v, "one two three four").is_empty());
    assert!(definite(&v, "one two three four fi")
        .iter()
        .all(|i| i.code == "TOO_LONG"));
    assert_eq!(definite(&v, "one two three four fi").len(), 1);
    let chars = Length::new("size", Unit::Chars, None, Some(Bound::error(3)));
    assert_eq!(codes(&definite(&chars, "äöüß")), ["TOO_LONG"]);
    assert!(
        Length::new("size", Unit::Chars, Some(Bound::error(3)), None)
            .partial_check(&Context::new())
            .is_none()
    );
}

#[test]
fn bare_json_decides_syntax_errors_and_complete_values() {
    let v = strict_json();
    assert!(definite(&v, "{\"age\": 4").is_empty());
    let broken = definite(&v, "{\"age\": tru e");
    assert_eq!(codes(&broken), ["INVALID_JSON"]);
    assert_eq!(
        broken[0].column,
        Some(12),
        "the space where the `e` of `true` belongs"
    );
    // Prose or a fence around the JSON is for the repair to strip, never a cut (58 of 60
    // JSON answers of a small model came in a ```json fence).
    assert!(definite(&v, "Sure! {").is_empty());
    assert!(definite(&v, "Sure! {\"age\": tru e").is_empty());
    assert!(definite(&v, "```json\n{\n  \"name\": \"Paris\",\n  \"").is_empty());
    assert!(definite(&v, "```json\n{\"age\": 4}\n```\nHope this helps!").is_empty());
    assert!(definite(&v, "{\"age\": 4}\nHope this helps!").is_empty());
    assert!(definite(&v, "```python\nx = {").is_empty());
    // A broken value the answer opens with stays broken after the repair, whatever value
    // parses inside or after it: the partial check called it definite (proptest found
    // `[{}"age"`, repaired to `{}`).
    assert_eq!(codes(&definite(&v, "[{}\"age\"")), ["INVALID_JSON"]);
    assert!(!errors_after_repair(&v, "[{}\"age\"").is_empty());
    assert!(!errors_after_repair(&v, "{\"age\": tru e {\"age\": 1}").is_empty());
    // Inside the fence, the value is judged like a bare one.
    let fenced = definite(&v, "```json\n{\"age\": tru e");
    assert_eq!(codes(&fenced), ["INVALID_JSON"]);
    assert_eq!(fenced[0].line, Some(2));
    let fenced = definite(&v, "```json\n{\n\"age\": \"old\"}\n");
    assert_eq!(codes(&fenced), ["SCHEMA_VIOLATION"]);
    assert_eq!(fenced[0].line, Some(2), "the line in the answer");
    // A member is not judged alone (a later duplicate key would replace it) ...
    assert!(definite(&v, "{\"age\": \"unknown\", ").is_empty());
    // ... but the complete value is: only whitespace can follow it.
    assert_eq!(
        codes(&definite(&v, "{\"age\": \"unknown\"}")),
        ["SCHEMA_VIOLATION"]
    );
    assert!(definite(&v, "{\"age\": 4}\n").is_empty());
    assert!(JsonValidator::new("lenient")
        .partial_check(&Context::new())
        .is_none());
}

/// Pieces that make terms, words, numbers and JSON likely.
fn text_piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "Acme",
        "acme",
        "ACME",
        "Acmeology",
        "Widget",
        " Co",
        "x",
        " ",
        ".",
        ",",
        "\n",
        "_",
        "é",
        "12",
        "3",
        " %",
        "%",
        "L",
        "L3",
        "4",
        "-",
        "\u{a0}",
    ])
}

fn json_piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        "\"age\"",
        "\"tags\"",
        "\"x",
        "\"",
        ":",
        ",",
        " ",
        "\n",
        "1",
        "0",
        "-",
        ".",
        "e",
        "+",
        "tru",
        "e",
        "null",
        "\\",
        "u00",
        "é",
        "\u{a0}",
        "\"unknown\"",
        "```json\n",
        "\n```\n",
        "Sure! ",
    ])
}

fn join(pieces: Vec<&str>) -> String {
    pieces.concat()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The partial-check invariant, for every built-in partial check: a definite error on a
    /// prefix is an error of every text that starts with it.
    #[test]
    fn a_definite_error_stays_an_error_on_every_extension(
        prefix in prop::collection::vec(text_piece(), 0..12).prop_map(join),
        rest in prop::collection::vec(text_piece(), 0..12).prop_map(join),
    ) {
        let short = Length::new("size", Unit::Words, None, Some(Bound::error(6)));
        let few_chars = Length::new("size", Unit::Chars, None, Some(Bound::error(15)));
        let validators: [&dyn Validator; 4] = [&acme(), &patterns(), &short, &few_chars];
        let whole = format!("{prefix}{rest}");
        for v in validators {
            if !definite(v, &prefix).is_empty() {
                prop_assert!(!errors_after_repair(v, &whole).is_empty(), "{}: {prefix:?} + {rest:?}", v.name());
            }
        }
    }

    #[test]
    fn a_definite_json_error_stays_an_error_on_every_extension(
        prefix in prop::collection::vec(json_piece(), 0..14).prop_map(join),
        rest in prop::collection::vec(json_piece(), 0..14).prop_map(join),
    ) {
        let v = strict_json();
        if !definite(&v, &prefix).is_empty() {
            let whole = format!("{prefix}{rest}");
            prop_assert!(!errors_after_repair(&v, &whole).is_empty(), "{prefix:?} + {rest:?}");
        }
    }

    /// Checking as the text arrives, piece by piece, finds what one check of the whole finds:
    /// the tail-only searches miss nothing.
    #[test]
    fn checking_in_pieces_finds_what_one_check_finds(
        text in prop::collection::vec(text_piece(), 0..16).prop_map(join),
        cuts in prop::collection::vec(0usize..200, 0..8),
    ) {
        for v in [&acme() as &dyn Validator, &Length::new("s", Unit::Words, None, Some(Bound::error(6)))] {
            let in_pieces = definite_in_pieces(v, &text, &cuts);
            let mut at_once = codes(&definite(v, &text));
            at_once.sort();
            at_once.dedup();
            prop_assert_eq!(
                in_pieces,
                at_once,
                "{}: {:?} cut at {:?}", v.name(), text, cuts
            );
        }
    }

    /// Valid JSON is never cut, whatever the prefix.
    #[test]
    fn no_prefix_of_valid_json_is_an_error(value in json_value()) {
        let text = serde_json::to_string_pretty(&serde_json::json!({"age": 1, "tags": [value]})).unwrap();
        let v = strict_json();
        let context = Context::new();
        let mut check = v.partial_check(&context).unwrap();
        for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
            let found = block_on(check.check(&text[..end]));
            prop_assert!(found.is_empty(), "{:?} at {end}: {found:?}", &text[..end]);
        }
    }
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-1e6f64..1e6).prop_map(serde_json::Value::from),
        "[a-z\"\\\\\u{1}é ]{0,6}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}
