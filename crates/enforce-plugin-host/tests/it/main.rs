//! The integration tests of enforce-plugin-host in one test binary (one link instead of one per
//! file): `cargo test -p enforce-plugin-host --test it`. The registry tests need the
//! feature: `--features registry` (on in `cargo test --workspace`, where the `enforce` package
//! turns it on).

mod host;
mod interface_versions;
#[cfg(unix)]
mod permissions;
#[cfg(feature = "registry")]
mod registry;
