//! A request body on its way to the upstream ([`UploadBody`]): serialized whole, or, for a
//! large one, handed to the connection in chunks as serde writes it, so that a long
//! conversation is not held a second time as its request's JSON.
//!
//! serde writes a value whole, and the body borrows the conversation, so the serializer runs
//! on the calling task inside [`tokio::task::block_in_place`] while the request is sent from a
//! task of its own that drains the chunks ([`post`]). A single-threaded runtime cannot do
//! that, and a body under [`STREAMED_FROM`] gains little: both are written whole.

use crate::transport::{SendError, Transport, UploadBody};
use bytes::Bytes;
use reqwest::header::HeaderMap;
use std::io::{self, Write};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The smallest body (as estimated before it is written) streamed rather than written whole.
const STREAMED_FROM: usize = 1 << 20;

/// The size of a streamed body's chunks.
const CHUNK_BYTES: usize = 64 * 1024;

/// Chunks written but not yet taken by the connection: the most a streamed body holds.
const CHUNKS_QUEUED: usize = 4;

/// Writes a request's body: serde writing a value into `out`.
pub(crate) type WriteBody<'a> = &'a (dyn Fn(&mut dyn Write) -> serde_json::Result<()> + Sync);

/// Why a body was not sent.
#[derive(Debug)]
pub(crate) enum UploadError {
    /// The body could not be serialized.
    Unwritable(serde_json::Error),
    /// The request failed.
    Send(SendError),
}

/// Where and how a request goes: the parts of it every try shares.
pub(crate) struct Target<'a> {
    pub transport: &'a Transport,
    pub url: &'a reqwest::Url,
    pub uri: &'a http::Uri,
    pub headers: &'a HeaderMap,
}

/// Posts the body `write` writes, `room` its estimated size: streamed when it is large and
/// the runtime has threads to spare for the serializer, else written whole first.
pub(crate) async fn post(
    target: &Target<'_>,
    write: WriteBody<'_>,
    room: usize,
    deadline: Instant,
) -> Result<crate::transport::UpstreamResponse, UploadError> {
    if room < STREAMED_FROM || !multi_threaded() {
        let body = whole(write, room).map_err(UploadError::Unwritable)?;
        return target
            .transport
            .post(
                target.url,
                target.uri,
                target.headers,
                body.into(),
                deadline,
            )
            .await
            .map_err(UploadError::Send);
    }
    streamed(target, write, deadline).await
}

/// The body written into one buffer, made room for once (a buffer grown from empty is
/// copied each time it grows and ends up to twice the body's size).
fn whole(write: WriteBody<'_>, room: usize) -> serde_json::Result<Bytes> {
    let mut bytes = Vec::with_capacity(room);
    write(&mut bytes)?;
    Ok(Bytes::from(bytes))
}

/// Whether this runs on a runtime whose workers can hand their tasks over while one blocks
/// ([`tokio::task::block_in_place`] panics on any other).
fn multi_threaded() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Sends the request from a task of its own, which takes the chunks the serializer writes
/// here. The request's answer, an upstream that stops reading (the chunks' receiver dropped)
/// or the deadline ends the writing; a serializer error ends the request (its body fails).
async fn streamed(
    target: &Target<'_>,
    write: WriteBody<'_>,
    deadline: Instant,
) -> Result<crate::transport::UpstreamResponse, UploadError> {
    let mut length = Counted(0);
    tokio::task::block_in_place(|| write(&mut length)).map_err(UploadError::Unwritable)?;
    let (sender, chunks) = mpsc::channel(CHUNKS_QUEUED);
    let body = UploadBody::Streamed {
        chunks,
        left: length.0,
    };
    let (transport, url, uri, headers) = (
        target.transport.clone(),
        target.url.clone(),
        target.uri.clone(),
        target.headers.clone(),
    );
    // A JoinSet aborts the request when this future is dropped (a client gone).
    let mut sending = tokio::task::JoinSet::new();
    let (task_alive, ended) = oneshot::channel::<()>();
    sending.spawn(async move {
        // Dropped when the task ends: its answer, its error or its deadline.
        let _alive = task_alive;
        transport.post(&url, &uri, &headers, body, deadline).await
    });
    let mut out = Chunks {
        sender,
        chunk: Vec::with_capacity(CHUNK_BYTES),
        ended,
        runtime: tokio::runtime::Handle::current(),
        stopped: false,
    };
    let written = tokio::task::block_in_place(|| {
        write(&mut out).and_then(|()| out.end().map_err(serde_json::Error::io))
    });
    if let Err(error) = written {
        if !out.stopped {
            // The body fails, so the upstream does not take a cut body for a whole one.
            let _ = out
                .sender
                .try_send(Err(io::Error::other("the body could not be written")));
            return Err(UploadError::Unwritable(error));
        }
    }
    drop(out);
    match sending.join_next().await {
        Some(Ok(sent)) => sent.map_err(UploadError::Send),
        Some(Err(e)) => Err(UploadError::Send(SendError::Other(format!(
            "the request's task ended: {e}"
        )))),
        None => Err(UploadError::Send(SendError::Other(
            "the request's task was lost".into(),
        ))),
    }
}

/// A writer that only counts the bytes written.
struct Counted(u64);

impl Write for Counted {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0 += data.len() as u64;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A writer that hands the connection [`CHUNK_BYTES`] at a time, waiting while
/// [`CHUNKS_QUEUED`] are not yet taken: until the connection takes one, drops the body, or
/// the request's task ends (an upstream that answered early and stopped reading would
/// otherwise hold the writer for good).
struct Chunks {
    sender: mpsc::Sender<io::Result<Bytes>>,
    chunk: Vec<u8>,
    /// Resolves when the request's task ends.
    ended: oneshot::Receiver<()>,
    /// The runtime the wait runs on (the writer runs in `block_in_place`).
    runtime: tokio::runtime::Handle,
    /// The connection stopped taking them (the request ended).
    stopped: bool,
}

impl Chunks {
    fn send(&mut self) -> io::Result<()> {
        let chunk = std::mem::replace(&mut self.chunk, Vec::with_capacity(CHUNK_BYTES));
        let Chunks {
            sender,
            ended,
            runtime,
            stopped,
            ..
        } = self;
        // Taken while the connection drains the chunks, even once the answer is in.
        let taken = !*stopped
            && runtime.block_on(async {
                tokio::select! {
                    biased;
                    sent = sender.send(Ok(chunk.into())) => sent.is_ok(),
                    _ = ended => false,
                }
            });
        if !taken {
            *stopped = true;
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the request ended before its body",
            ));
        }
        Ok(())
    }

    /// Sends the last chunk.
    fn end(&mut self) -> io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        self.send()
    }
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        // At most a chunk's room at a time: serde writes a long string in one call.
        let taken = data.len().min(CHUNK_BYTES - self.chunk.len());
        self.chunk.extend_from_slice(&data[..taken]);
        if self.chunk.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the recording server read of one request: its head, and its body as far as it
    /// read it.
    #[derive(Debug, Default, Clone)]
    struct Received {
        head: String,
        body: Vec<u8>,
    }

    /// A server that reads each request's head and body (its `Content-Length`), answers
    /// `{}`, and hands them over once read (the body whole, or cut where the connection
    /// ended); with `stop_after`, it closes the connection once it has read that many bytes
    /// of a body instead.
    async fn recording_server(
        stop_after: Option<usize>,
    ) -> (reqwest::Url, mpsc::UnboundedReceiver<Received>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let (record, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut read = Vec::new();
                    let mut buffer = vec![0u8; 64 * 1024];
                    let (head, length) = loop {
                        let Ok(n @ 1..) = socket.read(&mut buffer).await else {
                            return;
                        };
                        read.extend_from_slice(&buffer[..n]);
                        if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&read[..end]).to_lowercase();
                            read.drain(..end + 4);
                            let length = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length: "))
                                .and_then(|l| l.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            break (head, length);
                        }
                    };
                    let wanted = stop_after.unwrap_or(length).min(length);
                    while read.len() < wanted {
                        let Ok(n @ 1..) = socket.read(&mut buffer).await else {
                            break;
                        };
                        read.extend_from_slice(&buffer[..n]);
                    }
                    let whole = read.len() >= length && stop_after.is_none();
                    let _ = record.send(Received { head, body: read });
                    if whole {
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                        let _ = socket.write_all(answer).await;
                    }
                });
            }
        });
        let url =
            reqwest::Url::parse(&format!("http://{address}/v1/chat/completions")).expect("a URL");
        (url, received)
    }

    fn transports(url: &reqwest::Url) -> [Transport; 2] {
        let direct = Transport::for_url(
            url,
            Duration::from_secs(5),
            |_| None,
            reqwest::Client::new(),
        );
        assert!(direct.is_direct());
        [direct, Transport::Reqwest(reqwest::Client::new())]
    }

    /// A conversation over a MiB: escapes, multi-byte characters, several messages.
    fn large_body() -> serde_json::Value {
        let long = "ünïcödé ✓ \"quoted\"\n\t".repeat(STREAMED_FROM / 20);
        serde_json::json!({"model": "m", "messages": [
            {"role": "system", "content": "short"},
            {"role": "user", "content": long},
            {"role": "user", "content": "x".repeat(CHUNK_BYTES * 3 + 7)},
        ]})
    }

    /// Posts what `write` writes to `url` as a large body, with time to spare.
    async fn post_large(
        transport: &Transport,
        url: &reqwest::Url,
        write: WriteBody<'_>,
    ) -> Result<crate::transport::UpstreamResponse, UploadError> {
        let uri: http::Uri = url.as_str().parse().expect("a URI");
        let headers = HeaderMap::new();
        let target = Target {
            transport,
            url,
            uri: &uri,
            headers: &headers,
        };
        let deadline = Instant::now() + Duration::from_secs(600);
        post(&target, write, STREAMED_FROM, deadline).await
    }

    /// Whether a request's head announced `length` bytes of body, not chunks.
    fn announced(head: &str, length: usize) -> bool {
        head.contains(&format!("content-length: {length}")) && !head.contains("transfer-encoding")
    }

    /// A large body is streamed (written twice: counted, then sent) with its
    /// `Content-Length`, and the upstream gets the bytes the whole body would have been, on
    /// both transports.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_body_arrives_as_the_whole_body_would_with_its_length() {
        let (url, mut received) = recording_server(None).await;
        let body = large_body();
        let expected = serde_json::to_vec(&body).expect("JSON");
        for transport in transports(&url) {
            let writes = AtomicUsize::new(0);
            let write = |out: &mut dyn Write| {
                writes.fetch_add(1, Ordering::SeqCst);
                serde_json::to_writer(out, &body)
            };
            let response = post_large(&transport, &url, &write)
                .await
                .expect("an answer");
            assert_eq!(response.status(), 200);
            assert_eq!(
                writes.load(Ordering::SeqCst),
                2,
                "streamed: counted, then written"
            );
            let last = received.recv().await.expect("a request");
            assert!(last.body == expected, "the body differs from the whole one");
            assert!(announced(&last.head, expected.len()), "{}", last.head);
        }
    }

    /// An upstream that closes the connection part way through the body ends the request
    /// with a send error, not a wait for the deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upstream_that_closes_mid_upload_ends_the_request_with_an_error() {
        let (url, mut received) = recording_server(Some(CHUNK_BYTES)).await;
        let body = large_body();
        for transport in transports(&url) {
            let write = |out: &mut dyn Write| serde_json::to_writer(out, &body);
            let sent = post_large(&transport, &url, &write).await;
            let ended = matches!(
                sent,
                Err(UploadError::Send(
                    SendError::Other(_) | SendError::Connect(_)
                ))
            );
            assert!(ended, "{sent:?}");
            let cut = received.recv().await.expect("a request");
            assert!(cut.body.len() < serde_json::to_vec(&body).expect("JSON").len());
        }
    }

    /// An upstream that answers before it has read the body and then stops reading ends
    /// the writing when the answer is in, rather than holding it until the deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upstream_that_answers_early_and_stops_reading_ends_the_writing() {
        // Held open and unread past the test's end.
        let url = crate::transport::tests::answering_server(
            b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n",
            Duration::from_secs(3600),
        )
        .await;
        // Larger than what the socket buffers take in.
        let body = serde_json::json!({"messages": [{"content": "x".repeat(24 << 20)}]});
        for transport in transports(&url) {
            let write = |out: &mut dyn Write| serde_json::to_writer(out, &body);
            let sent = post_large(&transport, &url, &write).await;
            match sent {
                Ok(response) => assert_eq!(response.status(), 413),
                Err(error) => assert!(
                    !matches!(error, UploadError::Send(SendError::Timeout)),
                    "{error:?}"
                ),
            }
        }
    }

    /// A body serde fails to write part way through fails its request: the upstream gets
    /// less than the length it was told, and the caller the serializer's error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_that_fails_to_be_written_is_not_sent_whole() {
        let (url, mut received) = recording_server(None).await;
        let whole = serde_json::to_vec(&large_body()).expect("JSON");
        for transport in transports(&url) {
            let writes = AtomicUsize::new(0);
            // Counted whole, then fails half way through the pass that is sent.
            let write = |out: &mut dyn Write| match writes.fetch_add(1, Ordering::SeqCst) {
                0 => out.write_all(&whole).map_err(serde_json::Error::io),
                _ => {
                    let half = &whole[..whole.len() / 2];
                    out.write_all(half).map_err(serde_json::Error::io)?;
                    Err(serde::ser::Error::custom("a value that cannot be written"))
                }
            };
            let sent = post_large(&transport, &url, &write).await;
            assert!(matches!(sent, Err(UploadError::Unwritable(_))), "{sent:?}");
            let cut = received.recv().await.expect("a request");
            assert!(announced(&cut.head, whole.len()), "{}", cut.head);
            assert!(cut.body.len() < whole.len());
        }
    }
}
