//! Test-only shared library: a valid `.so` that exports a C function but no enforce root
//! module, so the host must report "missing root module".
#![deny(missing_docs)]

/// Some unrelated exported function.
#[no_mangle]
pub extern "C" fn enforce_test_unrelated_function() -> u32 {
    42
}
