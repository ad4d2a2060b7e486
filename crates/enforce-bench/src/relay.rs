//! A byte relay: the floor of any proxy on this machine. It forwards TCP bytes between a client
//! and the upstream without reading HTTP, so what it adds over `direct` is the cost of one more
//! process on the path (the extra loopback hop, the cross-core wake-ups), which no proxy can
//! avoid and which is part of every proxied row.
//!
//! With `--http`, an HTTP relay instead: axum's server and hyper's pooled client, the request
//! and the answer passed on untouched. What reading and writing HTTP on both sides costs here,
//! before any proxy logic.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};

/// Serves until the process is killed; prints its address first.
pub async fn serve(listen: &str, upstream: &str) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    println!("{}", listener.local_addr()?);
    loop {
        let (mut client, _) = listener.accept().await?;
        let upstream = upstream.to_string();
        tokio::spawn(async move {
            let Ok(mut server) = TcpStream::connect(&upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
    }
}

/// Serves the HTTP relay until the process is killed; prints its address first.
pub async fn serve_http(listen: &str, upstream: &str) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    println!("{}", listener.local_addr()?);
    axum::serve(listener, http_relay(upstream)).await?;
    Ok(())
}

struct Upstream {
    client: Client<HttpConnector, Full<bytes::Bytes>>,
    /// `host:port`.
    address: String,
}

/// Every request, whatever its path, passed to `upstream` (`host:port`) and its answer back.
fn http_relay(upstream: &str) -> axum::Router {
    let upstream = Upstream {
        client: Client::builder(TokioExecutor::new()).build_http(),
        address: upstream.to_string(),
    };
    axum::Router::new()
        .fallback(forward)
        .with_state(Arc::new(upstream))
}

async fn forward(State(upstream): State<Arc<Upstream>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("http://{}{path}", upstream.address).parse() else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut out = axum::http::Request::new(Full::new(body));
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    *out.headers_mut() = parts.headers;
    match upstream.client.request(out).await {
        Ok(answer) => answer.map(Body::new),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn serve_on_a_free_port(router: axum::Router) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move { axum::serve(listener, router).await });
        address
    }

    #[tokio::test]
    async fn the_http_relay_passes_the_request_and_the_answer_on_untouched() {
        let upstream = axum::Router::new().fallback(|request: Request| async move {
            let path = request.uri().path().to_string();
            let key = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let body = request
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            (
                StatusCode::CREATED,
                [("x-upstream", "yes")],
                format!("{path} {key} {}", String::from_utf8_lossy(&body)),
            )
        });
        let upstream = serve_on_a_free_port(upstream).await;
        let relay = serve_on_a_free_port(http_relay(&upstream)).await;
        let answer = reqwest::Client::new()
            .post(format!("http://{relay}/v1/chat/completions"))
            .header("authorization", "Bearer sk-x")
            .body("{\"model\":\"m\"}")
            .send()
            .await
            .expect("an answer");
        assert_eq!(answer.status(), 201);
        assert_eq!(answer.headers()["x-upstream"], "yes");
        assert_eq!(
            answer.text().await.expect("text"),
            "/v1/chat/completions Bearer sk-x {\"model\":\"m\"}"
        );
    }
}
