//! The host requests the agent answers for plugins in its turns: session search, the
//! current session's compact history, and (through the profile's own answers) the state
//! folder.

use std::sync::Arc;

use async_trait::async_trait;
use toolhost_plugin_api::{HostAnswer, HostRequest, ServiceError, SessionsSearchAnswer};

use super::{AgentInner, blocking};
use toolhost_calls::context::{HostRequests, TurnIdentity};

/// Plugins' host requests in an agent's turns: the state folder, session search and
/// summary.
pub(super) struct AgentRequests {
    pub(super) agent: Arc<AgentInner>,
}

#[async_trait]
impl HostRequests for AgentRequests {
    async fn request(
        &self,
        turn: &TurnIdentity,
        request: HostRequest,
    ) -> Result<HostAnswer, ServiceError> {
        match request {
            HostRequest::SessionsSearch(query) => {
                let limit = query.limit.clamp(1, 50);
                let exclude = query.exclude_current.then(|| turn.session_id.clone());
                let store = Arc::clone(&self.agent.store);
                let hits = blocking(move || store.search(&query.query, limit, exclude.as_deref()))
                    .await
                    .map_err(|e| ServiceError::Failed(e.to_string()))?;
                Ok(SessionsSearchAnswer { hits }.into())
            }
            HostRequest::SessionsSummary(query) => {
                let store = Arc::clone(&self.agent.store);
                let session = turn.session_id.clone();
                let messages = blocking(move || store.messages(&session))
                    .await
                    .map_err(|e| ServiceError::Failed(e.to_string()))?;
                Ok(super::history::summarize(&turn.session_id, &messages, query.last).into())
            }
            other => self.agent.profile_requests.request(turn, other).await,
        }
    }
}
