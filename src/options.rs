//! The rules the options of `dump`, `record` and `top` follow, checked in
//! one place each: every command that breaks a rule gets the same message
//! (one [`Error`] variant per rule). The CLI edge checks them before anything
//! is opened, launched or drawn; the library entry points check them again.

use crate::error::Error;
use crate::sampler::MAX_RATE;

/// `--native` reads each thread's registers, which needs the thread paused.
pub fn check_read(native: bool, nonblocking: bool) -> Result<(), Error> {
    if native && nonblocking {
        return Err(Error::NativeNeedsPause);
    }
    Ok(())
}

/// A process to follow: `--pid`, or a command to launch, exactly one.
pub fn check_target(pid: Option<i32>, command: &[String]) -> Result<(), Error> {
    match (pid, command.is_empty()) {
        (Some(_), false) => Err(Error::PidAndCommand),
        (None, true) => Err(Error::NoTarget),
        _ => Ok(()),
    }
}

/// What `dump` reads: `--pid`, or a core with `--core`, exactly one; the
/// core's `--executable` and `--root` only with a core.
pub fn check_dump_target(pid: Option<i32>, core: bool, core_files: bool) -> Result<(), Error> {
    match (pid, core) {
        (Some(_), true) => Err(Error::PidAndCore),
        (None, false) => Err(Error::NoTarget),
        (None, true) => Ok(()),
        (Some(_), false) if core_files => Err(Error::CoreFilesWithoutCore),
        (Some(_), false) => Ok(()),
    }
}

/// Samples per second: finite, above 0, at most [`MAX_RATE`]. `given` is
/// how the user wrote it, for the message.
pub(crate) fn check_rate(rate: f64, given: &str) -> Result<f64, Error> {
    if rate.is_finite() && rate > MAX_RATE {
        Err(Error::RateTooHigh {
            given: given.to_string(),
        })
    } else if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(Error::NotARate {
            given: given.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_has_its_own_error() {
        assert!(matches!(
            check_read(true, true),
            Err(Error::NativeNeedsPause)
        ));
        assert!(check_read(true, false).is_ok() && check_read(false, true).is_ok());
        let cmd = vec!["python3".to_string()];
        assert!(matches!(
            check_target(Some(1), &cmd),
            Err(Error::PidAndCommand)
        ));
        assert!(matches!(check_target(None, &[]), Err(Error::NoTarget)));
        assert!(check_target(Some(1), &[]).is_ok() && check_target(None, &cmd).is_ok());
        assert!(matches!(
            check_dump_target(Some(1), true, false),
            Err(Error::PidAndCore)
        ));
        assert!(matches!(
            check_dump_target(Some(1), false, true),
            Err(Error::CoreFilesWithoutCore)
        ));
        assert!(check_dump_target(None, true, true).is_ok());
        assert!(matches!(
            check_dump_target(None, false, false),
            Err(Error::NoTarget)
        ));
        for bad in [0.0, -5.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(check_rate(bad, "x"), Err(Error::NotARate { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            check_rate(2e5, "200k"),
            Err(Error::RateTooHigh { .. })
        ));
        assert_eq!(check_rate(MAX_RATE, "100k").ok(), Some(MAX_RATE));
    }
}
