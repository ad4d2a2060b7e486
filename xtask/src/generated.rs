//! Files the repository keeps generated (the reference pages, the public-API lists): written by
//! their xtask, compared by a test that fails when the checked-in copy is stale.

use crate::{root, Result};

/// A generated file: its path relative to the repository and what it must contain.
pub(crate) type Generated = (String, String);

/// Writes every file.
pub(crate) fn write(files: &[Generated]) -> Result<()> {
    for (path, content) in files {
        let path = root().join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        std::fs::write(&path, content)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("xtask: wrote {}", path.display());
    }
    Ok(())
}

/// The paths whose checked-in text differs from what they must contain.
#[cfg(test)]
pub(crate) fn stale(files: &[Generated]) -> Vec<String> {
    files
        .iter()
        .filter(|(path, content)| {
            std::fs::read_to_string(root().join(path)).unwrap_or_default() != *content
        })
        .map(|(path, _)| path.clone())
        .collect()
}
