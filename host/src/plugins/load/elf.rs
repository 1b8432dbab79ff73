//! The ELF check before dlopen: a file that is not a shared library, or is shorter than
//! its own headers say (half-written), is refused without the dynamic loader seeing it.

use std::fs;
use std::io;

use crate::plugins::load::error::{LoadErrorKind, RustLibraryKind};

/// Refuses files that cannot be (complete) shared libraries before the dynamic loader
/// sees them: no ELF header, or an ELF file shorter than its own headers say. The dynamic
/// loader happily maps a library whose tail is missing, and the host would crash later.
/// Reads only the header and the program header table, at their offsets (the file's
/// position is left alone), from a file of `size` bytes.
#[cfg(unix)]
pub(crate) fn check_elf_header(f: &fs::File, size: u64) -> Result<(), LoadErrorKind> {
    checked_header(f, size).map(|_| ())
}

/// [`check_elf_header`]'s work: the 64-bit header it read, when it is one.
#[cfg(unix)]
fn checked_header(f: &fs::File, size: u64) -> Result<Option<Elf64>, LoadErrorKind> {
    use std::os::unix::fs::FileExt as _;
    if cfg!(target_os = "macos") {
        return Ok(None);
    }
    let io_err = |source| LoadErrorKind::Io {
        action: "read the file",
        source,
    };
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    let header = &buf[..got];
    if header.len() < 4 || header[..4] != *b"\x7fELF" {
        return Err(LoadErrorKind::NotASharedLibrary { size });
    }
    let Some(elf) = Elf64::parse(header) else {
        // 32-bit or malformed: leave the verdict to the dynamic loader.
        return Ok(None);
    };
    let mut needed = elf
        .shoff
        .saturating_add(u64::from(elf.shnum) * u64::from(elf.shentsize));
    let ph_end = elf
        .phoff
        .saturating_add(u64::from(elf.phnum) * u64::from(elf.phentsize));
    needed = needed.max(ph_end);
    if ph_end <= size && elf.phentsize >= 0x28 {
        // Within the file, which is at most max_file_size: a bounded allocation.
        let mut table = vec![0u8; usize::from(elf.phnum) * usize::from(elf.phentsize)];
        f.read_exact_at(&mut table, elf.phoff).map_err(io_err)?;
        for ph in table.chunks_exact(usize::from(elf.phentsize)) {
            let offset = elf.u64_at(ph, 0x08);
            let filesz = elf.u64_at(ph, 0x20);
            needed = needed.max(offset.saturating_add(filesz));
        }
    }
    if needed > size {
        return Err(LoadErrorKind::Truncated { size, needed });
    }
    Ok(Some(elf))
}

/// [`check_elf_header`], then refuses a library rustc builds for itself
/// ([`RustLibraryKind`]), which is whole but no plugin: the check of a file before it is
/// loaded (its private copy, the same bytes, needs only the first).
#[cfg(unix)]
pub(crate) fn check_plugin_elf(f: &fs::File, size: u64) -> Result<(), LoadErrorKind> {
    let Some(elf) = checked_header(f, size)? else {
        return Ok(());
    };
    match rust_library_kind(f, &elf, size) {
        Ok(Some(kind)) => Err(LoadErrorKind::RustLibrary { kind }),
        Ok(None) => Ok(()),
        Err(source) => Err(LoadErrorKind::Io {
            action: "read the file",
            source,
        }),
    }
}

#[cfg(not(unix))]
pub(crate) fn check_plugin_elf(f: &fs::File, size: u64) -> Result<(), LoadErrorKind> {
    check_elf_header(f, size)
}

/// The longest string table read to tell a Rust library for rustc from a plugin; a
/// plugin's tables are far smaller, and a longer one is left to the later checks.
#[cfg(unix)]
const MAX_STRINGS: u64 = 16 << 20;

/// Whether the library is one rustc builds for itself, not a plugin: a proc-macro crate's
/// (it exports `__rustc_proc_macro_decls_*`) or a `dylib` crate's (it carries rustc's
/// metadata in a `.rustc` section, which a `cdylib`, as every plugin is, never has).
/// `cargo build --release` puts the `#[tool]` macros' library in `target/release` beside
/// the plugins, so the scan and `install` pass these over without running them. Reads
/// the section headers (already checked to lie within the file's `size`) and two string
/// tables.
#[cfg(unix)]
fn rust_library_kind(f: &fs::File, elf: &Elf64, size: u64) -> io::Result<Option<RustLibraryKind>> {
    use std::os::unix::fs::FileExt as _;
    const SHT_DYNSYM: u32 = 11;
    let entry = usize::from(elf.shentsize);
    if elf.shoff == 0 || elf.shnum == 0 || entry < 0x40 {
        return Ok(None);
    }
    let mut table = vec![0u8; usize::from(elf.shnum) * entry];
    f.read_exact_at(&mut table, elf.shoff)?;
    let sections: Vec<&[u8]> = table.chunks_exact(entry).collect();
    let read = |section: &[u8]| -> io::Result<Option<Vec<u8>>> {
        let offset = elf.u64_at(section, 0x18);
        let len = elf.u64_at(section, 0x20);
        if len > MAX_STRINGS || offset.saturating_add(len) > size {
            return Ok(None);
        }
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
        f.read_exact_at(&mut bytes, offset)?;
        Ok(Some(bytes))
    };
    for section in &sections {
        if elf.u32_at(section, 0x04) != SHT_DYNSYM {
            continue;
        }
        let link = elf.u32_at(section, 0x28) as usize;
        if let Some(strings) = sections.get(link).map(|s| read(s)).transpose()?.flatten()
            && crate::text::contains_bytes(&strings, b"\0__rustc_proc_macro_decls_")
        {
            return Ok(Some(RustLibraryKind::ProcMacro));
        }
    }
    if let Some(names) = sections
        .get(usize::from(elf.shstrndx))
        .map(|s| read(s))
        .transpose()?
        .flatten()
    {
        for section in &sections {
            let at = elf.u32_at(section, 0x00) as usize;
            if names.get(at..).is_some_and(|n| n.starts_with(b".rustc\0")) {
                return Ok(Some(RustLibraryKind::Dylib));
            }
        }
    }
    Ok(None)
}

/// Whether the file at `path` is, by its ELF headers, a whole shared library now: a
/// regular file (opened without blocking, so a FIFO never stalls the caller) whose section
/// header table, program header table and segments all end within its size. What the
/// watcher asks before it rescans at once instead of waiting for the directory to be
/// quiet; loading checks the same again on the bytes it copies.
pub(crate) fn looks_complete(path: &std::path::Path) -> bool {
    match crate::sys::safe_open::open_regular(path) {
        Ok((file, meta)) => check_elf_header(&file, meta.len()).is_ok(),
        Err(_) => false,
    }
}

#[cfg(not(unix))]
pub(crate) fn check_elf_header(_f: &fs::File, _size: u64) -> Result<(), LoadErrorKind> {
    Ok(())
}

/// The fields of a 64-bit ELF header that say how long the file must be.
struct Elf64 {
    big_endian: bool,
    phoff: u64,
    shoff: u64,
    phentsize: u16,
    phnum: u16,
    shentsize: u16,
    shnum: u16,
    shstrndx: u16,
}

impl Elf64 {
    fn parse(h: &[u8]) -> Option<Elf64> {
        if h.len() < 64 || h[4] != 2 {
            return None;
        }
        let big_endian = match h[5] {
            1 => false,
            2 => true,
            _ => return None,
        };
        let mut elf = Elf64 {
            big_endian,
            phoff: 0,
            shoff: 0,
            phentsize: 0,
            phnum: 0,
            shentsize: 0,
            shnum: 0,
            shstrndx: 0,
        };
        elf.phoff = elf.u64_at(h, 0x20);
        elf.shoff = elf.u64_at(h, 0x28);
        elf.phentsize = elf.u16_at(h, 0x36);
        elf.phnum = elf.u16_at(h, 0x38);
        elf.shentsize = elf.u16_at(h, 0x3A);
        elf.shnum = elf.u16_at(h, 0x3C);
        elf.shstrndx = elf.u16_at(h, 0x3E);
        Some(elf)
    }

    fn u64_at(&self, b: &[u8], at: usize) -> u64 {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&b[at..at + 8]);
        if self.big_endian {
            u64::from_be_bytes(raw)
        } else {
            u64::from_le_bytes(raw)
        }
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let mut raw = [0u8; 4];
        raw.copy_from_slice(&b[at..at + 4]);
        if self.big_endian {
            u32::from_be_bytes(raw)
        } else {
            u32::from_le_bytes(raw)
        }
    }

    fn u16_at(&self, b: &[u8], at: usize) -> u16 {
        let raw = [b[at], b[at + 1]];
        if self.big_endian {
            u16::from_be_bytes(raw)
        } else {
            u16::from_le_bytes(raw)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf_verdict(bytes: &[u8]) -> Result<(), LoadErrorKind> {
        let mut f = tempfile::tempfile().expect("temp file");
        std::io::Write::write_all(&mut f, bytes).expect("write");
        check_elf_header(&f, bytes.len() as u64)
    }

    #[test]
    fn the_elf_check_takes_any_bytes_and_refuses_what_cannot_be_a_whole_library() {
        let me = fs::read(std::env::current_exe().expect("exe")).expect("read");
        assert!(elf_verdict(&me).is_ok(), "a whole ELF file passes");
        assert!(matches!(
            elf_verdict(&me[..me.len() / 2]),
            Err(LoadErrorKind::Truncated { .. })
        ));
        for bytes in [&b""[..], b"\x7fEL", b"#!/bin/sh\n", &[0u8; 100]] {
            assert!(matches!(
                elf_verdict(bytes),
                Err(LoadErrorKind::NotASharedLibrary { .. })
            ));
        }
        // A header whose tables lie far past the end, or overflow: refused, never read.
        let mut lying = me[..64].to_vec();
        lying[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        lying[0x28..0x30].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
        assert!(matches!(
            elf_verdict(&lying),
            Err(LoadErrorKind::Truncated { .. })
        ));
        // The watcher's question, on files: whole, half-written, missing.
        let dir = tempfile::tempdir().expect("temp dir");
        let whole = dir.path().join("whole.so");
        let half = dir.path().join("half.so");
        fs::write(&whole, &me).expect("write");
        fs::write(&half, &me[..me.len() / 2]).expect("write");
        assert!(looks_complete(&whole));
        assert!(!looks_complete(&half));
        assert!(!looks_complete(&dir.path().join("missing.so")));
        assert!(!looks_complete(dir.path()), "a directory is not a library");
        // Pseudo-random headers never panic.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut h = b"\x7fELF\x02\x01".to_vec();
            while h.len() < 200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                h.extend_from_slice(&x.to_le_bytes());
            }
            let _ = elf_verdict(&h);
        }
    }
}
