//! What a peers run measures, and of whom: the peer table, the relay row's name and
//! [`Results`]. The run (`peers.rs`) fills them in and the report (`report.rs`) reads them, so
//! they belong to neither.

use serde_json::Value;
use std::collections::BTreeMap;

/// A Python peer: its virtualenv and the pinned requirements.
pub struct Peer {
    pub name: &'static str,
    pub venv: &'static str,
    pub requirements: &'static [&'static str],
    pub packages: &'static [&'static str],
}

/// The peers with their pins. LiteLLM 1.82.7 and 1.82.8 were compromised releases: never pin
/// those.
pub const PEERS: &[Peer] = &[
    Peer {
        name: "TensorZero",
        venv: "tensorzero",
        requirements: &["tensorzero==2026.6.0"],
        packages: &["tensorzero"],
    },
    Peer {
        name: "LiteLLM proxy",
        venv: "litellm",
        requirements: &["litellm[proxy]==1.80.0"],
        packages: &["litellm"],
    },
    Peer {
        name: "Guardrails AI",
        venv: "guardrails",
        requirements: &["guardrails-ai==0.11.0"],
        packages: &["guardrails-ai", "pydantic"],
    },
    Peer {
        name: "Instructor",
        venv: "instructor",
        requirements: &["instructor==1.17.0", "openai==2.54.0"],
        packages: &["instructor", "openai", "pydantic"],
    },
    Peer {
        name: "Pydantic AI",
        venv: "pydanticai",
        requirements: &["pydantic-ai-slim[openai]==2.68.0"],
        packages: &["pydantic-ai-slim", "openai", "pydantic"],
    },
];

/// The name of the byte-relay row in the proxy table.
pub const RELAY: &str = "relay (floor)";

/// Everything measured, fed to the report.
#[derive(Debug, Default)]
pub struct Results {
    pub machine: BTreeMap<String, String>,
    pub versions: BTreeMap<String, String>,
    pub unsupported: BTreeMap<String, String>,
    pub commands: Vec<String>,
    pub mock_capacity: Option<Value>,
    /// (target, streaming) → load report.
    pub proxy: BTreeMap<(String, bool), Value>,
    pub validators_rust: Option<Value>,
    pub validators_python: Option<Value>,
    /// library → loop figures ("enforce" included).
    pub loops: BTreeMap<String, Value>,
    /// Scenario 4 (streaming), enforce only.
    pub streaming: Option<Value>,
    pub pinned: bool,
    pub started: String,
    pub duration_s: f64,
    pub load_before: String,
    pub load_after: String,
    pub settings: Value,
    /// How idle cores were kept awake, or why not.
    pub cores_awake: String,
}

impl Results {
    /// The figures of `what`, or `None` with the error noted as unsupported.
    pub fn measured(
        &mut self,
        what: impl Into<String>,
        result: anyhow::Result<Value>,
    ) -> Option<Value> {
        match result {
            Ok(figures) => Some(figures),
            Err(e) => {
                self.unsupported.insert(what.into(), e.to_string());
                None
            }
        }
    }
}
