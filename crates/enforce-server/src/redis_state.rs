//! [`RedisState`]: the [`SharedState`] of replicas in a Redis server (feature `redis`).
//!
//! The key layout and the design are in the book's `docs/operations.md` ("Shared state:
//! design and key layout").
//!
//! The connection is made on first use and remade by the `redis` crate's connection manager;
//! a command is bounded by `server.state.timeout_ms` and so is a connect, so a slow or dead
//! Redis costs a request at most about twice that per operation before it goes on with local
//! state (after a failed connect, operations fail at once for a second).

use crate::config::StateConfig;
use crate::session::chat_dir_name;
use crate::session_status::SessionStatus;
use crate::shared::{SharedState, StateError};
use enforce_core::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Mutex;

/// The field of a statistics hash that says its counters were started from a file.
const STATS_SEEDED: &str = "seeded";

/// After a failed connect, operations fail at once for this long instead of each waiting for
/// its own connect timeout while Redis is down.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// How long a breaker's open state is kept when nobody probes (a restart of every replica
/// would forget it too).
const BREAKER_TTL: Duration = Duration::from_secs(24 * 3600);

/// Takes a slot when fewer than `limit` unexpired ones are held: drops expired slots, counts,
/// adds. One script, so two replicas can never both take the last slot.
const TRY_SLOT: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
";

/// Chat sessions, concurrency slots, heartbeats and breaker states in Redis.
pub struct RedisState {
    client: redis::Client,
    prefix: String,
    session_ttl: Duration,
    timeout: Duration,
    connection: Mutex<Option<ConnectionManager>>,
    last_connect_failure: std::sync::Mutex<Option<Instant>>,
    try_slot: redis::Script,
}

impl std::fmt::Debug for RedisState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisState")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisState {
    /// A store for `config`; checks the URL but does not connect (the first operation does, so
    /// a replica starts while Redis is down).
    pub fn new(config: &StateConfig) -> Result<Self, StateError> {
        crate::config::check_redis_url(&config.redis_url).map_err(StateError)?;
        let client = redis::Client::open(config.redis_url.as_str())
            .map_err(|e| StateError(format!("{}: {e}", config.redis_url)))?;
        Ok(RedisState {
            client,
            prefix: format!("enforce:{}", config.namespace),
            session_ttl: config.session_ttl,
            timeout: config.timeout,
            connection: Mutex::new(None),
            last_connect_failure: std::sync::Mutex::new(None),
            try_slot: redis::Script::new(TRY_SLOT),
        })
    }

    fn key(&self, parts: &[&str]) -> String {
        let mut key = self.prefix.clone();
        for part in parts {
            key.push(':');
            key.push_str(part);
        }
        key
    }

    /// The connection, made now if there is none yet.
    async fn connection(&self) -> Result<ConnectionManager, StateError> {
        let mut slot = self.connection.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let paused = self
            .last_connect_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < RECONNECT_PAUSE);
        if paused {
            return Err(StateError("Redis unreachable at the last connect".into()));
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(self.timeout);
        let made = tokio::time::timeout(
            self.timeout,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await
        .map_err(|_| StateError("connecting to Redis timed out".into()))
        .and_then(|r| r.map_err(|e| StateError(format!("cannot connect to Redis: {e}"))));
        let mut failed = self
            .last_connect_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match made {
            Ok(made) => {
                *failed = None;
                *slot = Some(made.clone());
                Ok(made)
            }
            Err(e) => {
                *failed = Some(Instant::now());
                Err(e)
            }
        }
    }

    /// Runs one command (or pipeline) within the timeout. A connection that broke since its
    /// last use (Redis restarted) fails the first command and is remade: that one is sent again
    /// once, so a replica that did not notice the restart does not fall back for nothing.
    async fn run<T: redis::FromRedisValue>(
        &self,
        what: &str,
        command: impl Fn(ConnectionManager) -> redis::RedisFuture<'static, T>,
    ) -> Result<T, StateError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut retried = false;
        loop {
            let connection = self.connection().await?;
            match tokio::time::timeout_at(deadline, command(connection)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if !retried && (e.is_connection_dropped() || e.is_io_error()) => {
                    retried = true;
                }
                Ok(Err(e)) => return Err(StateError(format!("{what}: {e}"))),
                Err(_) => {
                    return Err(StateError(format!(
                        "{what}: no answer from Redis within {} ms",
                        self.timeout.as_millis()
                    )))
                }
            }
        }
    }

    fn query<T: redis::FromRedisValue + Send + 'static>(
        command: redis::Cmd,
    ) -> impl Fn(ConnectionManager) -> redis::RedisFuture<'static, T> {
        move |mut c| {
            let command = command.clone();
            Box::pin(async move { command.query_async(&mut c).await })
        }
    }
}

#[async_trait]
impl SharedState for RedisState {
    async fn ping(&self) -> Result<(), StateError> {
        self.run::<String>("PING", Self::query(redis::cmd("PING")))
            .await
            .map(drop)
    }

    async fn load_session(&self, chat_id: &str) -> Result<Option<SessionStatus>, StateError> {
        let key = self.key(&["session", &chat_dir_name(chat_id)]);
        let mut get = redis::cmd("GET");
        get.arg(&key);
        let Some(json) = self.run::<Option<String>>("GET", Self::query(get)).await? else {
            return Ok(None);
        };
        let status: SessionStatus = serde_json::from_str(&json)
            .map_err(|e| StateError(format!("{key} holds no session: {e}")))?;
        // A digest-named key could in theory hold another chat.
        Ok((status.chat_id == chat_id).then_some(status))
    }

    async fn save_session(&self, status: &SessionStatus) -> Result<(), StateError> {
        let key = self.key(&["session", &chat_dir_name(&status.chat_id)]);
        let json = serde_json::to_string(status).map_err(|e| StateError(e.to_string()))?;
        let mut set = redis::cmd("SET");
        set.arg(&key)
            .arg(json)
            .arg("PX")
            .arg(millis(self.session_ttl));
        self.run::<()>("SET", Self::query(set)).await
    }

    async fn save_response(&self, id: &str, body: &[u8]) -> Result<(), StateError> {
        let key = self.key(&["response", &chat_dir_name(id)]);
        let mut set = redis::cmd("SET");
        set.arg(&key)
            .arg(body)
            .arg("PX")
            .arg(millis(self.session_ttl));
        self.run::<()>("SET", Self::query(set)).await
    }

    async fn load_response(&self, id: &str) -> Result<Option<Vec<u8>>, StateError> {
        let key = self.key(&["response", &chat_dir_name(id)]);
        let mut get = redis::cmd("GET");
        get.arg(&key);
        self.run::<Option<Vec<u8>>>("GET", Self::query(get)).await
    }

    async fn cache_put(&self, key: &str, answer: &[u8], ttl: Duration) -> Result<(), StateError> {
        let mut set = redis::cmd("SET");
        set.arg(self.key(&["cache", key]))
            .arg(answer)
            .arg("PX")
            .arg(millis(ttl).max(1));
        self.run::<()>("SET", Self::query(set)).await
    }

    async fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        let mut get = redis::cmd("GET");
        get.arg(self.key(&["cache", key]));
        self.run::<Option<Vec<u8>>>("GET", Self::query(get)).await
    }

    async fn seed_stats(&self, name: &str, counters: &[(String, u64)]) -> Result<(), StateError> {
        // The first replica to set the marker adds the file's counts; the others find it.
        let mut mark = redis::cmd("HSETNX");
        mark.arg(self.key(&["stats", name]))
            .arg(STATS_SEEDED)
            .arg(1);
        let first = self.run::<i64>("HSETNX", Self::query(mark)).await?;
        if first == 1 {
            self.add_stats(name, counters).await?;
        }
        Ok(())
    }

    async fn add_stats(&self, name: &str, counters: &[(String, u64)]) -> Result<(), StateError> {
        if counters.is_empty() {
            return Ok(());
        }
        let key = self.key(&["stats", name]);
        let mut pipe = redis::pipe();
        for (field, n) in counters {
            pipe.cmd("HINCRBY").arg(&key).arg(field).arg(*n).ignore();
        }
        self.run::<()>("HINCRBY", move |mut c| {
            let pipe = pipe.clone();
            Box::pin(async move { pipe.query_async(&mut c).await })
        })
        .await
    }

    async fn load_stats(&self, name: &str) -> Result<Option<Vec<(String, u64)>>, StateError> {
        let mut all = redis::cmd("HGETALL");
        all.arg(self.key(&["stats", name]));
        let fields = self
            .run::<Vec<(String, u64)>>("HGETALL", Self::query(all))
            .await?;
        Ok(Some(
            fields
                .into_iter()
                .filter(|(field, _)| field != STATS_SEEDED)
                .collect(),
        ))
    }

    async fn try_slot(&self, slot: &str, limit: usize, ttl: Duration) -> Result<bool, StateError> {
        let now = unix_ms();
        let (key, script) = (self.key(&["slots"]), self.try_slot.clone());
        let (expires, ttl_ms) = (now.saturating_add(millis(ttl)), millis(ttl));
        let slot = slot.to_string();
        let taken = self
            .run::<i64>("slot", move |mut c| {
                let (key, script, slot) = (key.clone(), script.clone(), slot.clone());
                Box::pin(async move {
                    script
                        .key(key)
                        .arg(now)
                        .arg(limit)
                        .arg(expires)
                        .arg(slot)
                        .arg(ttl_ms)
                        .invoke_async(&mut c)
                        .await
                })
            })
            .await?;
        Ok(taken == 1)
    }

    async fn release_slot(&self, slot: &str) -> Result<(), StateError> {
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(self.key(&["slots"])).arg(slot);
        self.run::<()>("ZREM", Self::query(zrem)).await
    }

    async fn heartbeat(&self, replica: &str, ttl: Duration) -> Result<(), StateError> {
        let mut set = redis::cmd("SET");
        set.arg(self.key(&["replica", replica]))
            .arg(unix_ms())
            .arg("PX")
            .arg(millis(ttl));
        self.run::<()>("SET", Self::query(set)).await
    }

    async fn is_alive(&self, replica: &str) -> Result<bool, StateError> {
        let mut exists = redis::cmd("EXISTS");
        exists.arg(self.key(&["replica", replica]));
        self.run::<i64>("EXISTS", Self::query(exists))
            .await
            .map(|n| n > 0)
    }

    async fn leave(&self, replica: &str) -> Result<(), StateError> {
        let mut del = redis::cmd("DEL");
        del.arg(self.key(&["replica", replica]));
        self.run::<()>("DEL", Self::query(del)).await
    }

    async fn breaker_opened_at(&self, name: &str) -> Result<Option<u64>, StateError> {
        let mut get = redis::cmd("GET");
        get.arg(self.key(&["breaker", name]));
        self.run::<Option<u64>>("GET", Self::query(get)).await
    }

    async fn breaker_open(&self, name: &str, at_ms: u64) -> Result<(), StateError> {
        let key = self.key(&["breaker", name]);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(&key)
            .arg(at_ms)
            .arg("PX")
            .arg(millis(BREAKER_TTL))
            .ignore()
            .cmd("DEL")
            .arg(format!("{key}:probe"))
            .ignore();
        self.run::<()>("SET breaker", move |mut c| {
            let pipe = pipe.clone();
            Box::pin(async move { pipe.query_async(&mut c).await })
        })
        .await
    }

    async fn breaker_try_probe(
        &self,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<bool, StateError> {
        let mut set = redis::cmd("SET");
        set.arg(self.key(&["breaker", name, "probe"]))
            .arg(holder)
            .arg("NX")
            .arg("PX")
            .arg(millis(lease));
        self.run::<Option<String>>("SET NX", Self::query(set))
            .await
            .map(|ok| ok.is_some())
    }

    async fn breaker_close(&self, name: &str) -> Result<(), StateError> {
        let key = self.key(&["breaker", name]);
        let mut del = redis::cmd("DEL");
        del.arg(&key).arg(format!("{key}:probe"));
        self.run::<()>("DEL", Self::query(del)).await
    }
}
