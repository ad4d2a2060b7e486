//! Files replaced whole: written beside, flushed to disk, then renamed over.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `text` to a temporary file beside `path`, flushes it to disk, then renames it over
/// `path` (created when missing): a crash leaves the old file or the new one, never part of
/// one. The temporary file is removed when a step fails.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}
