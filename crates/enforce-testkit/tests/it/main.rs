//! The integration tests of enforce-testkit in one test binary (one link instead of one per
//! file; new test files become modules here): `cargo test -p enforce-testkit --test it`.

mod mock_server;
