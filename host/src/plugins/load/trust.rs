//! Trust modes: which plugin files may load at all. `any` (the default) loads every file
//! that passes the other checks; `pinned` loads only files whose sha256 the operator
//! recorded with `toolhost trust FILE`; `signed` also loads files with a minisign
//! signature (`FILE.minisig`) by one of the `[trust] publishers` keys.
//!
//! The decision is made on the bytes that are loaded: the loader feeds the signature
//! verifier and the sha256 from the same reads that make the private copy, and decides
//! before the copy is handed to the dynamic loader. Pins live in a 0600 JSON file in the
//! host's state directory (see [`crate::state_dir`]). Weak spot: only prehashed minisign
//! signatures (the default since minisign 0.8) are accepted; legacy ones are refused.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use minisign_verify::{PublicKey, Signature, StreamVerifier};
use serde::{Deserialize, Serialize};

use crate::sys::safe_open::{OpenError, read_capped_text};

/// `[trust] mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrustMode {
    /// Any file that passes the other checks loads.
    #[default]
    Any,
    /// Only files whose sha256 is pinned (`toolhost trust FILE`).
    Pinned,
    /// Files signed by a listed publisher, and pinned files.
    Signed,
}

/// One entry of `[trust] publishers`: a minisign public key (the base64 line of
/// `minisign.pub`), or `{ name = "...", key = "..." }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PublisherEntry {
    /// Just the key.
    Key(String),
    /// A key with a name for messages.
    Named {
        /// Who it belongs to.
        name: String,
        /// The key.
        key: String,
    },
}

#[derive(Debug, Clone)]
struct Publisher {
    name: String,
    key: PublicKey,
}

/// What the loader asks of a file's origin: the mode, the publishers' keys and where the
/// pins are kept.
#[derive(Debug, Clone, Default)]
pub struct TrustPolicy {
    mode: TrustMode,
    publishers: Vec<Publisher>,
    file: Option<PathBuf>,
}

/// The longest trust file or signature read (a planted `/dev/zero` fails at once).
const TRUST_FILE_LIMIT: u64 = 16 * 1024 * 1024;
const SIGNATURE_LIMIT: u64 = 64 * 1024;

/// A problem with the trust settings or the trust file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// A publisher key that is not a minisign public key.
    #[error(
        "[trust] publishers entry {index} ({name}) is not a minisign public key: {reason}; \
         give the base64 line of the publisher's minisign.pub (it starts with \"RW\")"
    )]
    BadKey {
        /// Its position (from 1).
        index: usize,
        /// Its name, or the text given.
        name: String,
        /// Why.
        reason: String,
    },
    /// Pinned or signed mode without a trust file location.
    #[error(
        "no trust file: set [trust] file, or $XDG_STATE_HOME or $HOME so the state directory \
         can be found"
    )]
    NoTrustFile,
    /// The trust file could not be read or parsed.
    #[error(
        "could not read the trust file {}: {reason}; fix it, or move it away and pin the \
         plugins again with `toolhost trust FILE`",
        path.display()
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The trust file could not be written.
    #[error("could not write the trust file {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Why a file is not trusted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustRefusal {
    /// Pinned mode: its sha256 is not pinned.
    #[error(
        "not trusted: check it, then run `toolhost trust {}` ([trust] mode = \"pinned\"; its \
         sha256 {sha256} is not pinned in {})",
        file.display(),
        store.display()
    )]
    NotPinned {
        /// The operator's file.
        file: PathBuf,
        /// Its sha256.
        sha256: String,
        /// The trust file.
        store: PathBuf,
    },
    /// Signed mode: no valid signature, and not pinned.
    #[error(
        "not trusted: {reason} ([trust] mode = \"signed\" needs a minisign signature {} by \
         one of [trust] publishers, or its sha256 {sha256} pinned with `toolhost trust {}` \
         after checking it)",
        signature.display(),
        file.display()
    )]
    NotSigned {
        /// The operator's file.
        file: PathBuf,
        /// Where the signature was looked for.
        signature: PathBuf,
        /// Its sha256.
        sha256: String,
        /// What was wrong with the signature.
        reason: String,
    },
    /// The trust file could not be read.
    #[error(transparent)]
    Store(#[from] TrustError),
}

/// One pinned file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// The sha256 of the file's bytes (lowercase hex).
    pub sha256: String,
    /// The file it was pinned from.
    pub file: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The plugin's name, if it was loaded to read it.
    #[serde(default)]
    pub plugin: Option<String>,
    /// The plugin's version, if it was loaded to read it.
    #[serde(default)]
    pub version: Option<String>,
    /// When it was pinned (RFC 3339).
    pub added: String,
}

/// The trust file: pinned sha256s.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TrustStore {
    /// The pins, in the order they were added.
    pub pins: Vec<Pin>,
}

impl TrustStore {
    /// Reads the trust file; a missing file is an empty store.
    pub fn load(path: &Path) -> Result<TrustStore, TrustError> {
        let read_err = |reason: String| TrustError::Read {
            path: path.to_path_buf(),
            reason,
        };
        match read_capped_text(path, TRUST_FILE_LIMIT) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| read_err(e.to_string())),
            Err(crate::sys::safe_open::OpenError::Io(e))
                if e.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(TrustStore::default())
            }
            Err(e) => Err(read_err(e.to_string())),
        }
    }

    /// Writes the trust file (0600, its folder 0700, replaced atomically).
    pub fn save(&self, path: &Path) -> Result<(), TrustError> {
        let write_err = |source| TrustError::Write {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            toolhost_calls::private::ensure_private_dir(dir).map_err(write_err)?;
        }
        let text =
            serde_json::to_string_pretty(self).map_err(|e| write_err(std::io::Error::other(e)))?;
        toolhost_calls::private::write_private_file(path, format!("{text}\n").as_bytes())
            .map_err(write_err)
    }

    /// Whether `sha256` is pinned.
    pub fn is_pinned(&self, sha256: &str) -> bool {
        self.pins.iter().any(|p| p.sha256 == sha256)
    }

    /// Adds `pin`, replacing an earlier pin of the same sha256.
    pub fn add(&mut self, pin: Pin) {
        self.pins.retain(|p| p.sha256 != pin.sha256);
        self.pins.push(pin);
    }

    /// Removes the pins whose sha256 or file is in `which`; returns them.
    pub fn remove(&mut self, sha256s: &BTreeSet<String>, files: &BTreeSet<PathBuf>) -> Vec<Pin> {
        let (gone, kept) = std::mem::take(&mut self.pins)
            .into_iter()
            .partition(|p| sha256s.contains(&p.sha256) || files.contains(&p.file));
        self.pins = kept;
        gone
    }
}

impl TrustPolicy {
    /// A policy from the config's `[trust]` settings; `file` is the trust file (`None`
    /// when no state directory can be found; pinned and signed mode then fail loads with
    /// a message saying so).
    pub fn new(
        mode: TrustMode,
        publishers: &[PublisherEntry],
        file: Option<PathBuf>,
    ) -> Result<TrustPolicy, TrustError> {
        let mut keys = Vec::with_capacity(publishers.len());
        for (i, entry) in publishers.iter().enumerate() {
            let (name, text) = match entry {
                PublisherEntry::Key(k) => (k.trim().to_owned(), k.as_str()),
                PublisherEntry::Named { name, key } => (name.clone(), key.as_str()),
            };
            let text = text.trim();
            let parsed = if text.contains('\n') {
                PublicKey::decode(text)
            } else {
                PublicKey::from_base64(text)
            };
            let key = parsed.map_err(|e| TrustError::BadKey {
                index: i + 1,
                name: name.clone(),
                reason: e.to_string(),
            })?;
            keys.push(Publisher { name, key });
        }
        Ok(TrustPolicy {
            mode,
            publishers: keys,
            file,
        })
    }

    /// The mode.
    pub fn mode(&self) -> TrustMode {
        self.mode
    }

    /// The trust file, if one could be placed.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// What must hold of `file`'s bytes, read before they are: the pins and, in signed
    /// mode, the signature beside it.
    pub(crate) fn expect(&self, file: &Path) -> Result<Expectation, TrustRefusal> {
        if self.mode == TrustMode::Any {
            return Ok(Expectation::default());
        }
        let store_path = self.file.clone().ok_or(TrustError::NoTrustFile)?;
        let pins = TrustStore::load(&store_path)?
            .pins
            .into_iter()
            .map(|p| p.sha256)
            .collect();
        let mut signature_path = file.as_os_str().to_owned();
        signature_path.push(".minisig");
        let signature_path = PathBuf::from(signature_path);
        let signature = if self.mode == TrustMode::Signed {
            Some(self.signature(&signature_path))
        } else {
            None
        };
        Ok(Expectation {
            mode: self.mode,
            pins,
            store: store_path,
            signature_path,
            signature,
        })
    }

    /// The signature beside the file and the publisher key that made it.
    fn signature(&self, path: &Path) -> Result<(Signature, Publisher), SignatureProblem> {
        let text = match read_capped_text(path, SIGNATURE_LIMIT) {
            Ok(t) => t,
            Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SignatureProblem::Missing(path.to_path_buf()));
            }
            Err(source) => {
                return Err(SignatureProblem::Unreadable {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let signature =
            Signature::decode(&text).map_err(|source| SignatureProblem::NotMinisign {
                path: path.to_path_buf(),
                source,
            })?;
        for publisher in &self.publishers {
            let usable = publisher.key.verify_stream(&signature).map(|_| ());
            match usable {
                Ok(()) => return Ok((signature, publisher.clone())),
                Err(minisign_verify::Error::UnexpectedKeyId) => continue,
                Err(minisign_verify::Error::UnsupportedLegacyMode) => {
                    return Err(SignatureProblem::Legacy(path.to_path_buf()));
                }
                Err(source) => {
                    return Err(SignatureProblem::Unusable {
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
        }
        Err(SignatureProblem::UnknownKey(path.to_path_buf()))
    }
}

/// Why the signature beside a file cannot vouch for it (the reason of a
/// [`TrustRefusal::NotSigned`]).
#[derive(Debug, thiserror::Error)]
enum SignatureProblem {
    /// No `FILE.minisig`.
    #[error("there is no signature {}", .0.display())]
    Missing(PathBuf),
    /// It could not be read (a link, too large, an I/O error).
    #[error("could not read {}: {source}", path.display())]
    Unreadable { path: PathBuf, source: OpenError },
    /// It is not a minisign signature.
    #[error("{} is not a minisign signature ({source})", path.display())]
    NotMinisign {
        path: PathBuf,
        source: minisign_verify::Error,
    },
    /// A legacy (not prehashed) signature, which is refused.
    #[error(
        "{} is a legacy minisign signature; ask the publisher to sign with a current \
         minisign (prehashed signatures are the default)",
        .0.display()
    )]
    Legacy(PathBuf),
    /// A publisher's key made it, and it still cannot be checked.
    #[error("{} cannot be used: {source}", path.display())]
    Unusable {
        path: PathBuf,
        source: minisign_verify::Error,
    },
    /// No key of `[trust] publishers` made it.
    #[error("{} was made by a key that is not in [trust] publishers", .0.display())]
    UnknownKey(PathBuf),
}

/// What must hold of one file's bytes (see [`TrustPolicy::expect`]).
#[derive(Default)]
pub(crate) struct Expectation {
    mode: TrustMode,
    pins: BTreeSet<String>,
    store: PathBuf,
    signature_path: PathBuf,
    signature: Option<Result<(Signature, Publisher), SignatureProblem>>,
}

impl Expectation {
    /// A verifier to feed the file's bytes to, when there is a signature to check.
    pub(crate) fn verifier(&self) -> Option<StreamVerifier<'_>> {
        match &self.signature {
            Some(Ok((signature, publisher))) => publisher.key.verify_stream(signature).ok(),
            _ => None,
        }
    }

    /// The verdict, once every byte went through `verifier` and the sha256.
    pub(crate) fn decide(
        &self,
        file: &Path,
        sha256: &str,
        verifier: Option<StreamVerifier<'_>>,
    ) -> Result<(), TrustRefusal> {
        match self.mode {
            TrustMode::Any => Ok(()),
            _ if self.pins.contains(sha256) => Ok(()),
            TrustMode::Pinned => Err(TrustRefusal::NotPinned {
                file: file.to_path_buf(),
                sha256: sha256.to_owned(),
                store: self.store.clone(),
            }),
            TrustMode::Signed => {
                let refuse = |reason: String| TrustRefusal::NotSigned {
                    file: file.to_path_buf(),
                    signature: self.signature_path.clone(),
                    sha256: sha256.to_owned(),
                    reason,
                };
                let publisher = match &self.signature {
                    Some(Ok((_, publisher))) => publisher,
                    Some(Err(problem)) => return Err(refuse(problem.to_string())),
                    None => return Err(refuse("no signature was looked for".to_owned())),
                };
                let Some(mut verifier) = verifier else {
                    return Err(refuse("the signature was not checked".to_owned()));
                };
                match verifier.finalize() {
                    Ok(()) => {
                        tracing::debug!(
                            file = %file.display(),
                            publisher = %publisher.name,
                            "signature verified"
                        );
                        Ok(())
                    }
                    Err(e) => Err(refuse(format!(
                        "the signature {} by {} does not match the file's bytes ({e}): the \
                         file was changed after it was signed, or the signature is for \
                         another file",
                        self.signature_path.display(),
                        publisher.name
                    ))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trust_file_round_trips_privately_and_pins_are_removed_by_hash_or_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state").join("trust.json");
        assert!(
            TrustStore::load(&path)
                .expect("missing is empty")
                .pins
                .is_empty()
        );
        let mut store = TrustStore::default();
        let pin = |sha: &str, file: &str| Pin {
            sha256: sha.to_owned(),
            file: PathBuf::from(file),
            size: 10,
            plugin: Some("p".to_owned()),
            version: None,
            added: "2026-01-01T00:00:00Z".to_owned(),
        };
        store.add(pin("aa", "/p/a.so"));
        store.add(pin("bb", "/p/b.so"));
        store.add(pin("aa", "/p/a2.so"));
        store.save(&path).expect("save");
        assert!(toolhost_calls::private::is_private(&path).expect("stat"));
        assert!(toolhost_calls::private::is_private(path.parent().expect("dir")).expect("stat"));
        let mut back = TrustStore::load(&path).expect("load");
        assert_eq!(back.pins.len(), 2);
        assert!(back.is_pinned("aa") && back.is_pinned("bb"));
        let gone = back.remove(
            &BTreeSet::new(),
            &BTreeSet::from([PathBuf::from("/p/b.so")]),
        );
        assert_eq!(gone.len(), 1);
        let gone = back.remove(&BTreeSet::from(["aa".to_owned()]), &BTreeSet::new());
        assert_eq!(gone[0].file, PathBuf::from("/p/a2.so"));
        assert!(back.pins.is_empty());
        std::fs::write(&path, "not json").expect("write");
        assert!(TrustStore::load(&path).is_err());
    }

    #[test]
    fn a_bad_publisher_key_is_named() {
        let err = TrustPolicy::new(
            TrustMode::Signed,
            &[PublisherEntry::Named {
                name: "acme".to_owned(),
                key: "not a key".to_owned(),
            }],
            None,
        )
        .expect_err("bad key");
        let text = err.to_string();
        assert!(text.contains("entry 1 (acme)"), "{text}");
    }
}
