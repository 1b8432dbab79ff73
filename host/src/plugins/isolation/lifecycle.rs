//! The lifecycle of a plugin's workers as a plain state machine: starts, crashes, the
//! backoff before the next start, quarantine after too many crashes within the crash
//! window, and the lift (`toolhost reload`). No processes, no I/O and no clock of its own:
//! the supervisor passes each event in with the time it happened and acts on the decision
//! it gets back, so every rule here is tested without starting a worker.
//!
//! The machine is per plugin (one generation of one file), while workers are per profile:
//! a crash of any profile's worker counts, and quarantine refuses new workers for every
//! profile. Workers already running when the plugin is quarantined keep serving until
//! they end; the supervisor, which knows them, decides that.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// When crashes quarantine a plugin (`[isolation] max_crashes`, `crash_window_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CrashLimits {
    /// More than this many crashes within `window` quarantine the plugin.
    pub(crate) max_crashes: u32,
    /// See `max_crashes`.
    pub(crate) window: Duration,
}

/// Whether a worker may start now, for a profile that has none running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Start one now.
    Start,
    /// Not yet: the backoff after a crash ends in this long; ask again then.
    Wait(Duration),
    /// Never, until the quarantine is lifted: the reason.
    Quarantined(String),
}

/// What follows a crash: said at the end of the error of every call the crash failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterCrash {
    /// A fresh worker starts on the next call, once `delay` has passed.
    Restart {
        /// The backoff (zero after the first crash within the window).
        delay: Duration,
    },
    /// The plugin is quarantined: its tools are refused until its file changes or
    /// `toolhost reload`.
    Quarantined {
        /// Crashes within the window, this one included.
        failures: usize,
        /// The crash window.
        window: Duration,
    },
}

impl std::fmt::Display for AfterCrash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AfterCrash::Restart { delay } if delay.is_zero() => {
                f.write_str("; a fresh worker starts on the next call")
            }
            AfterCrash::Restart { delay } => write!(
                f,
                "; a fresh worker starts on the next call, after {} ms",
                delay.as_millis()
            ),
            AfterCrash::Quarantined { failures, window } => write!(
                f,
                "; the plugin is now quarantined ({failures} failures within {} s): its tools \
                 are refused until its file changes or `toolhost reload`",
                window.as_secs()
            ),
        }
    }
}

/// What status shows of the lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LifecycleFacts {
    /// Workers started after the first.
    pub(crate) restarts: u64,
    /// Crashes within the crash window.
    pub(crate) recent_crashes: u32,
    /// How the last worker ended, if one did.
    pub(crate) last_exit: Option<String>,
    /// Why the plugin is quarantined, while it is.
    pub(crate) quarantined: Option<String>,
}

/// The state of one plugin's workers, apart from the processes themselves.
#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    limits: CrashLimits,
    /// When workers crashed (or failed to start), oldest first; pruned to the window at
    /// each crash.
    crashes: VecDeque<Instant>,
    restarts: u64,
    last_exit: Option<String>,
    /// Set by the crash that went over the limit; only `lift` clears it.
    quarantined: Option<String>,
    /// No worker starts before this (the backoff after the last crash).
    not_before: Option<Instant>,
    /// What fails, as the quarantine reason names it: "its worker" (a plugin's), "it"
    /// (an MCP server).
    subject: &'static str,
}

impl Lifecycle {
    /// A plugin whose first worker runs (or is about to): no crashes, no backoff.
    pub(crate) fn new(limits: CrashLimits) -> Lifecycle {
        Lifecycle {
            limits,
            crashes: VecDeque::new(),
            restarts: 0,
            last_exit: None,
            quarantined: None,
            not_before: None,
            subject: "its worker",
        }
    }

    /// The same machine for a process that is itself what fails (an MCP server): its
    /// quarantine reason says "it failed", not "its worker failed".
    pub(crate) fn for_server(limits: CrashLimits) -> Lifecycle {
        Lifecycle {
            subject: "it",
            ..Lifecycle::new(limits)
        }
    }

    /// Whether a worker may start at `now`.
    pub(crate) fn admit(&self, now: Instant) -> Admission {
        if let Some(why) = &self.quarantined {
            return Admission::Quarantined(why.clone());
        }
        match self.not_before {
            Some(t) if t > now => Admission::Wait(t - now),
            _ => Admission::Start,
        }
    }

    /// A worker started. `replaces_a_worker`: its profile had one before (a profile's
    /// first worker is a start, not a restart, unless a worker of the plugin has ended).
    pub(crate) fn started(&mut self, replaces_a_worker: bool) {
        if replaces_a_worker || self.last_exit.is_some() {
            self.restarts += 1;
        }
        self.not_before = None;
    }

    /// A worker ended unexpectedly at `now`, or one could not be started, with `reason`:
    /// counts the crash and decides what follows. Over `max_crashes` within the window
    /// the plugin is quarantined; otherwise the next start waits for the backoff. A
    /// quarantine stays until [`Lifecycle::lift`], whatever crashes follow.
    pub(crate) fn crashed(&mut self, now: Instant, reason: &str) -> AfterCrash {
        self.last_exit = Some(reason.to_owned());
        self.crashes.push_back(now);
        let window = self.limits.window;
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.crashes.pop_front();
        }
        let failures = self.crashes.len();
        if failures > self.limits.max_crashes as usize {
            self.quarantined = Some(format!(
                "{} failed {failures} times within {} s (last: {reason})",
                self.subject,
                window.as_secs()
            ));
            AfterCrash::Quarantined { failures, window }
        } else {
            let delay = backoff(failures);
            self.not_before = Some(now + delay);
            AfterCrash::Restart { delay }
        }
    }

    /// Lifts a quarantine (`toolhost reload`): the crash count and any backoff start
    /// over. `true` if the plugin was quarantined.
    pub(crate) fn lift(&mut self) -> bool {
        self.crashes.clear();
        self.not_before = None;
        self.quarantined.take().is_some()
    }

    /// What status shows, at `now`.
    pub(crate) fn facts(&self, now: Instant) -> LifecycleFacts {
        let window_start = now.checked_sub(self.limits.window);
        let recent = self
            .crashes
            .iter()
            .filter(|t| window_start.is_none_or(|s| **t >= s))
            .count();
        LifecycleFacts {
            restarts: self.restarts,
            recent_crashes: u32::try_from(recent).unwrap_or(u32::MAX),
            last_exit: self.last_exit.clone(),
            quarantined: self.quarantined.clone(),
        }
    }
}

/// Exponential backoff before the n-th restart within the crash window: none for the
/// first, then 100 ms doubling up to 5 s.
fn backoff(n: usize) -> Duration {
    if n <= 1 {
        return Duration::ZERO;
    }
    let exp = u32::try_from(n - 2).unwrap_or(u32::MAX).min(6);
    Duration::from_millis(100u64 << exp).min(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn quarantined(life: &Lifecycle) -> bool {
        life.facts(Instant::now()).quarantined.is_some()
    }

    fn limits() -> CrashLimits {
        CrashLimits {
            max_crashes: 5,
            window: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_fresh_plugin_starts_at_once_and_has_nothing_to_report() {
        let t0 = Instant::now();
        let life = Lifecycle::new(limits());
        assert_eq!(life.admit(t0), Admission::Start);
        assert_eq!(
            life.facts(t0),
            LifecycleFacts {
                restarts: 0,
                recent_crashes: 0,
                last_exit: None,
                quarantined: None,
            }
        );
        assert!(!quarantined(&life));
    }

    #[test]
    fn a_profiles_first_worker_is_a_start_and_a_replacement_is_a_restart() {
        let mut life = Lifecycle::new(limits());
        life.started(false);
        assert_eq!(life.facts(Instant::now()).restarts, 0);
        life.started(true);
        assert_eq!(life.facts(Instant::now()).restarts, 1);
        // Once a worker has ended, any start is a restart.
        life.crashed(Instant::now(), "was killed by signal 11 (SIGSEGV, a crash)");
        life.started(false);
        assert_eq!(life.facts(Instant::now()).restarts, 2);
    }

    #[test]
    fn the_first_crash_restarts_at_once() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        let next = life.crashed(t0, "exited with status 3");
        assert_eq!(
            next,
            AfterCrash::Restart {
                delay: Duration::ZERO
            }
        );
        assert_eq!(next.to_string(), "; a fresh worker starts on the next call");
        assert_eq!(life.admit(t0), Admission::Start);
        let facts = life.facts(t0);
        assert_eq!(facts.recent_crashes, 1);
        assert_eq!(facts.last_exit.as_deref(), Some("exited with status 3"));
    }

    #[test]
    fn a_second_crash_backs_off_and_the_backoff_ends() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        life.crashed(t0, "first");
        let next = life.crashed(t0 + MS, "second");
        assert_eq!(next, AfterCrash::Restart { delay: 100 * MS });
        assert_eq!(
            next.to_string(),
            "; a fresh worker starts on the next call, after 100 ms"
        );
        assert_eq!(life.admit(t0 + MS), Admission::Wait(100 * MS));
        assert_eq!(life.admit(t0 + 51 * MS), Admission::Wait(50 * MS));
        assert_eq!(life.admit(t0 + 101 * MS), Admission::Start);
    }

    #[test]
    fn a_start_ends_the_backoff() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        life.crashed(t0, "first");
        life.crashed(t0, "second");
        assert!(matches!(life.admit(t0), Admission::Wait(_)));
        life.started(false);
        assert_eq!(life.admit(t0), Admission::Start);
        assert_eq!(life.facts(t0).restarts, 1);
    }

    #[test]
    fn a_crash_during_the_backoff_counts_and_backs_off_longer_from_then() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        life.crashed(t0, "first");
        life.crashed(t0, "second");
        assert_eq!(life.admit(t0 + 10 * MS), Admission::Wait(90 * MS));
        // Another profile's worker crashes while the backoff runs.
        let next = life.crashed(t0 + 50 * MS, "third");
        assert_eq!(next, AfterCrash::Restart { delay: 200 * MS });
        assert_eq!(life.admit(t0 + 100 * MS), Admission::Wait(150 * MS));
        assert_eq!(life.admit(t0 + 250 * MS), Admission::Start);
        assert_eq!(life.facts(t0 + 250 * MS).recent_crashes, 3);
    }

    #[test]
    fn the_backoff_doubles_up_to_five_seconds() {
        let delays: Vec<u128> = (1..=10).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(
            delays,
            [0, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]
        );
    }

    #[test]
    fn more_crashes_than_allowed_within_the_window_quarantine_the_plugin() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        for i in 0..5 {
            let next = life.crashed(t0 + i * MS, "was killed by signal 6 (SIGABRT, an abort)");
            assert!(matches!(next, AfterCrash::Restart { .. }), "{i}: {next:?}");
        }
        let next = life.crashed(t0 + 5 * MS, "was killed by signal 6 (SIGABRT, an abort)");
        assert_eq!(
            next,
            AfterCrash::Quarantined {
                failures: 6,
                window: Duration::from_secs(60)
            }
        );
        assert_eq!(
            next.to_string(),
            "; the plugin is now quarantined (6 failures within 60 s): its tools are refused \
             until its file changes or `toolhost reload`"
        );
        let why = "its worker failed 6 times within 60 s (last: was killed by signal 6 \
                   (SIGABRT, an abort))";
        assert_eq!(
            life.admit(t0 + 5 * MS),
            Admission::Quarantined(why.to_owned())
        );
        // Time alone does not lift it.
        assert_eq!(
            life.admit(t0 + Duration::from_secs(3600)),
            Admission::Quarantined(why.to_owned())
        );
        assert!(quarantined(&life));
        assert_eq!(life.facts(t0).quarantined.as_deref(), Some(why));
    }

    #[test]
    fn crashes_older_than_the_window_do_not_count() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        let apart = Duration::from_secs(61);
        for i in 0..20 {
            let next = life.crashed(t0 + i * apart, "exited with status 1");
            assert_eq!(
                next,
                AfterCrash::Restart {
                    delay: Duration::ZERO
                },
                "crash {i}"
            );
        }
        assert_eq!(life.facts(t0 + 19 * apart).recent_crashes, 1);
        assert!(!quarantined(&life));
    }

    #[test]
    fn status_counts_only_the_crashes_within_the_window() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        life.crashed(t0, "a");
        life.crashed(t0 + Duration::from_secs(30), "b");
        assert_eq!(life.facts(t0 + Duration::from_secs(45)).recent_crashes, 2);
        assert_eq!(life.facts(t0 + Duration::from_secs(75)).recent_crashes, 1);
        assert_eq!(life.facts(t0 + Duration::from_secs(95)).recent_crashes, 0);
    }

    #[test]
    fn lifting_the_quarantine_lets_a_worker_start_and_the_count_start_over() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        for i in 0..6 {
            life.crashed(t0 + i * MS, "crash");
        }
        assert!(quarantined(&life));
        assert!(life.lift(), "it was quarantined");
        assert_eq!(life.admit(t0 + 6 * MS), Admission::Start);
        let facts = life.facts(t0 + 6 * MS);
        assert_eq!((facts.recent_crashes, facts.quarantined), (0, None));
        // The last exit is still reported.
        assert_eq!(facts.last_exit.as_deref(), Some("crash"));
        assert!(!life.lift(), "nothing left to lift");
        // The next crash is a first crash again.
        assert_eq!(
            life.crashed(t0 + 7 * MS, "crash"),
            AfterCrash::Restart {
                delay: Duration::ZERO
            }
        );
    }

    #[test]
    fn lifting_also_ends_a_backoff() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        life.crashed(t0, "a");
        life.crashed(t0, "b");
        assert!(matches!(life.admit(t0), Admission::Wait(_)));
        assert!(!life.lift(), "not quarantined");
        assert_eq!(life.admit(t0), Admission::Start);
    }

    #[test]
    fn a_crash_while_quarantined_keeps_the_quarantine() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(limits());
        for i in 0..6 {
            life.crashed(t0 + i * MS, "crash");
        }
        // A worker that was still running (another profile's) ends much later, when the
        // earlier crashes are outside the window: still quarantined.
        let later = t0 + Duration::from_secs(120);
        life.crashed(later, "late crash");
        assert!(matches!(life.admit(later), Admission::Quarantined(_)));
        assert_eq!(life.facts(later).last_exit.as_deref(), Some("late crash"));
    }

    #[test]
    fn no_crashes_allowed_quarantines_at_the_first() {
        let t0 = Instant::now();
        let mut life = Lifecycle::new(CrashLimits {
            max_crashes: 0,
            window: Duration::from_secs(60),
        });
        assert!(matches!(
            life.crashed(t0, "crash"),
            AfterCrash::Quarantined { failures: 1, .. }
        ));
        assert!(matches!(life.admit(t0), Admission::Quarantined(_)));
    }
}
