//! Client connections under hostile timing, with small limits: a request refused for load is
//! refused before its body is read, the bodies held at once stay within the body budget, slow heads and idle keep-alive connections are closed
//! after `header_timeout`, a request head over the read buffer gets a 431, a slow body gets a
//! 408 at the request deadline, and a shutdown does not wait for a connection that never sent
//! a whole request head.

use crate::common::*;
use enforce_core::ScriptedRunner;
use enforce_server::{ModelOptions, ServerConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const GOOD: &str = "Fine.\n\n<!-- STEP: done -->";

/// A server whose one model waits for `gate` before answering.
async fn gated_server(config: ServerConfig, gate: Arc<tokio::sync::Semaphore>) -> Harness {
    let runner = Arc::new(Gated {
        inner: ScriptedRunner::texts([GOOD, GOOD, GOOD]),
        gate,
    });
    Harness::start(server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    ))
    .await
}

async fn with_header_timeout_300ms() -> Harness {
    let config = ServerConfig {
        header_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    };
    gated_server(config, Arc::new(tokio::sync::Semaphore::new(0))).await
}

async fn connect(h: &Harness) -> TcpStream {
    TcpStream::connect(h.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// What the server sends until it closes the connection or `within` passes (`None`: it was
/// still open then).
async fn read_until_closed(tcp: &mut TcpStream, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&got).into_owned())
}

/// What the server answers to `head` sent alone, its body never sent.
async fn answer_to_head(h: &Harness, head: &str) -> String {
    let mut tcp = connect(h).await;
    tcp.write_all(head.as_bytes()).await.unwrap();
    read_until_closed(&mut tcp, Duration::from_secs(5))
        .await
        .expect("answered without the body")
}

/// The head of a chat request whose body is `length` bytes long.
fn chat_head(length: usize) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

#[tokio::test]
async fn a_request_refused_for_load_is_refused_before_its_body_is_read() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let config = ServerConfig {
        max_concurrent: 1,
        ..ServerConfig::default()
    };
    let h = gated_server(config, gate.clone()).await;
    let first = {
        let (client, url) = (h.client.clone(), h.url("/v1/chat/completions"));
        tokio::spawn(async move { client.post(url).json(&user_body(false)).send().await })
    };
    h.wait_in_flight(1).await;
    // A large body announced, a few bytes of it sent: the 429 comes without the rest.
    let mut tcp = connect(&h).await;
    tcp.write_all(chat_head(9_000_000).as_bytes())
        .await
        .unwrap();
    tcp.write_all(b"{\"model\":").await.unwrap();
    let answer = read_until_closed(&mut tcp, Duration::from_secs(5))
        .await
        .expect("answered without the body");
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    // The token count holds a permit too.
    let head = chat_head(9_000_000).replace("/v1/chat/completions", "/v1/messages/count_tokens");
    let answer = answer_to_head(&h, &head).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn the_bodies_held_at_once_stay_within_the_body_budget() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let config = ServerConfig {
        max_concurrent: 4,
        max_body_bytes: 200_000,
        max_body_bytes_in_flight: Some(150_000),
        ..ServerConfig::default()
    };
    let h = gated_server(config, gate.clone()).await;
    let mut held = user_body(false);
    held["messages"][0]["content"] = "x".repeat(100_000).into();
    let first = {
        let (client, url) = (h.client.clone(), h.url("/v1/chat/completions"));
        tokio::spawn(async move { client.post(url).json(&held).send().await })
    };
    h.wait_in_flight(1).await;
    // 80 KB more would pass the budget while the first body is held: a 429 before the body.
    let answer = answer_to_head(&h, &chat_head(80_000)).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("retry-after"), "{answer}");
    // A body larger than the whole budget (though within max_body_bytes) is never admitted.
    let answer = answer_to_head(&h, &chat_head(160_000)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // A body without Content-Length reserves as it grows: refused once it passes the budget.
    let mut tcp = connect(&h).await;
    let head = chat_head(0).replace("content-length: 0", "transfer-encoding: chunked");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 20_000, "x".repeat(20_000));
    let mut answer = None;
    for _ in 0..5 {
        if tcp.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
        answer = read_until_closed(&mut tcp, Duration::from_millis(100)).await;
        if answer.is_some() {
            break;
        }
    }
    let answer = answer.expect("refused before the body ended");
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    // Answered, the first request gave its bytes back: a body of the same size is admitted.
    let mut again = user_body(false);
    again["messages"][0]["content"] = "x".repeat(100_000).into();
    gate.add_permits(1);
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .json(&again)
        .send()
        .await;
    assert_eq!(resp.unwrap().status(), 200);
}

/// A connection reads about 64 KiB at a time, and that bounds a request head too: one well
/// under is answered, one of 150 KiB gets 431 (hyper's default would read and accept it).
#[tokio::test]
async fn a_request_head_larger_than_the_read_buffer_gets_a_431() {
    let h = with_header_timeout_300ms().await;
    let head = |padding: usize| {
        format!(
            "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-padding: {}\r\n\r\n",
            "p".repeat(padding)
        )
    };
    let under = answer_to_head(&h, &head(40 * 1024)).await;
    assert!(under.starts_with("HTTP/1.1 200"), "{under:.80}");
    let over = answer_to_head(&h, &head(150 * 1024)).await;
    assert!(over.starts_with("HTTP/1.1 431"), "{over:.80}");
}

#[tokio::test]
async fn a_request_head_sent_slowly_is_closed_after_the_header_timeout() {
    let h = with_header_timeout_300ms().await;
    let mut tcp = connect(&h).await;
    let started = Instant::now();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    // A header line every 50 ms, never the blank line that ends the head.
    let mut closed = false;
    for i in 0..40 {
        if tcp
            .write_all(format!("x-{i}: y\r\n").as_bytes())
            .await
            .is_err()
        {
            closed = true;
            break;
        }
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(50), tcp.read(&mut buf)).await
        {
            closed = true;
            break;
        }
    }
    let elapsed = started.elapsed();
    assert!(
        closed,
        "the dribbling connection was still open after {elapsed:?}"
    );
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let h = with_header_timeout_300ms().await;
    let mut tcp = connect(&h).await;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = read_until_closed(&mut tcp, Duration::from_secs(3))
        .await
        .expect("the idle connection was closed");
    let elapsed = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
}

#[tokio::test]
async fn a_body_sent_slowly_gets_a_408_at_the_request_deadline() {
    let config = ServerConfig {
        request_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    };
    let h = gated_server(config, Arc::new(tokio::sync::Semaphore::new(0))).await;
    let mut tcp = connect(&h).await;
    tcp.write_all(chat_head(100).as_bytes()).await.unwrap();
    tcp.write_all(b"{\"model\":").await.unwrap();
    let started = Instant::now();
    let answer = read_until_closed(&mut tcp, Duration::from_secs(3))
        .await
        .expect("answered at the deadline");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_body_timeout"), "{answer}");
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn a_shutdown_does_not_wait_for_a_half_sent_request_head() {
    let config = ServerConfig {
        shutdown_grace: Duration::from_secs(10),
        ..ServerConfig::default()
    };
    let mut h = gated_server(config, Arc::new(tokio::sync::Semaphore::new(0))).await;
    let mut half = connect(&h).await;
    half.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    // An idle connection that never sent anything.
    let _idle = connect(&h).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let served = h.begin_shutdown();
    tokio::time::timeout(Duration::from_secs(3), served)
        .await
        .expect("serve returned well within the grace")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        read_until_closed(&mut half, Duration::from_secs(1)).await,
        Some(String::new())
    );
}
