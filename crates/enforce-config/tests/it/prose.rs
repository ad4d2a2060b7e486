//! The drafting pipeline's prose rules, expressed by configuration alone
//! (`examples/prose.yaml`), checked rule by rule and through the enforcement loop.

use enforce_config::{ConfigSource, ProfileSet, Registry};
use enforce_core::{Context, Enforcer, Request, ScriptedRunner, Severity, Status, StopReason};
use serde_json::json;
use std::path::PathBuf;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn prose() -> Enforcer {
    let source = ConfigSource::read(&examples().join("prose.yaml")).unwrap();
    let profiles = ProfileSet::load(&source, &Registry::builtin(), None).unwrap();
    profiles.enforcer("prose").unwrap()
}

fn context() -> Context {
    Context::new()
        .with("company_name", "Muster Logistik GmbH")
        .with("industry", "Logistik")
        .with("sanitized", "true")
}

const GOOD_TEXT: &str =
    "Die Muster Logistik GmbH betreibt ein regionales Netz von Lagerstandorten und \
     hat ihre organisatorischen Abläufe in den vergangenen Jahren schrittweise \
     vereinheitlicht. Die folgenden Abschnitte beschreiben die technischen und \
     organisatorischen Maßnahmen, die das Unternehmen zum Schutz seiner Daten \
     umgesetzt hat, und ordnen sie in die Anforderungen der Branche Logistik ein.";

fn block(block_type: &str, text: &str, flagged: &[&str]) -> String {
    json!({
        "blockId": "b1",
        "blockType": block_type,
        "language": "de",
        "text": text,
        "forbiddenContentDetected": flagged,
    })
    .to_string()
}

async fn codes(text: &str, ctx: &Context) -> Vec<(String, Severity, bool)> {
    let out = prose().check(text, ctx, enforce_core::Check::Report).await;
    out.attempts[0]
        .issues
        .iter()
        .map(|i| (i.code.clone(), i.severity, i.repairable))
        .collect()
}

fn has(found: &[(String, Severity, bool)], code: &str, severity: Severity) -> bool {
    found.iter().any(|(c, s, _)| c == code && *s == severity)
}

#[tokio::test]
async fn a_good_block_passes_bare_or_fenced() {
    let good = block("introduction", GOOD_TEXT, &[]);
    assert!(
        codes(&good, &context()).await.is_empty(),
        "{:?}",
        codes(&good, &context()).await
    );
    let fenced = format!("Hier der Block:\n```json\n{good}\n```");
    assert!(codes(&fenced, &context()).await.is_empty());
}

#[tokio::test]
async fn json_with_required_fields() {
    let found = codes("Leider kein JSON.", &context()).await;
    assert!(has(&found, "JSON_VALID", Severity::Error), "{found:?}");
    let missing = json!({"blockId": "b1", "text": GOOD_TEXT}).to_string();
    let found = codes(&missing, &context()).await;
    assert!(has(&found, "JSON_VALID", Severity::Error), "{found:?}");
    let wrong_type = block("summary", GOOD_TEXT, &[]);
    assert!(has(
        &codes(&wrong_type, &context()).await,
        "JSON_VALID",
        Severity::Error
    ));
}

#[tokio::test]
async fn word_limits_depend_on_the_block_type() {
    let short = "Die Muster Logistik GmbH in der Logistik.";
    // 7 words: a warning for an introduction (min 30), also for a transition (min 10) ...
    assert!(has(
        &codes(&block("introduction", short, &[]), &context()).await,
        "WORD_COUNT_IN_RANGE",
        Severity::Warning
    ));
    // ... and 85 words are too long for a transition (max 80) but fine for an introduction.
    let long = format!(
        "Die Muster Logistik GmbH in der Logistik {}",
        "wächst stetig ".repeat(39)
    );
    let found = codes(&block("transition", &long, &[]), &context()).await;
    // The pipeline's own rule name (`code:` on each bound), not TOO_LONG.
    assert!(
        has(&found, "WORD_COUNT_IN_RANGE", Severity::Error),
        "{found:?}"
    );
    let found = codes(&block("introduction", &long, &[]), &context()).await;
    assert!(
        !found
            .iter()
            .any(|(c, _, _)| c == "WORD_COUNT_IN_RANGE" || c == "TOO_LONG" || c == "TOO_SHORT"),
        "{found:?}"
    );
}

#[tokio::test]
async fn no_percentages_scores_or_levels() {
    for bad in [
        "erreicht 80 % Abdeckung",
        "mit Score: 7 bewertet",
        "SCORE 12",
        "auf Stufe L2 eingeordnet",
    ] {
        let text = format!("{GOOD_TEXT} Das Team {bad}.");
        let found = codes(&block("introduction", &text, &[]), &context()).await;
        assert!(
            has(&found, "NO_NUMERIC_SCORES", Severity::Error),
            "{bad}: {found:?}"
        );
    }
    let fine = format!("{GOOD_TEXT} Level L5 und Prozentrechnung sind kein Thema.");
    assert!(!has(
        &codes(&block("introduction", &fine, &[]), &context()).await,
        "NO_NUMERIC_SCORES",
        Severity::Error
    ));
}

#[tokio::test]
async fn no_direct_address_whole_words_case_sensitive() {
    for word in ["Sie", "Ihr", "Ihnen", "Ihrem", "Ihrer"] {
        let text = format!("{GOOD_TEXT} Das betrifft {word} Team.");
        let found = codes(&block("introduction", &text, &[]), &context()).await;
        assert!(
            has(&found, "NO_DIRECT_ADDRESS", Severity::Error),
            "{word}: {found:?}"
        );
    }
    // "sie" (they), "ihre" and "Siegel" are not direct address.
    let text = format!("{GOOD_TEXT} Dort prüft sie ihre Siegel und Ihresgleichen.");
    assert!(!has(
        &codes(&block("introduction", &text, &[]), &context()).await,
        "NO_DIRECT_ADDRESS",
        Severity::Error
    ));
}

#[tokio::test]
async fn company_name_required_industry_warned() {
    let text = GOOD_TEXT
        .replace("Muster Logistik GmbH", "Firma")
        .replace("Logistik", "Transport");
    let found = codes(&block("introduction", &text, &[]), &context()).await;
    assert!(
        has(&found, "COMPANY_NAME_PRESENT", Severity::Error),
        "{found:?}"
    );
    assert!(
        has(&found, "INDUSTRY_REFERENCED", Severity::Warning),
        "{found:?}"
    );
    // Unknown company: the rule is skipped.
    let unknown = context().with("company_name", "Unbekannt");
    assert!(!has(
        &codes(&block("introduction", &text, &[]), &unknown).await,
        "COMPANY_NAME_PRESENT",
        Severity::Error
    ));
}

#[tokio::test]
async fn forbidden_topics_and_self_reported_content() {
    let text = format!("{GOOD_TEXT} Eine Datenpanne gab es nicht.");
    assert!(has(
        &codes(&block("introduction", &text, &[]), &context()).await,
        "NO_DISALLOWED_TOPICS",
        Severity::Error
    ));
    let found = codes(
        &block("introduction", GOOD_TEXT, &["Gesundheitsdaten"]),
        &context(),
    )
    .await;
    assert!(
        has(&found, "SELF_REPORTED_FORBIDDEN", Severity::Error),
        "{found:?}"
    );
}

#[tokio::test]
async fn invalid_sanitisation_is_a_hard_abort_straight_to_the_fallback() {
    let ctx = context().with("sanitized", "false");
    let found = codes(&block("introduction", GOOD_TEXT, &[]), &ctx).await;
    assert_eq!(
        found,
        vec![("SANITIZATION_PASSED".to_string(), Severity::Error, false)]
    );

    let runner = ScriptedRunner::texts([
        block("introduction", GOOD_TEXT, &[]),
        block("introduction", GOOD_TEXT, &[]),
    ]);
    let out = prose()
        .run(&runner, &Request::prompt("Schreibe die Einleitung."), &ctx)
        .await;
    assert_eq!(out.status, Status::Aborted);
    assert_eq!(out.stop_reason, StopReason::HardAbort);
    assert_eq!(out.attempts.len(), 1, "no re-ask after a hard abort");
    assert!(out.fallback_used);
    let fallback = out.response.unwrap();
    assert!(
        fallback.contains("Die Muster Logistik GmbH beschreibt"),
        "{fallback}"
    );
    let parsed: serde_json::Value = serde_json::from_str(&fallback).unwrap();
    assert_eq!(parsed["forbiddenContentDetected"], json!([]));
}

#[tokio::test]
async fn repairable_errors_are_re_asked_in_german_and_then_pass() {
    let bad = block(
        "introduction",
        &format!("{GOOD_TEXT} Das zeigt 90 % Reife."),
        &[],
    );
    let good = block("introduction", GOOD_TEXT, &[]);
    let runner = ScriptedRunner::texts([bad, good]);
    let out = prose()
        .run(
            &runner,
            &Request::prompt("Schreibe die Einleitung."),
            &context(),
        )
        .await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(out.attempts.len(), 2);
    let feedback = runner.calls()[1].feedback().unwrap().to_string();
    assert!(feedback.contains("NO_NUMERIC_SCORES"), "{feedback}");
    assert!(feedback.contains("Behebe"), "German feedback: {feedback}");
    // The repair prompt's fixed rules, from the profile's feedback settings.
    for rule in [
        "alle unerlaubten Inhalte entfernen",
        "den Firmenkontext beibehalten",
        "ausschließlich das JSON-Objekt im vorgegebenen Format",
        "keine Fakten ändern",
        "keine direkte Ansprache",
        "keine Prozentwerte",
    ] {
        assert!(feedback.contains(rule), "{rule}: {feedback}");
    }
}

/// Runs one hard-aborting request (facts not sanitised) and returns the fallback sent.
async fn fallback_for(ctx: Context) -> serde_json::Value {
    let ctx = ctx.with("sanitized", "false");
    let runner = ScriptedRunner::texts([block("introduction", GOOD_TEXT, &[])]);
    let out = prose()
        .run(&runner, &Request::prompt("Schreibe den Block."), &ctx)
        .await;
    assert!(out.fallback_used, "{:?}", out.warnings);
    serde_json::from_str(out.response.as_deref().unwrap()).unwrap()
}

#[tokio::test]
async fn the_fallback_template_follows_the_block_type_and_the_facts() {
    let transition = fallback_for(
        context()
            .with("block_type", "transition")
            .with("block_id", "t-7"),
    )
    .await;
    assert_eq!(transition["blockType"], "transition");
    assert_eq!(transition["blockId"], "t-7");
    assert!(transition["text"]
        .as_str()
        .unwrap()
        .contains("Muster Logistik GmbH"));
    // A kind without a template of its own, and no block facts: the default template, with
    // the placeholder defaults.
    let default = fallback_for(context().with("block_type", "summary")).await;
    assert_eq!(default["blockType"], "introduction");
    assert_eq!(default["blockId"], "fallback");
    // `{{document_type|Compliance}}`: the fact when given, else its default.
    let intro = fallback_for(context().with("block_type", "introduction")).await;
    assert!(
        intro["text"]
            .as_str()
            .unwrap()
            .contains("Compliance-Dokumentation"),
        "{intro}"
    );
    let dsfa = fallback_for(
        context()
            .with("block_type", "introduction")
            .with("document_type", "DSFA"),
    )
    .await;
    assert!(
        dsfa["text"]
            .as_str()
            .unwrap()
            .contains("DSFA-Dokumentation"),
        "{dsfa}"
    );
    for kind in ["conclusion", "appreciation"] {
        let sent = fallback_for(context().with("block_type", kind)).await;
        assert_eq!(sent["blockType"], kind);
    }
}

/// The fallback block says what it asserts, as the seed's does: the company name is used,
/// and the appreciation block names its maturity tag (`{{maturity}}`, from the request's
/// narrative tags) in its text and its assertions.
#[tokio::test]
async fn the_fallback_asserts_the_company_name_and_the_appreciation_s_maturity() {
    for kind in ["introduction", "transition", "conclusion", "summary"] {
        let sent = fallback_for(context().with("block_type", kind)).await;
        assert_eq!(sent["assertions"]["companyNameUsed"], true, "{sent}");
        assert_eq!(sent["assertions"]["narrativeTagsUsed"], json!([]), "{sent}");
    }
    let solid = fallback_for(
        context()
            .with("block_type", "appreciation")
            .with("maturity", "solide"),
    )
    .await;
    let text = solid["text"].as_str().unwrap();
    assert!(text.contains("eine solide Grundlage"), "{solid}");
    assert!(!text.contains("tragfähige"), "{solid}");
    assert_eq!(solid["assertions"]["companyNameUsed"], true);
    assert_eq!(solid["assertions"]["narrativeTagsUsed"], json!(["solide"]));
    let default = fallback_for(context().with("block_type", "appreciation")).await;
    assert!(
        default["text"]
            .as_str()
            .unwrap()
            .contains("eine tragfähige Grundlage"),
        "{default}"
    );
}

#[tokio::test]
async fn asserted_tags_must_come_from_the_catalogue() {
    let ctx = context()
        .with("narrative_tags", json!(["Pionier", "Stabil"]))
        .with("expected_tags", json!(["Pionier"]));
    let asserting = |tags: serde_json::Value| {
        json!({
            "blockId": "b1", "blockType": "introduction", "language": "de", "text": GOOD_TEXT,
            "assertions": {"companyNameUsed": true, "narrativeTagsUsed": tags},
            "forbiddenContentDetected": [],
        })
        .to_string()
    };
    assert!(codes(&asserting(json!(["Pionier"])), &ctx).await.is_empty());
    let found = codes(&asserting(json!(["Pionier", "Visionär"])), &ctx).await;
    assert_eq!(
        found,
        vec![(
            "NARRATIVE_TAGS_CONSISTENT".to_string(),
            Severity::Error,
            true
        )]
    );
    // The schema checks the shape of the assertions.
    let found = codes(&asserting(json!("Pionier")), &ctx).await;
    assert!(has(&found, "JSON_VALID", Severity::Error), "{found:?}");
}

#[test]
fn the_full_example_configuration_loads() {
    let source = ConfigSource::read(&examples().join("enforce.yaml")).unwrap();
    let profiles = ProfileSet::load(&source, &Registry::builtin(), None).unwrap();
    let names: Vec<_> = profiles.names().collect();
    assert_eq!(names, vec!["adr", "chat", "code", "report", "support"]);
    assert_eq!(profiles.get("adr").unwrap().policy().max_retries, 3);
    assert_eq!(profiles.default_name(), "chat");
}

#[tokio::test]
async fn when_context_scopes_a_rule_to_one_fact_value() {
    use enforce_config::BuildEnv;
    use enforce_core::Validator;
    // No direct address, but only in reports: a letter may address its reader.
    let v: Box<dyn Validator> = Registry::builtin()
        .build(
            "formal",
            &json!({"type": "terms", "when": {"context": "document_type", "equals": "report"},
                    "forbidden": [{"term": "Sie", "case_sensitive": true, "code": "NO_DIRECT_ADDRESS"}]}),
            &BuildEnv::default(),
        )
        .unwrap();
    let text = "Wir danken Sie für die Zusammenarbeit.";
    let codes = |ctx: Context| {
        let v = &v;
        async move {
            v.validate(text, &ctx)
                .await
                .unwrap()
                .into_iter()
                .map(|i| i.code)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        codes(Context::new().with("document_type", "report")).await,
        ["NO_DIRECT_ADDRESS"]
    );
    assert!(codes(Context::new().with("document_type", "letter"))
        .await
        .is_empty());
    assert!(
        codes(Context::new()).await.is_empty(),
        "no fact: not in scope"
    );
}

/// An answer that is no block JSON gets exactly one regeneration, which asks for the JSON
/// alone with the field list and quotes the start of the answer; a second one goes to the
/// fallback.
#[tokio::test]
async fn one_json_only_regeneration_then_the_fallback() {
    let runner = ScriptedRunner::texts([
        "Leider kein JSON.".to_string(),
        "Wieder kein JSON.".to_string(),
        block("introduction", GOOD_TEXT, &[]),
    ]);
    let out = prose()
        .run(&runner, &Request::prompt("Schreibe den Block."), &context())
        .await;
    assert_eq!(runner.calls().len(), 2, "one regeneration only");
    assert!(out.fallback_used, "{out:?}");
    assert_eq!(out.stop_reason, StopReason::RetriesExhausted);
    let feedback = runner.calls()[1].feedback().unwrap().to_string();
    for words in [
        "Gib nur ein JSON-Objekt zurück",
        "blockId, blockType, language, text, assertions und forbiddenContentDetected",
        "Beginn deiner Antwort: Leider kein JSON.",
    ] {
        assert!(feedback.contains(words), "{words}: {feedback}");
    }
    // The regeneration that brings the block passes.
    let runner = ScriptedRunner::texts([
        "Leider kein JSON.".to_string(),
        block("introduction", GOOD_TEXT, &[]),
    ]);
    let out = prose()
        .run(&runner, &Request::prompt("Schreibe den Block."), &context())
        .await;
    assert_eq!(out.status, Status::Passed);
}
