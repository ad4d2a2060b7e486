//! Running a child process with the prompt on stdin, a timeout, and a process-group kill so that
//! no descendant outlives the call.

use enforce_core::RunnerError;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

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
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .envs(&spec.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(dir) = &spec.working_dir {
        command.current_dir(dir);
    }
    let mut child = command.spawn().map_err(|e| RunnerError::Process {
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
    })?;
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
