//! The approval policy through the real loader, registry and dispatcher: read runs, write
//! asks, deny never runs, overrides change what happens, remembered approvals end when the
//! plugin changes, unavailable tools are refused with the reason.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use toolhost::{
    ApprovalAnswer, ApprovalPolicy, ApprovalRequest, Approver, AutoApprove, Availability,
    CallContext, CallErrorKind, CatalogConfig, DispatchConfig, NobodyToAsk, Plan, PluginCatalog,
    Risk, RiskOverride, ToolRegistry, TurnIdentity, apply_risk_overrides,
};

use crate::support::{PluginDir, call, echo_build, load, marker};

fn policy(approver: Arc<dyn Approver>) -> Arc<ApprovalPolicy> {
    Arc::new(ApprovalPolicy::new(
        approver,
        Arc::new(Availability::default()),
        true,
    ))
}

fn nobody() -> Arc<dyn Approver> {
    Arc::new(NobodyToAsk {
        hint: "pass --yes".to_owned(),
    })
}

fn turn(session: &str) -> CallContext {
    CallContext::new(TurnIdentity {
        profile_id: "p".into(),
        session_id: session.into(),
        model: "m".into(),
    })
}

fn basic() -> (PluginDir, ToolRegistry) {
    let dir = PluginDir::with(&["fixture_basic"]);
    let (_, registry, _) = load(&dir);
    (dir, registry)
}

/// Answers with `answer` and counts how often it was asked.
struct Counting {
    asked: AtomicUsize,
    answer: ApprovalAnswer,
}

#[async_trait::async_trait]
impl Approver for Counting {
    async fn ask(&self, _request: &ApprovalRequest) -> ApprovalAnswer {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer.clone()
    }
}

#[tokio::test]
async fn a_write_tool_never_runs_without_approval_and_runs_with_it() {
    let (_dir, registry) = basic();
    let (_m, path) = marker();
    let refused = Plan::new(DispatchConfig::default(), policy(nobody()))
        .call(
            &registry,
            &turn("s"),
            call("1", "risky_write", json!({"marker": path})),
        )
        .await;
    assert_eq!(refused.error, Some(CallErrorKind::NotApproved));
    assert!(
        refused.output.contains("was not approved by the user"),
        "{}",
        refused.output
    );
    assert!(refused.output.contains("pass --yes"), "{}", refused.output);
    assert!(!path.exists(), "the plugin's code was entered");

    let declined = Arc::new(Counting {
        asked: AtomicUsize::new(0),
        answer: ApprovalAnswer::Decline("the user answered no".into()),
    });
    let r = Plan::new(DispatchConfig::default(), policy(declined.clone()))
        .call(
            &registry,
            &turn("s"),
            call("2", "risky_write", json!({"marker": path})),
        )
        .await;
    assert_eq!(r.error, Some(CallErrorKind::NotApproved));
    assert_eq!(declined.asked.load(Ordering::SeqCst), 1);
    assert!(!path.exists());

    let ok = Plan::new(DispatchConfig::default(), policy(Arc::new(AutoApprove)))
        .call(
            &registry,
            &turn("s"),
            call("3", "risky_write", json!({"marker": path})),
        )
        .await;
    assert!(!ok.is_error, "{ok:?}");
    assert!(path.exists(), "approved, it ran");
}

#[tokio::test]
async fn read_runs_without_asking_and_deny_never_runs() {
    let (_dir, registry) = basic();
    let counting = Arc::new(Counting {
        asked: AtomicUsize::new(0),
        answer: ApprovalAnswer::Approve,
    });
    let d = Plan::new(DispatchConfig::default(), policy(counting.clone()));
    let echo = d
        .call(
            &registry,
            &turn("s"),
            call("1", "echo", json!({"text": "hi"})),
        )
        .await;
    assert_eq!(echo.output, "hi");
    let (_m, path) = marker();
    let deny = d
        .call(
            &registry,
            &turn("s"),
            call("2", "risky_deny", json!({"marker": path})),
        )
        .await;
    assert_eq!(deny.error, Some(CallErrorKind::Denied));
    assert!(deny.output.contains("denied by policy"));
    assert!(!path.exists());
    assert_eq!(
        counting.asked.load(Ordering::SeqCst),
        0,
        "nobody is asked about read or deny"
    );
}

#[tokio::test]
async fn operator_overrides_change_what_happens() {
    let (_dir, registry) = basic();
    let (_m, path) = marker();
    let overrides = BTreeMap::from([
        (
            "echo".to_owned(),
            RiskOverride {
                risk: Risk::Write,
                allow_lower: false,
            },
        ),
        (
            "risky_write".to_owned(),
            RiskOverride {
                risk: Risk::Deny,
                allow_lower: false,
            },
        ),
    ]);
    let outcome = apply_risk_overrides(&registry, &overrides);
    assert!(outcome.refused.is_empty() && outcome.lowered.is_empty());
    let d = Plan::new(DispatchConfig::default(), policy(nobody()));
    let raised = d
        .call(
            &outcome.registry,
            &turn("s"),
            call("1", "echo", json!({"text": "hi"})),
        )
        .await;
    assert_eq!(
        raised.error,
        Some(CallErrorKind::NotApproved),
        "read raised to write asks"
    );
    let denied = d
        .call(
            &outcome.registry,
            &turn("s"),
            call("2", "risky_write", json!({"marker": path})),
        )
        .await;
    assert_eq!(denied.error, Some(CallErrorKind::Denied));
    assert!(!path.exists());
    assert!(
        outcome
            .registry
            .specs()
            .iter()
            .all(|s| s.name != "risky_write"),
        "deny is not listed"
    );
}

#[tokio::test]
async fn lowering_a_risk_must_be_explicit_and_is_reported() {
    let (_dir, registry) = basic();
    let (_m, path) = marker();
    let lower = |allow_lower| {
        BTreeMap::from([(
            "risky_write".to_owned(),
            RiskOverride {
                risk: Risk::Read,
                allow_lower,
            },
        )])
    };
    let refused = apply_risk_overrides(&registry, &lower(false));
    assert_eq!(refused.refused.len(), 1);
    assert!(
        refused.refused[0].contains("allow_lower = true"),
        "{}",
        refused.refused[0]
    );
    let kept = refused
        .registry
        .get("risky_write")
        .expect("tool")
        .spec()
        .risk;
    assert_eq!(kept, Risk::Write, "not applied without allow_lower");

    let allowed = apply_risk_overrides(&registry, &lower(true));
    assert_eq!(allowed.lowered.len(), 1, "logged at start-up");
    let r = Plan::new(DispatchConfig::default(), policy(nobody()))
        .call(
            &allowed.registry,
            &turn("s"),
            call("1", "risky_write", json!({"marker": path})),
        )
        .await;
    assert!(
        !r.is_error,
        "lowered to read, it runs without asking: {r:?}"
    );
    assert!(path.exists());
}

#[tokio::test]
async fn a_remembered_approval_is_asked_again_after_the_plugin_file_changes() {
    let dir = PluginDir::with(&[]);
    let file = dir.path().join("libecho.so");
    std::fs::copy(echo_build("v1"), &file).expect("install");
    let catalog = Arc::new(
        PluginCatalog::new(CatalogConfig {
            dirs: vec![dir.path()],
            ..CatalogConfig::default()
        })
        .expect("catalog"),
    );
    crate::support::rescan(&catalog).await;
    let approver = Arc::new(Counting {
        asked: AtomicUsize::new(0),
        answer: ApprovalAnswer::ApproveForSession,
    });
    let d = Plan::new(DispatchConfig::default(), policy(approver.clone()));
    let (_m, path) = marker();
    let write = || call("1", "note_write", json!({"marker": path}));
    for _ in 0..3 {
        let r = d
            .call(&catalog.registry(), &turn("session-1"), write())
            .await;
        assert!(!r.is_error, "{r:?}");
    }
    assert_eq!(
        approver.asked.load(Ordering::SeqCst),
        1,
        "asked once for the session"
    );

    let other = d
        .call(&catalog.registry(), &turn("session-2"), write())
        .await;
    assert!(!other.is_error);
    assert_eq!(
        approver.asked.load(Ordering::SeqCst),
        2,
        "another session asks again"
    );

    std::fs::copy(echo_build("v2"), &file).expect("update the plugin");
    let report = crate::support::rescan(&catalog).await;
    assert_eq!(report.plugins_updated.len(), 1);
    let r = d
        .call(&catalog.registry(), &turn("session-1"), write())
        .await;
    assert!(!r.is_error);
    assert_eq!(
        approver.asked.load(Ordering::SeqCst),
        3,
        "an updated plugin asks again"
    );
}

#[tokio::test]
async fn an_unavailable_tool_is_refused_with_the_reason() {
    let (_dir, registry) = basic();
    let d = Plan::new(DispatchConfig::default(), policy(nobody()));
    let r = d
        .call(&registry, &turn("s"), call("1", "needs_program", json!({})))
        .await;
    assert_eq!(r.error, Some(CallErrorKind::Unavailable));
    assert!(
        r.output.contains("toolhost-no-such-program"),
        "{}",
        r.output
    );
    let spec = registry.get("needs_env").expect("tool").spec();
    assert_eq!(spec.requirements.env, ["TOOLHOST_FIXTURE_TOKEN"]);
    let availability = Availability::new(Duration::from_secs(30));
    let reason = availability
        .check(spec)
        .expect_err("the variable is not set in tests");
    assert!(reason.contains("TOOLHOST_FIXTURE_TOKEN"), "{reason}");
}
