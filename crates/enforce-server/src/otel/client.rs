//! The HTTP client of the OTLP exporters (spans and log records): reqwest on the server's
//! runtime.

use enforce_core::async_trait;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// A receiver's answer is read up to this size (it is a short status, never needed whole).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Sends the exporter's requests with reqwest on the server's runtime. The batch processor
/// exports from its own thread, where an async client has no runtime: it hands each request
/// to the runtime and waits for the answer.
#[derive(Debug, Clone)]
pub(super) struct RuntimeClient {
    /// Sends the requests.
    pub client: reqwest::Client,
    /// The server's runtime, which the client needs.
    pub runtime: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let answer = self.runtime.spawn(async move {
            let mut response = client.execute(request).await?;
            let status = response.status();
            let headers = std::mem::take(response.headers_mut());
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                let room = MAX_ANSWER_BYTES.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = answer.await??;
        let mut response = Response::builder().status(status).body(Bytes::from(body))?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
