//! The integration tests of enforce-external in one test binary, like every crate's: `cargo test -p enforce-external
//! --test it`. New areas become modules here.

mod external;
// `cargo test -p enforce-external --features grpc --test it` (the workspace build has it).
#[cfg(feature = "grpc")]
mod grpc;
mod reformulate;
