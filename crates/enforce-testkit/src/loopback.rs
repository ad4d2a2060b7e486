//! [`Loopback`]: an axum app served on `127.0.0.1` at a free port until dropped, the
//! lifecycle every HTTP mock of this crate shares.

use axum::Router;
use std::net::SocketAddr;
use tokio::sync::oneshot;

/// A running app; dropping it stops the server (gracefully: open responses finish).
#[derive(Debug)]
pub(crate) struct Loopback {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Loopback {
    /// Binds a free port on `127.0.0.1` and serves `app` on the current tokio runtime; `name`
    /// says whose server stopped if serving fails.
    pub(crate) async fn serve(app: Router, name: &'static str) -> std::io::Result<Loopback> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                // Dropping the sender (the handle) stops the server too.
                let _stopped = rx.await;
            });
            if let Err(e) = served.await {
                eprintln!("{name} stopped: {e}");
            }
        });
        Ok(Loopback {
            addr,
            shutdown: Some(tx),
        })
    }

    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _already_stopped = tx.send(());
        }
    }
}
