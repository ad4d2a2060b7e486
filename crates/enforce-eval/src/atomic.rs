//! Files replaced whole: written beside, then renamed over.

use std::path::Path;

/// Writes `text` to a temporary file beside `path`, then renames it over `path`: a crash
/// leaves the old file or the new one, never part of one.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = std::path::PathBuf::from(temp);
    std::fs::write(&temp, text)?;
    std::fs::rename(&temp, path)
}
