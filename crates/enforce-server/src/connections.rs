//! Client connections: HTTP/1.1 served by hyper, each request head due within
//! [`ServerConfig::header_timeout`](crate::ServerConfig::header_timeout) of the connection
//! opening or its previous answer ending (so a slow head and an idle keep-alive connection
//! are both closed after it), read about [`READ_BUFFER_BYTES`] at a time, and a shutdown
//! that closes at once the connections that never sent a whole request head while the others
//! finish their answer.

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower_service::Service;

/// How long accepting pauses after an error that is not the client's (out of file
/// descriptors): retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// About the most a connection reads from its socket at once, which also bounds the request
/// head it accepts (a larger one gets 431). Read with hyper's default, about 400 KiB at a
/// time, a 9 MB body left some 6 MB more resident than read 64 KiB at a time: the read
/// buffers the body arrives in, on top of the body (RELIABILITY.md, "Hostile clients").
/// A small request arrives in one read either way; request heads are a few KiB.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Accepts connections on `listener` and serves `router` on each until `stopping` turns
/// true, then stops accepting and returns once every connection has closed.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    stopping: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    let mut stop = stopping.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(error = %e, "could not set TCP_NODELAY");
                    }
                    connections.spawn(connection(tcp, router.clone(), header_timeout, stopping.clone()));
                }
                Err(e) if is_the_clients(&e) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            // Finished connections are reaped as they end, not kept until shutdown.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = stopped(&mut stop) => break,
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// An accept error that concerns one connection only: accepting goes on at once.
fn is_the_clients(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    )
}

/// Serves one connection. At shutdown, a connection whose first request head has not
/// arrived whole is dropped (it has nothing in flight); the others stop after the answer in
/// progress (hyper closes one waiting between requests at once).
async fn connection(
    tcp: TcpStream,
    router: Router,
    header_timeout: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    let head_seen = Arc::new(AtomicBool::new(false));
    let seen = head_seen.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        seen.store(true, Ordering::Relaxed);
        let mut router = router.clone();
        router.call(request.map(Body::new))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(READ_BUFFER_BYTES);
    let mut served = pin!(builder.serve_connection(TokioIo::new(tcp), service));
    tokio::select! {
        result = served.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "client connection ended with an error");
            }
            return;
        }
        () = stopped(&mut stopping) => {}
    }
    if !head_seen.load(Ordering::Relaxed) {
        return;
    }
    served.as_mut().graceful_shutdown();
    if let Err(e) = served.await {
        tracing::debug!(error = %e, "client connection ended with an error");
    }
}

/// Completes once `stopping` is true (or can no longer change).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    // The guard the wait returns is not `Send`: dropped here, before any other await.
    let _ = stopping.wait_for(|stop| *stop).await;
}
