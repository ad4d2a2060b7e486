//! Test-only plugin: misbehaves on demand so the host's defences can be tested.
//!
//! - `test_panic` panics in `validate` when the response contains `PANIC` (or on every call with
//!   `{"panic_on": "always"}`), in `repair` with `{"panic_on": "repair"}` (its `validate` then
//!   reports `NEEDS_REPAIR` for responses containing `REPAIR`), and while being built with
//!   `{"panic_on": "build"}`. Otherwise it reports nothing.
//! - `test_sleep` sleeps `sleep_ms` milliseconds (default 10 000) in `validate`, then passes.
#![deny(missing_docs)]

use enforce_plugin_abi::sdk::{Context, PluginSpec, PluginValidator, ValidatorSpec};
use enforce_plugin_abi::{export_plugin, PluginError, PluginIssue};
use serde_json::Value;
use std::time::Duration;

struct Panicky {
    always: bool,
    in_repair: bool,
}

impl PluginValidator for Panicky {
    fn validate(&self, response: &str, _: &Context<'_>) -> Result<Vec<PluginIssue>, PluginError> {
        if self.always || (!self.in_repair && response.contains("PANIC")) {
            panic!("test_panic was asked to panic");
        }
        if self.in_repair && response.contains("REPAIR") {
            return Ok(vec![PluginIssue::error(
                "NEEDS_REPAIR",
                "asked for a repair",
            )
            .hard_abort()]);
        }
        Ok(Vec::new())
    }

    fn repair(&self, _: &str, _: &Context<'_>, _: &[PluginIssue]) -> Option<String> {
        if self.in_repair {
            panic!("test_panic was asked to panic in repair");
        }
        None
    }
}

fn build_panicky(config: &Value) -> Result<Box<dyn PluginValidator>, String> {
    let mode = config
        .get("panic_on")
        .and_then(Value::as_str)
        .unwrap_or("marker");
    match mode {
        "build" => panic!("test_panic was asked to panic while being built"),
        "marker" | "always" | "repair" => Ok(Box::new(Panicky {
            always: mode == "always",
            in_repair: mode == "repair",
        })),
        other => Err(format!("unknown panic_on `{other}`")),
    }
}

struct Sleepy {
    delay: Duration,
}

impl PluginValidator for Sleepy {
    fn validate(&self, _: &str, _: &Context<'_>) -> Result<Vec<PluginIssue>, PluginError> {
        std::thread::sleep(self.delay);
        Ok(Vec::new())
    }
}

export_plugin!(PluginSpec {
    name: "test-misbehaving",
    version: env!("CARGO_PKG_VERSION"),
    validators: &[
        ValidatorSpec {
            name: "test_panic",
            description: "Test only: panics on demand.",
            build: build_panicky,
        },
        ValidatorSpec {
            name: "test_sleep",
            description: "Test only: sleeps before answering.",
            build: |config| {
                let ms = config
                    .get("sleep_ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(10_000);
                Ok(Box::new(Sleepy {
                    delay: Duration::from_millis(ms),
                }))
            },
        },
    ],
});
