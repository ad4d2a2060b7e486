//! enforce-plugin-abi's interface 1.0.0, frozen (the types only; no SDK), so a test plugin can
//! be built exactly as a plugin built for 1.0 was.
#![allow(missing_docs, rustdoc::broken_intra_doc_links)]

mod ffi;

pub use abi_stable;
pub use ffi::*;
