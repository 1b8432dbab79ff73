//! Seconds as people write them, in the config file (`timeout_secs = 60`) and on the
//! command line (`--timeout 0.5`), turned into a [`Duration`] the moment they are read:
//! the one check, and the one message when a number is not a usable number of seconds.

use std::time::Duration;

/// A number of seconds that is not one a limit can use: negative, not a number, infinite
/// or too large for a [`Duration`] (or zero, where zero means nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be a positive number of seconds")]
pub struct SecondsError;

/// `secs` as a limit: a finite number of seconds above zero that a [`Duration`] holds.
///
/// ```
/// use std::time::Duration;
/// use toolhost::positive_seconds;
///
/// assert_eq!(positive_seconds(0.5), Ok(Duration::from_millis(500)));
/// assert!(positive_seconds(0.0).is_err());
/// assert!(positive_seconds(-1.0).is_err());
/// assert!(positive_seconds(f64::NAN).is_err());
/// assert!(positive_seconds(f64::INFINITY).is_err());
/// ```
pub fn positive_seconds(secs: f64) -> Result<Duration, SecondsError> {
    match seconds_or_zero(secs)? {
        d if d.is_zero() => Err(SecondsError),
        d => Ok(d),
    }
}

/// Like [`positive_seconds`], where zero has a meaning (a cache that keeps nothing).
pub(crate) fn seconds_or_zero(secs: f64) -> Result<Duration, SecondsError> {
    Duration::try_from_secs_f64(secs).map_err(|_| SecondsError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_refused_where_it_means_nothing_and_kept_where_it_means_something() {
        assert_eq!(positive_seconds(0.0), Err(SecondsError));
        assert_eq!(seconds_or_zero(0.0), Ok(Duration::ZERO));
        assert_eq!(seconds_or_zero(-0.5), Err(SecondsError));
        assert_eq!(positive_seconds(60.0), Ok(Duration::from_secs(60)));
        assert_eq!(
            SecondsError.to_string(),
            "must be a positive number of seconds"
        );
    }
}
