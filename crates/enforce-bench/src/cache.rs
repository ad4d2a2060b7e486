//! The answer cache in the surfaces run (`cargo xtask bench-peers --surfaces`): one more
//! `enforce serve` with the same `person` contract as three models, asked on the chat surface
//! at c=1 in every round. `uncached` has no `cache:`; `cache-hit` keeps answers (the warm-up
//! stores the one answer, every measured request is a hit); `cache-miss` has a cache that holds
//! nothing (`max_bytes: 0`: every request digests its key, looks it up, misses and asks the
//! upstream). A hit's figure against `uncached` is the upstream call it saves; `cache-miss`
//! against `uncached` is what the cache costs a request it cannot answer (target ≤ 0.01 ms).

use crate::peers::{serve, Guarded, Pinning, Served, PERSON_CONFIG};
use crate::results::Results;
use crate::stats::{median, rounds};
use std::path::Path;

/// The bound on what the cache adds to a request it misses, at c=1 (ms).
pub const TARGET_MISS_COST_MS: f64 = 0.01;

/// The models of the cache's `enforce serve`: no cache, a cache every request hits, and one
/// every request misses.
pub const MODELS: [&str; 3] = ["uncached", "cache-hit", "cache-miss"];

/// The configuration: [`PERSON_CONFIG`]'s contract, the three [`MODELS`] over `ok_url`.
fn config(ok_url: &str) -> String {
    let runner = format!(
        "    profile: person\n    runner: {{type: openai, base_url: \"{ok_url}\", model: mock, retry: {{max_retries: 0}}}}\n"
    );
    format!(
        "{PERSON_CONFIG}models:\n  - id: uncached\n{runner}  - id: cache-hit\n{runner}    cache: {{ttl_secs: 3600}}\n  - id: cache-miss\n{runner}    cache: {{max_bytes: 0}}\nserver:\n  api_keys: [sk-bench]\n"
    )
}

/// Starts the cache's `enforce serve` on the SUT core; the process and its base URL (without
/// `/v1`), once healthy.
pub(crate) fn start(
    enforce_bin: &Path,
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    r: &mut Results,
) -> anyhow::Result<(Guarded, String)> {
    let served = Served {
        name: "enforce-cache",
        config: &config(ok_url),
        log: "enforce-cache.log",
    };
    serve(enforce_bin, pin, work, r, &served, &[])
}

/// The rows of the surfaces table for the cache: each model's p50 per round (`p50s`, in
/// [`MODELS`]' order), and the verdicts.
pub fn render(p50s: &[Vec<f64>; 3]) -> String {
    let [uncached, hit, miss] = p50s;
    let differences =
        |of: &[f64]| -> Vec<f64> { of.iter().zip(uncached).map(|(x, base)| x - base).collect() };
    let saved = -median(&differences(hit));
    let miss_cost = median(&differences(miss));
    let verdict = if miss_cost <= TARGET_MISS_COST_MS {
        "met"
    } else {
        "**missed**"
    };
    let mut s = String::from(
        "\nThe answer cache (`cache:` on a model; [docs/cache.md](docs/cache.md)), chat at c=1 against one more `enforce serve` with the same contract: *uncached* has no cache, *cache hit* answers every measured request from the cache, *cache miss* looks every request up and misses (a cache holding nothing). The differences are medians over the rounds of the same round's p50s.\n\n| model | c=1 p50 ms (rounds) | against uncached ms | target | verdict |\n|---|---|---|---|---|\n",
    );
    s.push_str(&format!(
        "| uncached | {:.3} ({}) | 0 | – | – |\n",
        median(uncached),
        rounds(uncached)
    ));
    s.push_str(&format!(
        "| cache hit | {:.3} ({}) | −{saved:.3} (the upstream call saved) | – | – |\n",
        median(hit),
        rounds(hit)
    ));
    s.push_str(&format!(
        "| cache miss | {:.3} ({}) | {miss_cost:+.3} | ≤ {TARGET_MISS_COST_MS} | {verdict} |\n",
        median(miss),
        rounds(miss)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_has_the_three_models() {
        let text = config("http://127.0.0.1:1/v1");
        let parsed: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        let ids: Vec<&str> = parsed["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, MODELS);
    }

    #[test]
    fn a_miss_costing_more_than_the_target_is_missed() {
        let p50s = [vec![1.0, 1.0], vec![0.2, 0.2], vec![1.02, 1.02]];
        let table = render(&p50s);
        assert!(table.contains("−0.800"), "{table}");
        assert!(table.contains("**missed**"), "{table}");
        let p50s = [vec![1.0, 1.0], vec![0.2, 0.2], vec![1.005, 1.005]];
        assert!(render(&p50s).contains("| met |"));
    }
}
