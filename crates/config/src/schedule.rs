//! `scrub_schedule`: when a scheduled scrub is due. The accepted forms, and [`Schedule::next_after`],
//! the pure function that says when the next run is.
//!
//! Forms (case-insensitive):
//! - `off` (the default): never.
//! - `daily`: every day at 01:00 local time.
//! - `weekly`: every Sunday at 01:00 local time.
//! - `monthly`: the first Sunday of each month at 01:00 local time (a weekend night, as
//!   Debian's mdadm cron job runs `checkarray`).
//! - A cron spec of five fields, `MINUTE HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK`, in local time,
//!   as crontab(5) reads it: `*`, numbers, ranges `a-b`, steps `*/n` and `a-b/n`, lists
//!   `a,b`; months `1-12` or `jan`-`dec`, days of the week `0-7` (0 and 7 are Sunday) or
//!   `sun`-`sat`. When both day fields are restricted (neither starts with `*`), a day matching
//!   either runs (`0 3 1 * mon`: the 1st and every Monday). Example: `30 2 * * 6` (Saturdays at
//!   02:30).
//! - `every DURATION`: a fixed interval of elapsed time, `N` followed by `s`, `m`, `h`, `d` or
//!   `w` (`every 6h`, `every 2w`, at least 1 s), counted from the Unix epoch in UTC, so it
//!   does not move with restarts or daylight saving time: `every 6h` runs at 00:00, 06:00,
//!   12:00 and 18:00 UTC, `every 1d` at 00:00 UTC.
//!
//! Local time is the system's time zone (the `TZ` variable, else `/etc/localtime`), with
//! daylight saving time as the time zone database says: a time skipped when the clocks go
//! forward runs right after the gap (02:30 becomes 03:30 on that night), a time that happens
//! twice when the clocks go back runs once, at its first occurrence.
//!
//! A run missed while the daemon was not running is not caught up (as cron, and md's
//! `checkarray` run by cron): after a start, the next run is the first one after the start.

use std::fmt;

use jiff::civil::{Date, DateTime};
use jiff::{Timestamp, ZonedDateTime};

/// When a scheduled scrub is due; see the module docs for the forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    Off,
    Daily,
    Weekly,
    Monthly,
    /// A cron spec (local time).
    Cron(Cron),
    /// A fixed interval, in seconds, counted from the Unix epoch.
    Every {
        secs: u64,
    },
}

/// A five-field cron spec, each field a set of values as bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    /// As written (shown back in messages and written back by `examine --scan`).
    text: String,
    minutes: u64,
    hours: u32,
    /// Bits 1..=31.
    days: u32,
    /// Bits 1..=12.
    months: u16,
    /// Bits 0..=6, Sunday = 0.
    weekdays: u8,
    /// How the two day fields combine.
    day_rule: DayRule,
}

/// crontab(5): when either day field starts with `*`, a day must match both; when both are
/// restricted, either. (`monthly` needs "both" with both restricted: days 1-7 and Sunday.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DayRule {
    Both,
    Either,
}

/// The latest a calendar schedule can be from now: a 29 February may be 8 years away.
const HORIZON_DAYS: u32 = 8 * 366 + 7;
/// The longest `every` interval: a year's worth of seconds (a longer one is a mistake).
const EVERY_SECS_MAX: u64 = 366 * 86_400;

impl Schedule {
    const NAMES: [(&'static str, Schedule); 4] = [
        ("off", Schedule::Off),
        ("daily", Schedule::Daily),
        ("weekly", Schedule::Weekly),
        ("monthly", Schedule::Monthly),
    ];

    const FORMS: &'static str = "use off, daily, weekly, monthly, a cron spec such as \
                                 \"30 2 * * 6\" (minute hour day-of-month month day-of-week, \
                                 local time) or \"every DURATION\" such as \"every 6h\"";

    pub fn parse(text: &str) -> Result<Schedule, String> {
        let trimmed = text.trim();
        if let Some((_, s)) = Self::NAMES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(trimmed))
        {
            return Ok(s.clone());
        }
        let lower = trimmed.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("every") {
            return parse_every(rest.trim())
                .map(|secs| Schedule::Every { secs })
                .map_err(|e| format!("{text:?} is not a schedule: {e}"));
        }
        if lower.split_whitespace().count() == 5 {
            return Cron::parse(&lower)
                .map(Schedule::Cron)
                .map_err(|e| format!("{text:?} is not a cron spec: {e}"));
        }
        Err(format!("{text:?} is not a schedule: {}", Self::FORMS))
    }

    /// The first run strictly after `after`, in `after`'s time zone; `None` for `off`.
    pub fn next_after(&self, after: &ZonedDateTime) -> Option<ZonedDateTime> {
        match self {
            Schedule::Off => None,
            Schedule::Every { secs } => {
                let secs = i64::try_from(*secs).ok()?;
                let next = (after.timestamp().as_second().div_euclid(secs) + 1) * secs;
                let at = Timestamp::from_second(next).ok()?;
                Some(at.to_zoned_datetime(after.time_zone().clone()))
            }
            Schedule::Daily => Cron::named("0 1 * * *", DayRule::Both).next_after(after),
            Schedule::Weekly => Cron::named("0 1 * * 0", DayRule::Both).next_after(after),
            Schedule::Monthly => Cron::named("0 1 1-7 * 0", DayRule::Both).next_after(after),
            Schedule::Cron(cron) => cron.next_after(after),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Schedule::Cron(cron) => f.write_str(&cron.text),
            Schedule::Every { secs } => {
                let (n, unit) = [(604_800, "w"), (86_400, "d"), (3_600, "h"), (60, "m")]
                    .into_iter()
                    .find(|(unit, _)| secs % unit == 0)
                    .map_or((*secs, "s"), |(unit, name)| (secs / unit, name));
                write!(f, "every {n}{unit}")
            }
            named => {
                let name = Self::NAMES.iter().find(|(_, s)| s == named).map(|(n, _)| n);
                f.write_str(name.expect("every other form has a name"))
            }
        }
    }
}

/// `6h` → 21600.
fn parse_every(text: &str) -> Result<u64, String> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let unit_secs = match unit.trim() {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err("write the interval as a number and s, m, h, d or w (\"every 6h\")".into())
        }
    };
    let n: u64 = number
        .parse()
        .map_err(|_| "the interval needs a number (\"every 6h\")".to_string())?;
    let secs = n.saturating_mul(unit_secs);
    if secs == 0 {
        return Err("the interval must be at least 1 s".into());
    }
    if secs > EVERY_SECS_MAX {
        return Err("the interval is longer than a year; use a cron spec".into());
    }
    Ok(secs)
}

impl Cron {
    fn named(text: &str, day_rule: DayRule) -> Cron {
        let mut cron = Cron::parse(text).expect("the named schedules parse");
        cron.day_rule = day_rule;
        cron
    }

    fn parse(text: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(
                "a cron spec has five fields: minute hour day-of-month month day-of-week".into(),
            );
        };
        const MONTHS: [&str; 12] = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        let minutes = field(minute, "minute", 0, 59, &[], 0)?;
        let hours = field(hour, "hour", 0, 23, &[], 0)?;
        let days = field(day, "day of month", 1, 31, &[], 0)?;
        let months = field(month, "month", 1, 12, &MONTHS, 1)?;
        let mut weekdays = field(weekday, "day of week", 0, 7, &DAYS, 0)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & 0x7f; // 7 is Sunday too
        }
        let restricted = |f: &str| !f.starts_with('*');
        let cron = Cron {
            text: fields.join(" "),
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            day_rule: match restricted(day) && restricted(weekday) {
                true => DayRule::Either,
                false => DayRule::Both,
            },
        };
        // A day of the month no month in the set has (`0 0 31 2 *`) would never run.
        let weekdays_any = !restricted(weekday);
        if restricted(day) && (weekdays_any || cron.day_rule == DayRule::Both) {
            let longest = |m: u32| Date::new(2024, m as i8, 1).map_or(0, |d| d.days_in_month());
            let possible = (1..=12u32)
                .filter(|m| cron.months & (1 << m) != 0)
                .any(|m| (1..=longest(m) as u32).any(|d| cron.days & (1 << d) != 0));
            if !possible {
                return Err(
                    "no month in the spec has that day of the month: it would never run".into(),
                );
            }
        }
        Ok(cron)
    }

    fn day_matches(&self, date: Date) -> bool {
        let bit = |set: u64, v: i64| set & (1 << v) != 0;
        if !bit(u64::from(self.months), i64::from(date.month())) {
            return false;
        }
        let day = bit(u64::from(self.days), i64::from(date.day()));
        let weekday = bit(
            u64::from(self.weekdays),
            i64::from(date.weekday().to_sunday_zero_offset()),
        );
        match self.day_rule {
            DayRule::Both => day && weekday,
            DayRule::Either => day || weekday,
        }
    }

    /// The earliest run after `after` on the first matching day that has one. Each candidate's
    /// local time becomes an instant with the time zone's "compatible" rule (a time in a gap
    /// moves past it, a time in a fold is its first occurrence), and only instants after
    /// `after` count: a fold's second pass does not run the job again.
    fn next_after(&self, after: &ZonedDateTime) -> Option<ZonedDateTime> {
        let tz = after.time_zone();
        // From the day before: a gap's candidate can move past midnight.
        let mut date = after.date().yesterday().ok()?;
        for _ in 0..HORIZON_DAYS {
            if self.day_matches(date) {
                let best = (0..24)
                    .filter(|h| self.hours & (1 << h) != 0)
                    .flat_map(|h| (0..60).map(move |m| (h, m)))
                    .filter(|(_, m)| self.minutes & (1 << m) != 0)
                    .filter_map(|(h, m)| {
                        tz.to_zoned_datetime(DateTime::from_parts(
                            date,
                            jiff::civil::time(h, m, 0, 0),
                        ))
                        .ok()
                    })
                    .filter(|z| z.timestamp() > after.timestamp())
                    .min_by_key(|z| z.timestamp());
                if best.is_some() {
                    return best;
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }
}

/// One cron field as a bit set of the values it names, each within `lo..=hi`.
fn field(
    text: &str,
    what: &str,
    lo: u32,
    hi: u32,
    names: &[&str],
    first_name: u32,
) -> Result<u64, String> {
    let value = |v: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| *n == v) {
            return Ok(i as u32 + first_name);
        }
        let n: u32 = v
            .parse()
            .map_err(|_| format!("{what} {v:?} is not a number"))?;
        if !(lo..=hi).contains(&n) {
            return Err(format!("{what} {n} is outside {lo}-{hi}"));
        }
        Ok(n)
    };
    let mut bits = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 =
                    step.parse().ok().filter(|s| *s >= 1).ok_or_else(|| {
                        format!("{what} step {step:?} is not a number of at least 1")
                    })?;
                (range, step)
            }
            None => (item, 1),
        };
        let (from, to) = match range {
            "*" => (lo, hi),
            _ => match range.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None if step > 1 => {
                    return Err(format!("{what} {item:?}: a step needs a range or *"))
                }
                None => (value(range)?, value(range)?),
            },
        };
        if from > to {
            return Err(format!("{what} range {range:?} runs backwards"));
        }
        for v in (from..=to).step_by(step as usize) {
            bits |= 1 << v;
        }
    }
    Ok(bits)
}

serde_as_text!(Schedule);

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;
    use jiff::tz::TimeZone;

    /// Central European time with its daylight saving rules, without the system's database.
    fn berlin() -> TimeZone {
        TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").unwrap()
    }

    fn at(tz: &TimeZone, y: i16, mo: i8, d: i8, h: i8, mi: i8) -> ZonedDateTime {
        tz.to_zoned_datetime(date(y, mo, d).at(h, mi, 0, 0))
            .unwrap()
    }

    fn next(s: &str, after: &ZonedDateTime) -> String {
        let z = Schedule::parse(s).unwrap().next_after(after).unwrap();
        z.strftime("%Y-%m-%d %H:%M %:z").to_string()
    }

    #[test]
    fn named_schedules_run_at_one_in_the_night() {
        let utc = TimeZone::UTC;
        let fri = at(&utc, 2026, 11, 27, 8, 0);
        assert_eq!(next("daily", &fri), "2026-11-28 01:00 +00:00");
        assert_eq!(next("weekly", &fri), "2026-11-29 01:00 +00:00");
        // The first Sunday of December 2026 is the 6th.
        assert_eq!(next("monthly", &fri), "2026-12-06 01:00 +00:00");
        // Exactly at a run: the next one, not the same.
        let run = at(&utc, 2026, 12, 6, 1, 0);
        assert_eq!(next("monthly", &run), "2027-01-03 01:00 +00:00");
        assert_eq!(next("daily", &run), "2026-12-07 01:00 +00:00");
        assert_eq!(Schedule::parse("off").unwrap().next_after(&run), None);
    }

    #[test]
    fn cron_fields_read_as_crontab_reads_them() {
        let utc = TimeZone::UTC;
        let t = at(&utc, 2026, 11, 27, 8, 0); // a Friday
        assert_eq!(next("30 2 * * 6", &t), "2026-11-28 02:30 +00:00");
        assert_eq!(next("30 2 * * sat", &t), "2026-11-28 02:30 +00:00");
        assert_eq!(next("* * * * *", &t), "2026-11-27 08:01 +00:00");
        assert_eq!(next("*/15 9-17 * * mon-fri", &t), "2026-11-27 09:00 +00:00");
        assert_eq!(next("0 0 * * 7", &t), "2026-11-29 00:00 +00:00"); // 7 is Sunday
        assert_eq!(next("0 12 1,15 * *", &t), "2026-12-01 12:00 +00:00");
        assert_eq!(next("0 0 1 jan *", &t), "2027-01-01 00:00 +00:00");
        assert_eq!(next("0 6-18/6 * * *", &t), "2026-11-27 12:00 +00:00");
        // Both day fields restricted: either matches (the 1st, or any Monday).
        assert_eq!(next("0 3 1 * mon", &t), "2026-11-30 03:00 +00:00");
        // A day field starting with `*`: both must match (odd days that are Sundays).
        assert_eq!(next("0 3 */2 * sun", &t), "2026-11-29 03:00 +00:00");
        assert_eq!(next("0 3 */2 * mon", &t), "2026-12-07 03:00 +00:00");
    }

    #[test]
    fn month_ends_and_leap_days() {
        let utc = TimeZone::UTC;
        // The 31st skips the months without one.
        let t = at(&utc, 2026, 1, 31, 12, 0);
        assert_eq!(next("0 1 31 * *", &t), "2026-03-31 01:00 +00:00");
        // The 30th skips February.
        let t = at(&utc, 2027, 1, 30, 12, 0);
        assert_eq!(next("0 1 30 * *", &t), "2027-03-30 01:00 +00:00");
        // The 29th of February: the next leap year, and 2100 is not one.
        let t = at(&utc, 2026, 3, 1, 0, 0);
        assert_eq!(next("0 0 29 2 *", &t), "2028-02-29 00:00 +00:00");
        let t = at(&utc, 2096, 3, 1, 0, 0);
        assert_eq!(next("0 0 29 2 *", &t), "2104-02-29 00:00 +00:00");
        // Over the year's end, and monthly on a month whose 1st is a Sunday.
        let t = at(&utc, 2026, 12, 31, 23, 59);
        assert_eq!(next("daily", &t), "2027-01-01 01:00 +00:00");
        let t = at(&utc, 2027, 7, 30, 0, 0);
        assert_eq!(next("monthly", &t), "2027-08-01 01:00 +00:00");
    }

    #[test]
    fn daylight_saving_time_changes() {
        let tz = berlin();
        // 29 March 2026: 02:00 CET jumps to 03:00 CEST. 02:30 does not exist: it runs right
        // after the gap, once.
        let before = at(&tz, 2026, 3, 29, 0, 0);
        assert_eq!(next("30 2 * * *", &before), "2026-03-29 03:30 +02:00");
        let ran = Schedule::parse("30 2 * * *")
            .unwrap()
            .next_after(&before)
            .unwrap();
        assert_eq!(next("30 2 * * *", &ran), "2026-03-30 02:30 +02:00");
        // 01:00 is before the gap: unchanged, in CET.
        assert_eq!(next("daily", &before), "2026-03-29 01:00 +01:00");
        // 25 October 2026: 03:00 CEST goes back to 02:00 CET. 02:30 happens twice: it runs
        // at the first, and the second pass does not run it again.
        let before = at(&tz, 2026, 10, 25, 0, 0);
        let first = Schedule::parse("30 2 * * *")
            .unwrap()
            .next_after(&before)
            .unwrap();
        assert_eq!(first.strftime("%H:%M %:z").to_string(), "02:30 +02:00");
        assert_eq!(next("30 2 * * *", &first), "2026-10-26 02:30 +01:00");
        let second_pass = first
            .checked_add(jiff::SignedDuration::from_mins(50))
            .unwrap();
        assert_eq!(
            second_pass.strftime("%H:%M %:z").to_string(),
            "02:20 +01:00"
        );
        assert_eq!(next("30 2 * * *", &second_pass), "2026-10-26 02:30 +01:00");
        // A daily run at 01:00 keeps its local time across the change (23 or 25 hours apart).
        let d = at(&tz, 2026, 10, 24, 1, 0);
        assert_eq!(next("daily", &d), "2026-10-25 01:00 +02:00");
        assert_eq!(
            next("daily", &at(&tz, 2026, 10, 25, 1, 0)),
            "2026-10-26 01:00 +01:00"
        );
    }

    #[test]
    fn every_counts_from_the_epoch_whatever_the_time_zone() {
        let tz = berlin();
        let t = at(&tz, 2026, 11, 27, 8, 10); // 07:10 UTC
        assert_eq!(next("every 6h", &t), "2026-11-27 13:00 +01:00"); // 12:00 UTC
        assert_eq!(next("every 1d", &t), "2026-11-28 01:00 +01:00"); // 00:00 UTC
        assert_eq!(next("every 30m", &t), "2026-11-27 08:30 +01:00");
        let s = Schedule::parse("every 5s").unwrap();
        let n = s.next_after(&t).unwrap();
        assert_eq!(n.timestamp().as_second() % 5, 0);
        assert!(n.timestamp() > t.timestamp());
        assert!(n.timestamp().as_second() - t.timestamp().as_second() <= 5);
        // Across a DST change the interval is of elapsed time: 6 h after 00:00 UTC is 06:00 UTC.
        let night = at(&tz, 2026, 3, 29, 1, 30); // 00:30 UTC
        assert_eq!(next("every 6h", &night), "2026-03-29 08:00 +02:00");
    }

    #[test]
    fn forms_parse_and_print_back() {
        for (text, shown) in [
            ("Monthly", "monthly"),
            ("off", "off"),
            ("every 6h", "every 6h"),
            ("EVERY 90s", "every 90s"),
            ("every 120m", "every 2h"),
            ("every 14d", "every 2w"),
            ("30  2 * *  SAT", "30 2 * * sat"),
            ("*/5 * * * *", "*/5 * * * *"),
        ] {
            let s = Schedule::parse(text).unwrap();
            assert_eq!(s.to_string(), shown, "{text}");
            assert_eq!(Schedule::parse(shown).unwrap(), s, "{shown}");
        }
    }

    #[test]
    fn bad_schedules_say_what_is_wrong() {
        for (text, needle) in [
            ("hourly", "off, daily, weekly, monthly, a cron spec"),
            ("every", "number and s, m, h, d or w"),
            ("every 6", "number and s, m, h, d or w"),
            ("every h", "needs a number"),
            ("every 0s", "at least 1 s"),
            ("every 400d", "longer than a year"),
            ("60 * * * *", "minute 60 is outside 0-59"),
            ("* 24 * * *", "hour 24 is outside 0-23"),
            ("* * 0 * *", "day of month 0 is outside 1-31"),
            ("* * * 13 *", "month 13 is outside 1-12"),
            ("* * * * 8", "day of week 8 is outside 0-7"),
            ("* * * foo *", "month \"foo\" is not a number"),
            ("5-1 * * * *", "runs backwards"),
            ("*/0 * * * *", "step \"0\""),
            ("5/2 * * * *", "a step needs a range"),
            ("0 0 31 2 *", "never run"),
            ("0 0 30 feb,apr *", ""),
            ("1 2 3 4", "off, daily"),
        ] {
            let got = Schedule::parse(text);
            match needle {
                "" => assert!(got.is_ok(), "{text}: {got:?}"),
                _ => {
                    let e = got.unwrap_err();
                    assert!(e.contains(needle), "{text}: {e}");
                }
            }
        }
    }
}
