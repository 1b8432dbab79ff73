//! The host process's own environment, written only while the process has one thread:
//! the paths of the host's state that every sandbox built in this process, or in a
//! worker it starts, hides (`toolhost_sandbox::protected`).

use std::path::PathBuf;

/// Why the environment was not written.
#[derive(Debug, thiserror::Error)]
pub enum ProcessEnvError {
    /// Other threads exist (or their number could not be read): one of them could read
    /// the environment while it is written.
    #[error(
        "the environment can only be set while the process has one thread, and it has {} \
         (set it before starting the runtime)",
        .0.map_or_else(|| "an unknown number".to_owned(), |n| n.to_string())
    )]
    Threads(Option<usize>),
}

/// How many threads this process has, from `/proc/self/status`.
fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

fn single_threaded() -> Result<(), ProcessEnvError> {
    match threads() {
        Some(1) => Ok(()),
        other => Err(ProcessEnvError::Threads(other)),
    }
}

/// Publishes `hidden` (the host's state folders and files) to every sandbox this process
/// and its workers build, and clears the mark a worker's sandbox sets (only a worker whose
/// own sandbox hides the state may say so). Refused unless the process has one thread.
pub fn publish_protected_state(hidden: &[PathBuf]) -> Result<(), ProcessEnvError> {
    single_threaded()?;
    // SAFETY: checked just above that this process has a single thread, so nothing reads
    // the environment while it is written (and no thread can start meanwhile: only this
    // one could start it).
    unsafe {
        std::env::set_var(
            toolhost_sandbox::protected::ENV,
            toolhost_sandbox::protected::to_env(hidden),
        );
        std::env::remove_var(toolhost_sandbox::protected::HIDDEN_BY_OUTER);
    }
    Ok(())
}

/// Records, in a worker whose sandbox now hides the host's state, that the sandboxes of
/// the commands it starts need not carve it again. Refused unless the process has one
/// thread.
pub(crate) fn mark_state_hidden_by_worker() -> Result<(), ProcessEnvError> {
    single_threaded()?;
    // SAFETY: a single thread, checked above.
    unsafe { std::env::set_var(toolhost_sandbox::protected::HIDDEN_BY_OUTER, "1") };
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_with_threads_is_refused_and_says_how_many() {
        // A second thread, alive until the check is done, whatever the harness does.
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || wait.recv());
        assert!(super::threads().is_some_and(|n| n > 1));
        let err = super::publish_protected_state(&[]).expect_err("threads exist");
        assert!(
            err.to_string().contains("one thread") && err.to_string().contains("before"),
            "{err}"
        );
        drop(done);
        let _ = other.join();
    }
}
