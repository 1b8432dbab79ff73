//! The test host's state folder: a fresh folder under the system's temporary folder,
//! named after the process, a counter and the clock, created 0700 like a host's, removed
//! with the `TestHost`. Standard library only.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A folder that is removed (with everything in it) when this is dropped.
#[derive(Debug)]
pub(super) struct TempDir(PathBuf);

impl TempDir {
    pub(super) fn new() -> io::Result<TempDir> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let mut last = None;
        for _ in 0..64 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = base.join(format!(
                "toolhost-test-{}-{}-{nanos:08x}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&path) {
                Ok(()) => return Ok(TempDir(path)),
                // Left by an earlier process with the same id: try the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("could not create {}: {e}", path.display()),
                    ));
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a test that made the folder unremovable (a read-only subfolder)
        // leaves it behind rather than failing in a destructor.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
