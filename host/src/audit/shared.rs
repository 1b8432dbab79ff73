//! The audit log in the shared state (`[state] backend = "postgres"`): the same lines as
//! the file, one row each, a chain per replica (`seq` from 1, `prev` the sha256 of the
//! replica's line before), the chain's end in `toolhost_audit_heads`, a batch of lines and
//! the new end written by one statement that writes nothing if the end moved (two
//! processes with one replica name keep one chain). [`verify_shared`] checks every
//! replica's chain.
//!
//! A call waits until its line is committed, so a replica killed at any moment has
//! recorded every call whose result left it. While the database cannot be reached, lines
//! wait in memory (up to [`BACKLOG`]) and are written when it is back; calls do not wait
//! for them meanwhile (they would all stall), so a replica killed during an outage loses
//! the lines it held. The writer logs when that starts and ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use super::record::{AuditRecord, GENESIS, sha256_hex};
use super::writer::{Msg, ready};
use crate::state::{SharedState, StateError};

/// Lines gathered into one transaction at most.
const BATCH: usize = 256;
/// Lines held in memory while the database is away, at most; past it calls wait.
pub(super) const BACKLOG: usize = 100_000;

/// Whether the last write reached the database (calls wait for their line only then).
#[derive(Debug)]
pub(super) struct Reachable(AtomicBool);

impl Reachable {
    pub(super) fn new() -> Arc<Reachable> {
        Arc::new(Reachable(AtomicBool::new(true)))
    }

    pub(super) fn now(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The writer: takes lines from `rx`, writes them in batches, tells each call when its
/// line is stored. Runs on the shared state's runtime until every sender is gone.
pub(super) async fn run(
    mut rx: tokio::sync::mpsc::Receiver<Msg>,
    state: Arc<SharedState>,
    reachable: Arc<Reachable>,
    done: std::sync::mpsc::Sender<()>,
) {
    let mut backlog: VecDeque<(AuditRecord, Option<oneshot::Sender<()>>)> = VecDeque::new();
    let mut open = true;
    let mut pause = Duration::from_millis(50);
    let mut end: Option<ChainEnd> = None;
    while open || !backlog.is_empty() {
        if backlog.is_empty() {
            match rx.recv().await {
                Some(msg) => backlog.push_back(take(msg)),
                None => break,
            }
        }
        while open && backlog.len() < BACKLOG {
            match rx.try_recv() {
                Ok(msg) => backlog.push_back(take(msg)),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        let n = backlog.len().min(BATCH);
        let mut records: Vec<AuditRecord> =
            backlog.iter().take(n).map(|(r, _)| r.clone()).collect();
        match append(&state, &mut records, &mut end).await {
            Ok(()) => {
                if !reachable.now() {
                    tracing::info!(
                        "the audit log reaches the shared state database again ({} lines were \
                         waiting)",
                        backlog.len()
                    );
                }
                reachable.0.store(true, Ordering::Release);
                pause = Duration::from_millis(50);
                for (_, committed) in backlog.drain(..n) {
                    if let Some(committed) = committed {
                        let _ = committed.send(());
                    }
                }
            }
            Err(e) => {
                if reachable.now() {
                    tracing::error!(
                        "could not write the audit log to the shared state database ({e}); \
                         lines wait in memory until it is back, and calls no longer wait for \
                         theirs"
                    );
                }
                reachable.0.store(false, Ordering::Release);
                // Calls waiting for these lines go on (they would all stall otherwise).
                for (_, committed) in backlog.iter_mut() {
                    if let Some(committed) = committed.take() {
                        let _ = committed.send(());
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
                // Keep the channel drained meanwhile (up to the backlog's bound).
                while open && backlog.len() < BACKLOG {
                    match rx.try_recv() {
                        Ok(msg) => {
                            let (record, committed) = take(msg);
                            if let Some(committed) = committed {
                                let _ = committed.send(());
                            }
                            backlog.push_back((record, None));
                        }
                        Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                        Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                            open = false;
                        }
                    }
                }
                if !open && !state_reachable(&state).await {
                    tracing::error!(
                        "the audit log is closing with {} lines the shared state database \
                         never received",
                        backlog.len()
                    );
                    break;
                }
            }
        }
    }
    let _ = done.send(());
}

/// Whether the database answers (checked once, when the log closes with lines left).
async fn state_reachable(state: &Arc<SharedState>) -> bool {
    match state.client().await {
        Ok(client) => client.simple_query("SELECT 1").await.is_ok(),
        Err(_) => false,
    }
}

fn take(msg: Msg) -> (AuditRecord, Option<oneshot::Sender<()>>) {
    let Msg::Record(mut pending) = msg;
    let committed = pending.committed.take();
    (ready(Msg::Record(pending)), committed)
}

/// The end of this replica's chain, as the writer last left it.
#[derive(Debug, Clone)]
pub(super) struct ChainEnd {
    seq: i64,
    sha256: String,
}

/// The end of this replica's chain as the database has it (its head row made if new).
async fn read_end(state: &Arc<SharedState>) -> Result<ChainEnd, StateError> {
    let replica = state.replica().to_owned();
    let client = state.client().await?;
    client
        .execute(
            "INSERT INTO toolhost_audit_heads (replica, seq, sha256) VALUES ($1, 0, $2) \
             ON CONFLICT (replica) DO NOTHING",
            &[&replica, &GENESIS],
        )
        .await
        .map_err(state.query_error("start an audit chain"))?;
    let head = client
        .query_one(
            "SELECT seq, sha256 FROM toolhost_audit_heads WHERE replica = $1",
            &[&replica],
        )
        .await
        .map_err(state.query_error("read the audit chain's head"))?;
    Ok(ChainEnd {
        seq: head.get(0),
        sha256: head.get(1),
    })
}

/// Numbers and chains `records` after this replica's chain end (`end`, read when not
/// known) and stores them with the new end in one statement, which writes nothing if the
/// head moved meanwhile (another process of the same replica name wrote): then the end
/// is read again and the lines renumbered. One round trip while this writer is the
/// chain's only one.
async fn append(
    state: &Arc<SharedState>,
    records: &mut [AuditRecord],
    end: &mut Option<ChainEnd>,
) -> Result<(), StateError> {
    let replica = state.replica().to_owned();
    for _ in 0..16 {
        let from = match end.take() {
            Some(known) => known,
            None => read_end(state).await?,
        };
        let mut seq = from.seq;
        let mut prev = from.sha256.clone();
        let mut seqs = Vec::with_capacity(records.len());
        let mut lines = Vec::with_capacity(records.len());
        let mut hashes = Vec::with_capacity(records.len());
        for record in records.iter_mut() {
            seq += 1;
            record.seq = u64::try_from(seq).unwrap_or(0);
            record.prev.clone_from(&prev);
            let line = serde_json::to_string(record).map_err(|e| state.damaged("audit line", e))?;
            prev = sha256_hex(line.as_bytes());
            seqs.push(seq);
            lines.push(line);
            hashes.push(prev.clone());
        }
        let client = state.client().await?;
        let written = client
            .execute(
                "WITH head AS (UPDATE toolhost_audit_heads SET seq = $3, sha256 = $4 \
                 WHERE replica = $1 AND seq = $2 AND sha256 = $5 RETURNING replica) \
                 INSERT INTO toolhost_audit (replica, seq, line, sha256) \
                 SELECT head.replica, t.s, t.l, t.h FROM head, \
                 unnest($6::bigint[], $7::text[], $8::text[]) AS t(s, l, h)",
                &[
                    &replica,
                    &from.seq,
                    &seq,
                    &prev,
                    &from.sha256,
                    &seqs,
                    &lines,
                    &hashes,
                ],
            )
            .await
            .map_err(state.query_error("write audit lines"))?;
        if written == records.len() as u64 {
            *end = Some(ChainEnd { seq, sha256: prev });
            return Ok(());
        }
        // The head moved: read it again, renumber, write.
    }
    Err(state.damaged(
        "audit chain head",
        "it kept moving under this writer (16 tries): another process writes as this replica",
    ))
}

/// One replica's chain as checked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaChain {
    /// The replica.
    pub replica: String,
    /// Lines checked.
    pub lines: u64,
    /// The head's `seq`.
    pub head_seq: u64,
    /// What is wrong (empty: the chain is whole).
    pub problems: Vec<String>,
}

/// What [`verify_shared`] found: one chain per replica.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SharedAuditReport {
    /// Each replica's chain, by name.
    pub replicas: Vec<ReplicaChain>,
}

impl SharedAuditReport {
    /// Whether every chain is whole.
    pub fn ok(&self) -> bool {
        self.replicas.iter().all(|r| r.problems.is_empty())
    }

    /// Lines in all.
    pub fn lines(&self) -> u64 {
        self.replicas.iter().map(|r| r.lines).sum()
    }
}

/// Checks every replica's chain: each line's stored sha256 is its bytes', its `seq` the
/// row's and one more than the line before, its `prev` the line before's sha256 (the
/// first's all zeros), and the chain ends at its head. Blocking.
pub fn verify_shared(state: &Arc<SharedState>) -> Result<SharedAuditReport, StateError> {
    let me = Arc::clone(state);
    state.block(async move {
        let client = me.client().await?;
        let heads = client
            .query(
                "SELECT replica, seq, sha256 FROM toolhost_audit_heads ORDER BY replica",
                &[],
            )
            .await
            .map_err(me.query_error("read the audit chains' heads"))?;
        let mut replicas = Vec::new();
        for head in heads {
            let replica: String = head.get(0);
            let head_seq: i64 = head.get(1);
            let head_sha: String = head.get(2);
            let rows = client
                .query(
                    "SELECT seq, line, sha256 FROM toolhost_audit WHERE replica = $1 ORDER BY seq",
                    &[&replica],
                )
                .await
                .map_err(me.query_error("read audit lines"))?;
            let mut problems = Vec::new();
            let mut expect_seq = 1i64;
            let mut prev = GENESIS.to_owned();
            for row in &rows {
                let seq: i64 = row.get(0);
                let line: String = row.get(1);
                let stored: String = row.get(2);
                let actual = sha256_hex(line.as_bytes());
                if seq != expect_seq {
                    problems.push(format!("line {expect_seq} is missing (the next is {seq})"));
                }
                if actual != stored {
                    problems.push(format!(
                        "line {seq} was edited (its sha256 is not the one stored)"
                    ));
                }
                match serde_json::from_str::<AuditRecord>(&line) {
                    Ok(record) => {
                        if i64::try_from(record.seq).ok() != Some(seq) {
                            problems.push(format!("line {seq} says it is line {}", record.seq));
                        }
                        if record.prev != prev {
                            problems
                                .push(format!("line {seq} does not chain to the line before it"));
                        }
                    }
                    Err(e) => problems.push(format!("line {seq} is not an audit record: {e}")),
                }
                prev = actual;
                expect_seq = seq + 1;
            }
            let last = expect_seq - 1;
            if last != head_seq || (head_seq > 0 && prev != head_sha) {
                problems.push(format!(
                    "the chain ends at line {last}, but its head says line {head_seq}: lines \
                     were removed from its end or the head was changed"
                ));
            }
            replicas.push(ReplicaChain {
                replica,
                lines: rows.len() as u64,
                head_seq: u64::try_from(head_seq).unwrap_or(0),
                problems,
            });
        }
        Ok(SharedAuditReport { replicas })
    })
}

/// Every replica's lines, oldest first (by when they were written). Blocking.
pub fn read_shared(state: &Arc<SharedState>) -> Result<Vec<AuditRecord>, StateError> {
    let me = Arc::clone(state);
    state.block(async move {
        let client = me.client().await?;
        let rows = client
            .query(
                "SELECT line FROM toolhost_audit ORDER BY written_at, replica, seq",
                &[],
            )
            .await
            .map_err(me.query_error("read audit lines"))?;
        rows.iter()
            .map(|row| {
                let line: String = row.get(0);
                serde_json::from_str(&line).map_err(|e| me.damaged("audit line", e))
            })
            .collect()
    })
}
