//! Figures as a person reads them: bytes in KB, MB and GB (1024 each, as PostgreSQL's
//! `pg_size_pretty` counts), durations in seconds, minutes and hours, rates with their
//! unit. The operations page showed "Lag 4964616 bytes" and an axis in "217.1M B" (issue
//! 48); these are what it shows now. Pure, with the cases tested below.

use super::pictures::short;

/// What a figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::console) enum Unit {
    /// Bytes of WAL.
    Bytes,
    /// A duration in seconds.
    Seconds,
    /// Things per second.
    PerSecond,
    /// A plain count.
    Count,
}

impl Unit {
    /// `value` in this unit, for a person.
    pub(in crate::console) fn show(self, value: f64) -> String {
        match self {
            Self::Bytes => bytes(value),
            Self::Seconds => duration(value),
            Self::PerSecond => format!("{}/s", short(value)),
            Self::Count => short(value),
        }
    }
}

/// Bytes in B, KB, MB, GB or TB, one decimal from KB on.
pub(in crate::console) fn bytes(value: f64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if value.abs() < 1024.0 {
        return format!("{value:.0} B");
    }
    let mut scaled = value / 1024.0;
    let mut unit = 0;
    while scaled.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        scaled /= 1024.0;
        unit += 1;
    }
    format!("{scaled:.1} {}", UNITS[unit])
}

/// A duration: tenths of a second below 10 s, whole seconds below a minute, then minutes
/// and seconds, then hours and minutes.
pub(in crate::console) fn duration(seconds: f64) -> String {
    let seconds = seconds.max(0.0);
    if seconds < 10.0 {
        let tenths = format!("{seconds:.1}");
        return format!("{} s", tenths.strip_suffix(".0").unwrap_or(&tenths));
    }
    let whole = seconds.round() as u64;
    match whole {
        0..60 => format!("{whole} s"),
        60..3600 => format!("{} min {} s", whole / 60, whole % 60),
        _ => format!("{} h {} min", whole / 3600, whole % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_in_kb_mb_gb() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(1023.0), "1023 B");
        assert_eq!(bytes(4_964_616.0), "4.7 MB");
        assert_eq!(bytes(217.1e6), "207.0 MB");
        assert_eq!(bytes(8.0 * 1024.0 * 1024.0 * 1024.0), "8.0 GB");
        assert_eq!(bytes(-2048.0), "-2.0 KB", "a headroom past the limit");
    }

    #[test]
    fn durations_read_in_seconds_minutes_hours() {
        assert_eq!(duration(0.0), "0 s");
        assert_eq!(duration(0.26), "0.3 s");
        assert_eq!(duration(3.0), "3 s");
        assert_eq!(duration(11.4), "11 s");
        assert_eq!(duration(125.0), "2 min 5 s");
        assert_eq!(duration(7_380.0), "2 h 3 min");
        assert_eq!(Unit::PerSecond.show(1_700.0), "1.7k/s");
    }
}
