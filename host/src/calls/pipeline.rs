//! The call pipeline every frontend builds once: availability checks, the approval
//! policy over them (asking the frontend's approver), and the dispatcher that admits and
//! runs calls under that policy. The CLI (`call`, `run`, `chat`) and the long-running host
//! build theirs here, so the three parts are always wired the same way.

use std::sync::Arc;
use std::time::Duration;

use crate::calls::availability::Availability;
use crate::calls::dispatcher::{DispatchConfig, Dispatcher};
use crate::calls::policy::{ApprovalPolicy, Approver};

/// What a call pipeline is built from: plain settings (the config turns into these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSettings {
    /// Call time limits.
    pub dispatch: DispatchConfig,
    /// How long availability answers are cached.
    pub availability_ttl: Duration,
    /// Whether "approve for this session" answers are remembered.
    pub remember_approvals: bool,
}

impl Default for CallSettings {
    fn default() -> Self {
        CallSettings {
            dispatch: DispatchConfig::default(),
            availability_ttl: Duration::from_secs(30),
            remember_approvals: true,
        }
    }
}

/// Availability, approval policy and dispatcher, wired together.
pub struct CallPipeline {
    /// The availability checks (cached); the policy refuses what they refuse.
    pub availability: Arc<Availability>,
    /// The approval policy the dispatcher admits calls under.
    pub policy: Arc<ApprovalPolicy>,
    /// The dispatcher.
    pub dispatcher: Dispatcher,
}

impl CallPipeline {
    /// A pipeline whose policy asks `approver` for calls that need approval.
    pub fn new(settings: &CallSettings, approver: Arc<dyn Approver>) -> CallPipeline {
        let availability = Arc::new(Availability::new(settings.availability_ttl));
        let policy = Arc::new(ApprovalPolicy::new(
            approver,
            Arc::clone(&availability),
            settings.remember_approvals,
        ));
        CallPipeline {
            dispatcher: Dispatcher::new(settings.dispatch, Arc::clone(&policy) as _),
            availability,
            policy,
        }
    }
}
