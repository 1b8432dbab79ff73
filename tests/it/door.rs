//! The call door with real plugin tools: a request's caller, profile, session and model
//! reach the tool and the door's observers; its approver is asked (and the door's own when
//! it names none); its timeout cap shortens the door's limit and never lengthens it; a
//! request's exclusions and an unknown profile are refused as such (and observed).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::{
    AutoApprove, CallContext, CallDoor, CallErrorKind, CallObserver, CallSettings, Caller,
    Frontend, NobodyToAsk, ToolResult, fixed_profile,
};

use crate::support::{PluginDir, call, eventually_async, load, marker, short_timeout};

/// Every call an observer saw: (frontend, client, profile, session, tool, error kind).
type Seen = (
    Frontend,
    Option<(String, String)>,
    String,
    String,
    String,
    Option<CallErrorKind>,
);

#[derive(Default)]
struct Recorder(Mutex<Vec<Seen>>);

impl CallObserver for Recorder {
    fn record(&self, ctx: &CallContext, result: &ToolResult) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push((
            ctx.caller.frontend,
            ctx.caller.client.clone(),
            ctx.turn.profile_id.clone(),
            ctx.turn.session_id.clone(),
            result.name.clone(),
            result.error,
        ));
    }
}

/// A door over the basic fixture's tools as profile `dev`, asking nobody by default.
fn door(settings: CallSettings) -> (PluginDir, CallDoor, Arc<Recorder>) {
    let dir = PluginDir::with(&["fixture_basic"]);
    let (_, registry, _) = load(&dir);
    let recorder = Arc::new(Recorder::default());
    let door = CallDoor::new(
        &settings,
        fixed_profile("dev", Arc::new(registry), None),
        Arc::new(NobodyToAsk {
            hint: "nobody here".to_owned(),
        }),
    )
    .with_observer(Arc::clone(&recorder) as Arc<dyn CallObserver>);
    (dir, door, recorder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_reaches_the_tool_and_every_observer_as_its_caller() {
    let (_dir, door, recorder) = door(CallSettings::default());
    let mut request = door.request(Caller {
        frontend: Frontend::Mcp,
        client: Some(("inspector".to_owned(), "1.2".to_owned())),
        ..Caller::default()
    });
    request.session = "s-7".to_owned();
    request.model = "inspector".to_owned();
    let result = door
        .call(&request, call("1", "context_info", json!({})))
        .await;
    assert!(!result.is_error, "{result:?}");
    let seen: Value = serde_json::from_str(&result.output).expect("JSON");
    assert_eq!(seen["profile_id"], "dev", "the door filled in the profile");
    assert_eq!(seen["session_id"], "s-7");
    assert_eq!(seen["model"], "inspector");

    let control = door.request(Caller::new(Frontend::Control));
    let batch = door
        .dispatch(
            &control,
            vec![
                call("a", "echo", json!({"text": "x"})),
                call("b", "no_such_tool", json!({})),
            ],
        )
        .await;
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[1].error, Some(CallErrorKind::ToolNotFound));

    let seen = recorder
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(seen.len(), 3, "one record per call: {seen:?}");
    assert_eq!(
        seen[0],
        (
            Frontend::Mcp,
            Some(("inspector".to_owned(), "1.2".to_owned())),
            "dev".to_owned(),
            "s-7".to_owned(),
            "context_info".to_owned(),
            None
        )
    );
    let mut rest: Vec<_> = seen[1..].iter().map(|s| (s.0, s.4.clone(), s.5)).collect();
    rest.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        rest,
        vec![
            (Frontend::Control, "echo".to_owned(), None),
            (
                Frontend::Control,
                "no_such_tool".to_owned(),
                Some(CallErrorKind::ToolNotFound)
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requests_approver_is_asked_and_without_one_the_doors() {
    let (_dir, door, _) = door(CallSettings::default());
    let (_marker_dir, marker) = marker();
    let args = json!({"marker": marker.to_str().expect("utf-8")});
    let nobody = door.request(Caller::new(Frontend::Control));
    let refused = door
        .call(&nobody, call("1", "risky_write", args.clone()))
        .await;
    assert_eq!(
        refused.error,
        Some(CallErrorKind::NotApproved),
        "{refused:?}"
    );
    assert!(refused.output.contains("nobody here"), "{}", refused.output);
    assert!(!marker.exists(), "a refused call never runs");

    let mut asked = door.request(Caller::new(Frontend::Cli));
    asked.approver = Some(Arc::new(AutoApprove));
    let approved = door.call(&asked, call("2", "risky_write", args)).await;
    assert!(!approved.is_error, "{approved:?}");
    assert!(marker.exists(), "the approved call ran");
}

/// Answers "for this session" to every question, and records what each offered.
#[derive(Default)]
struct ForTheSession(Mutex<Vec<(bool, bool)>>);

#[async_trait::async_trait]
impl toolhost::Approver for ForTheSession {
    async fn ask(&self, request: &toolhost::ApprovalRequest) -> toolhost::ApprovalAnswer {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((request.offer_session, request.offer_always));
        toolhost::ApprovalAnswer::ApproveForSession
    }

    fn who(&self) -> String {
        "test".to_owned()
    }
}

/// A caller with no session to remember an answer for (a sessionless MCP client) is not
/// offered "for this session", and such an answer is not remembered; a caller with a
/// session is offered it and is not asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_without_a_session_is_not_offered_or_given_session_answers() {
    let (_dir, door, _) = door(CallSettings::default());
    let (_marker_dir, marker) = marker();
    let args = json!({"marker": marker.to_str().expect("utf-8")});
    let approver = Arc::new(ForTheSession::default());
    for _ in 0..2 {
        let mut sessionless = door.request(Caller::new(Frontend::Mcp));
        sessionless.session = "s1".to_owned();
        sessionless.session_answers = false;
        sessionless.approver = Some(Arc::clone(&approver) as Arc<dyn toolhost::Approver>);
        let ran = door
            .call(&sessionless, call("1", "risky_write", args.clone()))
            .await;
        assert!(!ran.is_error, "{ran:?}");
    }
    assert_eq!(
        *approver.0.lock().unwrap_or_else(PoisonError::into_inner),
        vec![(false, false), (false, false)],
        "asked both times, never offered the session"
    );
    for _ in 0..2 {
        let mut with_session = door.request(Caller::new(Frontend::Mcp));
        with_session.session = "s2".to_owned();
        with_session.approver = Some(Arc::clone(&approver) as Arc<dyn toolhost::Approver>);
        let ran = door
            .call(&with_session, call("2", "risky_write", args.clone()))
            .await;
        assert!(!ran.is_error, "{ran:?}");
    }
    assert_eq!(
        approver
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len(),
        3,
        "a session's answer is remembered"
    );
    assert_eq!(
        approver.0.lock().unwrap_or_else(PoisonError::into_inner)[2],
        (true, false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_cap_shortens_the_limit_and_never_lengthens_it() {
    let (_dir, door, _) = door(CallSettings {
        dispatch: short_timeout(400),
        ..CallSettings::default()
    });
    let slow = || call("1", "slow", json!({"ms": 20_000, "label": "x"}));

    let mut shorter = door.request(Caller::new(Frontend::Control));
    shorter.timeout_cap = Some(Duration::from_millis(100));
    let r = door.call(&shorter, slow()).await;
    assert_eq!(r.error, Some(CallErrorKind::TimedOut), "{r:?}");
    assert!(r.output.contains("the limit is 0.1 s"), "{}", r.output);

    let mut longer = door.request(Caller::new(Frontend::Control));
    longer.timeout_cap = Some(Duration::from_secs(3600));
    let r = door.call(&longer, slow()).await;
    assert_eq!(r.error, Some(CallErrorKind::TimedOut), "{r:?}");
    assert!(r.output.contains("the limit is 0.4 s"), "{}", r.output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_exclusions_and_an_unknown_profile_are_refused() {
    let (_dir, door, _) = door(CallSettings::default());
    let mut child = door.request(Caller::new(Frontend::ChildTurn));
    child.without = Arc::from(["echo".to_owned()]);
    let r = door
        .call(&child, call("1", "echo", json!({"text": "x"})))
        .await;
    assert_eq!(r.error, Some(CallErrorKind::ToolNotFound), "{r:?}");

    let mut elsewhere = door.request(Caller::new(Frontend::Control));
    elsewhere.profile = Some("ops".to_owned());
    let r = door
        .call(&elsewhere, call("1", "echo", json!({"text": "x"})))
        .await;
    assert!(r.is_error);
    assert_eq!(
        r.output,
        "this host has no profile 'ops'; its profiles are: dev"
    );
    assert!(door.scope(Some("ops")).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_for_its_profile_is_observed_too() {
    let (_dir, door, recorder) = door(CallSettings::default());
    let mut request = door.request(Caller::new(Frontend::Control));
    request.profile = Some("ops".to_owned());
    door.call(&request, call("1", "echo", json!({"text": "x"})))
        .await;
    let seen = recorder
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, Frontend::Control);
    assert_eq!(seen[0].2, "ops");
    assert_eq!(seen[0].5, Some(CallErrorKind::ToolNotFound));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_request_cancels_its_calls() {
    let (_dir, door, _) = door(CallSettings::default());
    let (markers, marker) = marker();
    let started = markers.path().join("started");
    let request = door.request(Caller::new(Frontend::Mcp));
    let cancel = request.cancel.clone();
    let args = json!({
        "marker": marker.to_str().expect("utf-8"),
        "started": started.to_str().expect("utf-8"),
    });
    let running = {
        let door = door.clone();
        tokio::spawn(async move { door.call(&request, call("1", "wait_cancel", args)).await })
    };
    // Cancelled once the tool runs, not after a guess at how long that takes.
    eventually_async(Duration::from_secs(10), "the call starting", || {
        started.exists()
    })
    .await;
    cancel.cancel();
    let r = running.await.expect("the call's task");
    assert_eq!(r.error, Some(CallErrorKind::Cancelled), "{r:?}");
    // The door's cancel_all reaches requests it made.
    let later = door.request(Caller::new(Frontend::Mcp));
    door.cancel_all();
    assert!(later.cancel.is_cancelled());
}
