//! Availability: whether a tool's declared requirements (environment variables, programs
//! on `PATH`) are met, checked by the host (no plugin code runs) and cached for a short
//! time. Unavailable tools are left out of what the model sees and refused with the reason.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::calls::tool::{Requirements, ToolSpec};

/// Checks requirements, caching each tool's answer for `ttl`.
pub struct Availability {
    ttl: Duration,
    cache: Mutex<HashMap<String, Answer>>,
}

/// A cached answer: when it was found, for which requirements, and what it was.
type Answer = (Instant, Requirements, Result<(), String>);

impl Availability {
    /// Answers are cached this long.
    pub fn new(ttl: Duration) -> Self {
        Availability {
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// `Ok` when every requirement of `spec` is met, else the reason, for the model and
    /// the operator.
    pub fn check(&self, spec: &ToolSpec) -> Result<(), String> {
        if spec.requirements == Requirements::default() {
            return Ok(());
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, req, answer)) = cache.get(&spec.name)
            && at.elapsed() < self.ttl
            && *req == spec.requirements
        {
            return answer.clone();
        }
        let answer = evaluate(&spec.name, &spec.requirements);
        cache.insert(
            spec.name.clone(),
            (Instant::now(), spec.requirements.clone(), answer.clone()),
        );
        answer
    }
}

impl Default for Availability {
    fn default() -> Self {
        Availability::new(Duration::from_secs(30))
    }
}

impl Availability {
    /// The specs of `registry` the model should see: those whose requirements are met.
    pub fn visible_specs<'a>(&self, registry: &'a crate::ToolRegistry) -> Vec<&'a ToolSpec> {
        registry
            .specs()
            .into_iter()
            .filter(|s| self.check(s).is_ok())
            .collect()
    }
}

fn evaluate(tool: &str, req: &Requirements) -> Result<(), String> {
    let missing_env: Vec<&str> = req
        .env
        .iter()
        .filter(|v| std::env::var_os(v).is_none_or(|x| x.is_empty()))
        .map(String::as_str)
        .collect();
    let missing_programs: Vec<&str> = req
        .programs
        .iter()
        .filter(|p| !on_path(p))
        .map(String::as_str)
        .collect();
    let mut reasons = Vec::new();
    if !missing_env.is_empty() {
        reasons.push(format!(
            "the environment variable(s) {} are not set",
            missing_env.join(", ")
        ));
    }
    if !missing_programs.is_empty() {
        reasons.push(format!(
            "the program(s) {} are not on PATH",
            missing_programs.join(", ")
        ));
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "tool '{tool}' is unavailable: {}; set them in the host's environment and it becomes available",
            reasons.join(" and ")
        ))
    }
}

fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return is_executable(Path::new(program));
    }
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| is_executable(&dir.join(program)))
    })
}

fn is_executable(path: &Path) -> bool {
    match std::fs::metadata(path) {
        #[cfg(unix)]
        Ok(m) => {
            m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
        }
        #[cfg(not(unix))]
        Ok(m) => m.is_file(),
        Err(_) => false,
    }
}
