//! Conversations longer than the model's context window. Every request is estimated
//! ([`Estimator`]: characters / 4 per message and tool spec, calibrated by the ratio of the
//! last `usage.prompt_tokens` the server reported to the estimate of that request) and,
//! when it would pass `[model] context_window` less `reserve_output_tokens`, compacted in
//! stages until it fits:
//!
//! 1. **Stubs**: old tool results are sent as one line naming their kept output
//!    (`read_output` brings one back); a result the output budget did not keep is kept at
//!    that moment. Oldest first; the results of the turn's latest model step never (the
//!    model has not read them yet), the current turn's only after every older one.
//! 2. **Summary**: older turns are sent as a summary the model writes (one extra call);
//!    the system prompt, the first request and the latest turns stay whole. The summary is
//!    recorded in the session and reused by later requests, and extended (the old summary
//!    plus the turns since) when the window fills again. The latest turns kept are at most
//!    half the room, so the window does not fill again at once.
//! 3. **Cut**: a message still too large is cut, with a marker.
//!
//! The session store keeps every message whole: only what is sent changes. A server that
//! still refuses the request as too long gets it compacted harder (every stage, to three
//! quarters of the refused size, which stays the limit for the agent's life), once. The stages that changed what was sent are recorded in the session
//! (`toolhost sessions show` lists them). The estimate is a heuristic: a model whose
//! tokenizer differs a lot is corrected by the calibration after its first answer, and by
//! the retry when the server says the request was too long.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use super::messages::{Message, Role};
use super::model::{ModelError, TextSink};
use super::sessions::{Compaction, CompactionStage};
use super::{AgentError, AgentInner, blocking};
use toolhost_calls::details::{FullOutput, HostDetail as _};
use toolhost_calls::outputs::Owner;
use toolhost_calls::tool::ToolSpec;

/// Characters per token of the uncalibrated estimate.
const CHARS_PER_TOKEN: u64 = 4;
/// Tokens a message costs beyond its text (role, separators), and a tool spec beyond its.
const OVERHEAD_TOKENS: u64 = 4;
/// The calibration never moves the estimate further than this factor either way.
const MAX_RATIO: f64 = 3.0;
/// Tool results shorter than this (characters) are not worth a stub.
const STUB_MIN_CHARS: usize = 400;
/// The shortest a cut message gets (characters).
const CUT_MIN_CHARS: usize = 200;
/// What the summarising call's own instructions and answer take, in tokens.
const SUMMARY_OVERHEAD_TOKENS: u64 = 700;

/// The instructions of the summarising call.
const SUMMARY_PROMPT: &str = "You compact a conversation between a person and an AI \
    assistant that uses tools, so that the assistant can go on with it within its context \
    window. Write notes for the assistant: what the person asked for and wants, what was \
    done (which tools were called and what they found, with the exact file names, \
    identifiers, numbers and results that matter), what was decided, and what is still to \
    do. If a previous summary is given, merge it in. Write only the notes.";

/// The start of the summary message the model gets in place of the older turns.
const SUMMARY_HEADER: &str = "[Summary of the earlier part of this conversation, written to \
    fit the context window. The conversation continues below; all tools remain available, \
    so call them whenever they help. Output ids named here can be read with read_output.]";

/// Estimates a request's tokens: characters / 4, calibrated by what the server reported.
#[derive(Debug)]
pub(super) struct Estimator {
    /// Reported prompt tokens / uncalibrated estimate, of the last request with a usage.
    ratio: Mutex<f64>,
    /// After the server refused a request as too long: three quarters of its estimate,
    /// the most a request may have from then on (the configured window was too large).
    cap: Mutex<Option<u64>>,
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator {
            ratio: Mutex::new(1.0),
            cap: Mutex::new(None),
        }
    }
}

impl Estimator {
    /// The calibration factor now.
    pub(super) fn ratio(&self) -> f64 {
        *self.ratio.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most tokens a request may have, given the configured `budget`.
    pub(super) fn budget(&self, budget: u64) -> u64 {
        let cap = *self.cap.lock().unwrap_or_else(PoisonError::into_inner);
        cap.map_or(budget, |cap| budget.min(cap))
    }

    /// Learns that the server refused a request of about `tokens` as too long.
    pub(super) fn refused(&self, tokens: u64) {
        let mut cap = self.cap.lock().unwrap_or_else(PoisonError::into_inner);
        let smaller = tokens.saturating_mul(3) / 4;
        *cap = Some(cap.map_or(smaller, |c| c.min(smaller)));
    }

    /// Learns from a request whose uncalibrated estimate was `raw` and which the server
    /// counted as `reported` prompt tokens.
    pub(super) fn calibrate(&self, raw: u64, reported: u64) {
        if raw == 0 || reported == 0 {
            return;
        }
        let ratio = (reported as f64 / raw as f64).clamp(1.0 / MAX_RATIO, MAX_RATIO);
        *self.ratio.lock().unwrap_or_else(PoisonError::into_inner) = ratio;
    }
}

/// A message's uncalibrated tokens.
pub(super) fn message_tokens(m: &Message) -> u64 {
    let chars = m.content.as_deref().map_or(0, str::len)
        + m.tool_calls
            .iter()
            .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 16)
            .sum::<usize>()
        + m.tool_call_id.as_deref().map_or(0, str::len);
    (chars as u64).div_ceil(CHARS_PER_TOKEN) + OVERHEAD_TOKENS
}

/// The tool specs' uncalibrated tokens.
pub(super) fn tools_tokens(tools: &[&ToolSpec]) -> u64 {
    tools
        .iter()
        .map(|t| {
            let chars = t.name.len() + t.description.len() + t.schema.to_string().len() + 30;
            (chars as u64).div_ceil(CHARS_PER_TOKEN) + OVERHEAD_TOKENS
        })
        .sum()
}

/// A request's uncalibrated tokens.
pub(super) fn request_tokens(messages: &[Message], tools: &[&ToolSpec]) -> u64 {
    messages.iter().map(message_tokens).sum::<u64>() + tools_tokens(tools)
}

/// `raw` tokens calibrated by `ratio`.
fn calibrated(raw: u64, ratio: f64) -> u64 {
    (raw as f64 * ratio).ceil() as u64
}

/// The tool results worth a stub, in the order they are stubbed: those before the latest
/// request oldest first, then the current turn's oldest first; never those of the last
/// model step (the results after the last assistant message).
pub(super) fn stub_order(messages: &[Message]) -> Vec<usize> {
    let last_user = messages.iter().rposition(|m| m.role == Role::User);
    let last_step = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .unwrap_or(0);
    let worth = |i: &usize| {
        let m = &messages[*i];
        m.role == Role::Tool
            && *i < last_step
            && m.content
                .as_deref()
                .is_some_and(|c| c.len() >= STUB_MIN_CHARS)
    };
    let split = last_user.unwrap_or(0);
    let mut order: Vec<usize> = (0..split).filter(worth).collect();
    order.extend((split..messages.len()).filter(worth));
    order
}

/// How many of `order` to stub so that `total` tokens fall to `budget` (each stub saves
/// its message's cost less `stub_cost`); all of them if that is not enough.
pub(super) fn stubs_needed(
    order: &[usize],
    costs: &[u64],
    stub_cost: u64,
    mut total: u64,
    budget: u64,
) -> usize {
    for (n, &i) in order.iter().enumerate() {
        if total <= budget {
            return n;
        }
        total = total.saturating_sub(costs[i].saturating_sub(stub_cost));
    }
    order.len()
}

/// Where the kept latest turns start (a request, after `first_user`): the earliest such
/// that they cost at most `room`, and at least the latest turn. `None` when no request
/// follows the first.
pub(super) fn tail_start(
    messages: &[Message],
    costs: &[u64],
    first_user: usize,
    room: u64,
) -> Option<usize> {
    let starts: Vec<usize> = (first_user + 1..messages.len())
        .filter(|&i| messages[i].role == Role::User)
        .collect();
    let latest = *starts.last()?;
    let mut chosen = latest;
    for &start in starts.iter().rev() {
        if costs[start..].iter().sum::<u64>() <= room {
            chosen = start;
        } else {
            break;
        }
    }
    Some(chosen)
}

/// Cuts the largest messages (never the system prompt while another will do) until the
/// `costs` fall to `budget`; returns how many were cut.
pub(super) fn cut_to_fit(messages: &mut [Message], ratio: f64, budget: u64) -> usize {
    let mut cut = std::collections::BTreeSet::new();
    loop {
        let costs: Vec<u64> = messages
            .iter()
            .map(|m| calibrated(message_tokens(m), ratio))
            .collect();
        let total: u64 = costs.iter().sum();
        if total <= budget {
            return cut.len();
        }
        let excess_chars =
            ((total - budget) as f64 / ratio).ceil() as usize * CHARS_PER_TOKEN as usize + 200;
        let largest = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m.content
                    .as_deref()
                    .is_some_and(|c| c.len() > CUT_MIN_CHARS + 100)
            })
            .max_by_key(|(i, m)| {
                let len = m.content.as_deref().map_or(0, str::len);
                // The system prompt last.
                (usize::from(*i != 0 || m.role != Role::System), len)
            })
            .map(|(i, _)| i);
        let Some(i) = largest else {
            return cut.len();
        };
        let Some(text) = messages[i].content.as_deref() else {
            return cut.len();
        };
        let keep = text.len().saturating_sub(excess_chars).max(CUT_MIN_CHARS);
        if keep >= text.len() {
            return cut.len();
        }
        messages[i].content = Some(cut_text(text, keep));
        cut.insert(i);
    }
}

/// `text` cut to about `keep` bytes (at a character boundary), with a marker.
fn cut_text(text: &str, keep: usize) -> String {
    let mut end = keep.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[... cut to fit the model's context window: {} of {} characters shown ...]",
        &text[..end],
        text[..end].chars().count(),
        text.chars().count()
    )
}

/// The one line a tool result is sent as in stage 1.
pub(super) fn stub_text(tool: &str, chars: usize, kept: Option<&str>) -> String {
    match kept {
        Some(id) => format!(
            "[output of {tool} ({} chars) kept as {id}; call read_output to see it again]",
            crate::text::grouped(chars)
        ),
        None => format!(
            "[output of {tool} ({} chars) left out to fit the context window, and not kept \
             (the profile keeps no outputs); call the tool again if you need it]",
            crate::text::grouped(chars)
        ),
    }
}

/// The kept output id a tool result's details name, if any.
fn kept_id(m: &Message) -> Option<String> {
    FullOutput::read(&m.details).map(|full| full.id)
}

/// The messages `span` as a transcript for the summarising call, at most `max_chars`
/// (long results are cut; if still too long, the middle is left out).
pub(super) fn transcript(
    span: &[Message],
    names: &HashMap<String, String>,
    max_chars: usize,
) -> String {
    let mut lines = Vec::new();
    for m in span {
        let text = m.content.as_deref().unwrap_or("");
        match m.role {
            Role::Tool => {
                let name = m
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| names.get(id))
                    .map_or("tool", String::as_str);
                let kept = kept_id(m)
                    .map(|id| format!(" (kept as {id})"))
                    .unwrap_or_default();
                lines.push(format!(
                    "[result of {name}{kept}] {}",
                    crate::text::shorten(text, 1500)
                ));
            }
            Role::Assistant => {
                if !text.is_empty() {
                    lines.push(format!("[assistant] {}", crate::text::shorten(text, 3000)));
                }
                for c in &m.tool_calls {
                    lines.push(format!(
                        "[assistant calls {}] {}",
                        c.name,
                        crate::text::shorten(&c.arguments, 300)
                    ));
                }
            }
            Role::User => lines.push(format!("[user] {}", crate::text::shorten(text, 3000))),
            Role::System => lines.push(format!("[system] {}", crate::text::shorten(text, 1000))),
        }
    }
    let whole = lines.join("\n");
    if whole.len() <= max_chars {
        return whole;
    }
    let half = max_chars / 2;
    let mut head_end = half.min(whole.len());
    while !whole.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = whole.len().saturating_sub(half);
    while !whole.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!(
        "{}\n[... {} characters of the transcript left out ...]\n{}",
        &whole[..head_end],
        tail_start.saturating_sub(head_end),
        &whole[tail_start..]
    )
}

/// The tool names of the calls in `messages`, by call id.
fn call_names(messages: &[Message]) -> HashMap<String, String> {
    messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|c| (c.id.clone(), c.name.clone()))
        .collect()
}

/// A request fitted to the window.
struct Fitted {
    messages: Vec<Message>,
    /// Its uncalibrated estimate (what the calibration compares the reported usage with).
    raw: u64,
    /// Its calibrated estimate.
    tokens: u64,
}

impl AgentInner {
    /// The model's next message after `messages`, the request compacted to fit the
    /// model's window (`messages` itself only learns the kept-output ids of results that
    /// were stubbed). A request the server still refuses as too long is compacted harder
    /// and sent again, once.
    pub(super) async fn ask_model(
        &self,
        session: &str,
        messages: &mut [Message],
        specs: &[&ToolSpec],
        depth: u32,
        cancel: &CancellationToken,
    ) -> Result<Message, AgentError> {
        let observer = self.observer.clone();
        let sink = observer
            .as_ref()
            .map(|o| move |text: &str| o.assistant_delta(depth, text));
        let on_text: Option<TextSink<'_>> = sink.as_ref().map(|s| s as TextSink<'_>);
        let mut harder = None;
        loop {
            let fitted = self.fit(session, messages, specs, harder, cancel).await?;
            match self
                .model
                .complete(&fitted.messages, specs, on_text, cancel)
                .await
            {
                Ok(completion) => {
                    let used = match completion.usage {
                        Some(usage) => {
                            self.estimator.calibrate(fitted.raw, usage.prompt_tokens);
                            usage.prompt_tokens + usage.completion_tokens
                        }
                        None => {
                            fitted.tokens
                                + calibrated(
                                    message_tokens(&completion.message),
                                    self.estimator.ratio(),
                                )
                        }
                    };
                    if let Some(observer) = &self.observer {
                        observer.context_use(depth, used, self.config.context.window);
                    }
                    return Ok(completion.message);
                }
                Err(ModelError::ContextLength { .. }) if harder.is_none() => {
                    tracing::warn!(
                        "the model server refused a request of about {} tokens as too long; \
                         compacting harder",
                        fitted.tokens
                    );
                    self.estimator.refused(fitted.tokens);
                    harder = Some(fitted.tokens);
                }
                Err(source @ ModelError::ContextLength { .. }) => {
                    return Err(AgentError::TooLong {
                        tokens: fitted.tokens,
                        window: self.config.context.window,
                        source,
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `messages` as a request that fits the window (`refused`: the estimate of a
    /// request the server refused as too long, when this is the second try: every stage
    /// is applied, to the smaller size learnt).
    async fn fit(
        &self,
        session: &str,
        messages: &mut [Message],
        specs: &[&ToolSpec],
        refused: Option<u64>,
        cancel: &CancellationToken,
    ) -> Result<Fitted, AgentError> {
        let ratio = self.estimator.ratio();
        let tools = calibrated(tools_tokens(specs), ratio);
        // After a refusal, the server's limit as learnt (see `Estimator::refused`).
        let budget = self.estimator.budget(self.config.context.budget());
        let costs: Vec<u64> = messages
            .iter()
            .map(|m| calibrated(message_tokens(m), ratio))
            .collect();
        let before = costs.iter().sum::<u64>() + tools;
        let done = |request: Vec<Message>| {
            let raw = request_tokens(&request, specs);
            Fitted {
                tokens: calibrated(raw, ratio),
                raw,
                messages: request,
            }
        };
        if before <= budget && refused.is_none() {
            return Ok(done(messages.to_vec()));
        }

        // Stage 1: stubs.
        let names = call_names(messages);
        let order = stub_order(messages);
        let stub_cost = calibrated(40, ratio);
        let n = if refused.is_some() {
            order.len()
        } else {
            stubs_needed(&order, &costs, stub_cost, before, budget)
        };
        let mut request = messages.to_vec();
        for &i in &order[..n] {
            let tool = messages[i]
                .tool_call_id
                .as_ref()
                .and_then(|id| names.get(id))
                .cloned()
                .unwrap_or_else(|| "a tool".to_owned());
            let kept = self.keep_output(session, &mut messages[i], &tool).await;
            // The whole output's size: the kept output's (a cut result), else the text's.
            let chars = FullOutput::read(&messages[i].details).map_or_else(
                || messages[i].content.as_deref().unwrap_or("").chars().count(),
                |full| usize::try_from(full.chars).unwrap_or(usize::MAX),
            );
            request[i].content = Some(stub_text(&tool, chars, kept.as_deref()));
        }
        let after_stubs = request_total(&request, tools, ratio);
        if n > 0 {
            self.note(session, CompactionStage::Stubs, n, before, after_stubs)
                .await?;
        }
        if after_stubs <= budget && refused.is_none() {
            return Ok(done(request));
        }

        // Stage 2: a summary of the older turns.
        let mut request = self
            .summarise(session, messages, request, budget, tools, ratio, cancel)
            .await?;

        // Stage 3: cut what is still too large.
        let after_summary = request_total(&request, tools, ratio);
        let cut = cut_to_fit(&mut request, ratio, budget.saturating_sub(tools));
        if cut > 0 {
            let after = request_total(&request, tools, ratio);
            self.note(session, CompactionStage::Cut, cut, after_summary, after)
                .await?;
        }
        Ok(done(request))
    }

    /// Stage 2: `request` (the stubbed `messages`) with its older turns replaced by a
    /// summary: the recorded one if it covers them, else a new one the model writes (the
    /// recorded one extended). Unchanged if there are no older turns to summarise.
    #[expect(
        clippy::too_many_arguments,
        reason = "one step of `fit`, with its state"
    )]
    async fn summarise(
        &self,
        session: &str,
        messages: &[Message],
        request: Vec<Message>,
        budget: u64,
        tools: u64,
        ratio: f64,
        cancel: &CancellationToken,
    ) -> Result<Vec<Message>, AgentError> {
        let Some(first_user) = request.iter().position(|m| m.role == Role::User) else {
            return Ok(request);
        };
        let recorded = {
            let (store, session) = (std::sync::Arc::clone(&self.store), session.to_owned());
            blocking(move || store.last_compaction(&session, CompactionStage::Summary)).await?
        };
        // A recorded summary is good for this conversation if it ends at a request.
        let recorded = recorded.and_then(|c| {
            let through = usize::try_from(c.through?).ok()?;
            let fits = through > first_user + 1
                && request.get(through).is_some_and(|m| m.role == Role::User);
            fits.then_some((c.summary?, through))
        });
        let with = |summary: &str, through: usize| {
            let mut out = request[..=first_user].to_vec();
            out.push(summary_message(summary));
            out.extend_from_slice(&request[through..]);
            out
        };
        // The recorded summary and the turns since, while they fit: the summary is
        // written again only when the window fills again.
        if let Some((summary, through)) = &recorded {
            let reused = with(summary, *through);
            if request_total(&reused, tools, ratio) <= budget {
                return Ok(reused);
            }
        }
        let costs: Vec<u64> = request
            .iter()
            .map(|m| calibrated(message_tokens(m), ratio))
            .collect();
        let head: u64 = costs[..=first_user].iter().sum();
        // A new summary keeps the latest turns that take at most half the room, so the
        // next turns fit beside it.
        let room = budget.saturating_sub(tools + head) / 2;
        let Some(start) = tail_start(&request, &costs, first_user, room) else {
            return Ok(request);
        };
        let (summary, through) = match recorded {
            // Nothing more to summarise: stage 3 cuts what is still too large.
            Some((summary, through)) if through >= start => (summary, through),
            _ if start <= first_user + 1 => return Ok(request),
            previous => {
                let from = previous.as_ref().map_or(first_user + 1, |(_, t)| *t);
                let span = &messages[from..start];
                let before = request_total(&request, tools, ratio);
                match self
                    .write_summary(
                        previous.as_ref().map(|(s, _)| s.as_str()),
                        span,
                        budget,
                        ratio,
                        cancel,
                    )
                    .await
                {
                    Ok(summary) => {
                        let replaced = start - (first_user + 1);
                        let mut after = request[..=first_user].to_vec();
                        after.push(summary_message(&summary));
                        after.extend_from_slice(&request[start..]);
                        let after = request_total(&after, tools, ratio);
                        let event = Compaction {
                            stage: CompactionStage::Summary,
                            messages: replaced as u64,
                            tokens_before: before,
                            tokens_after: after,
                            summary: Some(summary.clone()),
                            through: Some(start as u64),
                            created: String::new(),
                        };
                        let (store, id) = (std::sync::Arc::clone(&self.store), session.to_owned());
                        blocking(move || store.record_compaction(&id, &event)).await?;
                        (summary, start)
                    }
                    Err(ModelError::Cancelled) => return Err(AgentError::Cancelled),
                    Err(e) => {
                        // The session goes on: the older turns are left out with a note
                        // (and the summary is tried again at the next request).
                        tracing::warn!("could not summarise the older turns: {e}");
                        let note = format!(
                            "({} earlier messages were left out to fit the context window; \
                             a summary of them could not be written: {e})",
                            start - (first_user + 1)
                        );
                        let mut out = request[..=first_user].to_vec();
                        out.push(summary_message(&note));
                        out.extend_from_slice(&request[start..]);
                        return Ok(out);
                    }
                }
            }
        };
        Ok(with(&summary, through))
    }

    /// Asks the model for a summary of `span` (merging `previous`), on a request that
    /// fits the window itself.
    async fn write_summary(
        &self,
        previous: Option<&str>,
        span: &[Message],
        budget: u64,
        ratio: f64,
        cancel: &CancellationToken,
    ) -> Result<String, ModelError> {
        let room = budget.saturating_sub(SUMMARY_OVERHEAD_TOKENS);
        let max_chars = ((room as f64 / ratio) as u64).saturating_mul(CHARS_PER_TOKEN) as usize;
        let previous_text = previous
            .map(|p| format!("Previous summary:\n{p}\n\n"))
            .unwrap_or_default();
        let words = (budget / 10).clamp(100, 1500);
        let names = call_names(span);
        let body = format!(
            "{previous_text}Conversation to summarise:\n{}\n\nWrite the notes now, in at \
             most {words} words.",
            transcript(
                span,
                &names,
                max_chars.saturating_sub(previous_text.len()).max(1000)
            )
        );
        let request = [
            Message::text(Role::System, SUMMARY_PROMPT),
            Message::text(Role::User, body),
        ];
        let completion = self.model.complete(&request, &[], None, cancel).await?;
        let text = completion.message.content.unwrap_or_default();
        let text = text.trim();
        if text.is_empty() {
            return Err(ModelError::Malformed {
                detail: "the summary came back empty".to_owned(),
                body: String::new(),
            });
        }
        Ok(text.to_owned())
    }

    /// The kept output id of the tool result `m`: the one its details name, else one made
    /// now from its text (noted in the session and in `m`). `None` without an output
    /// store, or if keeping failed.
    async fn keep_output(&self, session: &str, m: &mut Message, tool: &str) -> Option<String> {
        if let Some(id) = kept_id(m) {
            return Some(id);
        }
        let store = self.door.scope(Some(&self.profile)).ok()?.outputs?;
        let text = m.content.clone()?;
        let owner = Owner {
            profile: self.profile.clone(),
            token: None,
        };
        let tool = tool.to_owned();
        let kept = tokio::task::spawn_blocking(move || {
            store.keep(&owner, &tool, &text, false, serde_json::Value::Null)
        })
        .await;
        let full = match kept {
            Ok(Ok(full)) => full,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not keep a tool result for its stub");
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not keep a tool result for its stub");
                return None;
            }
        };
        let id = full.id.clone();
        full.insert_into(&mut m.details);
        let details = m.details.clone();
        if let Some(row) = m.id {
            let (store, session) = (std::sync::Arc::clone(&self.store), session.to_owned());
            let noted = blocking(move || store.set_details(&session, row, &details)).await;
            if let Err(e) = noted {
                tracing::warn!(error = %e, "could not note a kept tool result in the session");
            }
        }
        Some(id)
    }

    /// Records a stage that changed `n` messages, unless it is the same as the last record
    /// of that stage (a conversation past the window is stubbed at every request).
    async fn note(
        &self,
        session: &str,
        stage: CompactionStage,
        n: usize,
        before: u64,
        after: u64,
    ) -> Result<(), AgentError> {
        let (store, session) = (std::sync::Arc::clone(&self.store), session.to_owned());
        blocking(move || {
            let last = store.last_compaction(&session, stage)?;
            if last.is_some_and(|l| l.messages == n as u64) {
                return Ok(());
            }
            store.record_compaction(
                &session,
                &Compaction {
                    stage,
                    messages: n as u64,
                    tokens_before: before,
                    tokens_after: after,
                    summary: None,
                    through: None,
                    created: String::new(),
                },
            )
        })
        .await?;
        Ok(())
    }
}

/// A request's calibrated tokens, its tools' `tools` included.
fn request_total(request: &[Message], tools: u64, ratio: f64) -> u64 {
    request
        .iter()
        .map(|m| calibrated(message_tokens(m), ratio))
        .sum::<u64>()
        + tools
}

/// The message the model gets in place of the older turns.
fn summary_message(summary: &str) -> Message {
    Message::text(Role::Assistant, format!("{SUMMARY_HEADER}\n\n{summary}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::messages::ModelToolCall;

    fn call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![ModelToolCall {
                id: id.to_owned(),
                name: "grep".to_owned(),
                arguments: "{}".to_owned(),
            }],
            tool_call_id: None,
            details: toolhost_calls::details::Details::new(),
            id: None,
        }
    }

    /// system, then `turns` turns of: request, a call, its 2,000-char result, an answer.
    fn conversation(turns: usize) -> Vec<Message> {
        let mut m = vec![Message::text(Role::System, "be useful")];
        for t in 0..turns {
            m.push(Message::text(Role::User, format!("request {t}")));
            m.push(call(&format!("c{t}")));
            m.push(Message::tool_result(format!("c{t}"), "x".repeat(2000)));
            m.push(Message::text(Role::Assistant, format!("answer {t}")));
        }
        m
    }

    #[test]
    fn the_estimate_counts_characters_and_learns_from_the_server() {
        let m = Message::text(Role::User, "a".repeat(400));
        assert_eq!(message_tokens(&m), 100 + OVERHEAD_TOKENS);
        let e = Estimator::default();
        assert!((e.ratio() - 1.0).abs() < f64::EPSILON);
        // The server counted 150 where the estimate said 100: later estimates grow.
        e.calibrate(100, 150);
        assert!((e.ratio() - 1.5).abs() < 1e-9);
        assert_eq!(calibrated(100, e.ratio()), 150);
        // Absurd reports are held to the bound.
        e.calibrate(100, 100_000);
        assert!((e.ratio() - MAX_RATIO).abs() < 1e-9);
        e.calibrate(0, 5);
        assert!(
            (e.ratio() - MAX_RATIO).abs() < 1e-9,
            "nothing learnt from nothing"
        );
        let spec = ToolSpec {
            name: "echo".to_owned(),
            description: "d".repeat(100),
            schema: serde_json::json!({"type": "object"}),
            risk: toolhost_plugin_api::Risk::Read,
            interactive: false,
            requirements: toolhost_plugin_api::Requirements::default(),
            output_schema: None,
        };
        assert!(tools_tokens(&[&spec]) > 30);
    }

    #[test]
    fn stubs_go_oldest_first_and_never_to_the_last_step() {
        let mut m = conversation(3);
        // The current turn: a request, two steps of calls.
        m.push(Message::text(Role::User, "now"));
        m.push(call("d1"));
        m.push(Message::tool_result("d1", "y".repeat(2000)));
        m.push(call("d2"));
        m.push(Message::tool_result("d2", "z".repeat(2000)));
        let order = stub_order(&m);
        let ids: Vec<&str> = order
            .iter()
            .map(|&i| m[i].tool_call_id.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(ids, ["c0", "c1", "c2", "d1"]);
        let costs: Vec<u64> = m.iter().map(message_tokens).collect();
        let total: u64 = costs.iter().sum();
        assert_eq!(stubs_needed(&order, &costs, 10, total, total), 0);
        assert_eq!(stubs_needed(&order, &costs, 10, total, total - 100), 1);
        assert_eq!(stubs_needed(&order, &costs, 10, total, total - 600), 2);
        assert_eq!(stubs_needed(&order, &costs, 10, total, 0), 4);
    }

    #[test]
    fn the_kept_tail_is_whole_turns_within_the_room_and_at_least_the_latest() {
        let m = conversation(5);
        let costs: Vec<u64> = m.iter().map(message_tokens).collect();
        let turn: u64 = costs[1..5].iter().sum();
        // Room for two turns: the tail starts at the fourth request (index 13).
        assert_eq!(tail_start(&m, &costs, 1, turn * 2 + 1), Some(13));
        assert_eq!(m[13].content.as_deref(), Some("request 3"));
        // No room: the latest turn all the same.
        assert_eq!(tail_start(&m, &costs, 1, 0), Some(17));
        // Room for everything: all but the first request.
        assert_eq!(tail_start(&m, &costs, 1, u64::MAX), Some(5));
        // One turn only: nothing to summarise.
        let one = conversation(1);
        assert_eq!(tail_start(&one, &costs[..5], 1, u64::MAX), None);
    }

    #[test]
    fn a_message_still_too_large_is_cut_with_a_marker() {
        let mut m = vec![
            Message::text(Role::System, "s".repeat(1000)),
            Message::text(Role::User, "u".repeat(40_000)),
        ];
        let cut = cut_to_fit(&mut m, 1.0, 2000);
        assert_eq!(cut, 1);
        let total: u64 = m.iter().map(message_tokens).sum();
        assert!(total <= 2000, "{total}");
        let text = m[1].content.as_deref().unwrap_or("");
        assert!(
            text.contains("cut to fit the model's context window"),
            "{text}"
        );
        assert_eq!(
            m[0].content.as_deref().map(str::len),
            Some(1000),
            "the system prompt kept"
        );
    }

    #[test]
    fn stubs_name_the_kept_output_or_say_it_is_not_kept() {
        assert_eq!(
            stub_text("grep", 12_480, Some("out-1")),
            "[output of grep (12,480 chars) kept as out-1; call read_output to see it again]"
        );
        assert!(stub_text("grep", 5, None).contains("not kept"));
        assert_eq!(crate::text::grouped(1_234_567), "1,234,567");
        assert_eq!(crate::text::grouped(999), "999");
    }

    #[test]
    fn the_transcript_fits_its_size() {
        let m = conversation(50);
        let names = call_names(&m);
        let t = transcript(&m[1..], &names, 5000);
        assert!(t.len() <= 5200, "{}", t.len());
        assert!(t.starts_with("[user] request 0"), "{t}");
        assert!(t.contains("left out"));
        assert!(t.ends_with("[assistant] answer 49"), "{t}");
        assert!(transcript(&m[1..5], &names, 100_000).contains("[result of grep]"));
    }
}
