//! Running a child process with the prompt on stdin, a timeout, and a process-group kill so that
//! no descendant outlives the call.

use enforce_core::{ReplyStream, RunnerError, StreamEvent};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// How much of stderr an error message keeps.
const STDERR_TAIL_CHARS: usize = 2000;

/// Most bytes read from stdout or stderr; a process printing more is stopped, so a runaway
/// program cannot exhaust memory.
pub(crate) const MAX_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<PathBuf>,
    pub stdin: String,
    pub timeout: Duration,
    pub kill_grace: Duration,
}

/// What a finished process left behind.
#[derive(Debug)]
pub(crate) struct ProcessOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ProcessOutput {
    /// The last characters of stderr, trimmed: enough to see why a run failed.
    pub fn stderr_tail(&self) -> String {
        tail(self.stderr.trim(), STDERR_TAIL_CHARS)
    }
}

/// The last `max` characters of `text`, marked with `…` when cut.
pub(crate) fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let skip = count - max;
    let mut out = String::from("…");
    out.extend(text.chars().skip(skip));
    out
}

/// Sends `signal` to every process in the group `pgid`. A group that is already gone is fine.
#[allow(unsafe_code)]
fn signal_group(pgid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        // Never signal group 0 (our own) or 1: only a group we created.
        return;
    }
    // SAFETY: killpg only reads its two integer arguments; an error (no such group) is ignored.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// Kills the child's process group when dropped, so a cancelled call (the future dropped, e.g.
/// by a client that went away) leaves no process behind either.
struct GroupGuard {
    pgid: Option<u32>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// Runs `spec`: writes stdin, reads stdout and stderr to the end, waits for the exit.
///
/// The child leads a new process group. When it exits, whatever it left running in that group is
/// killed; on timeout the group gets SIGINT, then SIGKILL after `kill_grace`.
pub(crate) async fn run_process(spec: &ProcessSpec) -> Result<ProcessOutput, RunnerError> {
    let program = spec.program.display().to_string();
    let mut child = spawn(spec, true)?;
    let mut guard = GroupGuard { pgid: child.id() };
    let pgid = child.id();

    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let input = spec.stdin.as_bytes();

    let io = async {
        let write = async {
            if let Some(mut pipe) = stdin {
                // A program that exits without reading all of its input is not our failure: its
                // exit status and output tell what happened.
                match pipe.write_all(input).await {
                    Ok(()) | Err(_) => {}
                }
                drop(pipe);
            }
        };
        let read_stdout = read_capped(stdout, pgid);
        let read_stderr = read_capped(stderr, pgid);
        let wait = async {
            let status = child.wait().await;
            // Descendants left in the group would keep the pipes open (and outlive the call).
            if let Some(pgid) = pgid {
                signal_group(pgid, libc::SIGKILL);
            }
            status
        };
        let ((), out, err, status) = tokio::join!(write, read_stdout, read_stderr, wait);
        Ok::<_, std::io::Error>((status?, out?, err?))
    };

    match tokio::time::timeout(spec.timeout, io).await {
        Ok(Ok((_, stdout, stderr)))
            if stdout.len() as u64 > MAX_OUTPUT_BYTES || stderr.len() as u64 > MAX_OUTPUT_BYTES =>
        {
            guard.pgid = None;
            Err(RunnerError::Process {
                message: format!(
                    "`{program}` printed more than {} MiB and was stopped",
                    MAX_OUTPUT_BYTES / (1024 * 1024)
                ),
                exit_code: None,
            })
        }
        Ok(Ok((status, stdout, stderr))) => {
            guard.pgid = None;
            Ok(ProcessOutput {
                status,
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            })
        }
        Ok(Err(e)) => Err(RunnerError::Process {
            message: format!("`{program}`: i/o error: {e}"),
            exit_code: None,
        }),
        Err(_elapsed) => {
            if let Some(pgid) = pgid {
                // Interrupt first: a CLI may save its state on SIGINT.
                signal_group(pgid, libc::SIGINT);
                let exited = tokio::time::timeout(spec.kill_grace, child.wait()).await;
                signal_group(pgid, libc::SIGKILL);
                if exited.is_err() {
                    // Reap the leader so it does not linger as a zombie.
                    let _reaped = child.wait().await;
                }
            }
            guard.pgid = None;
            Err(RunnerError::Timeout {
                after_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
            })
        }
    }
}

/// Starts `spec`'s program in its own process group with the pipes set up.
fn spawn(spec: &ProcessSpec, kill_on_drop: bool) -> Result<Child, RunnerError> {
    let program = spec.program.display().to_string();
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .envs(&spec.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(kill_on_drop)
        .process_group(0);
    if let Some(dir) = &spec.working_dir {
        command.current_dir(dir);
    }
    command.spawn().map_err(|e| RunnerError::Process {
        message: match e.kind() {
            ErrorKind::NotFound => format!(
                "cannot start `{program}`: no such program (install it, put it on PATH, or set \
                 the runner's binary path)"
            ),
            ErrorKind::PermissionDenied => {
                format!("cannot start `{program}`: permission denied (is it executable?)")
            }
            _ => format!("cannot start `{program}`: {e}"),
        },
        exit_code: None,
    })
}

/// The reply stream of a streaming process: `next` reads the state (the process and what the
/// runner keeps of its output) up to the next event. A spawn error is yielded once; after
/// `Done` or an error nothing more is read, and the state is dropped with the stream (which
/// interrupts a process still running).
pub(crate) fn process_events<'a, S, F, Fut>(
    state: Result<S, RunnerError>,
    mut next: F,
) -> ReplyStream<'a>
where
    S: Send + 'a,
    F: FnMut(S) -> Fut + Send + 'a,
    Fut: std::future::Future<Output = (Result<StreamEvent, RunnerError>, S)> + Send + 'a,
{
    /// Where the stream stands.
    enum Step<S> {
        Reading(S),
        Failed(RunnerError),
        Ended(S),
        Over,
    }
    let first = match state {
        Ok(state) => Step::Reading(state),
        Err(error) => Step::Failed(error),
    };
    ReplyStream::new(futures_util::stream::unfold(first, move |step| {
        let read = match step {
            Step::Reading(state) => Ok(next(state)),
            other => Err(other),
        };
        async move {
            match read {
                Ok(read) => {
                    let (item, state) = read.await;
                    let step = match item {
                        Ok(StreamEvent::Done(_)) | Err(_) => Step::Ended(state),
                        _ => Step::Reading(state),
                    };
                    Some((item, step))
                }
                Err(Step::Failed(error)) => Some((Err(error), Step::Over)),
                Err(_) => None,
            }
        }
    }))
}

/// A running process whose stdout is read while it writes it (a streamed answer).
///
/// Dropping it before the end cancels the call the way a person at the terminal would: SIGINT
/// to the process group (a CLI may stop cleanly and save its session), then SIGKILL after the
/// grace period, on a background task that also reaps the child. The timeout does the same.
pub(crate) struct StreamingProcess {
    program: String,
    child: Option<Child>,
    pgid: Option<u32>,
    stdout: tokio::io::BufReader<tokio::io::Take<tokio::process::ChildStdout>>,
    stderr: Option<tokio::task::JoinHandle<Vec<u8>>>,
    deadline: tokio::time::Instant,
    timeout: Duration,
    kill_grace: Duration,
    read: u64,
}

impl std::fmt::Debug for StreamingProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingProcess")
            .field("program", &self.program)
            .field("pgid", &self.pgid)
            .finish_non_exhaustive()
    }
}

impl StreamingProcess {
    /// Starts `spec`: its stdin is written on a task of its own, its stderr collected.
    pub(crate) fn spawn(spec: &ProcessSpec) -> Result<Self, RunnerError> {
        let mut child = spawn(spec, false)?;
        let pgid = child.id();
        if let Some(mut pipe) = child.stdin.take() {
            let input = spec.stdin.clone();
            tokio::spawn(async move {
                // A program that exits without reading all of its input is not our failure.
                match pipe.write_all(input.as_bytes()).await {
                    Ok(()) | Err(_) => {}
                }
            });
        }
        let stderr = child.stderr.take().map(|pipe| {
            tokio::spawn(async move { read_capped(Some(pipe), None).await.unwrap_or_default() })
        });
        let stdout = child.stdout.take().ok_or_else(|| RunnerError::Process {
            message: "the child has no stdout".to_string(),
            exit_code: None,
        })?;
        Ok(StreamingProcess {
            program: spec.program.display().to_string(),
            child: Some(child),
            pgid,
            stdout: tokio::io::BufReader::new(stdout.take(MAX_OUTPUT_BYTES + 1)),
            stderr,
            deadline: tokio::time::Instant::now() + spec.timeout,
            timeout: spec.timeout,
            kill_grace: spec.kill_grace,
            read: 0,
        })
    }

    /// Reads the next line of stdout into `line` (newline included); `false` at the end.
    pub(crate) async fn next_line(&mut self, line: &mut Vec<u8>) -> Result<bool, RunnerError> {
        line.clear();
        let read =
            tokio::time::timeout_at(self.deadline, self.stdout.read_until(b'\n', line)).await;
        self.after_read(read).map(|n| n > 0)
    }

    /// Reads what stdout has now (at most `buf.len()` bytes); 0 at the end.
    pub(crate) async fn next_chunk(&mut self, buf: &mut [u8]) -> Result<usize, RunnerError> {
        let read = tokio::time::timeout_at(self.deadline, self.stdout.read(buf)).await;
        self.after_read(read)
    }

    fn after_read(
        &mut self,
        read: Result<std::io::Result<usize>, tokio::time::error::Elapsed>,
    ) -> Result<usize, RunnerError> {
        match read {
            Err(_elapsed) => {
                self.interrupt();
                Err(RunnerError::Timeout {
                    after_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                })
            }
            Ok(Err(e)) => Err(RunnerError::Process {
                message: format!("`{}`: i/o error: {e}", self.program),
                exit_code: None,
            }),
            Ok(Ok(n)) => {
                self.read = self.read.saturating_add(n as u64);
                if self.read > MAX_OUTPUT_BYTES {
                    self.interrupt();
                    return Err(RunnerError::Process {
                        message: format!(
                            "`{}` printed more than {} MiB and was stopped",
                            self.program,
                            MAX_OUTPUT_BYTES / (1024 * 1024)
                        ),
                        exit_code: None,
                    });
                }
                Ok(n)
            }
        }
    }

    /// After the end of stdout: waits for the exit (within the timeout) and collects stderr.
    pub(crate) async fn finish(&mut self) -> Result<ProcessOutput, RunnerError> {
        let Some(mut child) = self.child.take() else {
            return Err(RunnerError::Process {
                message: format!("`{}` was already stopped", self.program),
                exit_code: None,
            });
        };
        let status = match tokio::time::timeout_at(self.deadline, child.wait()).await {
            Ok(status) => status.map_err(|e| RunnerError::Process {
                message: format!("`{}`: i/o error: {e}", self.program),
                exit_code: None,
            })?,
            Err(_elapsed) => {
                self.child = Some(child);
                self.interrupt();
                return Err(RunnerError::Timeout {
                    after_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                });
            }
        };
        // Descendants left in the group would outlive the call.
        if let Some(pgid) = self.pgid {
            signal_group(pgid, libc::SIGKILL);
        }
        let stderr = match self.stderr.take() {
            Some(task) => task.await.unwrap_or_default(),
            None => Vec::new(),
        };
        Ok(ProcessOutput {
            status,
            stdout: String::new(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    /// SIGINT to the group now; SIGKILL after the grace period, and the child reaped, on a
    /// background task (at once when there is no runtime to run it on).
    fn interrupt(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let Some(pgid) = self.pgid else {
            return;
        };
        signal_group(pgid, libc::SIGINT);
        let grace = self.kill_grace;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let exited = tokio::time::timeout(grace, child.wait()).await;
                    signal_group(pgid, libc::SIGKILL);
                    if exited.is_err() {
                        let _reaped = child.wait().await;
                    }
                });
            }
            Err(_) => signal_group(pgid, libc::SIGKILL),
        }
    }
}

impl Drop for StreamingProcess {
    fn drop(&mut self) {
        self.interrupt();
    }
}

/// Reads a pipe to its end, at most [`MAX_OUTPUT_BYTES`] + 1 bytes; past that the process group
/// is killed (which closes the pipe) and the oversized buffer tells the caller.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    pipe: Option<R>,
    pgid: Option<u32>,
) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    if let Some(pipe) = pipe {
        let mut limited = pipe.take(MAX_OUTPUT_BYTES + 1);
        limited.read_to_end(&mut buf).await?;
        if buf.len() as u64 > MAX_OUTPUT_BYTES {
            if let Some(pgid) = pgid {
                signal_group(pgid, libc::SIGKILL);
            }
        }
    }
    Ok(buf)
}

/// Describes a failed exit: the code (or signal) and the tail of stderr.
pub(crate) fn exit_failure(program: &str, output: &ProcessOutput) -> RunnerError {
    use std::os::unix::process::ExitStatusExt;
    let how = match (output.status.code(), output.status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "failed".to_string(),
    };
    let stderr = output.stderr_tail();
    let message = if stderr.is_empty() {
        format!("`{program}` {how} (stderr was empty)")
    } else {
        format!("`{program}` {how}: {stderr}")
    };
    RunnerError::Process {
        message,
        exit_code: output.status.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("abcdef", 3), "…def");
        assert_eq!(tail("abc", 3), "abc");
        assert_eq!(tail("äöü", 2), "…öü");
    }
}
