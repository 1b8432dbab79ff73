//! Risk levels: what a tool can do to the world, and how the level crosses the ABI as a
//! growable one-byte code.

use std::fmt;

use abi_stable::StableAbi;

/// How risky a tool is. The host's approval policy reads it before every call.
///
/// On the Rust side this is an enum; across the plugin boundary it travels as a
/// [`RiskCode`], so a later API version can add a level without breaking plugins that were
/// already built: a code this host does not know is read as [`Risk::Deny`], the most
/// restrictive level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Risk {
    /// Looks things up, or changes only the agent's own notes. Runs without asking.
    Read,
    /// Changes the outside world (files, calendars, messages). A person approves each call.
    Write,
    /// May cause irreversible effects (running commands, deleting data). Needs approval.
    Destructive,
    /// Makes network requests. Needs approval.
    Network,
    /// Installed but switched off: never runs and is not shown to the model.
    Deny,
}

impl Risk {
    /// Every level, from least to most restrictive in the order the docs list them.
    pub const ALL: [Risk; 5] = [
        Risk::Read,
        Risk::Write,
        Risk::Destructive,
        Risk::Network,
        Risk::Deny,
    ];

    /// The lowercase name used in configs, listings and JSON (`"read"`, `"write"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Read => "read",
            Risk::Write => "write",
            Risk::Destructive => "destructive",
            Risk::Network => "network",
            Risk::Deny => "deny",
        }
    }

    /// Parses the lowercase name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Risk> {
        Risk::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The code this level has on the wire.
    pub fn code(self) -> RiskCode {
        RiskCode(match self {
            Risk::Read => 0,
            Risk::Write => 1,
            Risk::Destructive => 2,
            Risk::Network => 3,
            Risk::Deny => 4,
        })
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A [`Risk`] as it crosses the plugin boundary: one byte, open-ended.
///
/// Codes are never reused. Codes 0-4 are the levels of API 0.1; a code from a newer API
/// that this build does not know decodes to [`Risk::Deny`].
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct RiskCode(pub u8);

impl RiskCode {
    /// Decodes the level; unknown codes are the most restrictive level, [`Risk::Deny`].
    pub fn risk(self) -> Risk {
        match self.0 {
            0 => Risk::Read,
            1 => Risk::Write,
            2 => Risk::Destructive,
            3 => Risk::Network,
            _ => Risk::Deny,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_round_trips_through_its_code_and_name() {
        for risk in Risk::ALL {
            assert_eq!(risk.code().risk(), risk);
            assert_eq!(Risk::parse(risk.as_str()), Some(risk));
        }
    }

    #[test]
    fn unknown_code_from_a_newer_api_is_denied() {
        assert_eq!(RiskCode(200).risk(), Risk::Deny);
        assert_eq!(RiskCode(5).risk(), Risk::Deny);
    }
}
