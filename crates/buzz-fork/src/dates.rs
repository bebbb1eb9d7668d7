//! Calendar dates for `Last-Update` without a clock dependency.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::registry::is_date;

/// Converts days since 1970-01-01 to a proleptic Gregorian (year, month, day).
#[must_use]
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a cycle.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// Today's UTC date as `YYYY-MM-DD`.
#[must_use]
pub fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The `--date` option, validated, or today.
///
/// # Errors
/// [`Error::Usage`] for a malformed date.
pub fn resolve(option: Option<&str>) -> Result<String> {
    match option {
        Some(d) if is_date(d) => Ok(d.to_owned()),
        Some(d) => Err(Error::Usage(format!("--date {d:?} is not YYYY-MM-DD"))),
        None => Ok(today()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(10_957), (2000, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
