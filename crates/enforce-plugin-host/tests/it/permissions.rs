//! Plugin directories and libraries writable by every user are refused with a reason (the
//! warning `enforce` prints), and nothing in them is loaded.

use enforce_plugin_host::{DirSource, PluginDir, PluginHost};
use std::os::unix::fs::PermissionsExt;

fn chmod(path: &std::path::Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn a_world_writable_plugin_directory_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("libevil.so"), b"not even a library").expect("write");
    chmod(dir.path(), 0o777);
    let host = PluginHost::load_dirs(&[PluginDir::new(dir.path(), DirSource::Config)]);
    assert!(host.plugins().is_empty());
    assert_eq!(host.failures().len(), 1, "{:?}", host.failures());
    let failure = &host.failures()[0];
    assert_eq!(failure.path, dir.path());
    assert_eq!(failure.error.kind(), "insecure_permissions");
    let text = failure.error.to_string();
    assert!(
        text.contains("writable by every user") && text.contains("chmod o-w"),
        "{text}"
    );
    assert!(text.contains("config directory"), "{text}");
}

#[test]
fn a_world_writable_library_is_refused_and_a_private_directory_is_read() {
    let dir = tempfile::tempdir().expect("dir");
    chmod(dir.path(), 0o755);
    let lib = dir.path().join("libshared.so");
    std::fs::write(&lib, b"not a library").expect("write");
    chmod(&lib, 0o666);
    let mut host = PluginHost::new();
    let err = host.load_file(&lib).expect_err("refused");
    assert_eq!(err.kind(), "insecure_permissions");
    // The same file, no longer world-writable, is tried (and fails for its real reason).
    chmod(&lib, 0o644);
    let host = PluginHost::load_dirs(&[PluginDir::new(dir.path(), DirSource::Config)]);
    assert_eq!(host.failures().len(), 1);
    assert_eq!(host.failures()[0].error.kind(), "not_a_library");
}
