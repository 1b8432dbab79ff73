//! The pool's threads and how a call is handed to one: each thread has a slot of its own
//! (a state word, the job, the call it runs), and a caller hands its call straight to an
//! idle thread's slot. A runtime thread keeps the slot it used last (its partner) and
//! tries it first, so the usual hand-off touches only the two threads' slot: no shared
//! lock, no queue, no wake-up when the partner is looking for work.
//!
//! Spinning is a bet that the other side answers within microseconds; it pays only when
//! the spinner has a core to itself. So nobody spins where the process may use one CPU
//! (`taskset`, a cgroup quota), and on more, at most half the CPUs' worth of idle threads
//! look for work at once; the others sleep until a caller wakes them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::{IDLE_LIFETIME, MAX_THREADS, PoolError, StuckCall};

/// How long an idle pool thread looks for the next call before it sleeps.
const SPIN_FOR_WORK: Duration = Duration::from_micros(100);

/// A call handed to the pool, its output type erased.
pub(super) trait Task: Send + Sync {
    /// Polls the call on this thread until it answers (calling `finishing` just before it
    /// hands the output over) or waits (it comes back through `submit` when woken).
    fn run(self: Arc<Self>, finishing: &dyn Fn());
    /// The call, if its caller gave it up (for `stuck_calls`).
    fn stuck(&self, now: Instant) -> Option<StuckCall>;
}

/// A slot's states. A caller moves an idle slot (`LOOKING` or `ASLEEP`) to `CLAIMED`,
/// puts the job in and sets `HAS_JOB`; the thread takes it (`BUSY`) and, done, goes back
/// to `LOOKING`, then `ASLEEP`, and ends (`GONE`) after [`IDLE_LIFETIME`] asleep.
/// `FINISHING` is the moment between a call's end and `LOOKING`, in which the thread
/// hands the output over and runs no plugin code: a caller whose next call finds its
/// partner there waits for it (briefly, and bounded) rather than starting another thread.
const LOOKING: u32 = 0;
const ASLEEP: u32 = 1;
const CLAIMED: u32 = 2;
const HAS_JOB: u32 = 3;
const BUSY: u32 = 4;
const GONE: u32 = 5;
const FINISHING: u32 = 6;

/// How long a caller waits for its partner to leave `FINISHING`.
const WAIT_FOR_FINISHING: Duration = Duration::from_micros(20);

/// One pool thread's slot, on a cache line of its own (two threads write it per call; a
/// neighbour on the same line would make every other call's hand-off slower).
#[repr(align(128))]
struct Slot {
    state: AtomicU32,
    /// The handed-over job; locked only by the claimer and then the thread, in turn.
    job: Mutex<Option<Arc<dyn Task>>>,
    /// The call the thread runs now.
    current: Mutex<Option<Arc<dyn Task>>>,
    /// The thread, once it started.
    thread: OnceLock<Thread>,
}

impl Slot {
    fn new(state: u32) -> Slot {
        Slot {
            state: AtomicU32::new(state),
            job: Mutex::new(None),
            current: Mutex::new(None),
            thread: OnceLock::new(),
        }
    }

    /// Claims the slot if its thread is idle or about to be; `Some(true)` if the thread
    /// was asleep.
    fn try_claim_soon(&self) -> Option<bool> {
        if self.state.load(Ordering::Acquire) == FINISHING {
            spin_until(WAIT_FOR_FINISHING, || {
                self.state.load(Ordering::Acquire) != FINISHING
            });
        }
        self.try_claim()
    }

    /// Claims the slot if its thread is idle; `Some(true)` if the thread was asleep.
    fn try_claim(&self) -> Option<bool> {
        for idle in [LOOKING, ASLEEP] {
            if self
                .state
                .compare_exchange(idle, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(idle == ASLEEP);
            }
        }
        None
    }

    /// Gives a claimed slot its job, waking the thread if it was asleep.
    fn give(&self, task: Arc<dyn Task>, asleep: bool) {
        *self.job.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        self.state.store(HAS_JOB, Ordering::Release);
        if asleep && let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Runs one job, listed as this thread's current call meanwhile.
    fn run(&self, task: Arc<dyn Task>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&task));
        task.run(&|| {
            *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.state.store(FINISHING, Ordering::Release);
        });
        // A call given up (or one whose `poll` panicked) has no `finishing`.
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Waits for the next job: looks for it for a moment (where spinning pays), then
    /// sleeps. `None` once the thread was idle for [`IDLE_LIFETIME`] (the slot is `GONE`).
    fn next_job(&self) -> Option<Arc<dyn Task>> {
        if let Some(_spinning) = Spinner::start() {
            spin_until(SPIN_FOR_WORK, || {
                self.state.load(Ordering::Acquire) != LOOKING
            });
        }
        if self
            .state
            .compare_exchange(LOOKING, ASLEEP, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let deadline = Instant::now() + IDLE_LIFETIME;
            loop {
                match self.state.load(Ordering::Acquire) {
                    HAS_JOB => break,
                    // Claimed while asleep: the claimer unparks this thread once the job
                    // is in (an unpark before the park makes the park return at once).
                    CLAIMED => std::thread::park(),
                    _ => {
                        let now = Instant::now();
                        if now >= deadline {
                            if self
                                .state
                                .compare_exchange(ASLEEP, GONE, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok()
                            {
                                return None;
                            }
                            continue;
                        }
                        std::thread::park_timeout(deadline - now);
                    }
                }
            }
        }
        // Claimed while looking: the claimer puts the job in at once.
        let mut round: u32 = 0;
        while self.state.load(Ordering::Acquire) != HAS_JOB {
            round = round.wrapping_add(1);
            if round.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        self.state.store(BUSY, Ordering::Relaxed);
        self.job
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// The process's one pool.
static POOL: LazyLock<Pool> = LazyLock::new(Pool::default);

#[derive(Default)]
struct Pool {
    /// Every thread's slot (changes when a thread starts or ends).
    slots: Mutex<Vec<Arc<Slot>>>,
    threads: AtomicUsize,
    /// Calls that found every one of [`MAX_THREADS`] busy, in order.
    overflow: Mutex<VecDeque<Arc<dyn Task>>>,
    overflow_len: AtomicUsize,
}

thread_local! {
    /// The slot this thread handed its last call to.
    static PARTNER: std::cell::RefCell<Option<Arc<Slot>>> = const { std::cell::RefCell::new(None) };
}

/// Hands `task` to an idle thread (this thread's partner first), a new one, or, with
/// [`MAX_THREADS`] busy, the queue the next free thread takes from.
/// Returns the thread that took it, if one did at once.
pub(super) fn submit(task: Arc<dyn Task>) -> Result<Option<Thread>, PoolError> {
    let task = match PARTNER.with(|p| {
        let partner = p.borrow();
        match partner
            .as_ref()
            .and_then(|slot| slot.try_claim_soon().map(|a| (slot, a)))
        {
            Some((slot, asleep)) => {
                slot.give(task, asleep);
                Ok(slot.thread.get().cloned())
            }
            None => Err(task),
        }
    }) {
        Ok(thread) => return Ok(thread),
        Err(task) => task,
    };
    let pool = &*POOL;
    let idle = pool
        .slots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find_map(|slot| slot.try_claim().map(|asleep| (Arc::clone(slot), asleep)));
    if let Some((slot, asleep)) = idle {
        slot.give(task, asleep);
        let thread = slot.thread.get().cloned();
        PARTNER.with(|p| *p.borrow_mut() = Some(slot));
        return Ok(thread);
    }
    if pool.threads.fetch_add(1, Ordering::AcqRel) < MAX_THREADS {
        match spawn(task) {
            Ok((slot, thread)) => {
                PARTNER.with(|p| *p.borrow_mut() = Some(slot));
                return Ok(Some(thread));
            }
            Err((task, e)) => {
                pool.threads.fetch_sub(1, Ordering::AcqRel);
                // With threads about, one takes it when free; with none, it is refused.
                if pool.threads.load(Ordering::Acquire) == 0 {
                    return Err(PoolError::NoThread(e));
                }
                queue(task);
                return Ok(None);
            }
        }
    }
    pool.threads.fetch_sub(1, Ordering::AcqRel);
    queue(task);
    Ok(None)
}

/// Queues a call for the next thread that is free, and hands the queue's head to a
/// thread that went idle meanwhile.
fn queue(task: Arc<dyn Task>) {
    let pool = &*POOL;
    pool.overflow
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push_back(task);
    pool.overflow_len.fetch_add(1, Ordering::SeqCst);
    // A thread checks the queue after it says it is idle; this looks for idle threads
    // after it queued: one of the two sees the other.
    let idle = pool
        .slots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find_map(|slot| slot.try_claim().map(|asleep| (Arc::clone(slot), asleep)));
    if let Some((slot, asleep)) = idle {
        match take_queued() {
            Some(task) => slot.give(task, asleep),
            None => slot.give(Arc::new(Nothing), asleep),
        }
    }
}

fn take_queued() -> Option<Arc<dyn Task>> {
    let pool = &*POOL;
    if pool.overflow_len.load(Ordering::SeqCst) == 0 {
        return None;
    }
    let task = pool
        .overflow
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop_front();
    if task.is_some() {
        pool.overflow_len.fetch_sub(1, Ordering::SeqCst);
    }
    task
}

/// A job that does nothing (given to a claimed slot whose queued call another took).
struct Nothing;

impl Task for Nothing {
    fn run(self: Arc<Self>, _: &dyn Fn()) {}

    fn stuck(&self, _: Instant) -> Option<StuckCall> {
        None
    }
}

/// Starts a thread that runs `first` and then takes calls in its slot.
#[allow(clippy::type_complexity)]
fn spawn(first: Arc<dyn Task>) -> Result<(Arc<Slot>, Thread), (Arc<dyn Task>, std::io::Error)> {
    let slot = Arc::new(Slot::new(BUSY));
    // The task goes through the slot so that a failed spawn gives it back.
    *slot.job.lock().unwrap_or_else(PoisonError::into_inner) = Some(first);
    let theirs = Arc::clone(&slot);
    let spawned = std::thread::Builder::new()
        .name("toolhost-plugin".to_owned())
        .spawn(move || work_loop(&theirs));
    match spawned {
        Ok(handle) => {
            POOL.slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Arc::clone(&slot));
            Ok((slot, handle.thread().clone()))
        }
        Err(e) => match slot
            .job
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            Some(task) => Err((task, e)),
            // The closure never ran, so the task is still there; this arm is unreachable
            // in practice and loses nothing but the call, which errs for its caller.
            None => Err((Arc::new(Nothing), e)),
        },
    }
}

thread_local! {
    static ON_POOL_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is one of the pool's.
pub(super) fn on_pool_thread() -> bool {
    ON_POOL_THREAD.with(std::cell::Cell::get)
}

fn work_loop(slot: &Slot) {
    ON_POOL_THREAD.with(|on| on.set(true));
    // Set before the thread can be asleep, which is when a claimer unparks it.
    let _ = slot.thread.set(std::thread::current());
    let mut next = slot
        .job
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    loop {
        if let Some(task) = next.take() {
            slot.run(task);
        }
        if let Some(task) = take_queued() {
            next = Some(task);
            continue;
        }
        slot.state.store(LOOKING, Ordering::SeqCst);
        // See `queue`: a call queued before this thread said it was idle is taken here.
        if POOL.overflow_len.load(Ordering::SeqCst) > 0
            && slot
                .state
                .compare_exchange(LOOKING, BUSY, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            next = take_queued();
            continue;
        }
        match slot.next_job() {
            Some(task) => next = Some(task),
            None => break,
        }
    }
    let pool = &*POOL;
    pool.slots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|s| !std::ptr::eq(Arc::as_ptr(s), slot));
    pool.threads.fetch_sub(1, Ordering::AcqRel);
}

/// The calls running on pool threads now.
pub(super) fn running(mut each: impl FnMut(&dyn Task)) {
    let slots: Vec<Arc<Slot>> = POOL
        .slots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for slot in slots {
        if let Some(call) = slot
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            each(call.as_ref());
        }
    }
}

/// The CPUs this process may run on (its affinity and cgroup quota), read once.
static CPUS: LazyLock<usize> =
    LazyLock::new(|| std::thread::available_parallelism().map_or(1, usize::from));

/// Whether a caller may spin for its call's answer: only with a second CPU, where the
/// pool thread it waits for runs beside it rather than behind it.
pub(super) fn caller_may_spin() -> bool {
    *CPUS > 1
}

/// Idle threads looking for work now.
static SPINNERS: AtomicUsize = AtomicUsize::new(0);

/// A licence to look for work by spinning, held while spinning: none with one CPU, and
/// at most half the CPUs' worth at once.
struct Spinner;

impl Spinner {
    fn start() -> Option<Spinner> {
        let most = *CPUS / 2;
        if most == 0 {
            return None;
        }
        let mut now = SPINNERS.load(Ordering::Relaxed);
        loop {
            if now >= most {
                return None;
            }
            match SPINNERS.compare_exchange_weak(now, now + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(Spinner),
                Err(seen) => now = seen,
            }
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        SPINNERS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Spins until `done` or `limit` passed. Returns whether `done` became true.
///
/// A few rounds on the CPU (a hand-off between two cores takes well under a microsecond),
/// then a yield every round: the thread waited for may share this CPU (the scheduler puts
/// a thread it wakes beside its waker, and with one CPU it has no choice), and there it
/// runs only when this one yields. A yield with nothing else to run returns at once.
pub(super) fn spin_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    const ON_CPU_ROUNDS: u32 = 32;
    let start = Instant::now();
    let mut round: u32 = 0;
    loop {
        if done() {
            return true;
        }
        if *CPUS > 1 && round < ON_CPU_ROUNDS {
            round += 1;
            std::hint::spin_loop();
            continue;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::yield_now();
    }
}
