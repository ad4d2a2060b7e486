//! # enforce-plugin-host
//!
//! Loads third-party enforce validator plugins at startup and adapts them to enforce-core's
//! [`Validator`](enforce_core::Validator).
//!
//! - **Discovery** ([`plugin_search_path_from_env`]): the config's `plugin_dirs`, then
//!   `ENFORCE_PLUGIN_PATH` (colon-separated), then `~/.local/share/enforce/plugins`
//!   (`$XDG_DATA_HOME/enforce/plugins` when set). Every `.so` (`.dylib` on macOS) directly inside
//!   a directory is a candidate.
//! - **Loading** ([`PluginHost::load_dirs`], [`load_plugin`]): each library is opened through its
//!   own abi_stable header and checked — it is a library, it exports the root module, it was
//!   built for interface [`INTERFACE_VERSION`](enforce_plugin_abi::INTERFACE_VERSION) (same
//!   major), its root module's layout matches, its initialisation succeeds. Every file that
//!   fails is recorded as a [`LoadFailure`] with a [`LoadError`] saying why; the others load.
//! - **Adapting** ([`PluginHost::create_validator`] → [`HostedValidator`]): the validator is
//!   built from its JSON/YAML configuration; calls run on a blocking thread with a timeout
//!   ([`CallOptions`]); a panic in the plugin becomes a [`PLUGIN_PANIC`] issue, a timeout or
//!   plugin error makes the validator unavailable.
//! - **Registry** (feature `registry`): `PluginHost::register_into` adds every plugin
//!   validator to enforce-config's `Registry`, so profiles name them like built-ins.
//!
//! ```no_run
//! use enforce_core::{Context, Validator};
//! use enforce_plugin_host::{plugin_search_path_from_env, CallOptions, PluginHost};
//!
//! # async fn demo() {
//! let host = PluginHost::load_dirs(&plugin_search_path_from_env(&[]));
//! for failure in host.failures() {
//!     eprintln!("skipped {}: {}", failure.path.display(), failure.error);
//! }
//! let prose = host
//!     .create_validator_from_text("german_prose", "german_prose", "check_scores: true", CallOptions::default())
//!     .expect("german-prose plugin installed");
//! let issues = prose.validate("Wir danken Ihnen.", &Context::new()).await.unwrap();
//! assert_eq!(issues[0].code, "DIRECT_ADDRESS");
//! # }
//! ```
#![deny(missing_docs)]

mod adapter;
mod discovery;
mod elf;
mod error;
mod host;
mod load;
mod pool;
#[cfg(feature = "registry")]
mod registry;

pub use adapter::{CallOptions, HostedValidator, Isolation, DEFAULT_CALL_TIMEOUT, PLUGIN_PANIC};
pub use discovery::{
    default_plugin_dir, is_library_file_name, library_files, plugin_search_path,
    plugin_search_path_from_env, DirSource, PluginDir, PLUGIN_PATH_ENV,
};
pub use error::{CreateError, LoadError};
pub use host::{config_from_text, LoadFailure, PluginHost};
pub use load::{host_interface_version, load_plugin, LoadedPlugin, ValidatorInfo};
#[cfg(feature = "registry")]
pub use registry::{call_options, RegistrationConflict, HOST_OPTIONS_KEY};
