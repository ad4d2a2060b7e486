#![no_main]
//! `file_refs` validation and the `files.modify` -> `files.create` repair on any text, against
//! a small fixed project: no panic; a repair never leaves a FILE_NOT_FOUND behind, and
//! repairing the repaired text changes nothing more.
use enforce_core::{Context, Validator};
use enforce_documents::file_refs::{FileRefs, FILE_NOT_FOUND};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

#[path = "common.rs"]
mod common;

fn validator() -> &'static FileRefs {
    static V: OnceLock<FileRefs> = OnceLock::new();
    V.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("enforce-fuzz-root-{}", std::process::id()));
        let _ = std::fs::create_dir_all(root.join("src"));
        let _ = std::fs::write(root.join("src/lib.rs"), "");
        let _ = std::fs::write(root.join("a.rs"), "");
        FileRefs::new("file_refs", root.canonicalize().unwrap_or(root))
    })
}

fuzz_target!(|text: &str| {
    let v = validator();
    let ctx = Context::new();
    let Ok(issues) = common::block_on(v.validate(text, &ctx)) else { return };
    if let Some(fixed) = v.repair(text, &ctx, &issues) {
        let again = common::block_on(v.validate(&fixed, &ctx)).unwrap_or_default();
        assert!(again.iter().all(|i| i.code != FILE_NOT_FOUND), "{fixed:?}");
        let twice = v.repair(&fixed, &ctx, &again);
        assert!(twice.is_none() || twice.as_deref() == Some(fixed.as_str()));
    }
});
