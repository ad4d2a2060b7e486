//! Reformulation hooks outside the process, for the input stage's `reformulate`: a command
//! ([`CommandReformulator`]) or an HTTP endpoint such as the caller's retrieval service
//! ([`HttpReformulator`]).
//!
//! Both get one JSON object, the request as the input validators saw it:
//!
//! ```json
//! {"question": "…", "system": "…", "context": "…" | ["…"] | null,
//!  "history": [{"role": "user" | "assistant" | "tool", "content": "…"}],
//!  "issues": [{"code": "CONTEXT_NOT_RELEVANT", "message": "…"}], "facts": {…}}
//! ```
//!
//! (a command on stdin, an endpoint as a POST body) and answer with
//! `{"question": "…", "context": "…" | ["…"]}`, either key optional, at least one present.
//! Anything else (a non-zero exit, an HTTP error, a timeout, other JSON) is a failed hook: the
//! loop then generates with the original request and the audit says why.

use enforce_core::{
    async_trait, context::keys, input::Reformulation, input::Reformulator, Context, Issue,
};
use serde_json::{json, Map, Value};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Most bytes of a hook's answer that are read.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The JSON object a hook gets.
pub fn hook_input(context: &Context, issues: &[Issue]) -> Value {
    let facts: Map<String, Value> = context
        .as_map()
        .iter()
        .filter(|(k, _)| !k.starts_with(keys::PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    json!({
        "question": context.get_str(keys::QUESTION).unwrap_or_default(),
        "system": context.get_str(keys::SYSTEM).unwrap_or_default(),
        "context": context.get(keys::RETRIEVED_CONTEXT).cloned().unwrap_or(Value::Null),
        "history": context.get(keys::HISTORY).cloned().unwrap_or_else(|| json!([])),
        "issues": issues
            .iter()
            .map(|i| json!({"code": i.code, "message": i.message}))
            .collect::<Vec<_>>(),
        "facts": facts,
    })
}

/// A hook's answer, parsed.
fn parse_answer(text: &str) -> Result<Reformulation, String> {
    serde_json::from_str::<Reformulation>(text.trim()).map_err(|e| {
        let shown: String = text.chars().take(200).collect();
        format!("the answer is not {{\"question\": …, \"context\": …}} JSON ({e}): {shown:?}")
    })
}

/// Runs a command: the request JSON on stdin, the reformulation JSON on stdout, exit 0.
#[derive(Debug, Clone)]
pub struct CommandReformulator {
    argv: Vec<String>,
    timeout: Duration,
}

impl CommandReformulator {
    /// Runs `argv` (program first; must not be empty) with `timeout`.
    pub fn new(argv: Vec<String>, timeout: Duration) -> Result<Self, String> {
        if argv.first().is_none_or(|p| p.is_empty()) {
            return Err("the command is empty".to_string());
        }
        Ok(CommandReformulator { argv, timeout })
    }
}

#[async_trait]
impl Reformulator for CommandReformulator {
    fn kind(&self) -> &str {
        "command"
    }

    async fn reformulate(
        &self,
        context: &Context,
        issues: &[Issue],
    ) -> Result<Reformulation, String> {
        let program = &self.argv[0];
        let mut child = tokio::process::Command::new(program)
            .args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start '{program}': {e}"))?;
        let input = hook_input(context, issues).to_string();
        let mut stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let run = async {
            let write = async {
                if let Some(s) = stdin.as_mut() {
                    let _ = s.write_all(input.as_bytes()).await;
                    let _ = s.shutdown().await;
                }
                drop(stdin);
            };
            let (_, out, err, status) = tokio::join!(
                write,
                read_limited(stdout),
                read_limited(stderr),
                child.wait()
            );
            (out, err, status)
        };
        let (out, err, status) = tokio::time::timeout(self.timeout, run).await.map_err(|_| {
            format!(
                "'{program}' did not finish within {} ms and was killed",
                self.timeout.as_millis()
            )
        })?;
        let status = status.map_err(|e| format!("'{program}' failed: {e}"))?;
        if !status.success() {
            let why: String = err.trim().chars().take(300).collect();
            return Err(format!("'{program}' exited with {status}: {why}"));
        }
        parse_answer(&out)
    }
}

async fn read_limited<R: tokio::io::AsyncRead + Unpin>(pipe: Option<R>) -> String {
    let Some(pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let _ = pipe
        .take(MAX_ANSWER_BYTES as u64)
        .read_to_end(&mut kept)
        .await;
    String::from_utf8_lossy(&kept).into_owned()
}

/// POSTs the request JSON to an endpoint (`http://` or `https://`) and reads the
/// reformulation from a 2xx answer.
#[derive(Debug, Clone)]
pub struct HttpReformulator {
    url: reqwest::Url,
    timeout: Duration,
    client: reqwest::Client,
}

impl HttpReformulator {
    /// POSTs to `url` with `timeout`.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("'{url}' is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("'{url}' is not an http:// or https:// URL"));
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(HttpReformulator {
            url,
            timeout,
            client,
        })
    }
}

#[async_trait]
impl Reformulator for HttpReformulator {
    fn kind(&self) -> &str {
        "http"
    }

    async fn reformulate(
        &self,
        context: &Context,
        issues: &[Issue],
    ) -> Result<Reformulation, String> {
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                format!(
                    "{} did not answer within {} ms",
                    self.url,
                    self.timeout.as_millis()
                )
            } else {
                format!("{}: {e}", self.url)
            }
        };
        let response = self
            .client
            .post(self.url.clone())
            .json(&hook_input(context, issues))
            .send()
            .await
            .map_err(failed)?;
        let status = response.status();
        let body = response.text().await.map_err(failed)?;
        if !status.is_success() {
            let shown: String = body.trim().chars().take(300).collect();
            return Err(format!("{} answered {status}: {shown}", self.url));
        }
        if body.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "{} answered more than {MAX_ANSWER_BYTES} bytes",
                self.url
            ));
        }
        parse_answer(&body)
    }
}
