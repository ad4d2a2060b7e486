//! API keys: `server.api_keys` entries as written ([`ApiKeyEntry`], [`ApiKeySpec`]), a key's
//! grant of models and profiles ([`KeyGrant`]), and the comma-separated list of `ENFORCE_API_KEYS`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A named key (a `server.api_keys` entry given as a mapping), which the audit record names,
/// and which may be limited to some models and profiles (`models:`, `profiles:`). A request
/// with a limited key for another model, or enforced with another profile, is refused with
/// 403; `/v1/models` lists only its models.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyGrant {
    /// The name logs and `enforce config explain` show for it (never the key).
    pub name: String,
    /// The key itself.
    pub key: String,
    /// The public model ids it may use; `None`: every model.
    pub models: Option<Vec<String>>,
    /// The profiles its requests may be enforced with (the model's own, a route's or
    /// `X-Enforce-Profile`'s); `None`: every profile.
    pub profiles: Option<Vec<String>>,
}

impl KeyGrant {
    /// Whether it is limited to some models or profiles (else it may use everything, like an
    /// anonymous key, and is kept for its name).
    pub fn is_limited(&self) -> bool {
        self.models.is_some() || self.profiles.is_some()
    }

    /// Whether this key may use model `id`.
    pub fn allows_model(&self, id: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|models| models.iter().any(|m| m == id))
    }

    /// Whether this key's requests may be enforced with profile `name`.
    pub fn allows_profile(&self, name: &str) -> bool {
        self.profiles
            .as_ref()
            .is_none_or(|profiles| profiles.iter().any(|p| p == name))
    }
}

impl fmt::Debug for KeyGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs and panics.
        f.debug_struct("KeyGrant")
            .field("name", &self.name)
            .field("models", &self.models)
            .field("profiles", &self.profiles)
            .finish_non_exhaustive()
    }
}

/// One entry of `server.api_keys`: a key as a string, or a key with what it may use.
///
/// ```yaml
/// server:
///   api_keys:
///     - sk-admin-1                      # every model and profile
///     - name: support-app
///       key_env: SUPPORT_APP_KEY        # or key: "..."
///       models: [support]               # 403 for any other model
///       profiles: [support, support-json]
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ApiKeyEntry {
    /// A key that may use every model and profile.
    Key(String),
    /// A key with a name (the audit record shows it), possibly limited to some models or
    /// profiles.
    Scoped(ApiKeySpec),
}

impl<'de> Deserialize<'de> for ApiKeyEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{self, MapAccess, Visitor};
        // By hand rather than `untagged`, so that a wrong field in a mapping is reported by
        // name instead of as "matches no variant".
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = ApiKeyEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key, or a mapping with `key` or `key_env` and `models`/`profiles`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ApiKeyEntry, E> {
                Ok(ApiKeyEntry::Key(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ApiKeyEntry, E> {
                Ok(ApiKeyEntry::Key(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ApiKeyEntry, E> {
                Ok(ApiKeyEntry::Key(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ApiKeyEntry, A::Error> {
                ApiKeySpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ApiKeyEntry::Scoped)
            }
        }
        deserializer.deserialize_any(Entry)
    }
}

/// A `server.api_keys` entry given as a mapping.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiKeySpec {
    /// Its name in the audit record, logs and `enforce config explain` (default `api_keys[N]`).
    pub name: Option<String>,
    /// The key (prefer `key_env`: a key in a file is a key in backups).
    pub key: Option<String>,
    /// The environment variable holding the key.
    pub key_env: Option<String>,
    /// The model ids it may use (default: all).
    pub models: Option<Vec<String>>,
    /// The profiles its requests may be enforced with (default: all).
    pub profiles: Option<Vec<String>>,
}

/// Splits a comma-separated key list, trimming each key. An empty or blank entry (`"$KEY"` with
/// `KEY` unset, a doubled or trailing comma) is refused with its 1-based position: a key list
/// that quietly shrank could leave the proxy open.
pub fn parse_key_list(value: &str) -> Result<Vec<String>, BlankKey> {
    value
        .split(',')
        .map(str::trim)
        .enumerate()
        .map(|(index, key)| match key.is_empty() {
            true => Err(BlankKey {
                position: index + 1,
            }),
            false => Ok(key.to_string()),
        })
        .collect()
}

/// An empty or blank entry in a key list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key {position} is empty")]
pub struct BlankKey {
    /// Its 1-based position in the list.
    pub position: usize,
}
