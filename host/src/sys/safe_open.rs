//! Opening files that someone else may have planted: plugin files, config files, trust
//! files and signatures are opened without blocking (`O_NONBLOCK | O_NOCTTY`, so a FIFO
//! or a terminal device cannot hold the host), checked with `fstat` on the opened
//! descriptor (only regular files pass; a swap after an earlier `stat` is caught), and
//! read with a size cap (so `/dev/zero` or a 2 GB sparse file cannot fill memory or disk).
//!
//! Weak spot: the cap is checked against the size `fstat` reports and enforced again
//! while reading, so a file that grows while it is read is cut off and refused, not read
//! to the end.

use std::fs;
use std::io::{self, Read as _};
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// Opening, `fstat` or reading failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Not a regular file (a FIFO, a device, a directory, a socket).
    #[error("not a regular file (it is {kind})")]
    NotRegular {
        /// What it is, e.g. "a FIFO".
        kind: &'static str,
    },
    /// Larger than the cap.
    #[error("{size} bytes, more than the {limit} bytes allowed")]
    TooLarge {
        /// Its size (as `fstat` saw it, or as far as it was read).
        size: u64,
        /// The cap.
        limit: u64,
    },
}

/// What a file looked like at one `stat`: size, mtime, ctime and inode. Two equal
/// fingerprints mean the file was not written, replaced or renamed over in between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub(crate) len: u64,
    pub(crate) modified: Option<std::time::SystemTime>,
    changed: i64,
    inode: u64,
}

/// The fingerprint of `path` (following symlinks).
pub(crate) fn fingerprint(path: &Path) -> io::Result<Fingerprint> {
    let meta = fs::metadata(path)?;
    #[cfg(unix)]
    let (inode, changed) = {
        use std::os::unix::fs::MetadataExt;
        (
            meta.ino(),
            meta.ctime().saturating_mul(1_000_000_000) + meta.ctime_nsec(),
        )
    };
    #[cfg(not(unix))]
    let (inode, changed) = (0, 0);
    Ok(Fingerprint {
        len: meta.len(),
        modified: meta.modified().ok(),
        changed,
        inode,
    })
}

impl From<OpenError> for io::Error {
    fn from(e: OpenError) -> io::Error {
        match e {
            OpenError::Io(e) => e,
            other @ OpenError::NotRegular { .. } => {
                io::Error::new(io::ErrorKind::InvalidInput, other.to_string())
            }
            other @ OpenError::TooLarge { .. } => {
                io::Error::new(io::ErrorKind::InvalidData, other.to_string())
            }
        }
    }
}

/// What kind of file `ft` describes, for messages ("a FIFO", "a directory").
pub(crate) fn kind_of(ft: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading without blocking on FIFOs or devices, then refuses anything
/// but a regular file by `fstat` of the opened descriptor. Returns the file and that
/// `fstat`'s metadata.
pub(crate) fn open_regular(path: &Path) -> Result<(fs::File, fs::Metadata), OpenError> {
    open_with(path, false)
}

/// [`open_regular`], refusing a symlink as the last component (`O_NOFOLLOW`): for a path
/// whose owner and mode were just judged, so a link swapped in after fails to open.
pub(crate) fn open_regular_nofollow(path: &Path) -> Result<(fs::File, fs::Metadata), OpenError> {
    open_with(path, true)
}

fn open_with(path: &Path, nofollow: bool) -> Result<(fs::File, fs::Metadata), OpenError> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let follow = if nofollow { libc::O_NOFOLLOW } else { 0 };
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | follow);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(OpenError::NotRegular {
            kind: kind_of(&meta.file_type()),
        });
    }
    Ok((file, meta))
}

/// Reads a whole regular file of at most `limit` bytes (see [`open_regular`]).
pub(crate) fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, OpenError> {
    let (file, meta) = open_regular(path)?;
    read_opened_capped(file, &meta, limit)
}

/// Reads an opened regular file (`meta` its `fstat`) to its end, at most `limit` bytes:
/// refused before reading when `fstat` says it is larger, and again when it grew.
pub(crate) fn read_opened_capped(
    file: fs::File,
    meta: &fs::Metadata,
    limit: u64,
) -> Result<Vec<u8>, OpenError> {
    if meta.len() > limit {
        return Err(OpenError::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(OpenError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// The bytes of a text file as a `String` (an `InvalidData` I/O error if not UTF-8).
pub(crate) fn utf8(bytes: Vec<u8>) -> Result<String, OpenError> {
    String::from_utf8(bytes)
        .map_err(|e| OpenError::Io(io::Error::new(io::ErrorKind::InvalidData, e)))
}

/// Reads a whole regular text file of at most `limit` bytes.
pub(crate) fn read_capped_text(path: &Path, limit: u64) -> Result<String, OpenError> {
    utf8(read_capped(path, limit)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_directories_and_fifos_are_refused_at_once_and_caps_hold() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(matches!(
            read_capped(Path::new("/dev/zero"), 1024),
            Err(OpenError::NotRegular {
                kind: "a character device"
            })
        ));
        assert!(matches!(
            read_capped(dir.path(), 1024),
            Err(OpenError::NotRegular {
                kind: "a directory"
            })
        ));
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            read_capped(&fifo, 1024),
            Err(OpenError::NotRegular { kind: "a FIFO" })
        ));
        let big = dir.path().join("big");
        fs::write(&big, [1u8; 2000]).expect("write");
        assert!(matches!(
            read_capped(&big, 1024),
            Err(OpenError::TooLarge { size: 2000, .. })
        ));
        assert_eq!(read_capped(&big, 2000).expect("read").len(), 2000);
    }
}
