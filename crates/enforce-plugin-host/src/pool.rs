//! The threads plugin calls run on.
//!
//! Tokio's blocking pool would do, except that dropping a runtime waits for every blocking task:
//! one stuck plugin call would keep `enforce` from ever exiting. These threads are detached, so
//! a call that outlives its timeout holds only its own thread, and only until the process ends.
//! Idle threads are reused, and leave after [`IDLE_EXIT`] without work.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How long an idle thread waits for work before it exits.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    /// Idle workers, each with an id and the sender of its job channel.
    idle: Mutex<Vec<(u64, Sender<Job>)>>,
    next_id: AtomicU64,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        idle: Mutex::new(Vec::new()),
        next_id: AtomicU64::new(0),
    })
}

impl Pool {
    fn idle(&self) -> MutexGuard<'_, Vec<(u64, Sender<Job>)>> {
        // A worker never panics while holding the lock; recover the list if one ever did.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Runs `job` on an idle pool thread, or on a new one. Fails only when no thread can be started.
pub(crate) fn execute(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let pool = pool();
    let mut job: Job = Box::new(job);
    loop {
        let worker = pool.idle().pop();
        match worker {
            Some((_, sender)) => match sender.send(job) {
                Ok(()) => return Ok(()),
                // That worker is gone; try the next one.
                Err(mpsc::SendError(returned)) => job = returned,
            },
            None => return spawn_worker(job),
        }
    }
}

fn spawn_worker(first: Job) -> std::io::Result<()> {
    let pool = pool();
    let id = pool.next_id.fetch_add(1, Ordering::Relaxed);
    let (sender, receiver) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("enforce-plugin-call".into())
        .spawn(move || work(id, first, &sender, &receiver))?;
    Ok(())
}

fn work(id: u64, first: Job, sender: &Sender<Job>, receiver: &Receiver<Job>) {
    let pool = pool();
    let mut job = first;
    loop {
        // A panicking job only loses its own answer (its result sender is dropped).
        let _ = catch_unwind(AssertUnwindSafe(job));
        pool.idle().push((id, sender.clone()));
        job = match receiver.recv_timeout(IDLE_EXIT) {
            Ok(next) => next,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let mut idle = pool.idle();
                match idle.iter().position(|(worker, _)| *worker == id) {
                    Some(index) => {
                        idle.remove(index);
                        return;
                    }
                    // A caller took this worker just now: its job is on the way.
                    None => {
                        drop(idle);
                        match receiver.recv() {
                            Ok(next) => next,
                            Err(_) => return,
                        }
                    }
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until some worker is idle (bounded), so the next job can reuse it.
    fn wait_for_idle_worker() {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while pool().idle().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn jobs_run_and_idle_threads_are_reused() {
        let (tx, rx) = mpsc::channel();
        let mut threads = std::collections::HashSet::new();
        for i in 0..10 {
            let tx = tx.clone();
            execute(move || {
                let _ = tx.send((i, std::thread::current().id()));
            })
            .unwrap();
            let (n, thread) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            assert_eq!(n, i);
            threads.insert(thread);
            wait_for_idle_worker();
        }
        // Other tests share the pool and may take an idle worker now and then, but sequential
        // jobs must mostly land on threads that already exist.
        assert!(threads.len() < 10, "idle workers were not reused");
    }

    #[test]
    fn a_blocked_job_does_not_hold_up_the_next_one() {
        let (release, blocked) = mpsc::channel::<()>();
        execute(move || {
            let _ = blocked.recv();
        })
        .unwrap();
        let (tx, rx) = mpsc::channel();
        execute(move || {
            let _ = tx.send("done");
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "done");
        drop(release);
    }

    #[test]
    fn a_panicking_job_leaves_the_pool_working() {
        execute(|| panic!("job panicked on purpose")).unwrap();
        let (tx, rx) = mpsc::channel();
        execute(move || {
            let _ = tx.send(1);
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
    }
}
