//! Errors: [`ServerError`] for starting and running the server, [`ApiError`] for what a client
//! receives in the OpenAI error shape.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// Why the server could not be built or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Two models share one public id.
    #[error("model id `{0}` is configured twice")]
    DuplicateModel(String),
    /// A model id is empty.
    #[error("a model id is empty")]
    EmptyModelId,
    /// No model is configured.
    #[error("no model is configured")]
    NoModels,
    /// The HTTP client that forwards the endpoints this proxy does not enforce could not be
    /// built (its TLS setup failed).
    #[error("the HTTP client of the passthrough: {0}")]
    PassthroughClient(String),
    /// An accepted API key is empty or blank: a request presenting no key at all would match it.
    #[error("an API key is empty ({origin}); give the key, or no keys at all to serve without authentication")]
    EmptyApiKey {
        /// Where the key came from.
        origin: String,
    },
    /// The session directory could not be created.
    #[error("session directory {path}: {source}")]
    SessionDir {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The audit log could not be opened.
    #[error("audit log {path}: {source}")]
    AuditLog {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `server.otlp` is set, but this build has no OpenTelemetry export.
    #[error("server.otlp: this build has no OpenTelemetry export; build enforce-server with the `otel` feature, or remove `otlp` and unset OTEL_EXPORTER_OTLP_ENDPOINT")]
    TracingNotBuilt,
    /// The OpenTelemetry exporter could not start.
    #[error("OpenTelemetry export: {0}")]
    Tracing(String),
    /// The shared state (`server.state`) cannot be used.
    #[error("server.state: {0}")]
    State(#[from] crate::shared::StateError),
    /// Serving failed.
    #[error("server I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// An error a client receives: an HTTP status and `{"error":{"message","type","param","code"}}`,
/// the body OpenAI SDKs and Open WebUI understand.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What failed and what to do, for a person.
    pub message: String,
    /// The error `type` (e.g. `invalid_request_error`).
    pub kind: &'static str,
    /// The error `code` (e.g. `enforcement_unresolved`).
    pub code: &'static str,
    /// The request field at fault, if any.
    pub param: Option<&'static str>,
    /// `Retry-After` seconds, sent with 429 and 503.
    pub retry_after: Option<u64>,
    /// The `enforcement` object, when an enforcement ran.
    pub enforcement: Option<Box<Value>>,
    /// The `X-Enforce-Status` header, when an enforcement ran.
    pub enforce_status: Option<&'static str>,
}

impl ApiError {
    /// An error with the given status, type, code and message.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            code,
            param: None,
            retry_after: None,
            enforcement: None,
            enforce_status: None,
        }
    }

    /// A 400 about the request.
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            param,
            ..Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_request",
                message,
            )
        }
    }

    /// The OpenAI error body, `{"error":{"message","type","param","code"},"enforcement":…}`
    /// (also a stream's error chunk), `error` first: SDKs print the body as it is, and the
    /// person reading should meet the message before the details.
    pub fn body(&self) -> impl serde::Serialize + '_ {
        OpenAiErrorBody {
            error: self.error_object(),
            enforcement: self.enforcement.as_deref(),
        }
    }

    /// [`body`](Self::body) as a stream's error chunk, whose HTTP status was already sent: the
    /// `error` also carries `status`, the status it stands for, and its `code` is
    /// [`streamed_code`](Self::streamed_code).
    pub fn streamed_body(&self) -> impl serde::Serialize + '_ {
        OpenAiErrorBody {
            error: OpenAiError {
                code: self.streamed_code(),
                status: Some(self.status.as_u16()),
                ..self.error_object()
            },
            enforcement: self.enforcement.as_deref(),
        }
    }

    /// Whether a stream whose outcome is known before its first byte answers with this error
    /// as a plain HTTP error, as a request not streamed does, rather than as a `200` stream
    /// holding it: a 4xx (an answer that failed its checks is a 422, which the SDKs raise as
    /// their own error type and do not retry), or an error that says when to come back
    /// (`Retry-After`, which the SDKs' retries honour). Other 5xx stay in the stream: the SDKs
    /// would send the whole enforced request again at once.
    pub(crate) fn refuses_a_stream(&self) -> bool {
        self.status.is_client_error() || self.retry_after.is_some()
    }

    /// The `code` of this error inside a stream, whose HTTP status was already sent: the
    /// status itself (`"422"`) for a client error that asking again cannot mend, else
    /// [`code`](Self::code). `@ai-sdk/openai` maps an in-stream error to a status by a
    /// numeric `code` first, then by words in `code`/`type`, else 500, and retries 408, 409,
    /// 429 and 5xx: with `enforcement_unresolved` it took an unresolved answer for a 500 and
    /// ran the whole enforcement twice more. What failed stays in `type` and `enforcement`.
    pub(crate) fn streamed_code(&self) -> std::borrow::Cow<'static, str> {
        let status = self.status.as_u16();
        let retryable = matches!(status, 408 | 409 | 429) || status >= 500;
        if self.status.is_client_error() && !retryable {
            std::borrow::Cow::Owned(status.to_string())
        } else {
            std::borrow::Cow::Borrowed(self.code)
        }
    }

    fn error_object(&self) -> OpenAiError<'_> {
        OpenAiError {
            message: &self.message,
            kind: self.kind,
            param: self.param,
            code: std::borrow::Cow::Borrowed(self.code),
            status: None,
        }
    }

    /// The headers every surface sends with this error: `Retry-After`, the enforcement status
    /// headers when an enforcement ran, `WWW-Authenticate` with a 401.
    pub fn headers(&self, headers: &mut HeaderMap) {
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(status) = self.enforce_status {
            headers.insert(
                crate::headers::ENFORCE_STATUS_HEADER,
                HeaderValue::from_static(status),
            );
        }
        let validation_status = self
            .enforcement
            .as_deref()
            .and_then(|e| e["validation_status"].as_str())
            .and_then(|v| HeaderValue::from_str(v).ok());
        if let Some(value) = validation_status {
            headers.insert(crate::headers::VALIDATION_STATUS_HEADER, value);
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
    }
}

#[derive(serde::Serialize)]
struct OpenAiErrorBody<'a> {
    error: OpenAiError<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enforcement: Option<&'a Value>,
}

#[derive(serde::Serialize)]
struct OpenAiError<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: std::borrow::Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
}

/// The OpenAI envelope (what the chat-completions and Responses surfaces and the model and
/// session endpoints answer with).
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        self.headers(response.headers_mut());
        response
    }
}
