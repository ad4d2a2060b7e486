//! The system calls a request costs the thread that serves it: tokio wakes its driver (an
//! eventfd write) whenever a timer is set before every pending one, even from the driver's own
//! thread, and every request sets one (its deadline). The server keeps a timer pending ahead of
//! them, so serving a request writes once: its answer.

use crate::common::server_with;
use enforce_core::{Ask, ReplyStream};
use enforce_core::{Enforcer, Reply, Runner};
use enforce_server::{ModelOptions, ServerConfig};
use std::sync::Arc;

/// Answers after yielding once, so the request's deadline timer is set while it waits.
struct YieldsOnce;

impl Runner for YieldsOnce {
    fn ask<'a>(&'a self, _: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async {
            tokio::task::yield_now().await;
            Ok(Reply::text("An answer."))
        })
    }
}

/// The write-type system calls a thread made so far (`syscw` of its `/proc` I/O counters).
fn writes_of(thread: &str) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{thread}/io")).expect("the thread's io");
    io.lines()
        .find_map(|line| line.strip_prefix("syscw: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a syscw line")
}

#[test]
fn a_request_costs_its_serving_thread_one_write() {
    if !std::path::Path::new("/proc/thread-self/io").exists() {
        eprintln!("skipped: /proc/thread-self/io not found (not Linux, or /proc not mounted)");
        return;
    }
    // The server alone on a thread of its own, on the single-threaded runtime it runs on a
    // single core: every write that thread makes is the server's.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    listener.set_nonblocking(true).expect("non-blocking");
    let addr = listener.local_addr().expect("an address");
    let (thread_tx, thread_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let thread = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
        thread_tx.send(thread).expect("the test waits");
        runtime.block_on(async move {
            let server = server_with(
                ServerConfig::default(),
                Arc::new(YieldsOnce),
                Enforcer::new(vec![]),
                ModelOptions::default(),
            );
            let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
            server
                .serve(listener, async move {
                    let _ = stop_rx.await;
                })
                .await
        })
    });
    let thread = thread_rx.recv().expect("the server's thread");
    let thread = thread.to_string_lossy().into_owned();

    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client");
    let url = format!("http://{addr}/v1/chat/completions");
    let ask = || async {
        let response = http
            .post(&url)
            .json(&crate::common::user_body(false))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200);
        response.bytes().await.expect("a body");
    };
    // The connection and the server's first timers are made before counting.
    client.block_on(async {
        for _ in 0..5 {
            ask().await;
        }
    });
    let requests = 200;
    let before = writes_of(&thread);
    client.block_on(async {
        for _ in 0..requests {
            ask().await;
        }
    });
    let writes = writes_of(&thread) - before;
    let _ = stop_tx.send(());
    serving.join().expect("the server's thread").expect("serve");
    // One `writev` per answer; the timer kept ahead wakes the driver once a second, and the
    // run takes well under a few seconds. Each request waking the driver would double it.
    assert!(
        writes <= requests + 5,
        "{writes} writes for {requests} requests: more than the answers"
    );
    assert!(
        writes >= requests,
        "{writes} writes for {requests} requests"
    );
}
