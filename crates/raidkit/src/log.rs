//! The daemon's log lines on stderr: for people, `raidkit: LINE` as every command prints; with
//! `--log-format json` (`[daemon] log_format = "json"`), one JSON object per line for a log
//! collector: `{"time", "level", "array", "event", "message"}`.
//!
//! Callers write the line as they would for a person; its fields are read from the daemon's
//! conventions, in this order: an optional topic (`reload: `, `SIGHUP: `, `admin: `: the event
//! when no alert names one), an optional level word (`error: `, `warning: `, or the alerter's
//! `ALERT: `, `event: `), an optional `array "NAME": ` (a line beginning `array "NAME" ...`
//! names it too, the sentence kept whole) — or the alerter's `EVENT on array "NAME"` —, then
//! the message. What is not recognised stays in the message:
//! nothing is ever lost, at worst a field is null.

use std::sync::OnceLock;
use std::time::SystemTime;

use serde::Serialize;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

static FORMAT: OnceLock<Format> = OnceLock::new();

/// Sets the format for the rest of the process (the first call wins).
pub fn set_format(format: Format) {
    let _ = FORMAT.set(format);
}

/// Writes one log line (see the module documentation).
pub fn emit(line: &str) {
    match FORMAT.get().copied().unwrap_or(Format::Text) {
        Format::Text => eprintln!("raidkit: {line}"),
        Format::Json => eprintln!("{}", json(line, SystemTime::now())),
    }
}

/// Sends the warnings and errors of the libraries that log through the `log` crate (the NBD
/// server's refused connections: a failed TLS handshake, a plaintext client where TLS is
/// required, too many connections) to [`emit`]; quieter records are dropped.
pub fn forward_library_warnings() {
    static FORWARD: Forward = Forward;
    if log::set_logger(&FORWARD).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

/// Says once, at start, when io_uring is unavailable here (`member::uring::probe`): members
/// opened with `--member-io auto` (`member_io = "auto"`, the default) then use positional calls
/// on threads; `uring` is refused when a member is opened, naming the reason.
pub fn note_member_io() {
    if let Err(why) = member::uring::probe() {
        emit(&format!(
            "warning: io_uring is unavailable here ({why}): file and block-device members are \
             read and written with positional calls on threads (--member-io auto)"
        ));
    }
}

struct Forward;

impl log::Log for Forward {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            let level = match record.level() {
                log::Level::Error => "error",
                _ => "warning",
            };
            emit(&format!("{level}: {}", record.args()));
        }
    }

    fn flush(&self) {}
}

/// The fields of one line.
#[derive(Debug, PartialEq, Eq, Serialize)]
struct Fields<'a> {
    level: &'static str,
    array: Option<&'a str>,
    event: Option<&'a str>,
    message: &'a str,
}

const TOPICS: [(&str, &str); 3] = [
    ("reload: ", "reload"),
    ("SIGHUP: ", "reload"),
    ("admin: ", "admin"),
];

/// The level words and the level each stands for (`ALERT` and `event` are the alerter's).
const LEVELS: [(&str, &str); 4] = [
    ("error: ", "error"),
    ("warning: ", "warning"),
    ("ALERT: ", "critical"),
    ("event: ", "info"),
];

/// Strips a level word off `rest`, if it starts with one.
fn level_of(rest: &mut &str) -> Option<&'static str> {
    let (prefix, level) = LEVELS.iter().find(|(p, _)| rest.starts_with(p))?;
    *rest = &rest[prefix.len()..];
    Some(level)
}

fn fields(line: &str) -> Fields<'_> {
    let mut rest = line;
    let mut event = None;
    if let Some((prefix, topic)) = TOPICS.iter().find(|(p, _)| rest.starts_with(p)) {
        rest = &rest[prefix.len()..];
        event = Some(*topic);
    }
    let mut level = level_of(&mut rest);
    let mut array = None;
    if let Some((name, after)) = quoted_array(rest) {
        array = Some(name);
        // `array "NAME": message`; in `array "NAME" did ...` the name is part of the sentence.
        if let Some(message) = after.strip_prefix(": ") {
            rest = message;
            level = level.or_else(|| level_of(&mut rest));
        }
    } else if let Some((named, after)) = rest.split_once(" on array \"") {
        // The alerter's summary: `EVENT on array "NAME"[, member M]: message`.
        if let (false, Some(end)) = (named.contains(' '), after.find('"')) {
            event = Some(named);
            array = Some(&after[..end]);
        }
    }
    Fields {
        level: level.unwrap_or("info"),
        array,
        event,
        message: rest,
    }
}

/// `array "NAME"...` at the start of `text`: the name and what follows its closing quote.
fn quoted_array(text: &str) -> Option<(&str, &str)> {
    let named = text.strip_prefix("array \"")?;
    let end = named.find('"')?;
    Some((&named[..end], &named[end + 1..]))
}

fn json(line: &str, at: SystemTime) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        time: String,
        #[serde(flatten)]
        fields: Fields<'a>,
    }
    let line = Line {
        time: humantime::format_rfc3339_millis(at).to_string(),
        fields: fields(line),
    };
    serde_json::to_string(&line).expect("a log line encodes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f<'a>(
        level: &'static str,
        array: Option<&'a str>,
        event: Option<&'a str>,
        message: &'a str,
    ) -> Fields<'a> {
        Fields {
            level,
            array,
            event,
            message,
        }
    }

    #[test]
    fn reads_the_fields_of_the_daemons_lines() {
        let cases = [
            (
                "array \"home\": warning: spare x left out",
                f("warning", Some("home"), None, "spare x left out"),
            ),
            (
                "error: array \"home\" did not close cleanly: flush failed",
                f(
                    "error",
                    Some("home"),
                    None,
                    "array \"home\" did not close cleanly: flush failed",
                ),
            ),
            (
                "ALERT: Fail on array \"home\", member /dev/sdb: marked faulty",
                f(
                    "critical",
                    Some("home"),
                    Some("Fail"),
                    "Fail on array \"home\", member /dev/sdb: marked faulty",
                ),
            ),
            (
                "event: NewArray on array \"media\": 3 members",
                f(
                    "info",
                    Some("media"),
                    Some("NewArray"),
                    "NewArray on array \"media\": 3 members",
                ),
            ),
            (
                "reload: warning: array \"home\": restart needed: cache_size changed",
                f(
                    "warning",
                    Some("home"),
                    Some("reload"),
                    "restart needed: cache_size changed",
                ),
            ),
            (
                "reload: /etc/raidkit.toml:3: key `x`: unknown",
                f(
                    "info",
                    None,
                    Some("reload"),
                    "/etc/raidkit.toml:3: key `x`: unknown",
                ),
            ),
            (
                "admin API on /run/raidkit/admin.sock",
                f("info", None, None, "admin API on /run/raidkit/admin.sock"),
            ),
            (
                "warning: SparesMissing on array \"b\": 0 spare(s) present",
                f(
                    "warning",
                    Some("b"),
                    Some("SparesMissing"),
                    "SparesMissing on array \"b\": 0 spare(s) present",
                ),
            ),
            (
                "warning: no alert target is configured",
                f("warning", None, None, "no alert target is configured"),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(fields(line), want, "{line}");
        }
    }

    #[test]
    fn a_json_line_is_one_object_with_every_field() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        let line = json("array \"a\": resync finished", at);
        assert!(!line.contains('\n'));
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "time": "2023-11-14T22:13:20.123Z",
                "level": "info",
                "array": "a",
                "event": null,
                "message": "resync finished",
            })
        );
    }
}
