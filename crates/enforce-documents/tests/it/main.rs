//! The integration tests of enforce-documents in one test binary, like every crate's: `cargo test -p enforce-documents
//! --test it`. New areas become modules here.

mod partial;
mod regressions;
