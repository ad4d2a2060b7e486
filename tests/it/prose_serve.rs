//! The drafting pipeline's twelve prose rules (`examples/prose.yaml`) through `enforce serve`,
//! with the facts in each request (body `enforce.context` or the `X-Enforce-Context` header),
//! in front of the mock OpenAI upstream: each rule fires on a bad block and a good block passes.
//! What every attempt raised is read from the audit log (synced before each response).

use crate::repo;
use crate::serve::{client, temp_dir, Proxy};
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};

/// About 50 words: an introduction naming the company, the industry and the chosen tag.
const GOOD_TEXT: &str =
    "Die Nordlicht Spedition GmbH betreibt ein regionales Netz von Lagerstandorten und hat ihre \
     organisatorischen Abläufe in den vergangenen Jahren schrittweise vereinheitlicht. Das \
     Unternehmen geht dabei pragmatisch vor. Die folgenden Abschnitte beschreiben die \
     technischen und organisatorischen Maßnahmen zum Schutz der Daten und ordnen sie in die \
     Anforderungen der Branche Logistik ein.";

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

fn good() -> String {
    block("introduction", GOOD_TEXT, &[])
}

/// The facts of a normal request.
fn facts() -> Value {
    json!({
        "company_name": "Nordlicht Spedition GmbH",
        "industry": "Logistik",
        "sanitized": "true",
        "narrative_tags": ["pragmatisch", "innovativ", "wachstumsorientiert"],
        "expected_tags": ["pragmatisch"],
    })
}

/// How the facts travel.
#[derive(Clone, Copy, Debug)]
enum Via {
    Body,
    Header,
}

struct Served {
    proxy: Proxy,
    upstream: MockOpenAi,
    audit: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Served {
    async fn start() -> Served {
        let upstream = MockOpenAi::start(MockScript::new()).await.unwrap();
        let dir = temp_dir("prose");
        let audit = dir.join("audit.jsonl");
        let prose = std::fs::read_to_string(repo().join("examples/prose.yaml")).unwrap();
        let config = dir.join("enforce.yaml");
        std::fs::write(
            &config,
            format!(
                "{prose}\nmodels:\n  - id: prose\n    profile: prose\n    runner:\n      type: openai\n      base_url: {}\n      model: mock-model\n      retry:\n        max_retries: 0\n\
                 server:\n  audit_log: {}\n  audit_fsync: always\n",
                upstream.url(),
                audit.display()
            ),
        )
        .unwrap();
        let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
        Served {
            proxy,
            upstream,
            audit,
            dir,
        }
    }

    /// Sends one request whose upstream answers are `answers`, with `facts` sent `via`; returns
    /// the response's status header, its body and the request's audit record.
    async fn ask(&self, answers: &[String], facts: &Value, via: Via) -> (String, Value, Value) {
        for answer in answers {
            self.upstream.push(MockReply::text(answer.clone()));
        }
        let mut body = json!({
            "model": "prose",
            "messages": [{"role": "user", "content": "Schreibe die Einleitung."}],
        });
        let mut request = client().post(self.proxy.url("/chat/completions"));
        match via {
            Via::Body => body["enforce"] = json!({ "context": facts }),
            // Header values are ASCII here; the serialized JSON is one line.
            Via::Header => request = request.header("X-Enforce-Context", facts.to_string()),
        }
        let resp = request.json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let status = resp.headers()["x-enforce-status"]
            .to_str()
            .unwrap()
            .to_string();
        let body: Value = resp.json().await.unwrap();
        let log = std::fs::read_to_string(&self.audit).unwrap();
        let last = log.lines().last().expect("an audit line per request");
        (status, body, serde_json::from_str(last).unwrap())
    }
}

fn codes(issues: &Value) -> Vec<(String, String)> {
    issues
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["code"].as_str().unwrap().to_string(),
                i["severity"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_twelve_prose_rules_through_the_proxy_with_facts_in_the_request() {
    let s = Served::start().await;

    // A good block passes at once, with no issue at all, whichever way the facts come.
    for via in [Via::Body, Via::Header] {
        let (status, _, record) = s.ask(&[good()], &facts(), via).await;
        assert_eq!(status, "passed", "{via:?}: {record}");
        assert_eq!(record["attempts"].as_array().unwrap().len(), 1);
        assert_eq!(codes(&record["attempts"][0]["issues"]), vec![], "{via:?}");
    }

    // Errors: the bad block fires its rule, the re-ask brings the good block, which passes.
    let long_transition = block("transition", &format!("{GOOD_TEXT} {GOOD_TEXT}"), &[]);
    let errors: Vec<(&str, String, &str)> = vec![
        ("1 JSON", "Leider kein JSON.".into(), "JSON_VALID"),
        (
            "1 JSON fields",
            json!({"blockId": "b1", "text": GOOD_TEXT}).to_string(),
            "JSON_VALID",
        ),
        (
            "2 company",
            block(
                "introduction",
                &GOOD_TEXT.replace("Nordlicht Spedition GmbH", "Firma"),
                &[],
            ),
            "COMPANY_NAME_PRESENT",
        ),
        (
            "4 scores",
            block("introduction", &format!("{GOOD_TEXT} Reifegrad L3."), &[]),
            "NO_NUMERIC_SCORES",
        ),
        (
            "5 topics",
            block(
                "introduction",
                &format!("{GOOD_TEXT} Eine Datenpanne gab es nicht."),
                &[],
            ),
            "NO_DISALLOWED_TOPICS",
        ),
        ("6 words", long_transition, "WORD_COUNT_IN_RANGE"),
        (
            "7 address",
            block(
                "introduction",
                &format!("{GOOD_TEXT} Wie Sie sehen, ist das gut."),
                &[],
            ),
            "NO_DIRECT_ADDRESS",
        ),
        (
            "8 tags",
            block(
                "introduction",
                &GOOD_TEXT.replace("pragmatisch", "innovativ"),
                &[],
            ),
            "NARRATIVE_TAGS_CONSISTENT",
        ),
        (
            "12 flagged",
            block("introduction", GOOD_TEXT, &["Name einer Mitarbeiterin"]),
            "SELF_REPORTED_FORBIDDEN",
        ),
    ];
    for (i, (rule, bad, code)) in errors.into_iter().enumerate() {
        let via = if i % 2 == 0 { Via::Body } else { Via::Header };
        let (status, body, record) = s.ask(&[bad, good()], &facts(), via).await;
        assert_eq!(status, "passed", "{rule} ({via:?}): {record}");
        let attempts = record["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{rule}: re-asked once");
        assert!(
            codes(&attempts[0]["issues"]).contains(&(code.to_string(), "error".to_string())),
            "{rule} ({via:?}) fires {code}: {}",
            attempts[0]["issues"]
        );
        assert_eq!(
            codes(&attempts[1]["issues"]),
            vec![],
            "{rule}: the good block passes"
        );
        assert_eq!(body["choices"][0]["message"]["content"], good());
    }

    // Warnings: no re-ask, the answer is delivered with the warning beside it.
    let warnings = [
        (
            "3 industry",
            block(
                "introduction",
                &GOOD_TEXT.replace("Branche Logistik", "Branche"),
                &[],
            ),
            "INDUSTRY_REFERENCED",
        ),
        (
            "9 terminology",
            block(
                "introduction",
                &format!("{GOOD_TEXT} Die Cybersecurity wird jährlich geprüft."),
                &[],
            ),
            "TERMINOLOGY_CORRECT",
        ),
        (
            "10 style",
            block(
                "introduction",
                &format!("{GOOD_TEXT} Ein bahnbrechender Schritt!"),
                &[],
            ),
            "STYLE_VIOLATION",
        ),
        (
            "6 words (too short is a warning)",
            block(
                "introduction",
                "Die Nordlicht Spedition GmbH der Branche Logistik arbeitet pragmatisch.",
                &[],
            ),
            "WORD_COUNT_IN_RANGE",
        ),
    ];
    for (i, (rule, bad, code)) in warnings.into_iter().enumerate() {
        let via = if i % 2 == 0 { Via::Header } else { Via::Body };
        let (status, body, record) = s.ask(std::slice::from_ref(&bad), &facts(), via).await;
        assert_eq!(status, "passed", "{rule}: {record}");
        assert_eq!(record["attempts"].as_array().unwrap().len(), 1, "{rule}");
        let warned = codes(&body["enforcement"]["warnings"]);
        assert!(
            warned.iter().any(|(c, s)| c == code && s == "warning"),
            "{rule} ({via:?}) warns {code}: {warned:?}"
        );
        assert_eq!(body["choices"][0]["message"]["content"], bad);
    }

    // 11: facts not sanitised: a hard abort, no re-ask, and the fallback, filled with the
    // company name JSON-escaped (a quote in it) and checked by the other rules, is sent.
    let mut unsanitised = facts();
    unsanitised["sanitized"] = json!("false");
    unsanitised["company_name"] = json!("Müller \"Bau\" GmbH");
    let bad = block(
        "introduction",
        &GOOD_TEXT.replace("Nordlicht Spedition GmbH", "Müller \"Bau\" GmbH"),
        &[],
    );
    let (status, body, record) = s.ask(&[bad], &unsanitised, Via::Body).await;
    assert_eq!(status, "aborted", "{record}");
    assert_eq!(record["stop_reason"]["reason"], "hard_abort");
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "no re-ask after a hard abort");
    assert_eq!(
        codes(&attempts[0]["issues"]),
        vec![("SANITIZATION_PASSED".to_string(), "error".to_string())]
    );
    assert_eq!(body["enforcement"]["fallback_used"], true, "{body}");
    let sent = body["choices"][0]["message"]["content"].as_str().unwrap();
    let fallback: Value = serde_json::from_str(sent).expect("the fallback is valid JSON");
    assert!(
        fallback["text"]
            .as_str()
            .unwrap()
            .starts_with("Die Müller \"Bau\" GmbH beschreibt"),
        "{fallback}"
    );

    assert_eq!(s.upstream.chat_requests().len(), 2 + 9 * 2 + 4 + 1);
    // `enforce` never reaches the upstream.
    assert!(s
        .upstream
        .chat_requests()
        .iter()
        .all(|r| r.body.get("enforce").is_none()));
    let _ = std::fs::remove_dir_all(&s.dir);
}
