//! Timestamps as the providers write them, without a date-time dependency, and unpredictable ids.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How many fractional digits a timestamp gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fraction {
    /// Whole seconds: `2024-01-01T00:00:00Z`.
    None,
    /// Always milliseconds, as JavaScript's `toISOString()`: `…:00.000Z`.
    Millis,
    /// 0, 3, 6 or 9 digits, the fewest that are exact, as protojson writes a `Timestamp`.
    Protojson,
    /// Nanoseconds with trailing zeros removed, as Go's `time.Time.String()`.
    Trimmed,
}

/// A UTC calendar time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utc {
    /// Year.
    pub year: i64,
    /// Month, 1..=12.
    pub month: u32,
    /// Day of the month, 1..=31.
    pub day: u32,
    /// Seconds into the day.
    pub second_of_day: u32,
    /// Nanoseconds into the second.
    pub nanos: u32,
}

impl Utc {
    /// The calendar time of `t` (times before the epoch included).
    pub fn of(t: SystemTime) -> Utc {
        let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
            Err(e) => {
                let d = e.duration();
                match d.subsec_nanos() {
                    0 => (-(d.as_secs() as i64), 0),
                    n => (-(d.as_secs() as i64) - 1, 1_000_000_000 - n),
                }
            }
        };
        // Howard Hinnant's civil_from_days.
        let z = secs.div_euclid(86_400) + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Utc {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            second_of_day: secs.rem_euclid(86_400) as u32,
            nanos,
        }
    }

    /// `YYYY-MM-DD`.
    pub fn date(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    /// `HH:MM:SS`.
    pub fn time(&self) -> String {
        let s = self.second_of_day;
        format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    }

    /// The fractional part, with its dot, or nothing.
    pub fn fraction(&self, f: Fraction) -> String {
        let n = self.nanos;
        match f {
            Fraction::None => String::new(),
            Fraction::Millis => format!(".{:03}", n / 1_000_000),
            Fraction::Protojson if n == 0 => String::new(),
            Fraction::Protojson if n.is_multiple_of(1_000_000) => format!(".{:03}", n / 1_000_000),
            Fraction::Protojson if n.is_multiple_of(1_000) => format!(".{:06}", n / 1_000),
            Fraction::Protojson => format!(".{n:09}"),
            Fraction::Trimmed if n == 0 => String::new(),
            Fraction::Trimmed => format!(".{n:09}").trim_end_matches('0').to_owned(),
        }
    }
}

/// RFC 3339 in UTC: `2024-01-01T00:00:00[.fraction]Z`.
pub fn rfc3339(t: SystemTime, fraction: Fraction) -> String {
    let u = Utc::of(t);
    format!("{}T{}{}Z", u.date(), u.time(), u.fraction(fraction))
}

/// 64 unpredictable bits without an RNG dependency: std's randomly keyed hash of a counter and
/// the clock. Good for ids that must differ, not for secrets.
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// A lowercase hex id of `len` characters.
pub fn hex_id(len: usize) -> String {
    let mut out = String::with_capacity(len + 16);
    while out.len() < len {
        out.push_str(&format!("{:016x}", random_u64()));
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn formats_known_instants_in_every_style() {
        assert_eq!(rfc3339(UNIX_EPOCH, Fraction::None), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(at(1_767_609_000, 0), Fraction::None),
            "2026-01-05T10:30:00Z"
        );
        assert_eq!(
            rfc3339(at(951_782_400 + 3661, 5_000_000), Fraction::Protojson),
            "2000-02-29T01:01:01.005Z"
        );
        assert_eq!(
            rfc3339(at(0, 1_500), Fraction::Protojson),
            "1970-01-01T00:00:00.000001500Z"
        );
        assert_eq!(
            rfc3339(at(0, 1_500), Fraction::Trimmed),
            "1970-01-01T00:00:00.0000015Z"
        );
        assert_eq!(
            rfc3339(at(1_704_067_200, 0), Fraction::Millis),
            "2024-01-01T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_millis(1), Fraction::Millis),
            "1969-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn ids_differ() {
        assert_ne!(hex_id(24), hex_id(24));
        assert_eq!(hex_id(5).len(), 5);
    }
}
