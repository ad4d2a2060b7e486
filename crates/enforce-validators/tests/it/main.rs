//! The integration tests of enforce-validators in one test binary:
//! `cargo test -p enforce-validators --test it`.

mod partial;
mod scope;

use futures_executor::block_on;
