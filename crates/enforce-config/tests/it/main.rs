//! The integration tests of enforce-config in one test binary, like every crate's: `cargo test -p enforce-config
//! --test it`. New areas become modules here.

mod prose;
