//! The HTTP target of the `external` validator: POSTs the input to an `http://` or `https://`
//! checker with reqwest (rustls; `ca_file` adds a private CA) and reads its verdict.

use enforce_core::Unavailable;
use enforce_validators::BuildError;
use std::path::Path;

/// Most response bytes read from an HTTP checker.
const MAX_HTTP_RESPONSE: usize = 1024 * 1024;

/// An HTTP checker: its URL and the client that calls it.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    url: reqwest::Url,
    /// The URL as configured when it has `{context.KEY}` placeholders, filled per call.
    template: Option<String>,
    client: reqwest::Client,
}

impl PartialEq for HttpTarget {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url
    }
}

impl Eq for HttpTarget {}

/// Reads the PEM certificates of `ca_file` (for the HTTP and gRPC targets); errors name the key.
pub(crate) fn read_ca_file(path: &Path) -> Result<Vec<u8>, BuildError> {
    let pem = std::fs::read(path)
        .map_err(|e| BuildError::at("ca_file", format!("cannot read {}: {e}", path.display())))?;
    if !pem
        .windows(b"-----BEGIN CERTIFICATE-----".len())
        .any(|w| w == b"-----BEGIN CERTIFICATE-----")
    {
        return Err(BuildError::at(
            "ca_file",
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(pem)
}

impl HttpTarget {
    /// An HTTP target for `url` (`http://` or `https://`); `ca_pem` adds trusted CA
    /// certificates (PEM) to the built-in roots. Errors name the key at fault.
    pub fn new(url: &str, ca_pem: Option<&[u8]>) -> Result<Self, BuildError> {
        let has_placeholders = !crate::case_context::placeholder_keys(url).is_empty();
        // Checked with every placeholder filled, as a call fills it.
        let example = crate::case_context::fill(url, &placeholder_example(url), |v| v.to_string())
            .map_err(|e| BuildError::at("url", e))?;
        let parsed =
            reqwest::Url::parse(&example).map_err(|e| BuildError::at("url", e.to_string()))?;
        if has_placeholders && authority_of(url).contains("{context.") {
            return Err(BuildError::at(
                "url",
                "`{context.KEY}` placeholders may stand in the path or the query, not in the scheme or the host",
            ));
        }
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(BuildError::at("url", "only http:// and https:// URLs"));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(BuildError::at("url", "the URL needs a host"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(BuildError::at(
                "url",
                "the URL cannot carry credentials (they would end up in logs)",
            ));
        }
        // A checker is called directly: no proxy from the environment, no redirects (a 3xx is
        // no verdict).
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent("enforce");
        if let Some(pem) = ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| BuildError::at("ca_file", format!("not a PEM certificate: {e}")))?;
            if certs.is_empty() {
                return Err(BuildError::at("ca_file", "no PEM certificate in it"));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| BuildError::at("url", format!("cannot build the HTTP client: {e}")))?;
        Ok(HttpTarget {
            url: parsed,
            template: has_placeholders.then(|| url.to_string()),
            client,
        })
    }

    /// The URL of a call with `context`: the configured one, its `{context.KEY}` placeholders
    /// filled percent-encoded.
    pub(crate) fn url_for(
        &self,
        context: &enforce_core::Context,
    ) -> Result<reqwest::Url, Unavailable> {
        let Some(template) = &self.template else {
            return Ok(self.url.clone());
        };
        let filled =
            crate::case_context::fill(template, context, crate::case_context::percent_encode)
                .map_err(Unavailable::new)?;
        reqwest::Url::parse(&filled)
            .map_err(|e| Unavailable::new(format!("{filled} is not a URL: {e}")))
    }

    /// The checker's URL.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// POSTs `body` of `content_type` to `url` (this target's, its placeholders filled);
    /// `Ok(None)` = passed, `Ok(Some(output))` = rejected with output (a JSON `issues` list
    /// re-encoded as trace lines), `Err` = no verdict.
    pub(crate) async fn post_to(
        &self,
        url: reqwest::Url,
        content_type: &'static str,
        body: String,
    ) -> Result<Option<String>, Unavailable> {
        let unavailable = |what: String| Unavailable::new(format!("{}: {what}", self.url));
        let mut response = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| unavailable(describe(&e)))?;
        let status = response.status();
        if status != reqwest::StatusCode::OK {
            return Err(unavailable(format!("HTTP status {}", status.as_u16())));
        }
        let mut raw = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unavailable(format!("cannot read the answer: {}", describe(&e))))?
        {
            let room = MAX_HTTP_RESPONSE.saturating_sub(raw.len());
            raw.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if room <= chunk.len() {
                break;
            }
        }
        Ok(verdict(&String::from_utf8_lossy(&raw)))
    }
}

/// A context with a value for every placeholder of `url`, to check the URL's shape when it is
/// configured.
fn placeholder_example(url: &str) -> enforce_core::Context {
    let mut context = enforce_core::Context::new();
    for key in crate::case_context::placeholder_keys(url) {
        context.insert(key, "x");
    }
    context
}

/// The scheme and authority of `url` as written (everything before the path).
fn authority_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// A reqwest error with its causes (reqwest's own Display hides the reason, e.g. the refused
/// connection or the TLS failure).
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The verdict in a 200 body: empty (or `{"issues": []}`) passes; a JSON `issues` list is
/// re-encoded as `Line N: message` lines so one parser handles every checker; any other text
/// is the checker's output.
fn verdict(text: &str) -> Option<String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return None;
    }
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(trimmed) {
        if let Some(serde_json::Value::Array(items)) = map.get("issues") {
            if items.is_empty() {
                return None;
            }
            let lines: Vec<String> = items
                .iter()
                .map(|i| {
                    let message = i
                        .get("message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("check failed");
                    match (
                        i.get("line").and_then(|l| l.as_u64()),
                        i.get("column").and_then(|c| c.as_u64()),
                    ) {
                        (Some(l), Some(c)) => format!("input:{l}:{c}: {message}"),
                        (Some(l), None) => format!("Line {l}: {message}"),
                        _ => message.to_string(),
                    }
                })
                .collect();
            return Some(lines.join("\n"));
        }
    }
    Some(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = HttpTarget::new("http://127.0.0.1:9000/check?x=1", None).unwrap();
        assert_eq!(t.url(), "http://127.0.0.1:9000/check?x=1");
        assert!(HttpTarget::new("https://example.invalid/", None).is_ok());
        for bad in ["ftp://x/", "http://u:p@x/", "not a url", "http://"] {
            let err = HttpTarget::new(bad, None).unwrap_err();
            assert_eq!(err.key, "url", "{bad}: {err}");
        }
        let err = HttpTarget::new("https://x/", Some(b"not pem")).unwrap_err();
        assert_eq!(err.key, "ca_file", "{err}");
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(" \n"), None);
        assert_eq!(verdict(r#"{"issues": []}"#), None);
        assert_eq!(
            verdict(
                r#"{"issues":[{"message":"m","line":3,"column":2},{"message":"n","line":4},{}]}"#
            )
            .as_deref(),
            Some("input:3:2: m\nLine 4: n\ncheck failed")
        );
        assert_eq!(verdict("Line 2: bad\n").as_deref(), Some("Line 2: bad\n"));
    }
}
