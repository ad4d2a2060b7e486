//! Files replaced whole: written beside, flushed to disk, then renamed over. The binary uses
//! it too (`enforce check --fix --write`, `enforce serve`'s statistics files).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Replaces `path` with `text` (creating it when missing): writes a temporary file beside it,
/// flushes it to disk, keeps the old file's permissions, renames it over: a crash leaves the
/// old file or the new one, never part of one. A symlink is followed to the file it names,
/// which is the one replaced: renaming over the link would turn it into a regular file and
/// leave its target as it was. The temporary file is removed when a step fails.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let path = match std::fs::canonicalize(path) {
        Ok(target) => target,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path.to_path_buf(),
        Err(e) => return Err(e),
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    let tmp = dir.join(format!(".{file_name}.enforce-{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if let Ok(meta) = std::fs::metadata(&path) {
            std::fs::set_permissions(&tmp, meta.permissions())?;
        }
        std::fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_created_and_a_symlink_keeps_pointing_at_the_replaced_file() {
        let dir = std::env::temp_dir().join(format!("enforce-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("stats.json");
        write_atomically(&target, "one").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "one");
        #[cfg(unix)]
        {
            let link = dir.join("link.json");
            std::os::unix::fs::symlink(&target, &link).unwrap();
            write_atomically(&link, "two").unwrap();
            assert!(std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink());
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "two");
        }
        let leftovers = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count();
        assert_eq!(leftovers, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
