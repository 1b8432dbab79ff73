//! TEMPORARY stub of the Landlock sandbox (replaced by the real module).

use std::path::PathBuf;

/// Sandbox mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Off.
    Off,
    /// Best effort.
    #[default]
    BestEffort,
    /// Required.
    Required,
}

/// Rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxRules {
    /// Read.
    pub read: Vec<PathBuf>,
    /// Write.
    pub write: Vec<PathBuf>,
    /// Network.
    pub network: bool,
}

/// Outcome.
#[derive(Debug)]
pub enum SandboxOutcome {
    /// Off.
    Off,
    /// Full.
    Full,
    /// Partial.
    Partial {
        /// Detail.
        detail: String,
    },
    /// Not supported.
    NotSupported {
        /// Detail.
        detail: String,
    },
}

impl std::fmt::Display for SandboxOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// Error.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Not enforced.
    #[error("{detail}")]
    NotEnforced {
        /// Detail.
        detail: String,
    },
}

/// System paths.
pub fn system_read_paths() -> Vec<PathBuf> {
    Vec::new()
}

/// Apply.
pub fn apply(_mode: SandboxMode, _rules: &SandboxRules) -> Result<SandboxOutcome, SandboxError> {
    Ok(SandboxOutcome::Off)
}

/// STUB.
pub fn kernel_abi() -> Option<u32> {
    None
}
