//! The runner's part of an eval's provenance ([`RunnerProvenance`]), from the runner's
//! configuration: fields picked one by one so that no API key or other secret gets in (the
//! base URL loses its user, password, query and fragment; of a runner's `params` only the
//! sampling keys stay), and for the local runner the GGUF file's size and SHA-256.

use enforce_eval::provenance::{ModelFile, RunnerProvenance};
use enforce_runner::{LocalConfig, RunnerConfig};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The size and SHA-256 of the file at `path`, read in chunks.
pub fn model_file(path: &Path) -> std::io::Result<ModelFile> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut file, &mut hasher)?;
    Ok(ModelFile {
        path: path.display().to_string(),
        bytes,
        sha256: format!("{:x}", hasher.finalize()),
    })
}

/// `url` without user, password, query or fragment; a text that is no URL is left out (it
/// could hold anything).
pub fn public_url(url: &str) -> Option<String> {
    let mut parsed = reqwest::Url::parse(url).ok()?;
    // Setting credentials fails only on URLs that cannot hold them, which then hold none.
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    parsed.set_query(None);
    parsed.set_fragment(None);
    Some(parsed.to_string())
}

/// The sampling keys of a runner's `params` that provenance keeps (any other key could be a
/// header or a credential someone put there).
const SAMPLING_KEYS: [&str; 11] = [
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty",
    "stop",
];

fn sampling_of(params: &Map<String, Value>, settings: &mut Map<String, Value>) {
    for key in SAMPLING_KEYS {
        if let Some(value) = params.get(key) {
            settings.insert(key.to_string(), value.clone());
        }
    }
}

/// The runner of `config` as provenance: for the local runner the GGUF file is read whole to
/// digest it; a file that cannot be read keeps its path and says why in `settings`.
pub fn runner_provenance(config: &RunnerConfig) -> RunnerProvenance {
    let mut settings = Map::new();
    let mut base_url = None;
    let mut model_file = None;
    let model = match config {
        RunnerConfig::OpenAi(c) => {
            base_url = public_url(&c.base_url);
            sampling_of(&c.params, &mut settings);
            settings.insert("timeout_secs".into(), c.timeout_secs.into());
            settings.insert("stream".into(), c.stream.into());
            Some(c.model.clone())
        }
        RunnerConfig::Anthropic(c) => {
            base_url = public_url(&c.base_url);
            sampling_of(&c.params, &mut settings);
            settings.insert("max_tokens".into(), c.max_tokens.into());
            settings.insert("timeout_secs".into(), c.timeout_secs.into());
            Some(c.model.clone())
        }
        RunnerConfig::Claude(c) => {
            settings.insert("timeout_secs".into(), c.timeout_secs.into());
            c.model.clone()
        }
        RunnerConfig::Command(c) => {
            settings.insert("program".into(), c.program.display().to_string().into());
            settings.insert("timeout_secs".into(), c.timeout_secs.into());
            None
        }
        RunnerConfig::Local(c) => {
            model_file = local_settings(c, &mut settings);
            c.model
                .file_name()
                .and_then(|name| name.to_str())
                .map(str::to_string)
        }
    };
    RunnerProvenance {
        kind: config.kind().to_string(),
        model,
        base_url,
        model_file,
        settings,
    }
}

/// The local runner's settings, into `settings`, and its model file (a file that cannot be
/// read says why in `settings`).
fn local_settings(c: &LocalConfig, settings: &mut Map<String, Value>) -> Option<ModelFile> {
    for (key, value) in [
        ("threads", Value::from(c.threads)),
        ("temperature", Value::from(c.temperature)),
        ("top_k", Value::from(c.top_k)),
        ("top_p", Value::from(c.top_p)),
        ("min_p", Value::from(c.min_p)),
        ("seed", c.seed.map_or(Value::Null, Value::from)),
        ("max_tokens", Value::from(c.max_tokens)),
        ("context_size", Value::from(c.context_size)),
    ] {
        settings.insert(key.into(), value);
    }
    if let Ok(engine) = serde_json::to_value(c.constraint_engine) {
        settings.insert("constraint_engine".into(), engine);
    }
    match model_file(&c.model) {
        Ok(file) => Some(file),
        Err(e) => {
            let error = format!("cannot read {}: {e}", c.model.display());
            settings.insert("model_file_error".into(), error.into());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_base_url_keeps_no_credentials() {
        assert_eq!(
            public_url("https://user:s3cret@api.example.com/v1?key=abc#x").as_deref(),
            Some("https://api.example.com/v1")
        );
        assert_eq!(
            public_url("http://127.0.0.1:8080/v1").as_deref(),
            Some("http://127.0.0.1:8080/v1")
        );
        assert_eq!(public_url("not a url with a token"), None);
    }

    #[test]
    fn a_model_file_is_digested_whole() {
        let mut file = tempfile::NamedTempFile::new().expect("a temp file");
        file.write_all(b"abc").expect("written");
        let digest = model_file(file.path()).expect("read");
        assert_eq!(digest.bytes, 3);
        // SHA-256("abc"), FIPS 180-2's first example.
        assert_eq!(
            digest.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn an_openai_runner_keeps_its_sampling_and_no_key() {
        let mut config = enforce_runner::OpenAiConfig {
            base_url: "https://k:secret@api.example.com/v1?token=t".into(),
            api_key: Some("sk-secret".into()),
            model: "m".into(),
            ..Default::default()
        };
        config.params.insert("temperature".into(), 0.5.into());
        config
            .params
            .insert("api_key".into(), "sk-in-params".into());
        let runner = runner_provenance(&RunnerConfig::OpenAi(config));
        let json = serde_json::to_string(&runner).expect("json");
        assert!(!json.contains("secret") && !json.contains("sk-"), "{json}");
        assert_eq!(
            runner.base_url.as_deref(),
            Some("https://api.example.com/v1")
        );
        assert_eq!(runner.settings["temperature"], 0.5);
        assert_eq!(runner.model.as_deref(), Some("m"));
    }

    #[test]
    fn a_local_runner_names_its_file_and_digest() {
        let mut file = tempfile::NamedTempFile::new().expect("a temp file");
        file.write_all(b"abc").expect("written");
        let config = enforce_runner::LocalConfig {
            model: file.path().to_path_buf(),
            threads: 3,
            ..Default::default()
        };
        let runner = runner_provenance(&RunnerConfig::Local(config));
        let digest = runner.model_file.expect("read");
        assert!(digest.sha256.starts_with("ba7816bf"));
        assert_eq!(runner.settings["threads"], 3);
        assert_eq!(runner.kind, "local");
    }
}
