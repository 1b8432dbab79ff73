//! The output store: a profile's kept outputs (the full text of every cut result), under
//! unguessable ids, readable only by the profile and token that made them, pruned by age
//! and total size.
//!
//! Weak spots: the running total that decides when to prune is this process's view; two
//! hosts sharing a profile each prune by their own count (both by age and size, so the
//! folder still stays bounded). A read loads the whole text into memory (outputs are at
//! most what a tool returned, which the plugin boundary already held in memory).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::budget::{OutputSettings, Size};
use super::read::{Excerpt, RangeError, ReadRange};
use crate::details::FullOutput;
use crate::profile_dirs::ProfileDirs;

/// Who made an output, and so who may read it: the profile, and over MCP HTTP the name
/// of the token (`None` for local callers: the command line, the control socket, stdio,
/// the agent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The profile the call ran as.
    pub profile: String,
    /// The bearer token's name, for HTTP callers.
    pub token: Option<String>,
}

/// What is kept beside an output's text (`<id>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputMeta {
    /// Who may read it.
    pub owner: Owner,
    /// The tool that produced it.
    pub tool: String,
    /// When it was kept, seconds since the Unix epoch.
    pub created: u64,
    /// Whether it was an error result.
    pub is_error: bool,
    /// Its size.
    #[serde(flatten)]
    pub size: Size,
    /// The rest of the result (everything but the text: error kind, details, ...).
    #[serde(default)]
    pub result: Value,
}

/// A record's owner and size, read without the rest (no `flatten`: that would buffer
/// the rest of the record; unknown keys are skipped).
#[derive(Deserialize)]
struct OwnerAndSize {
    owner: Owner,
    chars: usize,
    lines: usize,
    bytes: usize,
}

/// A record that names who may read its output.
trait Owned {
    fn owner(&self) -> &Owner;
}

impl Owned for OutputMeta {
    fn owner(&self) -> &Owner {
        &self.owner
    }
}

impl Owned for OwnerAndSize {
    fn owner(&self) -> &Owner {
        &self.owner
    }
}

/// Why an output could not be kept, pruned or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// No such output for this caller: never made, pruned, or made by another profile or
    /// token (which get exactly this answer too).
    #[error(
        "there is no output '{id}' for this caller (outputs are readable only by the profile \
         and token that made them, and are removed after a while; run the call again to get \
         a new one)"
    )]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The store's folder or files could not be used.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A range that is no range.
    #[error(transparent)]
    BadRange(#[from] RangeError),
    /// The shared store (the replicas' database) could not be used; its error names it.
    #[error("could not {action} a kept output: {source}")]
    Shared {
        /// What was being done.
        action: &'static str,
        /// The cause.
        source: SharedOutputsError,
    },
}

/// Why a [`SharedOutputs`] store failed (its own error type, boxed: the call core knows
/// nothing of where the store is).
pub type SharedOutputsError = Box<dyn std::error::Error + Send + Sync>;

/// Kept outputs held outside the profile's folder, in a store every replica of a host
/// reads (so an output kept through one replica is read through another). The
/// [`OutputStore`] still makes the ids and checks the owner; this only keeps the bytes.
pub trait SharedOutputs: Send + Sync + std::fmt::Debug {
    /// Keeps `text` with `meta` as output `id` of `profile`.
    fn put(
        &self,
        profile: &str,
        id: &str,
        meta: &OutputMeta,
        text: &str,
    ) -> Result<(), SharedOutputsError>;
    /// Output `id` of `profile`, if it is kept.
    fn get(
        &self,
        profile: &str,
        id: &str,
    ) -> Result<Option<(OutputMeta, String)>, SharedOutputsError>;
    /// Removes `profile`'s outputs older than `keep_for`, then the oldest until the total
    /// is within 90% of `keep_bytes` if it is over (0: no size limit).
    fn prune(
        &self,
        profile: &str,
        keep_for: Option<Duration>,
        keep_bytes: u64,
    ) -> Result<PruneReport, SharedOutputsError>;
}

/// What a prune removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Outputs removed because they were too old.
    pub by_age: usize,
    /// Outputs removed to bring the total under the size limit.
    pub by_size: usize,
    /// Bytes freed.
    pub freed_bytes: u64,
    /// Bytes kept afterwards.
    pub kept_bytes: u64,
}

/// A profile's kept outputs: `<state>/outputs/<id>.txt` (the text, raw) and `<id>.json`
/// ([`OutputMeta`]), in a 0700 folder, files 0600.
#[derive(Debug)]
pub struct OutputStore {
    dir: PathBuf,
    /// Kept in a shared store instead of `dir`: the profile's name there and the store.
    shared: Option<(String, std::sync::Arc<dyn SharedOutputs>)>,
    keep_for: Option<Duration>,
    keep_bytes: u64,
    /// The bytes kept, as of the last scan plus what was written since (`None`: not
    /// scanned yet), and when the last scan was.
    total: Mutex<(Option<u64>, Option<Instant>)>,
}

/// How often writes rescan the folder for outputs past their age.
const AGE_SCAN_EVERY: Duration = Duration::from_secs(3600);

impl OutputStore {
    /// The store in `dir` (created on the first write) with `settings`' limits.
    pub fn new(dir: PathBuf, settings: &OutputSettings) -> OutputStore {
        OutputStore {
            dir,
            shared: None,
            keep_for: settings.keep_for,
            keep_bytes: settings.keep_bytes,
            total: Mutex::new((None, None)),
        }
    }

    /// The store of a profile: its `outputs/` folder, beside the plugins' state folder,
    /// not in it. Plugin workers of the profile may write their state folder, and a kept
    /// output is the host's: another plugin's or another token's, read back by the host.
    pub fn for_profile(dirs: &ProfileDirs, settings: &OutputSettings) -> OutputStore {
        OutputStore::new(dirs.outputs(), settings)
    }

    /// The outputs of `profile` kept in `shared` (the replicas' store) with `settings`'
    /// limits.
    pub fn shared(
        profile: &str,
        settings: &OutputSettings,
        shared: std::sync::Arc<dyn SharedOutputs>,
    ) -> OutputStore {
        OutputStore {
            shared: Some((profile.to_owned(), shared)),
            ..OutputStore::new(PathBuf::new(), settings)
        }
    }

    /// Keeps `text` with `meta` (whose `size` is `Size::of(text)`) and returns its new id.
    /// Blocking.
    pub fn save(&self, meta: OutputMeta, text: &str) -> Result<String, OutputError> {
        if let Some((profile, shared)) = &self.shared {
            let id = new_id().map_err(|e| OutputError::Shared {
                action: "make an id for",
                source: Box::new(e),
            })?;
            shared
                .put(profile, &id, &meta, text)
                .map_err(|source| OutputError::Shared {
                    action: "keep",
                    source,
                })?;
            let written = text.len() as u64;
            if self.count_and_ask_prune(written)
                && let Err(e) = self.prune()
            {
                tracing::warn!(error = %e, "could not prune the kept outputs");
            }
            return Ok(id);
        }
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| OutputError::Io {
                action,
                path,
                source,
            }
        };
        crate::private::ensure_private_dir(&self.dir)
            .map_err(io("create the output folder", &self.dir))?;
        let id = new_id().map_err(io("make an id for an output in", &self.dir))?;
        let txt = self.dir.join(format!("{id}.txt"));
        crate::private::open_private_file(&txt)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(io("write", &txt))?;
        let json = self.dir.join(format!("{id}.json"));
        let meta_text = serde_json::to_vec(&meta).map_err(|e| OutputError::Io {
            action: "write",
            path: json.clone(),
            source: std::io::Error::other(e),
        })?;
        crate::private::write_private_file(&json, &meta_text).map_err(io("write", &json))?;
        let written = text.len() as u64 + meta_text.len() as u64;
        if self.count_and_ask_prune(written)
            && let Err(e) = self.prune()
        {
            tracing::warn!(error = %e, "could not prune the kept outputs");
        }
        Ok(id)
    }

    /// Adds `written` bytes to the running total; whether a prune is due.
    fn count_and_ask_prune(&self, written: u64) -> bool {
        let mut total = self.total.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = total.0.map(|t| t + written);
        total.0 = kept;
        kept.is_none_or(|t| self.keep_bytes > 0 && t > self.keep_bytes)
            || total.1.is_none_or(|at| at.elapsed() > AGE_SCAN_EVERY)
    }

    /// Output `id` of the shared store with its text, if `owner` made it.
    fn shared_owned(
        &self,
        profile: &str,
        shared: &dyn SharedOutputs,
        owner: &Owner,
        id: &str,
    ) -> Result<(OutputMeta, String), OutputError> {
        let not_found = || OutputError::NotFound { id: id.to_owned() };
        if !is_id(id) {
            return Err(not_found());
        }
        match shared.get(profile, id) {
            Ok(Some((meta, text))) if meta.owner == *owner => Ok((meta, text)),
            Ok(_) => Err(not_found()),
            Err(source) => Err(OutputError::Shared {
                action: "read",
                source,
            }),
        }
    }

    /// Keeps `text`, the full output of a call of `tool` by `owner` (`record`: the rest
    /// of its result, or null), and says where: the detail the cut result carries. The
    /// one way a cut output is kept (the door's budget, compaction's stubs). Blocking.
    pub fn keep(
        &self,
        owner: &Owner,
        tool: &str,
        text: &str,
        is_error: bool,
        record: Value,
    ) -> Result<FullOutput, OutputError> {
        let size = Size::of(text);
        let meta = OutputMeta {
            owner: owner.clone(),
            tool: tool.to_owned(),
            created: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            is_error,
            size,
            result: record,
        };
        let id = self.save(meta, text)?;
        Ok(FullOutput {
            id,
            chars: size.chars as u64,
            lines: size.lines as u64,
            bytes: size.bytes as u64,
        })
    }

    /// The metadata of output `id`, if `owner` made it.
    pub fn meta(&self, owner: &Owner, id: &str) -> Result<OutputMeta, OutputError> {
        if let Some((profile, shared)) = &self.shared {
            return self
                .shared_owned(profile, shared.as_ref(), owner, id)
                .map(|(meta, _)| meta);
        }
        self.owned::<OutputMeta>(owner, id)
    }

    /// The record of output `id` read as `M` (all of it, or just its owner and size), if
    /// `owner` made it.
    fn owned<M: serde::de::DeserializeOwned + Owned>(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Result<M, OutputError> {
        let not_found = || OutputError::NotFound { id: id.to_owned() };
        if !is_id(id) {
            return Err(not_found());
        }
        let json = self.dir.join(format!("{id}.json"));
        let bytes = match read_file(&json) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Err(source) => {
                return Err(OutputError::Io {
                    action: "read",
                    path: json,
                    source,
                });
            }
        };
        match serde_json::from_slice::<M>(&bytes) {
            Ok(meta) if meta.owner() == owner => Ok(meta),
            _ => Err(not_found()),
        }
    }

    /// `range` of output `id`, if `owner` made it (anyone else gets
    /// [`OutputError::NotFound`], as for an id that does not exist). Blocking.
    pub fn read(&self, owner: &Owner, id: &str, range: &ReadRange) -> Result<Excerpt, OutputError> {
        if let Some((profile, shared)) = &self.shared {
            let (meta, text) = self.shared_owned(profile, shared.as_ref(), owner, id)?;
            return Ok(range.apply(text, meta.size)?);
        }
        // Only the owner and the size: the rest of the record (a structured result left out
        // for the budget, say) is skipped, not built.
        let OwnerAndSize {
            chars,
            lines,
            bytes,
            ..
        } = self.owned::<OwnerAndSize>(owner, id)?;
        let size = Size {
            chars,
            lines,
            bytes,
        };
        let txt = self.dir.join(format!("{id}.txt"));
        let text = match read_file(&txt).and_then(|b| {
            String::from_utf8(b)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        }) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(OutputError::NotFound { id: id.to_owned() });
            }
            Err(source) => {
                return Err(OutputError::Io {
                    action: "read",
                    path: txt,
                    source,
                });
            }
        };
        Ok(range.apply(text, size)?)
    }

    /// Removes outputs older than the age limit, then, when the total is over the size
    /// limit, the oldest until it is within 90% of it; logs what it removed. Blocking.
    pub fn prune(&self) -> Result<PruneReport, OutputError> {
        if let Some((profile, shared)) = &self.shared {
            let report = shared
                .prune(profile, self.keep_for, self.keep_bytes)
                .map_err(|source| OutputError::Shared {
                    action: "prune",
                    source,
                })?;
            *self.total.lock().unwrap_or_else(PoisonError::into_inner) =
                (Some(report.kept_bytes), Some(Instant::now()));
            return Ok(report);
        }
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                *self.total.lock().unwrap_or_else(PoisonError::into_inner) =
                    (Some(0), Some(Instant::now()));
                return Ok(PruneReport::default());
            }
            Err(source) => {
                return Err(OutputError::Io {
                    action: "list",
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        // id -> (newest modification, bytes)
        let mut outputs: BTreeMap<String, (SystemTime, u64)> = BTreeMap::new();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".txt").or_else(|| n.strip_suffix(".json")))
                .filter(|id| is_id(id))
            else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let slot = outputs
                .entry(id.to_owned())
                .or_insert((SystemTime::UNIX_EPOCH, 0));
            slot.0 = slot.0.max(modified);
            slot.1 += meta.len();
        }
        let mut by_age: Vec<(SystemTime, String, u64)> = outputs
            .into_iter()
            .map(|(id, (at, bytes))| (at, id, bytes))
            .collect();
        by_age.sort();
        let mut report = PruneReport {
            kept_bytes: by_age.iter().map(|o| o.2).sum(),
            ..PruneReport::default()
        };
        let now = SystemTime::now();
        let mut kept = Vec::with_capacity(by_age.len());
        for (at, id, bytes) in by_age {
            let too_old = self
                .keep_for
                .is_some_and(|keep| now.duration_since(at).is_ok_and(|age| age > keep));
            if too_old {
                self.remove(&id);
                report.by_age += 1;
                report.freed_bytes += bytes;
                report.kept_bytes -= bytes;
            } else {
                kept.push((id, bytes));
            }
        }
        // Down to 90% of the limit, not to the limit: the next write would otherwise pass
        // it again and rescan the folder on every cut output.
        let target = self.keep_bytes - self.keep_bytes / 10;
        let over = report.kept_bytes > self.keep_bytes;
        for (id, bytes) in kept {
            if self.keep_bytes == 0 || !over || report.kept_bytes <= target {
                break;
            }
            self.remove(&id);
            report.by_size += 1;
            report.freed_bytes += bytes;
            report.kept_bytes -= bytes;
        }
        if report.by_age + report.by_size > 0 {
            tracing::info!(
                dir = %self.dir.display(),
                by_age = report.by_age,
                by_size = report.by_size,
                freed_bytes = report.freed_bytes,
                kept_bytes = report.kept_bytes,
                "pruned kept outputs (oldest first)"
            );
        }
        *self.total.lock().unwrap_or_else(PoisonError::into_inner) =
            (Some(report.kept_bytes), Some(Instant::now()));
        Ok(report)
    }

    fn remove(&self, id: &str) {
        for ext in ["json", "txt"] {
            let path = self.dir.join(format!("{id}.{ext}"));
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "could not remove a kept output");
            }
        }
    }
}

/// The bytes of the regular file `path`, opened without following a link (see
/// `sys::private::open_regular_file`).
fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    crate::private::open_regular_file(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A fresh id: `o` and 32 hex digits from the system's random source.
fn new_id() -> std::io::Result<String> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut id = String::with_capacity(33);
    id.push('o');
    for b in random {
        let _ = write!(id, "{b:02x}");
    }
    Ok(id)
}

/// Whether `id` has the shape of an id (checked before it is ever joined to a path).
pub fn is_id(id: &str) -> bool {
    id.len() == 33
        && id.starts_with('o')
        && id[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn ids_are_checked_before_they_become_paths() {
        let id = new_id().expect("random");
        assert!(is_id(&id), "{id}");
        for bad in [
            "",
            "o",
            "../etc/passwd",
            &format!("{id}x"),
            &id.to_uppercase(),
            "o/../../../../../../../etc/p",
        ] {
            assert!(!is_id(bad), "{bad}");
        }
    }

    /// Someone who can write the folder (it is the host's, 0700, but say a mistake widened
    /// it) plants a link to another file, or a FIFO, in place of a kept text: reading it
    /// back refuses both, at once, and never shows the other file.
    #[test]
    fn a_link_or_fifo_planted_in_place_of_an_output_is_refused_not_followed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = OutputStore::new(dir.path().join("outputs"), &OutputSettings::default());
        let owner = Owner {
            profile: "p".to_owned(),
            token: None,
        };
        let meta = || OutputMeta {
            owner: owner.clone(),
            tool: "t".to_owned(),
            created: 0,
            is_error: false,
            size: Size::of("kept"),
            result: Value::Null,
        };
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "not for the model").expect("secret");
        let linked = store.save(meta(), "kept").expect("saved");
        let txt = dir.path().join("outputs").join(format!("{linked}.txt"));
        std::fs::remove_file(&txt).expect("remove");
        std::os::unix::fs::symlink(&secret, &txt).expect("plant a link");
        let read = store.read(&owner, &linked, &ReadRange::All);
        assert!(
            read.as_ref().is_err_and(|e| e.to_string().contains("link")),
            "{read:?}"
        );
        let fifo = store.save(meta(), "kept").expect("saved");
        let txt = dir.path().join("outputs").join(format!("{fifo}.txt"));
        std::fs::remove_file(&txt).expect("remove");
        let c = std::ffi::CString::new(txt.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: `c` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        // Would block forever if the FIFO were opened for reading like a file.
        let read = store.read(&owner, &fifo, &ReadRange::All);
        assert!(read.is_err(), "{read:?}");
        // The metadata is read the same way.
        let json = dir.path().join("outputs").join(format!("{fifo}.json"));
        std::fs::remove_file(&json).expect("remove");
        std::os::unix::fs::symlink(&secret, &json).expect("plant a link");
        assert!(store.meta(&owner, &fifo).is_err());
    }
}
