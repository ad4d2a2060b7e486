//! The reference: llama.cpp through node-llama-cpp, installed by npm into the work directory
//! (its prebuilt CPU binaries; nothing is compiled and no model is downloaded), timed by
//! `llama.mjs`.

use super::{Answer, Job};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The node-llama-cpp release installed: a pinned one, so a rerun measures the same llama.cpp.
const NODE_LLAMA_CPP: &str = "node-llama-cpp@3.22.1";

/// The timing script, written next to its `node_modules`.
const SCRIPT: &str = include_str!("llama.mjs");

/// An installed node-llama-cpp.
pub struct Peer {
    dir: PathBuf,
    /// node-llama-cpp's version and the llama.cpp release its binaries are built from.
    pub version: String,
}

/// The prompt and grammar files the reference reads.
pub struct Prompts {
    text: PathBuf,
    city: PathBuf,
    grammar: PathBuf,
}

impl Prompts {
    /// Writes the prompts (already in the chat template) and the grammar into `work`.
    pub fn write(work: &Path, text: &str, city: &str, grammar: &str) -> anyhow::Result<Self> {
        let prompts = Prompts {
            text: work.join("local-speed-text.prompt"),
            city: work.join("local-speed-city.prompt"),
            grammar: work.join("local-speed-city.gbnf"),
        };
        std::fs::write(&prompts.text, text)?;
        std::fs::write(&prompts.city, city)?;
        std::fs::write(&prompts.grammar, grammar)?;
        Ok(prompts)
    }

    /// The GBNF grammar of the city answer.
    pub fn grammar(&self) -> &Path {
        &self.grammar
    }
}

#[derive(Deserialize)]
struct PackageJson {
    version: String,
}

#[derive(Deserialize)]
struct GithubRelease {
    release: String,
}

/// node-llama-cpp in `work/node-llama-cpp`, installed unless it is there; `Err` says why the
/// reference is skipped.
pub fn install(work: &Path) -> Result<Peer, String> {
    let dir = work.join("node-llama-cpp");
    let package = dir.join("node_modules/node-llama-cpp");
    for tool in ["npm", "node"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(format!("skipped: {tool} not found"));
        }
    }
    if !package.join("package.json").is_file() {
        eprintln!("bench: npm install {NODE_LLAMA_CPP} into {}", dir.display());
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(NODE_LLAMA_CPP)
            // The prebuilt binaries come as npm packages; never a source build or a download
            // from elsewhere.
            .env("NODE_LLAMA_CPP_SKIP_DOWNLOAD", "true")
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("skipped: npm install {NODE_LLAMA_CPP}: {e}"))?;
        if !status.success() {
            return Err(format!(
                "skipped: npm install {NODE_LLAMA_CPP} failed ({status})"
            ));
        }
    }
    let read = |file: &str| -> Result<String, String> {
        std::fs::read_to_string(package.join(file)).map_err(|e| format!("skipped: {file}: {e}"))
    };
    let version = serde_json::from_str::<PackageJson>(&read("package.json")?)
        .map_err(|e| format!("skipped: node-llama-cpp's package.json: {e}"))?
        .version;
    let llama = serde_json::from_str::<GithubRelease>(&read("llama/binariesGithubRelease.json")?)
        .map(|r| r.release)
        .unwrap_or_else(|_| "unknown".into());
    std::fs::write(dir.join("llama.mjs"), SCRIPT)
        .map_err(|e| format!("skipped: cannot write llama.mjs: {e}"))?;
    Ok(Peer {
        dir,
        version: format!(
            "node-llama-cpp {version} (its prebuilt CPU binaries of ggml-org/llama.cpp release {llama})"
        ),
    })
}

/// The CPU variant of ggml the runner's llama.cpp matches: llama-cpp-sys-2 builds without
/// `target-cpu` for SSE4.2, AVX, AVX2, F16C, FMA and BMI2 (`GGML_NATIVE` off), which is
/// ggml's `haswell` variant; node-llama-cpp loads the best variant the CPU runs.
const RUNNER_VARIANT: &str = "libggml-cpu-haswell.so";

impl Peer {
    /// A copy of this installation (hard links) that holds only the CPU variant of the
    /// runner's build, so llama.cpp runs with the runner's instruction set.
    pub fn runner_isa(&self) -> Result<Peer, String> {
        let dir = self.dir.with_file_name("node-llama-cpp-haswell");
        if !dir.join("llama.mjs").is_file() {
            let _ = std::fs::remove_dir_all(&dir);
            let status = Command::new("cp")
                .arg("-al")
                .arg(&self.dir)
                .arg(&dir)
                .status()
                .map_err(|e| format!("cannot run cp: {e}"))?;
            if !status.success() {
                return Err(format!("cp -al {} failed", self.dir.display()));
            }
        }
        let bins = dir.join("node_modules/@node-llama-cpp/linux-x64/bins/linux-x64");
        let variants = std::fs::read_dir(&bins).map_err(|e| format!("{}: {e}", bins.display()))?;
        let mut kept = false;
        for entry in variants.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == RUNNER_VARIANT {
                kept = true;
            } else if name.starts_with("libggml-cpu-") {
                std::fs::remove_file(entry.path()).map_err(|e| format!("{name}: {e}"))?;
            }
        }
        if !kept {
            return Err(format!("{RUNNER_VARIANT} is not in {}", bins.display()));
        }
        Ok(Peer {
            dir,
            version: self.version.clone(),
        })
    }

    /// The command that times `job`.
    pub fn command(&self, job: &Job) -> Command {
        let mut cmd = Command::new("node");
        cmd.arg(self.dir.join("llama.mjs"))
            .arg(&job.gguf)
            .arg(match job.answer {
                Answer::Text => &job.prompts.text,
                Answer::CityGrammar => &job.prompts.city,
            })
            .arg(job.args.threads.to_string())
            .arg(job.args.max_tokens.to_string());
        if job.answer == Answer::CityGrammar {
            cmd.arg(&job.prompts.grammar);
        }
        cmd
    }
}
