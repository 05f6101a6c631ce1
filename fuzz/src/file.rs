//! The configuration file through `config::Config::parse`, as `raidkit daemon` and
//! `--check-config` read it. The input is the file's bytes (not UTF-8: nothing to parse, as the
//! daemon refuses to read it). A file that parses must compare equal to itself key by key
//! (a reload of the same file changes nothing), and its schedules and windows must answer for
//! any time; every problem of one that does not must print.

use std::path::Path;

use jiff::tz::TimeZone;
use jiff::Timestamp;

/// Instants the schedules are asked about: the epoch, a leap day, the end of a year, far ahead.
const INSTANTS: [i64; 4] = [0, 1_709_164_800, 1_767_225_599, 4_102_444_800];

pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let origin = Path::new("/etc/raidkit/raidkit.toml");
    match config::Config::parse(text, origin) {
        Ok(c) => {
            assert!(c.daemon.changed_keys(&c.daemon).is_empty());
            assert!(c.alerts.changed_keys(&c.alerts).is_empty());
            for array in &c.arrays {
                assert!(array.changed_keys(array).is_empty(), "{array:?}");
                let _ = array.export_name();
                for secs in INSTANTS {
                    let at = Timestamp::from_second(secs)
                        .expect("a valid instant")
                        .to_zoned_datetime(TimeZone::UTC);
                    if let Some(schedule) = &array.scrub_schedule {
                        if let Some(next) = schedule.get_ref().next_after(&at) {
                            assert!(next > at, "{schedule:?}: {next} is not after {at}");
                        }
                    }
                    if let Some(window) = &array.background_window {
                        let _ = window.get_ref().contains_time(&at);
                    }
                }
            }
        }
        Err(problems) => {
            assert!(!problems.list.is_empty(), "a refused file names a problem");
            let _ = problems.to_string();
        }
    }
}
