//! A truncated ELF library is refused before the system loader sees it: `dlopen` maps the
//! segments the program headers name, and touching a page past the end of the file kills the
//! process with SIGBUS (a copy in progress, a full disk). Only the headers are read.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

const MAGIC: &[u8; 4] = b"\x7fELF";
const CLASS_32: u8 = 1;
const CLASS_64: u8 = 2;
const LITTLE_ENDIAN: u8 = 1;
/// The largest program header entry of any ELF class (64-bit: 56 bytes), with room to spare.
const MAX_PROGRAM_HEADER_SIZE: u64 = 64;

/// Where a truncated file falls short: `None` when `path` is not an ELF file (the system loader
/// judges it) or when every part its headers name lies within the file, else what is missing.
pub(crate) fn truncation(path: &Path) -> std::io::Result<Option<String>> {
    let mut file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut ident = [0u8; 64];
    let read = read_up_to(&mut file, &mut ident)?;
    if read < MAGIC.len() || &ident[..4] != MAGIC {
        return Ok(None);
    }
    let Some(header) = Header::parse(&ident[..read]) else {
        return Ok(Some(format!(
            "truncated: the file has {size} bytes, less than an ELF header"
        )));
    };
    if u64::from(header.ph_entry_size) > MAX_PROGRAM_HEADER_SIZE {
        // No ELF class has such entries; the system loader refuses the file.
        return Ok(None);
    }
    if let Some(missing) = header.tables_past(size) {
        return Ok(Some(missing));
    }
    let table_len = u64::from(header.ph_entry_size) * u64::from(header.ph_count);
    let mut table = vec![0u8; usize::try_from(table_len).unwrap_or(0)];
    file.seek(SeekFrom::Start(header.ph_offset))?;
    file.read_exact(&mut table)?;
    Ok(header.segment_past(&table, size))
}

/// Reads until `buf` is full or the file ends; the number of bytes read.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// The fields of the ELF file header that locate the program and section header tables.
struct Header {
    wide: bool,
    little: bool,
    ph_offset: u64,
    ph_entry_size: u16,
    ph_count: u16,
    sh_offset: u64,
    sh_entry_size: u16,
    sh_count: u16,
}

impl Header {
    /// The header from the file's first bytes; `None` when they are fewer than the header needs
    /// (or name an unknown class or byte order, which the system loader refuses by itself).
    fn parse(bytes: &[u8]) -> Option<Header> {
        let wide = match *bytes.get(4)? {
            CLASS_32 => false,
            CLASS_64 => true,
            _ => return Some(Header::empty()),
        };
        let little = *bytes.get(5)? == LITTLE_ENDIAN;
        let field = Fields { bytes, little };
        let (ph, sh, sizes) = if wide { (32, 40, 54) } else { (28, 32, 42) };
        let word = |at| if wide { field.u64(at) } else { field.u32(at) };
        Some(Header {
            wide,
            little,
            ph_offset: word(ph)?,
            sh_offset: word(sh)?,
            ph_entry_size: field.u16(sizes)?,
            ph_count: field.u16(sizes + 2)?,
            sh_entry_size: field.u16(sizes + 4)?,
            sh_count: field.u16(sizes + 6)?,
        })
    }

    /// A header naming no tables.
    fn empty() -> Header {
        Header {
            wide: false,
            little: true,
            ph_offset: 0,
            ph_entry_size: 0,
            ph_count: 0,
            sh_offset: 0,
            sh_entry_size: 0,
            sh_count: 0,
        }
    }

    /// What is missing when the program or section header table ends past `size`.
    fn tables_past(&self, size: u64) -> Option<String> {
        // With more than 0xff00 sections the count is 0 and the table still has its first entry.
        let sections = u64::from(self.sh_count.max(u16::from(self.sh_offset != 0)));
        let tables = [
            (
                "program header table",
                self.ph_offset,
                u64::from(self.ph_entry_size) * u64::from(self.ph_count),
            ),
            (
                "section header table",
                self.sh_offset,
                u64::from(self.sh_entry_size) * sections,
            ),
        ];
        tables.into_iter().find_map(|(what, offset, len)| {
            let end = offset.checked_add(len);
            (end.is_none_or(|end| end > size)).then(|| past_end(what, end, size))
        })
    }

    /// What is missing when a segment in the program header `table` ends past `size`.
    fn segment_past(&self, table: &[u8], size: u64) -> Option<String> {
        let entry = usize::from(self.ph_entry_size).max(1);
        table
            .chunks_exact(entry)
            .enumerate()
            .find_map(|(index, bytes)| {
                let field = Fields {
                    bytes,
                    little: self.little,
                };
                let (offset, file_size) = if self.wide {
                    (field.u64(8), field.u64(32))
                } else {
                    (field.u32(4), field.u32(16))
                };
                let (offset, file_size) = (offset?, file_size?);
                let end = offset.checked_add(file_size);
                (file_size > 0 && end.is_none_or(|end| end > size))
                    .then(|| past_end(&format!("segment {index}"), end, size))
            })
    }
}

fn past_end(what: &str, end: Option<u64>, size: u64) -> String {
    match end {
        Some(end) => format!("truncated: its {what} ends at byte {end}, the file has {size}"),
        None => format!("truncated: its {what} lies beyond any file size"),
    }
}

/// Little- or big-endian integers at byte offsets of a header.
struct Fields<'a> {
    bytes: &'a [u8],
    little: bool,
}

impl Fields<'_> {
    fn array<const N: usize>(&self, at: usize) -> Option<[u8; N]> {
        self.bytes.get(at..at + N)?.try_into().ok()
    }

    fn u16(&self, at: usize) -> Option<u16> {
        let b = self.array(at)?;
        Some(if self.little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    }

    fn u32(&self, at: usize) -> Option<u64> {
        let b = self.array(at)?;
        Some(u64::from(if self.little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }))
    }

    fn u64(&self, at: usize) -> Option<u64> {
        let b = self.array(at)?;
        Some(if self.little {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut file, bytes).expect("write");
        file
    }

    /// A 64-bit little-endian header with one program header (segment at `offset`, `len`
    /// bytes) right after it, and no section headers.
    fn elf64(offset: u64, len: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; 64 + 56];
        bytes[..4].copy_from_slice(MAGIC);
        bytes[4] = CLASS_64;
        bytes[5] = LITTLE_ENDIAN;
        bytes[32..40].copy_from_slice(&64u64.to_le_bytes());
        bytes[54..56].copy_from_slice(&56u16.to_le_bytes());
        bytes[56..58].copy_from_slice(&1u16.to_le_bytes());
        bytes[64 + 8..64 + 16].copy_from_slice(&offset.to_le_bytes());
        bytes[64 + 32..64 + 40].copy_from_slice(&len.to_le_bytes());
        bytes
    }

    #[test]
    fn finds_what_lies_past_the_end() {
        let whole = write(&elf64(0, 120));
        assert_eq!(truncation(whole.path()).unwrap(), None);
        let cut = write(&elf64(100, 4096));
        let reason = truncation(cut.path()).unwrap().expect("truncated");
        assert!(
            reason.starts_with("truncated: its segment 0 ends at byte 4196"),
            "{reason}"
        );
        let overflowing = write(&elf64(u64::MAX, 2));
        assert!(truncation(overflowing.path()).unwrap().is_some());
        let short_table = write(&elf64(0, 1)[..100]);
        let reason = truncation(short_table.path()).unwrap().expect("truncated");
        assert!(reason.contains("program header table"), "{reason}");
        let short_header = write(&elf64(0, 1)[..40]);
        let reason = truncation(short_header.path()).unwrap().expect("truncated");
        assert!(reason.contains("less than an ELF header"), "{reason}");
    }

    #[test]
    fn leaves_other_files_to_the_loader() {
        for bytes in [
            &b""[..],
            b"\x7fEL",
            b"#!/bin/sh\n",
            b"\xcf\xfa\xed\xfe mach-o",
        ] {
            assert_eq!(truncation(write(bytes).path()).unwrap(), None);
        }
    }
}
