//! The value types of the file that are not plain TOML: sizes, rates and time windows (the
//! scrub schedule is in `schedule`). Each parses from the text an operator writes (`"64M"`,
//! `"200M/s"`, `"19:00-05:00"`) and writes itself back the same way.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A byte count: an integer, or a string with a K/M/G/T suffix (powers of 1024), as the
/// command line takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

/// Bytes per second: a [`Size`], optionally written with a `/s` suffix; at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate(pub u64);

impl Size {
    fn parse(text: &str) -> Result<Self, String> {
        member::parse_size(text)
            .map(Size)
            .map_err(|e| format!("{text:?} is not a size: {e}"))
    }
}

impl Rate {
    fn parse(text: &str) -> Result<Self, String> {
        let size = text.strip_suffix("/s").unwrap_or(text);
        let bytes = member::parse_size(size).map_err(|e| format!("{text:?} is not a rate: {e}"))?;
        if bytes == 0 {
            return Err(format!("{text:?}: a rate must be at least 1 byte/s"));
        }
        Ok(Rate(bytes))
    }
}

/// Accepts a non-negative integer or a string and hands the text to `parse`.
struct NumberOrText<F>(&'static str, F);

impl<'de, T, F: Fn(&str) -> Result<T, String>> Visitor<'de> for NumberOrText<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        if v < 0 {
            return Err(E::custom(format!("{v} is negative; expected {}", self.0)));
        }
        (self.1)(&v.to_string()).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        (self.1)(&v.to_string()).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.1)(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrText("a size such as 65536 or \"64M\"", Size::parse))
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrText(
            "a rate such as \"200M\" or \"200M/s\"",
            Rate::parse,
        ))
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&size_text(self.0))
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&size_text(self.0))
    }
}

impl Size {
    /// 67108864 → "64M"; a count that is no whole number of KiB stays a number.
    pub fn text(self) -> String {
        size_text(self.0)
    }
}

fn size_text(bytes: u64) -> String {
    for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A daily window of local time, `"HH:MM-HH:MM"` (the system's time zone, as the scrub
/// schedule), in which scrubs and resyncs run; outside it they pause, keeping their position,
/// and resume when it opens. It may wrap past midnight (`"19:00-05:00"`); the start is inside,
/// the end is not. Rebuilds and replaces are not paused (they restore redundancy). Minutes
/// after midnight; a day with a daylight saving change has the window by its clock times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindow {
    pub start_minute: u16,
    pub end_minute: u16,
}

impl TimeWindow {
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not a time window: write it as \"HH:MM-HH:MM\"");
        let (start, end) = text.split_once('-').ok_or_else(bad)?;
        let minute = |t: &str| -> Option<u16> {
            let (h, m) = t.trim().split_once(':')?;
            let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60 && t.trim().len() == 5).then(|| h * 60 + m)
        };
        let window = TimeWindow {
            start_minute: minute(start).ok_or_else(bad)?,
            end_minute: minute(end).ok_or_else(bad)?,
        };
        if window.start_minute == window.end_minute {
            return Err(format!(
                "{text:?}: the window is empty (start and end are equal)"
            ));
        }
        Ok(window)
    }

    /// True when the local time `at` is inside the window.
    pub fn contains_time(&self, at: &jiff::ZonedDateTime) -> bool {
        self.contains((at.hour() as u16) * 60 + at.minute() as u16)
    }

    /// True when `minute` (after local midnight) is inside the window.
    pub fn contains(&self, minute: u16) -> bool {
        if self.start_minute < self.end_minute {
            (self.start_minute..self.end_minute).contains(&minute)
        } else {
            minute >= self.start_minute || minute < self.end_minute
        }
    }
}

impl fmt::Display for TimeWindow {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let (s, e) = (self.start_minute, self.end_minute);
        write!(f, "{:02}:{:02}-{:02}:{:02}", s / 60, s % 60, e / 60, e % 60)
    }
}

serde_as_text!(TimeWindow);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rates_read_as_the_command_line_reads_them() {
        assert_eq!(Size::parse("64M"), Ok(Size(64 << 20)));
        assert_eq!(Size::parse("4096"), Ok(Size(4096)));
        assert!(Size::parse("64X").is_err());
        assert_eq!(Rate::parse("200M/s"), Ok(Rate(200 << 20)));
        assert_eq!(Rate::parse("1K"), Ok(Rate(1024)));
        assert!(Rate::parse("0").unwrap_err().contains("at least 1"));
        assert_eq!(size_text(64 << 20), "64M");
        assert_eq!(size_text(1536), "1536");
        assert_eq!(size_text(3 << 30), "3G");
    }

    #[test]
    fn windows_may_wrap_past_midnight() {
        let night = TimeWindow::parse("19:00-05:00").unwrap();
        assert!(night.contains(19 * 60) && night.contains(23 * 60 + 59) && night.contains(0));
        assert!(night.contains(4 * 60 + 59) && !night.contains(5 * 60) && !night.contains(12 * 60));
        let day = TimeWindow::parse("09:30-17:00").unwrap();
        assert!(day.contains(9 * 60 + 30) && !day.contains(17 * 60) && !day.contains(60));
        assert_eq!(night.to_string(), "19:00-05:00");
        let utc = jiff::tz::TimeZone::UTC;
        let at = |h, m| utc.to_zoned_datetime(jiff::civil::date(2026, 11, 27).at(h, m, 59, 0));
        assert!(
            night.contains_time(&at(4, 59).unwrap()) && !night.contains_time(&at(5, 0).unwrap())
        );
        assert!(
            night.contains_time(&at(19, 0).unwrap()) && !night.contains_time(&at(18, 59).unwrap())
        );
        for bad in [
            "19-05",
            "25:00-01:00",
            "10:00-10:00",
            "9:00-10:00",
            "10:60-11:00",
            "",
        ] {
            assert!(TimeWindow::parse(bad).is_err(), "{bad:?}");
        }
    }
}
