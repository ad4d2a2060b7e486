//! Helpers for this crate's unit tests.

pub(crate) use futures_executor::block_on;
