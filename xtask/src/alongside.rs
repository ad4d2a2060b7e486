//! Steps that run while the tests run (part of `test` and `ci`).
//!
//! The test binaries leave about half of the two CI cores idle (they wait on child processes,
//! servers, installs and timeouts), while the Python library wheel and `package` are builds
//! that need no test binary. So they run on a second thread once `cargo test` has finished
//! checking its build (the first `Running` line: from then on cargo holds no lock on the
//! target directory), at a lower CPU priority so that the tests keep the cores they ask for.
//! What their commands print goes to a file, shown after the tests, so the two outputs do not
//! interleave in the log.

use crate::{target_dir, Result};
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

thread_local! {
    /// On the thread of the steps alongside the tests: the file their output goes to.
    static LOG: RefCell<Option<File>> = const { RefCell::new(None) };
}

/// Prints an `xtask:` message: to stderr, or on the thread alongside the tests to its log.
pub(crate) fn say(message: &str) {
    LOG.with(|log| match &mut *log.borrow_mut() {
        Some(file) => {
            let _ = writeln!(file, "{message}");
        }
        None => eprintln!("{message}"),
    });
}

/// Sends the output of `cmd` to the log when it is started alongside the tests.
pub(crate) fn redirect(cmd: &mut Command) {
    LOG.with(|log| {
        if let Some(file) = &*log.borrow() {
            if let (Ok(out), Ok(err)) = (file.try_clone(), file.try_clone()) {
                cmd.stdout(out).stderr(err);
            }
        }
    });
}

/// The nice value of the steps alongside the tests: they get what the tests leave idle.
const NICENESS: i32 = 10;

/// Lowers the calling thread's CPU priority, and so that of the commands it starts (on Linux a
/// thread's nice value is its own, and a child inherits its parent thread's).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority takes plain integers; `0` names the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, NICENESS);
    }
}

/// Runs the tests (`cargo_test`, which must find its build fresh) and, once they run, `work`
/// on another thread; returns both results after both ended.
pub(crate) fn run_tests_with<T: Send>(
    mut cargo_test: Command,
    work: impl FnOnce() -> Result<T> + Send,
) -> (Result<()>, Result<T>) {
    let log_path = target_dir().join("xtask-alongside.log");
    let log = match File::create(&log_path) {
        Ok(file) => file,
        Err(e) => {
            let why = format!("cannot create {}: {e}", log_path.display());
            return (Err(why.clone()), Err(why));
        }
    };
    crate::say(&format!("xtask: running {cargo_test:?}"));
    let mut child = match cargo_test.stderr(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(e) => {
            let why = format!("cannot start {cargo_test:?}: {e}");
            return (Err(why.clone()), Err(why));
        }
    };
    let started = Instant::now();
    let (go, wait_for_go) = mpsc::channel::<()>();
    let (done_forwarding, forwarding_done) = mpsc::channel::<()>();
    // Forwards cargo's stderr (and the tests' children's) and gives the go at the first
    // `Running`. Not joined: a process a test left behind may hold the pipe open.
    if let Some(stderr) = child.stderr.take() {
        let go = go.clone();
        std::thread::spawn(move || {
            let mut go = Some(go);
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                let _ = std::io::stderr().write_all(&line);
                if go.is_some() && String::from_utf8_lossy(&line).contains("Running ") {
                    let _ = go.take().map(|go| go.send(()));
                }
                line.clear();
            }
            let _ = done_forwarding.send(());
        });
    }
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            // The go, or cargo's end (every sender dropped) when it never ran a test.
            let _ = wait_for_go.recv();
            lower_priority();
            LOG.with(|slot| *slot.borrow_mut() = Some(log));
            work()
        });
        let status = child.wait();
        let _ = go.send(());
        // The last lines cargo wrote, before the next step's.
        let _ = forwarding_done.recv_timeout(Duration::from_secs(5));
        let tests = match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("{cargo_test:?} failed: {s}")),
            Err(e) => Err(format!("cannot wait for {cargo_test:?}: {e}")),
        };
        crate::say(&format!(
            "xtask: test run took {} s",
            started.elapsed().as_secs()
        ));
        let waited = Instant::now();
        let work = worker
            .join()
            .unwrap_or_else(|_| Err("a step alongside the tests panicked".into()));
        crate::say(&format!(
            "xtask: waited {} s for the steps alongside the tests; their output:",
            waited.elapsed().as_secs()
        ));
        match std::fs::read_to_string(&log_path) {
            Ok(text) => eprint!("{text}"),
            Err(e) => eprintln!("xtask: cannot read {}: {e}", log_path.display()),
        }
        eprintln!("xtask: (end of the output of the steps alongside the tests)");
        (tests, work)
    })
}
