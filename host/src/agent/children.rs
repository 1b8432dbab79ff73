//! Child turns for tools such as `delegate_task`: on the same agent, with the parent's
//! tools minus the excluded ones, one level deeper, within the depth, concurrency and
//! time limits of `[agent.children]`.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use toolhost_plugin_api::ChildTurnRequest;

use super::{AgentInner, blocking};
use crate::calls::context::{ChildTurnError, ChildTurnService, TurnIdentity};

/// Child turns for the calls of one turn: on the same agent, with the parent's tools
/// minus the excluded ones, one level deeper.
pub(super) struct ChildTurns {
    pub(super) agent: Arc<AgentInner>,
    /// The tools the parent's turn went without.
    pub(super) without: Arc<[String]>,
    pub(super) depth: u32,
}

#[async_trait]
impl ChildTurnService for ChildTurns {
    async fn run_child_turn(
        &self,
        parent: &TurnIdentity,
        request: ChildTurnRequest,
        call_cancel: CancellationToken,
    ) -> Result<String, ChildTurnError> {
        let limits = &self.agent.config.children;
        if self.depth >= limits.max_depth {
            return Err(ChildTurnError::TooDeep {
                max_depth: limits.max_depth,
            });
        }
        let ChildTurnRequest { prompt, context } = request;
        let prompt = match context {
            Some(context) if !context.is_empty() => format!("{prompt}\n\nContext:\n{context}"),
            _ => prompt,
        };
        // depth < max_depth here, and there is one semaphore per such depth.
        let slots = &self.agent.children[self.depth as usize];
        let _permit = tokio::select! {
            permit = slots.acquire() => permit
                .map_err(|_| ChildTurnError::ShuttingDown)?,
            () = call_cancel.cancelled() => return Err(ChildTurnError::Cancelled),
        };
        let without: Arc<[String]> = self
            .without
            .iter()
            .chain(&limits.exclude)
            .cloned()
            .collect();
        let store = Arc::clone(&self.agent.store);
        let parent_session = parent.session_id.clone();
        let session = blocking(move || store.create(Some(&parent_session)))
            .await
            .map_err(|e| ChildTurnError::Session(Box::new(e)))?;
        // The child stops with the calling tool (its cancel, its timeout) and its turn.
        let cancel = call_cancel.child_token();
        let child_session = session.clone();
        let mut child =
            Arc::clone(&self.agent).turn(without, session, prompt, cancel.clone(), self.depth + 1);
        let outcome = match tokio::time::timeout(limits.timeout, &mut child).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(ChildTurnError::Failed(Box::new(e))),
            Err(_) => {
                // Tell it to stop, and give its tools the door's grace to do so.
                cancel.cancel();
                let grace = self.agent.door.limits().cancel_grace;
                let _ = tokio::time::timeout(grace, child).await;
                Err(ChildTurnError::TimedOut(limits.timeout))
            }
        };
        // Whatever its tools left running (tagged with its session) ends with it.
        super::child_processes::end(&child_session, outcome).await
    }
}
