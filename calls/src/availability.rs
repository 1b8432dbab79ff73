//! Availability: whether a tool's declared requirements (environment variables, programs
//! on `PATH`) are met, checked by the host (no plugin code runs) and cached for a short
//! time. Unavailable tools are left out of what the model sees and refused with the reason.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::tool::{Requirements, ToolSpec};

/// Checks requirements, caching each tool's answer for `ttl`.
pub struct Availability {
    ttl: Duration,
    cache: Mutex<HashMap<String, Answer>>,
}

/// A cached answer: when it was found, for which requirements, and what it was.
type Answer = (Instant, Requirements, Result<(), Unavailable>);

/// A tool whose requirements the host's environment does not meet: what is missing, and
/// in its message (which it also reads as, `Deref<Target = str>`), for the model and the
/// operator, what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unavailable {
    /// The tool.
    pub tool: String,
    /// Environment variables that are not set (or empty).
    pub missing_env: Vec<String>,
    /// Programs that are not on `PATH` (or not executable).
    pub missing_programs: Vec<String>,
    message: String,
}

impl Unavailable {
    fn new(tool: &str, missing_env: Vec<String>, missing_programs: Vec<String>) -> Unavailable {
        let message = format!(
            "tool '{tool}' is unavailable: {}; set them in the host's environment and it \
             becomes available",
            reasons(&missing_env, &missing_programs)
        );
        Unavailable {
            tool: tool.to_owned(),
            missing_env,
            missing_programs,
            message,
        }
    }
}

impl std::ops::Deref for Unavailable {
    type Target = str;

    fn deref(&self) -> &str {
        &self.message
    }
}

/// What is missing, in words.
fn reasons(missing_env: &[String], missing_programs: &[String]) -> String {
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
    reasons.join(" and ")
}

impl Availability {
    /// Answers are cached this long.
    pub fn new(ttl: Duration) -> Self {
        Availability {
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// `Ok` when every requirement of `spec` is met, else what is missing.
    pub fn check(&self, spec: &ToolSpec) -> Result<(), Unavailable> {
        // Working in the workspace is not something that can be missing.
        if spec.requirements.env.is_empty() && spec.requirements.programs.is_empty() {
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

/// How long an availability answer is cached unless the config says otherwise.
pub const DEFAULT_AVAILABILITY_TTL: Duration = Duration::from_secs(30);

impl Default for Availability {
    fn default() -> Self {
        Availability::new(DEFAULT_AVAILABILITY_TTL)
    }
}

impl Availability {
    /// The specs of `registry` the model should see: those whose requirements are met.
    pub fn visible_specs<'a>(
        &self,
        registry: &'a crate::registry::ToolRegistry,
    ) -> Vec<&'a ToolSpec> {
        registry
            .specs()
            .into_iter()
            .filter(|s| self.check(s).is_ok())
            .collect()
    }
}

fn evaluate(tool: &str, req: &Requirements) -> Result<(), Unavailable> {
    let missing_env: Vec<String> = req
        .env
        .iter()
        .filter(|v| std::env::var_os(v).is_none_or(|x| x.is_empty()))
        .cloned()
        .collect();
    let missing_programs: Vec<String> = req
        .programs
        .iter()
        .filter(|p| !on_path(p))
        .cloned()
        .collect();
    if missing_env.is_empty() && missing_programs.is_empty() {
        Ok(())
    } else {
        Err(Unavailable::new(tool, missing_env, missing_programs))
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
