//! Replacing a file whole: `enforce check --fix` rewrites sources, `enforce serve` its
//! `reask: auto` statistics files.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Replaces `path` with `text`: write a temporary file next to it, flush it to disk, keep the
/// permissions, rename over the original. A symlink is followed to the file it names, which is
/// the one replaced: renaming over the link would turn it into a regular file and leave its
/// target unrepaired.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let path = &std::fs::canonicalize(path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "input".into());
    let tmp = dir.join(format!(".{file_name}.enforce-{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if let Ok(meta) = std::fs::metadata(path) {
            std::fs::set_permissions(&tmp, meta.permissions())?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
