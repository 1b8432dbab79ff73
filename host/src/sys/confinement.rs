//! What confines a plugin worker, protection by protection, for `toolhost status` and the
//! log: each of the filesystem, TCP, UDP, signals, abstract and path-named Unix sockets,
//! system calls, capabilities, memory, processes and cleanup is either enforced (and by
//! what) or not (and what it would need). "Fully enforced" is said only when every one is.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One protection of a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protection {
    /// What is protected: `filesystem`, `tcp`, `udp`, `signals`, `abstract sockets`,
    /// `unix sockets`, `syscalls`, `capabilities`, `memory`, `processes`, `cleanup`.
    pub area: String,
    /// Whether the rule holds.
    pub enforced: bool,
    /// By what it holds, or what it would need.
    pub detail: String,
}

impl Protection {
    /// A protection that holds, by `detail`.
    pub(crate) fn holds(area: &str, detail: impl Into<String>) -> Protection {
        Protection {
            area: area.to_owned(),
            enforced: true,
            detail: detail.into(),
        }
    }

    /// A protection that does not hold; `detail` says what it would need.
    pub(crate) fn lacks(area: &str, detail: impl Into<String>) -> Protection {
        Protection {
            area: area.to_owned(),
            enforced: false,
            detail: detail.into(),
        }
    }

    /// `holds` or `lacks` by `enforced`.
    pub(crate) fn new(area: &str, enforced: bool, detail: impl Into<String>) -> Protection {
        Protection {
            area: area.to_owned(),
            enforced,
            detail: detail.into(),
        }
    }
}

/// Every protection of one worker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confinement {
    /// In a fixed order: as the worker and the host reported them.
    pub protections: Vec<Protection>,
}

impl Confinement {
    /// Whether every protection holds (and there is at least one).
    pub fn fully_enforced(&self) -> bool {
        !self.protections.is_empty() && self.protections.iter().all(|p| p.enforced)
    }

    /// Replaces the protection of `p.area` (or adds it).
    pub(crate) fn set(&mut self, p: Protection) {
        match self.protections.iter_mut().find(|q| q.area == p.area) {
            Some(q) => *q = p,
            None => self.protections.push(p),
        }
    }

    /// The protection of `area`, if reported.
    pub fn get(&self, area: &str) -> Option<&Protection> {
        self.protections.iter().find(|p| p.area == area)
    }
}

impl fmt::Display for Confinement {
    /// "fully enforced (filesystem, tcp, ...)", or "partially enforced: not enforced:
    /// signals (needs ...); enforced: filesystem, ...". The details of what holds are in
    /// the protections (status --json).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.protections.is_empty() {
            return f.write_str("not confined");
        }
        let held: Vec<&str> = self
            .protections
            .iter()
            .filter(|p| p.enforced)
            .map(|p| p.area.as_str())
            .collect();
        let missing: Vec<String> = self
            .protections
            .iter()
            .filter(|p| !p.enforced)
            .map(|p| format!("{} ({})", p.area, p.detail))
            .collect();
        if missing.is_empty() {
            write!(f, "fully enforced ({})", held.join(", "))
        } else if held.is_empty() {
            write!(f, "not enforced: {}", missing.join("; "))
        } else {
            write!(
                f,
                "partially enforced: not enforced: {}; enforced: {}",
                missing.join("; "),
                held.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fully_enforced_only_when_every_protection_holds() {
        let mut c = Confinement::default();
        assert!(!c.fully_enforced());
        c.set(Protection::holds("filesystem", "Landlock ABI 7"));
        c.set(Protection::holds("signals", "Landlock scope"));
        assert!(c.fully_enforced());
        assert_eq!(c.to_string(), "fully enforced (filesystem, signals)");
        c.set(Protection::lacks("signals", "needs Landlock ABI 6"));
        assert!(!c.fully_enforced());
        assert_eq!(c.protections.len(), 2);
        let text = c.to_string();
        assert!(
            text.contains("not enforced: signals (needs Landlock ABI 6)"),
            "{text}"
        );
        assert!(text.ends_with("enforced: filesystem"), "{text}");
    }
}
