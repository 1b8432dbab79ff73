//! Lasting ("always") approvals: one JSON file per profile (`approvals/always.json` in the
//! profile's folder, beside its `state/` and out of plugin workers' reach: a worker may
//! write its profile's state folder, and must not approve its own calls). Each entry is
//! tied to the tool, the plugin file's sha256, the schema's sha256 and the risk after
//! overrides, so an updated plugin, a changed schema or a raised risk asks again.
//!
//! The file is 0600 in a 0700 folder, replaced atomically (`sys/private.rs`); a running
//! host re-reads it when its modification time, size or inode change (one `stat` per
//! check of a call that needs approval), so `toolhost approvals revoke` reaches it at its
//! next check. Weak spot: two writers at once (a host keeping an answer while the CLI
//! revokes another) read, change and replace the file each on its own; the later
//! replacement wins and the other change is lost (the next call asks again, or a
//! revocation must be repeated).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::policy::{ApprovalKey, KeepError, LastingApprovals};
use crate::profile_dirs::ProfileDirs;
use crate::tool::Risk;

/// The file name of a profile's lasting approvals, in its `approvals/` folder
/// ([`ProfileDirs::approvals`]).
pub const APPROVALS_FILE: &str = "always.json";

/// One lasting approval as the file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastingApproval {
    /// The tool.
    pub tool: String,
    /// Its plugin's name.
    pub plugin: String,
    /// The plugin file's sha256 when it was approved.
    pub plugin_sha256: String,
    /// The schema's sha256 when it was approved.
    pub schema_sha256: String,
    /// The risk (after overrides) when it was approved.
    pub risk: Risk,
    /// When (RFC 3339).
    pub approved_at: String,
    /// By whom (the approver: `terminal`, `mcp client NAME`, `control client`).
    pub approved_by: String,
}

impl LastingApproval {
    /// The entry that keeps `key` approved, by `by`, from now.
    pub fn of(key: &ApprovalKey, by: &str) -> LastingApproval {
        LastingApproval {
            tool: key.tool.clone(),
            plugin: key.plugin.clone(),
            plugin_sha256: key.plugin_sha256.clone(),
            schema_sha256: key.schema_sha256.clone(),
            risk: key.risk,
            approved_at: jiff::Timestamp::now().to_string(),
            approved_by: by.to_owned(),
        }
    }

    /// Whether this entry approves `key` (the same tool, plugin file, schema and risk).
    pub fn matches(&self, key: &ApprovalKey) -> bool {
        self.tool == key.tool
            && self.plugin_sha256 == key.plugin_sha256
            && self.schema_sha256 == key.schema_sha256
            && self.risk == key.risk
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FileContents {
    version: u32,
    #[serde(default)]
    approvals: Vec<LastingApproval>,
}

/// Why the approvals file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalsError {
    /// Reading or writing failed (a link or FIFO in its place is refused).
    #[error("could not {action} the approvals file {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not one this host wrote: toolhost writes it 0600, owned by the user it
    /// runs as, so one owned by another user, or that others may read or write (a file a
    /// tool or another program made), is not honoured.
    #[error(
        "the approvals file {} was not written by toolhost ({why}): its approvals are not \
         honoured, so calls ask again; remove it (`toolhost approvals revoke` cannot change \
         it), and find out who wrote it",
        path.display()
    )]
    NotWrittenByToolhost {
        /// The file.
        path: PathBuf,
        /// What gives it away.
        why: String,
    },
    /// The file is not the JSON this host writes.
    #[error(
        "the approvals file {} is not readable JSON ({source}); fix it or remove it (every \
         lasting approval of the profile is then forgotten)",
        path.display()
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        source: serde_json::Error,
    },
}

/// One profile's approvals file.
#[derive(Debug, Clone)]
pub struct ApprovalFile {
    path: PathBuf,
}

impl ApprovalFile {
    /// The approvals file of the profile whose folders are `dirs`.
    pub fn for_profile(dirs: &ProfileDirs) -> ApprovalFile {
        ApprovalFile {
            path: dirs.approvals().join(APPROVALS_FILE),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every lasting approval (none when the file does not exist).
    pub fn list(&self) -> Result<Vec<LastingApproval>, ApprovalsError> {
        Ok(self.read()?.approvals)
    }

    fn read(&self) -> Result<FileContents, ApprovalsError> {
        let io = |action, source| ApprovalsError::Io {
            action,
            path: self.path.clone(),
            source,
        };
        let mut text = String::new();
        match crate::private::open_regular_file(&self.path) {
            Ok(mut f) => {
                let meta = f.metadata().map_err(|e| io("inspect", e))?;
                self.check_provenance(&meta)?;
                f.read_to_string(&mut text).map_err(|e| io("read", e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(FileContents::default());
            }
            Err(e) => return Err(io("open", e)),
        }
        serde_json::from_str(&text).map_err(|source| ApprovalsError::Malformed {
            path: self.path.clone(),
            source,
        })
    }

    /// Refuses a file toolhost did not write: owned by another user, or readable or
    /// writable by others (toolhost writes it 0600). A lasting approval is made only by
    /// the approver through the host, never by a file something else put there.
    fn check_provenance(&self, meta: &std::fs::Metadata) -> Result<(), ApprovalsError> {
        let me = crate::private::effective_uid();
        let why = if meta.uid() != me {
            Some(format!("it is owned by uid {}, not uid {me}", meta.uid()))
        } else if meta.mode() & 0o077 != 0 {
            Some(format!(
                "its mode is {:04o}, where toolhost writes 0600",
                meta.mode() & 0o7777
            ))
        } else {
            None
        };
        match why {
            Some(why) => Err(ApprovalsError::NotWrittenByToolhost {
                path: self.path.clone(),
                why,
            }),
            None => Ok(()),
        }
    }

    fn write(&self, contents: &FileContents) -> Result<(), ApprovalsError> {
        let io = |action, source| ApprovalsError::Io {
            action,
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            crate::private::ensure_private_dir(dir).map_err(|e| io("create the folder of", e))?;
        }
        let mut text = serde_json::to_string_pretty(contents)
            .map_err(|e| io("encode", std::io::Error::other(e)))?;
        text.push('\n');
        crate::private::write_private_file(&self.path, text.as_bytes()).map_err(|e| io("write", e))
    }

    /// Adds (or renews) `entry`; an older entry for the same tool is replaced.
    pub fn keep(&self, entry: LastingApproval) -> Result<(), ApprovalsError> {
        let mut contents = self.read()?;
        contents.version = 1;
        contents.approvals.retain(|a| a.tool != entry.tool);
        contents.approvals.push(entry);
        contents.approvals.sort_by(|a, b| a.tool.cmp(&b.tool));
        self.write(&contents)
    }

    /// Removes the approvals of `tool` (every one when `None`); how many were removed.
    pub fn revoke(&self, tool: Option<&str>) -> Result<usize, ApprovalsError> {
        let mut contents = self.read()?;
        let before = contents.approvals.len();
        contents
            .approvals
            .retain(|a| tool.is_some_and(|t| a.tool != t));
        let removed = before - contents.approvals.len();
        if removed > 0 {
            contents.version = 1;
            self.write(&contents)?;
        }
        Ok(removed)
    }
}

/// What identifies a version of the file on disk: (inode, size, mtime in ns, and its
/// owner and mode, on which its provenance check depends).
type Stamp = (u64, u64, i128, u32, u32);

/// A profile's approvals as last read, and the file's stamp then.
type Cached = (Option<Stamp>, Vec<LastingApproval>);

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((
        m.ino(),
        m.size(),
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        m.uid(),
        m.mode(),
    ))
}

/// The profiles' approvals files, as a [`LastingApprovals`] store: each file is read when
/// it changed since it was last read.
pub struct ApprovalFiles {
    files: BTreeMap<String, ApprovalFile>,
    cache: Mutex<BTreeMap<String, Cached>>,
}

impl ApprovalFiles {
    /// A store over these profiles' approvals (profile name -> its folders).
    pub fn new(profiles: impl IntoIterator<Item = (String, ProfileDirs)>) -> ApprovalFiles {
        ApprovalFiles {
            files: profiles
                .into_iter()
                .map(|(name, dirs)| (name, ApprovalFile::for_profile(&dirs)))
                .collect(),
            cache: Mutex::new(BTreeMap::new()),
        }
    }

    /// `profile`'s approvals now: from the cache if the file did not change.
    fn current(&self, profile: &str) -> Vec<LastingApproval> {
        let Some(file) = self.files.get(profile) else {
            return Vec::new();
        };
        let now = stamp(file.path());
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, list)) = cache.get(profile)
            && *seen == now
        {
            return list.clone();
        }
        let list = match file.list() {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(profile, "lasting approvals are not honoured: {e}");
                Vec::new()
            }
        };
        cache.insert(profile.to_owned(), (now, list.clone()));
        list
    }
}

impl LastingApprovals for ApprovalFiles {
    fn available(&self, profile: &str) -> bool {
        self.files.contains_key(profile)
    }

    fn approved(&self, profile: &str, key: &ApprovalKey) -> bool {
        self.current(profile).iter().any(|a| a.matches(key))
    }

    fn keep(&self, profile: &str, key: &ApprovalKey, by: &str) -> Result<(), KeepError> {
        let Some(file) = self.files.get(profile) else {
            return Err(KeepError::NoStore {
                profile: profile.to_owned(),
            });
        };
        file.keep(LastingApproval::of(key, by))
            .map_err(|e| KeepError::Store(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tool: &str, sha: &str) -> ApprovalKey {
        ApprovalKey {
            tool: tool.to_owned(),
            plugin: "p".to_owned(),
            plugin_sha256: sha.to_owned(),
            schema_sha256: "s".to_owned(),
            risk: Risk::Write,
        }
    }

    #[test]
    fn a_file_toolhost_did_not_write_is_not_honoured() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let dirs = ProfileDirs::under(dir.path(), "p1");
        let files = ApprovalFiles::new([("p1".to_owned(), dirs.clone())]);
        files.keep("p1", &key("t", "a"), "terminal").expect("kept");
        assert!(files.approved("p1", &key("t", "a")));
        let file = ApprovalFile::for_profile(&dirs);
        // What a tool's write leaves: the same JSON at the default mode.
        let text = std::fs::read_to_string(file.path()).expect("read");
        std::fs::remove_file(file.path()).expect("remove");
        std::fs::write(file.path(), &text).expect("plant");
        std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        assert!(
            !files.approved("p1", &key("t", "a")),
            "a planted file approved"
        );
        let e = file.list().expect_err("planted").to_string();
        assert!(
            e.contains("was not written by toolhost") && e.contains("0644"),
            "{e}"
        );
        assert!(files.keep("p1", &key("u", "a"), "terminal").is_err());
        std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        assert!(files.approved("p1", &key("t", "a")));
    }

    #[test]
    fn kept_approvals_match_only_the_same_file_schema_and_risk_and_revoke_is_seen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dirs = ProfileDirs::under(dir.path(), "p1");
        let files = ApprovalFiles::new([("p1".to_owned(), dirs.clone())]);
        assert!(files.available("p1") && !files.available("p2"));
        assert!(!files.approved("p1", &key("t", "a")));
        files.keep("p1", &key("t", "a"), "terminal").expect("kept");
        assert!(files.approved("p1", &key("t", "a")));
        assert!(!files.approved("p1", &key("t", "b")), "another plugin file");
        let mut raised = key("t", "a");
        raised.risk = Risk::Destructive;
        assert!(!files.approved("p1", &raised), "another risk");
        let file = ApprovalFile::for_profile(&dirs);
        assert!(crate::private::is_private(file.path()).expect("stat"));
        assert!(crate::private::is_private(file.path().parent().expect("dir")).expect("stat"));
        assert_eq!(file.revoke(Some("t")).expect("revoked"), 1);
        assert!(!files.approved("p1", &key("t", "a")), "revocation seen");
    }
}
