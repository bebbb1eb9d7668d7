//! Calendar dates of the registry (`Last-Update`, `--date`), read and
//! written by jiff: `2026-02-31` is rejected, not just a malformed shape.

use jiff::civil::Date;

use crate::error::Result;

/// The one spelling of a date the registry and `--date` use.
const FORMAT: &str = "%Y-%m-%d";

/// Parses a `YYYY-MM-DD` calendar date: exactly that spelling (no ISO 8601
/// variants such as `20261130`, `2026-1-01` or a time part) and a day that
/// exists.
///
/// # Errors
/// A message saying what is wrong with `text`.
pub fn parse(text: &str) -> Result<Date, String> {
    let shape = || format!("{text:?} is not YYYY-MM-DD");
    let fields = jiff::fmt::strtime::parse(FORMAT, text).map_err(|_| shape())?;
    let date = fields
        .to_date()
        .map_err(|e| format!("{text:?} is not a calendar date: {e}"))?;
    // strptime also reads unpadded fields and signed years; the registry
    // keeps the one canonical spelling.
    if date.strftime(FORMAT).to_string() != text {
        return Err(shape());
    }
    Ok(date)
}

/// Whether `text` is a valid `YYYY-MM-DD` date.
#[must_use]
pub fn is_date(text: &str) -> bool {
    parse(text).is_ok()
}

/// `date` as `YYYY-MM-DD`.
#[must_use]
pub fn format(date: Date) -> String {
    date.strftime(FORMAT).to_string()
}

/// Today's UTC date as `YYYY-MM-DD`.
#[must_use]
pub fn today() -> String {
    format(
        jiff::Timestamp::now()
            .to_zoned_datetime(jiff::tz::TimeZone::UTC)
            .date(),
    )
}

/// The `--date` option (clap has parsed it with [`parse`]) as `YYYY-MM-DD`,
/// or today.
#[must_use]
pub fn or_today(option: Option<Date>) -> String {
    option.map_or_else(today, format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_dates_pass() {
        for good in ["2026-11-30", "2024-02-29", "2000-02-29", "1999-12-31"] {
            assert!(is_date(good), "{good}");
        }
    }

    #[test]
    fn impossible_and_malformed_dates_fail() {
        for bad in [
            "2026-02-31",
            "2026-02-29",
            "1900-02-29",
            "2026-04-31",
            "2026-13-01",
            "2026-11-00",
            "2026-1-01",
            "20261130",
            "2026-11-30T00:00",
            "+02026-11-30",
            "",
        ] {
            assert!(!is_date(bad), "{bad}");
        }
    }

    #[test]
    fn today_is_a_date() {
        assert!(is_date(&today()), "{}", today());
    }

    #[test]
    fn a_given_date_is_written_as_it_was_given() {
        assert_eq!(or_today(Some(parse("2026-02-28").unwrap())), "2026-02-28");
        assert_eq!(or_today(None), today());
    }
}
