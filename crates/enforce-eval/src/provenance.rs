//! Provenance: what produced an eval's numbers, so a reader can tell two runs apart and rerun
//! one: enforce's version, the runner and its settings, the model (a local GGUF file with its
//! sha256), the sampling, the seeds, the digests of the dataset and the configuration, and the
//! machines. The runner's part comes from the front end, which knows the runner; it holds
//! fields picked one by one, never a secret.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What produced an eval's numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The version of enforce that ran the eval.
    pub enforce_version: String,
    /// The runner and the model.
    pub runner: RunnerProvenance,
    /// Sampling parameters sent with every request (`temperature`, `max_tokens`), the seed
    /// excepted: see `seeds`.
    pub sampling: Map<String, Value>,
    /// The seeds of the trials' first attempts (each re-ask advances its trial's seed by one).
    pub seeds: Seeds,
    /// Digest of the dataset file (as `eval.json` has it).
    pub dataset_digest: String,
    /// Digest of the configuration file as written (`${VAR}` unexpanded); `null` without one.
    pub config_digest: Option<String>,
    /// The machines that ran the trials (several for a merged sharded eval).
    pub machines: Vec<Machine>,
}

/// The runner and the model, without secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunnerProvenance {
    /// `openai`, `anthropic`, `claude`, `command` or `local`.
    pub kind: String,
    /// The model's name (the GGUF file's name for the local runner).
    pub model: Option<String>,
    /// The server's base URL, without credentials, query or fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The local runner's model file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_file: Option<ModelFile>,
    /// The runner's own settings that shape answers (threads, sampling defaults, context
    /// size, timeouts...).
    pub settings: Map<String, Value>,
}

/// A model file and its digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// The path as given.
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// SHA-256 of its content, hex.
    pub sha256: String,
}

/// The seeds: the first, and one more per (case, repeat) up to the last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seeds {
    /// The first seed (`--seed`, 0 without it).
    pub first: u64,
    /// The last (first + cases × repeats − 1).
    pub last: u64,
}

impl Seeds {
    /// The seeds of `cases` × `repeats` from `first`.
    pub fn of(first: u64, cases: usize, repeats: u32) -> Seeds {
        let count = (cases as u64).saturating_mul(u64::from(repeats));
        Seeds {
            first,
            last: first.wrapping_add(count.saturating_sub(1)),
        }
    }
}

/// The machine an eval ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// Operating system (`linux`, `macos`, `windows`...).
    pub os: String,
    /// CPU architecture (`x86_64`, `aarch64`...).
    pub arch: String,
    /// Logical CPUs available to the process.
    pub cpus: Option<usize>,
    /// The CPU's model name, where the system says it (Linux's `/proc/cpuinfo`).
    pub cpu_model: Option<String>,
}

impl Machine {
    /// This machine.
    pub fn this() -> Machine {
        Machine {
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            cpus: std::thread::available_parallelism().ok().map(|n| n.get()),
            cpu_model: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|text| cpu_model(&text)),
        }
    }
}

/// The first `model name` (x86) or `Model` (ARM boards) line of `/proc/cpuinfo`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let key = key.trim();
        (key == "model name" || key == "Model")
            .then(|| value.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

/// Merges the machines of `others` into `machines`, each machine once.
pub fn add_machines(machines: &mut Vec<Machine>, others: &[Machine]) {
    for machine in others {
        if !machines.contains(machine) {
            machines.push(machine.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_comes_from_cpuinfo() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel Xeon\n";
        assert_eq!(cpu_model(text).as_deref(), Some("Intel Xeon"));
        assert_eq!(cpu_model("processor: 0\n"), None);
        let this = Machine::this();
        assert_eq!(this.arch, std::env::consts::ARCH);
    }

    #[test]
    fn seeds_run_one_per_case_and_repeat() {
        assert_eq!(
            Seeds::of(40, 6, 2),
            Seeds {
                first: 40,
                last: 51
            }
        );
        let mut machines = vec![Machine::this()];
        add_machines(&mut machines, &[Machine::this()]);
        assert_eq!(machines.len(), 1);
    }
}
