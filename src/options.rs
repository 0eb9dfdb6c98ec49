//! The rules the options of `dump`, `record` and `top` follow, checked in
//! one place each: every command that breaks a rule gets the same message
//! (one [`Error`] variant per rule). The CLI edge checks each once, before
//! anything is opened, launched or drawn (`--rate` as it is parsed, the
//! rules between options right after); the commands and the sampler take
//! their options as checked.

use crate::error::Error;

/// Highest rate accepted. A read of a small process takes some 10 µs, so
/// far beyond 10 kHz the schedule is finer than a read: the summary then says
/// what share of the asked rate was delivered and why.
pub const MAX_RATE: f64 = 100_000.0;
/// `record`'s and `top`'s rate when none is asked for: py-spy's.
pub const DEFAULT_RATE: f64 = 100.0;
/// `watch`'s rate when none is asked for. A watchdog runs for hours: at
/// 50 Hz a 100 ms threshold still spans five samples, an incident's
/// duration is good to about 20 ms (`uncertainty_ms` says), and the steady
/// cost on a small service stays under 1% of a core.
pub const WATCH_DEFAULT_RATE: f64 = 50.0;

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

/// Parse a sampling rate in samples per second: a number with an optional
/// `k` (thousands) and `hz` suffix (`100`, `2.5k`, `10khz`, `500Hz`), finite,
/// above 0, at most [`MAX_RATE`]. The one parser of `--rate` for every command.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix("hz").unwrap_or(&t).trim_end();
    let (num, scale) = match t.strip_suffix('k') {
        Some(n) => (n.trim_end(), 1000.0),
        None => (t, 1.0),
    };
    // Reject what f64 parsing accepts but no one means as a rate.
    let plain = !num.is_empty()
        && num
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'-' | b'+'));
    match num.parse::<f64>().map(|r| r * scale) {
        Ok(r) if plain => check_rate(r, s).map_err(|e| e.to_string()),
        _ => Err(not_a_rate(s).to_string()),
    }
}

fn not_a_rate(given: &str) -> Error {
    Error::NotARate {
        given: given.to_string(),
        max: MAX_RATE,
    }
}

/// Samples per second: finite, above 0, at most [`MAX_RATE`]. `given` is
/// how the user wrote it, for the message.
fn check_rate(rate: f64, given: &str) -> Result<f64, Error> {
    if rate.is_finite() && rate > MAX_RATE {
        Err(Error::RateTooHigh {
            given: given.to_string(),
            max: MAX_RATE,
        })
    } else if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(not_a_rate(given))
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

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100"), Ok(100.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        assert_eq!(parse_rate("10k"), Ok(10_000.0));
        assert_eq!(parse_rate("10khz"), Ok(10_000.0));
        assert_eq!(parse_rate("10 kHz"), Ok(10_000.0));
        assert_eq!(parse_rate("2.5K"), Ok(2_500.0));
        assert_eq!(parse_rate("500Hz"), Ok(500.0));
        assert_eq!(parse_rate("100k"), Ok(100_000.0));
        for bad in [
            "0",
            "-5",
            "nan",
            "inf",
            "abc",
            "",
            "1e9",
            "k",
            "hz",
            "khz",
            "10kk",
            "0x10",
            "101k",
            "10 k hz x",
            "infk",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert!(parse_rate("200k").unwrap_err().contains("too high"));
    }
}
