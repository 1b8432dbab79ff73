//! Per-tool call statistics for status: calls, errors, mean and p99 latency (over the
//! last 1024 calls), last error, and how many results carried details of each kind. Fed
//! by the dispatcher through [`CallObserver`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::context::CallContext;
use crate::dispatcher::CallObserver;
use crate::result::{CallErrorKind, ToolResult};

const WINDOW: usize = 1024;
/// The detail kinds counted per tool; a tool that invents more is counted under the
/// first ones only.
const MAX_DETAIL_KINDS: usize = 32;

#[derive(Default)]
struct Counters {
    calls: u64,
    errors: u64,
    pending: u64,
    total: Duration,
    recent: VecDeque<Duration>,
    last_error: Option<String>,
    details: BTreeMap<String, u64>,
}

/// Statistics of the calls of each tool.
#[derive(Default)]
pub struct CallStats {
    tools: Mutex<BTreeMap<String, Counters>>,
}

/// One tool's statistics.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolStatsSnapshot {
    /// The tool.
    pub name: String,
    /// Calls since start.
    pub calls: u64,
    /// Of which ended in an error result.
    pub errors: u64,
    /// Calls that waited for a person's answer and were not run (an MCP client's
    /// `input-required` leg, answered by calling again): not counted in `calls`.
    #[serde(default)]
    pub pending: u64,
    /// Mean latency in milliseconds.
    pub mean_ms: f64,
    /// 99th-percentile latency over the last 1024 calls, in milliseconds.
    pub p99_ms: f64,
    /// The last error message.
    pub last_error: Option<String>,
    /// How many results carried details of each kind (`diagnostics`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, u64>,
}

impl CallStats {
    /// Empty statistics.
    pub fn new() -> Self {
        CallStats::default()
    }

    /// Every tool called so far, sorted by name.
    pub fn snapshot(&self) -> Vec<ToolStatsSnapshot> {
        let tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
        tools
            .iter()
            .map(|(name, c)| {
                let mut recent: Vec<Duration> = c.recent.iter().copied().collect();
                recent.sort_unstable();
                let p99 = recent
                    .get((recent.len() * 99).div_ceil(100).saturating_sub(1))
                    .copied()
                    .unwrap_or_default();
                let mean = if c.calls == 0 {
                    0.0
                } else {
                    c.total.as_secs_f64() * 1e3 / c.calls as f64
                };
                ToolStatsSnapshot {
                    name: name.clone(),
                    calls: c.calls,
                    errors: c.errors,
                    pending: c.pending,
                    mean_ms: mean,
                    p99_ms: p99.as_secs_f64() * 1e3,
                    last_error: c.last_error.clone(),
                    details: c.details.clone(),
                }
            })
            .collect()
    }
}

impl CallObserver for CallStats {
    fn record(&self, _ctx: &CallContext, result: &ToolResult) {
        // Names that are not tools would grow the table without bound.
        if result.error == Some(CallErrorKind::ToolNotFound) {
            return;
        }
        let mut tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
        let c = tools.entry(result.name.clone()).or_default();
        if matches!(result.decision, crate::decision::Decision::Pending { .. }) {
            c.pending += 1;
            return;
        }
        c.calls += 1;
        c.total += result.elapsed;
        if c.recent.len() == WINDOW {
            c.recent.pop_front();
        }
        c.recent.push_back(result.elapsed);
        if result.is_error {
            c.errors += 1;
            c.last_error = Some(result.output.clone());
        }
        for kind in result.details.keys() {
            if let Some(n) = c.details.get_mut(kind) {
                *n += 1;
            } else if c.details.len() < MAX_DETAIL_KINDS {
                c.details.insert(kind.clone(), 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Decision;

    #[test]
    fn a_leg_waiting_for_an_answer_is_pending_and_neither_a_call_nor_an_error() {
        let stats = CallStats::new();
        let ctx = CallContext::default();
        let waiting = ToolResult {
            decision: Decision::Pending {
                by: "mcp client x (input required)".to_owned(),
            },
            ..ToolResult::refused(
                "1".to_owned(),
                "write".to_owned(),
                "waiting".to_owned(),
                CallErrorKind::NotApproved,
            )
        };
        stats.record(&ctx, &waiting);
        let refused = ToolResult::refused(
            "2".to_owned(),
            "write".to_owned(),
            "declined".to_owned(),
            CallErrorKind::NotApproved,
        );
        stats.record(&ctx, &refused);
        let snapshot = stats.snapshot();
        let write = &snapshot[0];
        assert_eq!((write.calls, write.errors, write.pending), (1, 1, 1));
        assert_eq!(write.last_error.as_deref(), Some("declined"));
    }
}
