//! [`Server`]: the proxy's routes and its serving loop with a graceful shutdown; built by
//! [`ServerBuilder`](builder::ServerBuilder).

pub(crate) mod builder;

use crate::config::ServerConfig;
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::shared::ReplicaState;
use crate::state::App;
use crate::{app, connections, count_tokens, messages, openai, pipeline, responses};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use builder::ServerBuilder;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpListener;

/// The proxy. Build it with [`Server::builder`], then [`serve`](Server::serve) it, or mount
/// [`router`](Server::router) in your own axum application.
#[derive(Clone)]
pub struct Server {
    app: Arc<App>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("models", &self.app.model_order)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts building a server with `config`.
    pub fn builder(config: ServerConfig) -> ServerBuilder {
        ServerBuilder::new(config)
    }

    /// The state shared with other replicas, when configured: hand it to the circuit breakers
    /// (see `enforce serve`, which links `enforce-external`'s breakers to it).
    pub fn shared_state(&self) -> Option<Arc<ReplicaState>> {
        self.app.shared.clone()
    }

    /// The metrics registry (what `/metrics` renders).
    pub fn metrics(&self) -> &Metrics {
        &self.app.metrics
    }

    /// The routes, ready to serve.
    pub fn router(&self) -> Router {
        // The pipeline's surfaces check the key themselves, as their first stage.
        let surfaces = Router::new();
        let surfaces = both(
            surfaces,
            "/chat/completions",
            post(pipeline::serve::<openai::Chat>),
        );
        let surfaces = both(
            surfaces,
            "/messages",
            post(pipeline::serve::<messages::Messages>),
        );
        let surfaces = both(
            surfaces,
            "/responses",
            post(pipeline::serve::<responses::Responses>),
        );
        let authed = Router::new();
        let authed = both(authed, "/models", get(app::list_models));
        let authed = both(authed, "/models/{id}", get(app::get_model));
        let authed = both(
            authed,
            "/messages/count_tokens",
            post(count_tokens::count_tokens),
        );
        let authed = both(authed, "/responses/{id}", get(app::get_response));
        let authed = both(authed, "/sessions/{id}", get(app::get_session)).route_layer(
            axum::middleware::from_fn_with_state(self.app.clone(), app::require_key),
        );
        Router::new()
            .merge(surfaces)
            .merge(authed)
            .route("/", get(app::root))
            .route("/healthz", get(app::healthz))
            .route("/metrics", get(app::metrics))
            .fallback(app::unknown_route)
            .method_not_allowed_fallback(app::wrong_method)
            .with_state(self.app.clone())
    }

    /// Serves on `listener` until `shutdown` completes, then stops accepting, lets in-flight
    /// requests finish for at most [`ServerConfig::shutdown_grace`], flushes the audit log and
    /// exports the spans still queued. Connections that never sent a whole request head are
    /// closed at once at shutdown; a request head is due within
    /// [`ServerConfig::header_timeout`]. Accepted connections get `TCP_NODELAY`.
    pub async fn serve<F>(self, listener: TcpListener, shutdown: F) -> Result<(), ServerError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let app = self.app.clone();
        let monitor = app.shared.clone().map(|shared| {
            let sessions_app = app.clone();
            tokio::spawn(shared.monitor(move |chat| sessions_app.sessions.cached(chat)))
        });
        let timer_ahead = tokio::spawn(keep_a_timer_ahead());
        let (stopping_tx, mut stopping_rx) = tokio::sync::watch::channel(false);
        let signal_app = app.clone();
        let signal = async move {
            shutdown.await;
            signal_app.draining.store(true, Ordering::Relaxed);
            tracing::info!("shutting down: no new connections, draining in-flight requests");
            let _ = stopping_tx.send(true);
        };
        let connections = connections::serve(
            listener,
            self.router(),
            app.config.header_timeout,
            stopping_rx.clone(),
        );
        let server = async move {
            tokio::join!(signal, connections);
            Ok::<(), ServerError>(())
        };
        let grace = app.config.shutdown_grace;
        let bounded = async move {
            // Only an actual shutdown starts the grace period.
            if stopping_rx.wait_for(|s| *s).await.is_ok() {
                tokio::time::sleep(grace).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let result = tokio::select! {
            result = server => result,
            () = bounded => {
                tracing::warn!(grace_secs = grace.as_secs_f64(), "in-flight requests outlived the shutdown grace period");
                Ok(())
            }
        };
        if let Some(monitor) = monitor {
            monitor.abort();
        }
        timer_ahead.abort();
        if let Some(shared) = &app.shared {
            shared.leave().await;
        }
        if let Some(audit) = app.audit.clone() {
            if tokio::task::spawn_blocking(move || audit.close())
                .await
                .is_err()
            {
                tracing::error!("audit log flush failed");
            }
        }
        if app.telemetry.is_some() {
            // Blocks until the last batch is sent, which the runtime itself sends: off its
            // threads, or a single-threaded runtime would wait for itself.
            let app = app.clone();
            let flushed = tokio::task::spawn_blocking(move || {
                if let Some(telemetry) = &app.telemetry {
                    telemetry.shutdown();
                }
            });
            if flushed.await.is_err() {
                tracing::error!("OpenTelemetry flush failed");
            }
        }
        result
    }
}

/// Routes `path` under `/v1` and without it, as OpenAI-compatible servers do (clients are
/// configured with either base URL).
fn both(router: Router<Arc<App>>, path: &str, method: MethodRouter<Arc<App>>) -> Router<Arc<App>> {
    router
        .route(&format!("/v1{path}"), method.clone())
        .route(path, method)
}

/// How far ahead [`keep_a_timer_ahead`] keeps its timer.
const TIMER_AHEAD: std::time::Duration = std::time::Duration::from_secs(1);

/// Keeps a timer pending at most [`TIMER_AHEAD`] away, for as long as the server runs.
///
/// tokio wakes its I/O driver (a write to an eventfd: a system call, and one more event for
/// the driver to read) whenever a timer is set to fire before every pending one, even from the
/// thread that runs the driver and so cannot be waiting in it (tokio issue 5207). Each request
/// sets two timers (its deadline and the upstream call's timeout, both seconds away), so
/// without an earlier one pending, an idle server paid two such wake-ups per request; with
/// this timer pending they fall after it and wake nothing. It costs one wake-up a second.
async fn keep_a_timer_ahead() {
    let mut ticks = tokio::time::interval(TIMER_AHEAD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
    }
}
