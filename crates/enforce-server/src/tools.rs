//! The per-request checks of tool calls ([`ToolCalls`]), compiled once per distinct `tools`
//! array: Open WebUI sends the same ~36 tool definitions with every request, and compiling their
//! schemas each time would cost more than the rest of the proxy.

use enforce_validators::tool_calls::ToolCalls;
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

/// Distinct `tools` arrays kept; when full the cache starts over (a client cycling through more
/// tool sets than this pays the compile per request, nothing worse).
const CAPACITY: usize = 256;

/// Compiled tool checks by a digest of the `tools` JSON.
#[derive(Debug, Default)]
pub(crate) struct ToolCheckCache {
    /// Random keys per process: a client cannot craft two tool sets that share an entry.
    keys: RandomState,
    entries: Mutex<HashMap<u64, Arc<ToolCalls>>>,
}

/// Feeds serialized JSON into a hasher without building the string.
struct HashWriter<'a, H: Hasher>(&'a mut H);

impl<H: Hasher> io::Write for HashWriter<'_, H> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ToolCheckCache {
    /// The checks for a request's `tools` (built and kept on first sight).
    pub fn checks_for(&self, tools: &Value) -> Arc<ToolCalls> {
        let mut hasher = self.keys.build_hasher();
        // Writing into a hasher cannot fail; on the impossible error the digest is still usable.
        let _ = serde_json::to_writer(HashWriter(&mut hasher), tools);
        let digest = hasher.finish();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = entries.get(&digest) {
            return found.clone();
        }
        let checks = Arc::new(ToolCalls::from_declared(tools));
        if !checks.unchecked().is_empty() {
            tracing::warn!(
                tools = ?checks.unchecked(),
                "tool parameter schemas that do not compile: their arguments are only checked for valid JSON"
            );
        }
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(digest, checks.clone());
        checks
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_compile_per_distinct_tool_set() {
        let cache = ToolCheckCache::default();
        let a = json!([{"type": "function", "function": {"name": "a"}}]);
        let b = json!([{"type": "function", "function": {"name": "b"}}]);
        let first = cache.checks_for(&a);
        assert!(Arc::ptr_eq(&first, &cache.checks_for(&a.clone())));
        let other = cache.checks_for(&b);
        assert_eq!(other.names().collect::<Vec<_>>(), ["b"]);
        assert_eq!(cache.len(), 2);
    }
}
