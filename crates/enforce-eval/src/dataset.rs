//! The eval's dataset: JSONL (one case a line) or promptfoo-style YAML (`prompts:` ×
//! `tests:` with `vars`), read into [`Case`]s.

use enforce_core::{Context, Message};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::path::Path;

/// One case: what is asked, with its facts.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// From the dataset, or `case-<n>` (1-based position).
    pub id: String,
    /// The conversation sent.
    pub messages: Vec<Message>,
    /// Facts for placeholders and validators.
    pub context: Context,
    /// A profile for this case instead of `--profile`.
    pub profile: Option<String>,
}

/// A JSONL line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: Option<Value>,
    prompt: Option<String>,
    messages: Option<Vec<Message>>,
    #[serde(default)]
    context: Option<Map<String, Value>>,
    profile: Option<String>,
    /// Free notes for people (what the case tests); not sent.
    #[serde(default, rename = "description")]
    _description: Option<Value>,
}

/// Reads `path`: `.yaml`/`.yml` as promptfoo-style YAML, anything else as JSONL. Errors name
/// the file and line.
pub fn read(path: &Path) -> Result<Vec<Case>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the dataset {}: {e}", path.display()))?;
    let is_yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let cases = if is_yaml {
        from_yaml(&text).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        from_jsonl(&text, &path.display().to_string())?
    };
    if cases.is_empty() {
        return Err(format!("the dataset {} has no cases", path.display()));
    }
    let mut seen = BTreeSet::new();
    for case in &cases {
        if !seen.insert(case.id.as_str()) {
            return Err(format!(
                "{}: case id `{}` appears twice (ids key the results and the resume)",
                path.display(),
                case.id
            ));
        }
    }
    Ok(cases)
}

fn context_of(facts: Map<String, Value>) -> Context {
    let mut context = Context::new();
    for (key, value) in facts {
        context.insert(key, value);
    }
    context
}

fn id_text(id: Value) -> Option<String> {
    match id {
        Value::String(s) if !s.trim().is_empty() => Some(s),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// JSONL: each non-blank line an object with `prompt` or `messages`.
pub fn from_jsonl(text: &str, file: &str) -> Result<Vec<Case>, String> {
    let mut cases = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let at = format!("{file}:{}", index + 1);
        let line: Line = serde_json::from_str(raw).map_err(|e| format!("{at}: {e}"))?;
        let messages = match (line.prompt, line.messages) {
            (Some(prompt), None) if !prompt.trim().is_empty() => vec![Message::user(prompt)],
            (None, Some(messages)) if !messages.is_empty() => messages,
            (Some(_), Some(_)) => {
                return Err(format!("{at}: give `prompt` or `messages`, not both"))
            }
            _ => {
                return Err(format!(
                    "{at}: a case needs a non-empty `prompt` or `messages`"
                ))
            }
        };
        let n = cases.len() + 1;
        let id = line
            .id
            .map(|id| {
                id_text(id)
                    .ok_or_else(|| format!("{at}: `id` must be a non-empty string or a number"))
            })
            .transpose()?
            .unwrap_or_else(|| format!("case-{n}"));
        cases.push(Case {
            id,
            messages,
            context: context_of(line.context.unwrap_or_default()),
            profile: line.profile,
        });
    }
    Ok(cases)
}

/// promptfoo's file: prompts (strings or `{raw}`), tests with `vars`, `defaultTest.vars`.
#[derive(Deserialize)]
struct PromptfooFile {
    #[serde(default)]
    prompts: Vec<PromptEntry>,
    #[serde(default)]
    tests: Vec<TestEntry>,
    #[serde(default, rename = "defaultTest")]
    default_test: Option<TestEntry>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PromptEntry {
    Text(String),
    Raw { raw: String },
}

#[derive(Deserialize, Clone, Default)]
struct TestEntry {
    #[serde(default)]
    vars: Map<String, Value>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    profile: Option<String>,
}

fn var_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `template` with every `{{name}}` (spaces allowed inside the braces) replaced by its var.
fn fill(template: &str, vars: &Map<String, Value>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = after[..end].trim();
        let value = vars.get(name).ok_or_else(|| {
            format!("the prompt uses {{{{{name}}}}} but the test has no var `{name}`")
        })?;
        out.push_str(&var_text(value));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// promptfoo-style YAML: every prompt × every test (the prompt with the test's vars filled in),
/// or, without `prompts:`, each test's `prompt` var. The vars are the case's facts.
pub fn from_yaml(text: &str) -> Result<Vec<Case>, String> {
    let file: PromptfooFile = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    let defaults = file.default_test.unwrap_or_default();
    let prompts: Vec<String> = file
        .prompts
        .into_iter()
        .map(|p| match p {
            PromptEntry::Text(t) | PromptEntry::Raw { raw: t } => t,
        })
        .collect();
    let mut cases = Vec::new();
    for (index, test) in file.tests.into_iter().enumerate() {
        let mut vars = defaults.vars.clone();
        vars.extend(test.vars);
        let texts = if prompts.is_empty() {
            let prompt = vars
                .get("prompt")
                .map(var_text)
                .ok_or_else(|| format!("test {}: no `prompts:` and no `prompt` var", index + 1))?;
            vec![fill(&prompt, &vars).map_err(|e| format!("test {}: {e}", index + 1))?]
        } else {
            prompts
                .iter()
                .map(|p| fill(p, &vars).map_err(|e| format!("test {}: {e}", index + 1)))
                .collect::<Result<_, _>>()?
        };
        let many = texts.len() > 1;
        for (p, text) in texts.into_iter().enumerate() {
            if text.trim().is_empty() {
                return Err(format!("test {}: the prompt is empty", index + 1));
            }
            let n = cases.len() + 1;
            let id = match test.id.clone().and_then(id_text) {
                Some(id) if many => format!("{id}-p{}", p + 1),
                Some(id) => id,
                None => format!("case-{n}"),
            };
            cases.push(Case {
                id,
                messages: vec![Message::user(text)],
                context: context_of(vars.clone()),
                profile: test.profile.clone().or_else(|| defaults.profile.clone()),
            });
        }
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_reads_prompts_messages_context_and_ids() {
        let text = r#"{"prompt": "Name a city.", "context": {"country": "France"}}

{"id": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "profile": "json"}
{"id": 7, "prompt": "x"}
"#;
        let cases = from_jsonl(text, "d.jsonl").expect("valid");
        assert_eq!(cases.len(), 3);
        assert_eq!(cases[0].id, "case-1");
        assert_eq!(cases[0].context.get_str("country"), Some("France"));
        assert_eq!(cases[1].id, "m");
        assert_eq!(cases[1].messages.len(), 2);
        assert_eq!(cases[1].profile.as_deref(), Some("json"));
        assert_eq!(cases[2].id, "7");
    }

    #[test]
    fn bad_jsonl_lines_name_file_and_line() {
        for (text, line, words) in [
            ("{\"prompt\": \"a\"}\nnot json\n", 2, "expected"),
            (
                "{\"prompt\": \"a\", \"messages\": [{\"role\":\"user\",\"content\":\"b\"}]}",
                1,
                "not both",
            ),
            ("\n\n{\"context\": {}}", 3, "needs a non-empty"),
            ("{\"prompt\": \"a\", \"promt\": 1}", 1, "unknown field"),
            ("{\"prompt\": \"a\", \"id\": \"\"}", 1, "`id`"),
        ] {
            let err = from_jsonl(text, "d.jsonl").expect_err(text);
            assert!(err.starts_with(&format!("d.jsonl:{line}:")), "{err}");
            assert!(err.contains(words), "{err}");
        }
    }

    #[test]
    fn promptfoo_yaml_fills_the_prompts_with_the_vars() {
        let text = r#"
prompts:
  - "Give {{ city }} as JSON."
defaultTest:
  vars: {style: short}
tests:
  - vars: {city: Paris}
  - vars: {city: Lima}
    id: lima
"#;
        let cases = from_yaml(text).expect("valid");
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].messages[0].content, "Give Paris as JSON.");
        assert_eq!(cases[0].id, "case-1");
        assert_eq!(cases[1].id, "lima");
        assert_eq!(cases[1].context.get_str("style"), Some("short"));
        let err = from_yaml("prompts: ['{{x}}']\ntests:\n  - vars: {y: 1}\n").expect_err("no x");
        assert!(err.contains("`x`"), "{err}");
        let cases =
            from_yaml("tests:\n  - vars: {prompt: 'Say {{w}}', w: hi}\n").expect("prompt var");
        assert_eq!(cases[0].messages[0].content, "Say hi");
    }
}
