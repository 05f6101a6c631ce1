//! The configuration file as an operator meets it: what parses, and every mistake named with
//! its file, line and key.

use std::path::Path;

use config::{Config, Problems, Schedule, Size, TimeWindow};

fn parse(text: &str) -> Result<Config, Problems> {
    Config::parse(text, Path::new("raidkit.toml"))
}

/// The problems of a file that must not parse, as `(line, key, message)`.
fn problems(text: &str) -> Vec<(Option<usize>, Option<String>, String)> {
    let err = parse(text).expect_err("the file has a problem");
    err.list
        .into_iter()
        .map(|p| (p.line, p.key, p.message))
        .collect()
}

/// Asserts one problem on `line` about `key` whose message contains `needle`.
fn assert_problem(text: &str, line: usize, key: &str, needle: &str) {
    let found = problems(text);
    assert!(
        found
            .iter()
            .any(|(l, k, m)| *l == Some(line) && k.as_deref() == Some(key) && m.contains(needle)),
        "expected line {line}, key {key:?}, {needle:?} in {found:#?}"
    );
}

const ISSUE_EXAMPLE: &str = r#"
[daemon]
listen = ["127.0.0.1:10809"]          # TCP listeners
admin = "/run/raidkit/admin.sock"
metrics = "127.0.0.1:9469"
dashboard_token_file = "/etc/raidkit/dashboard.token"

[alerts]
program = "/usr/local/sbin/raid-alert"
mail_to = "root"
webhook = "http://127.0.0.1:8080/raid"

[[array]]
name = "home"
members = ["/dev/sdb", "/dev/sdc", "/dev/sdd", "nbd://backup-host/home"]
spares = ["/dev/sde"]
spare_group = "shelf1"
journal = "/dev/nvme0n1p3"
scrub_schedule = "monthly"
"#;

#[test]
fn the_documented_example_parses() {
    let config = parse(ISSUE_EXAMPLE).unwrap();
    assert_eq!(config.daemon.listen[0].get_ref(), "127.0.0.1:10809");
    assert_eq!(
        config.daemon.admin.unwrap().get_ref(),
        Path::new("/run/raidkit/admin.sock")
    );
    assert_eq!(config.alerts.mail_to.unwrap().get_ref(), "root");
    let home = &config.arrays[0];
    assert_eq!(home.name.get_ref(), "home");
    assert_eq!(home.export_name(), "home");
    assert_eq!(home.members.len(), 4);
    assert_eq!(home.members[3].get_ref(), "nbd://backup-host/home");
    assert_eq!(home.spares[0].get_ref(), "/dev/sde");
    assert_eq!(home.journal.as_ref().unwrap().get_ref(), "/dev/nvme0n1p3");
    assert_eq!(
        home.scrub_schedule.as_ref().unwrap().get_ref(),
        &Schedule::Monthly
    );
}

#[test]
fn tunables_read_as_serve_reads_them() {
    let config = parse(
        r#"
[[array]]
name = "media"
export = "films"
members = ["a.img", "b.img"]
cache_size = "256M"
read_ahead = "on"
read_ahead_window = 1048576
buffer_memory = "1G"
speed_min = "5M/s"
speed_max = "100M"
gather_wait_ms = 0
latency_target_us = 500
max_bandwidth = "200M/s"
max_iops = 5000
nice = 10
io_timeout_secs = 10
member_cache = "direct"
member_io = "threads"
reconnect = false
background_window = "19:00-05:00"
listen = ["127.0.0.1:10810"]
"#,
    )
    .unwrap();
    let a = &config.arrays[0];
    assert_eq!(a.export_name(), "films");
    assert_eq!(a.member_cache.as_ref().unwrap().get_ref(), "direct");
    assert_eq!(a.member_io.as_ref().unwrap().get_ref(), "threads");
    assert_eq!(a.cache_size.as_ref().unwrap().get_ref(), &Size(256 << 20));
    assert_eq!(
        a.read_ahead_window.as_ref().unwrap().get_ref(),
        &Size(1 << 20)
    );
    assert_eq!(a.speed_min.as_ref().unwrap().get_ref().0, 5 << 20);
    assert_eq!(a.reconnect, Some(false));
    assert_eq!(a.latency_target_us.as_ref().unwrap().get_ref(), &500);
    assert_eq!(a.max_bandwidth.as_ref().unwrap().get_ref().0, 200 << 20);
    assert_eq!(a.max_iops.as_ref().unwrap().get_ref(), &5000);
    assert_eq!(a.nice.as_ref().unwrap().get_ref(), &10);
    assert!(a.has_own_listener());
    assert_eq!(
        a.background_window.as_ref().unwrap().get_ref(),
        &TimeWindow {
            start_minute: 19 * 60,
            end_minute: 5 * 60
        }
    );
}

#[test]
fn an_unknown_key_is_named_with_its_line() {
    let text = "[[array]]\nname = \"a\"\nmembers = [\"x\"]\nspare = [\"y\"]\n";
    assert_problem(text, 4, "spare", "unknown field `spare`");
    assert_problem(
        "[daemon]\nlisten = []\nadmn = \"/x\"\n",
        3,
        "admn",
        "unknown field",
    );
    assert_problem(
        "[alert]\nprogram = \"/x\"\n",
        1,
        "alert",
        "unknown field `alert`",
    )
}

#[test]
fn a_wrong_type_is_named_with_its_line() {
    assert_problem(
        "[[array]]\nname = \"a\"\nmembers = \"/dev/sdb\"\n",
        3,
        "members",
        "invalid type",
    );
    assert_problem(
        "[[array]]\nname = \"a\"\nmembers = [\"x\"]\nread_only = \"yes\"\n",
        4,
        "read_only",
        "invalid type",
    );
    assert_problem(
        "[[array]]\nname = \"a\"\nmembers = [\"x\"]\ncache_size = \"64X\"\n",
        4,
        "cache_size",
        "is not a size",
    );
    assert_problem(
        "[[array]]\nname = \"a\"\nmembers = [\"x\"]\nio_timeout_secs = -1\n",
        4,
        "io_timeout_secs",
        "",
    );
}

#[test]
fn a_missing_member_list_is_refused() {
    let found = problems("[[array]]\nname = \"a\"\n");
    assert!(found[0].2.contains("missing field `members`"), "{found:?}");
    assert_problem(
        "[[array]]\nname = \"a\"\nmembers = []\n",
        2,
        "members",
        "names no member",
    );
}

#[test]
fn a_device_used_twice_is_refused_with_both_places() {
    let text = r#"[[array]]
name = "a"
members = ["/dev/sdb", "/dev/sdc", "/dev/sdb"]

[[array]]
name = "b"
members = ["/dev/sdd", "/dev/sdc"]
journal = "/dev/sdd"
"#;
    assert_problem(text, 3, "members", "also in array \"a\"'s members (line 3)");
    assert_problem(
        text,
        7,
        "members",
        "\"/dev/sdc\" is also in array \"a\"'s members",
    );
    assert_problem(
        text,
        8,
        "journal",
        "\"/dev/sdd\" is also in array \"b\"'s members (line 7)",
    );
    assert_eq!(problems(text).len(), 3);
}

#[test]
fn the_same_device_under_two_paths_is_one_device() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk0.img");
    std::fs::write(&disk, b"").unwrap();
    let link = dir.path().join("by-id-disk0");
    std::os::unix::fs::symlink(&disk, &link).unwrap();
    let text = format!(
        "[[array]]\nname = \"a\"\nmembers = [{:?}]\n\n[[array]]\nname = \"b\"\nmembers = [{:?}]\n",
        disk.display().to_string(),
        link.display().to_string()
    );
    assert_problem(
        &text,
        7,
        "members",
        "is also in array \"a\"'s members (line 3)",
    );
}

#[test]
fn names_and_exports_are_unique() {
    let text = r#"[[array]]
name = "a"
members = ["x"]

[[array]]
name = "a"
members = ["y"]

[[array]]
name = "c"
export = "a"
members = ["z"]
"#;
    assert_problem(
        text,
        6,
        "name",
        "array \"a\" is named twice (first at line 2)",
    );
    assert_problem(text, 11, "export", "export name \"a\" is used twice");
}

#[test]
fn values_out_of_range_are_refused() {
    let array = "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n";
    for (line, key, needle) in [
        ("buffer_memory = \"1M\"", "buffer_memory", "below 64M"),
        ("gather_wait_ms = 5000", "gather_wait_ms", "above 1000"),
        (
            "latency_target_us = 5",
            "latency_target_us",
            "must be from 10 to 10000000",
        ),
        (
            "latency_target_us = 20000000",
            "latency_target_us",
            "must be from 10 to 10000000",
        ),
        ("latency_target_us = \"2ms\"", "latency_target_us", ""),
        ("max_bandwidth = \"512K\"", "max_bandwidth", "at least 1M/s"),
        ("max_iops = 5", "max_iops", "at least 10"),
        ("nice = 20", "nice", "must be from -20 (most CPU) to 19"),
        ("nice = -21", "nice", "must be from -20 (most CPU) to 19"),
        ("nice = \"low\"", "nice", ""),
        (
            "io_timeout_secs = 0",
            "io_timeout_secs",
            "at least 1 second",
        ),
        ("read_ahead = \"sometimes\"", "read_ahead", "sometimes"),
        (
            "member_cache = \"cached\"",
            "member_cache",
            "give direct, buffered or auto",
        ),
        ("member_io = \"rings\"", "member_io", "give auto"),
        ("read_ahead_window = \"48M\"", "read_ahead_window", ""),
        (
            "background_window = \"7-5\"",
            "background_window",
            "HH:MM-HH:MM",
        ),
        (
            "scrub_schedule = \"hourly\"",
            "scrub_schedule",
            "off, daily, weekly, monthly, a cron spec",
        ),
        ("speed_max = 0", "speed_max", "at least 1 byte/s"),
        ("uuid = \"abc\"", "uuid", "is not a UUID"),
        ("listen = [\"localhost\"]", "listen", "not a HOST:PORT"),
    ] {
        assert_problem(&format!("{array}{line}\n"), 4, key, needle);
    }
    assert_problem(
        &format!("{array}speed_min = \"10M\"\nspeed_max = \"1M\"\n"),
        4,
        "speed_min",
        "above speed_max",
    );
    assert_problem(
        "[[array]]\nname = \"a b\"\nmembers = [\"x\"]\n",
        2,
        "name",
        "letters, digits",
    );
    assert_problem(
        "[[array]]\nname = \"a\"\nmembers = [\"mem:64M\"]\n",
        3,
        "members",
        "RAM member",
    );
    assert_problem(
        "[[array]]\nname = \"a\"\nmembers = [\"sim:hdd7200:1G\"]\n",
        3,
        "members",
        "RAM member",
    );
    assert_problem(
        "[alerts]\nwebhook = \"ftp://host/x\"\n",
        2,
        "alerts.webhook",
        "not an http:// URL",
    );
    assert_problem(
        "[alerts]\nmail_command = \"/usr/sbin/sendmail -t\"\n",
        2,
        "alerts.mail_command",
        "without alerts.mail_to",
    );
    assert_problem(
        "[daemon]\nlisten = [\"127.0.0.1\"]\n",
        2,
        "daemon.listen",
        "HOST:PORT",
    );
    let admin_tcp = [
        (
            "admin_listen = \"0.0.0.0:9470\"",
            "daemon.admin_listen",
            "speaks TLS only",
        ),
        (
            "admin_listen = \"0.0.0.0:9470\"",
            "daemon.admin_listen",
            "needs a token",
        ),
        (
            "admin_listen = \"9470\"",
            "daemon.admin_listen",
            "HOST:PORT",
        ),
        (
            "admin_tls_certificates = \"/etc/raidkit/tls\"",
            "daemon.admin_tls_certificates",
            "set daemon.admin_listen",
        ),
        (
            "admin_token_file = \"/etc/raidkit/admin.token\"",
            "daemon.admin_token_file",
            "set daemon.admin_listen",
        ),
        (
            "admin_tls_verify_peer = true",
            "daemon.admin_tls_verify_peer",
            "set daemon.admin_listen",
        ),
    ];
    for (line, key, needle) in admin_tcp {
        assert_problem(&format!("[daemon]\n{line}\n"), 2, key, needle);
    }
    let complete = "[daemon]\nadmin_listen = \"127.0.0.1:9470\"\nadmin_token_file = \"/t\"\n\
                    admin_tls_certificates = \"/c\"\nadmin_tls_verify_peer = true\n";
    let daemon = parse(complete)
        .expect("a complete TCP admin listener")
        .daemon;
    assert_eq!(daemon.admin_listen.unwrap().get_ref(), "127.0.0.1:9470");
    assert_eq!(
        daemon.admin_tls_verify_peer.map(|v| *v.get_ref()),
        Some(true)
    );
    assert_problem(
        "[daemon]\ndashboard_token_file = \"/etc/raidkit/dashboard.token\"\n",
        2,
        "daemon.dashboard_token_file",
        "set daemon.metrics too",
    );
    for (line, key, needle) in [
        (
            "handshake_timeout_secs = 0",
            "daemon.handshake_timeout_secs",
            "1 to 3600",
        ),
        ("max_connections = 0", "daemon.max_connections", "1 to 1024"),
        (
            "max_connections_per_client = 2000",
            "daemon.max_connections_per_client",
            "1 to 1024",
        ),
        (
            "max_requests_per_connection = 0",
            "daemon.max_requests_per_connection",
            "1 to 1024",
        ),
        (
            "max_option_size = \"4K\"",
            "daemon.max_option_size",
            "8K to 1M",
        ),
        (
            "reply_timeout_secs = 3601",
            "daemon.reply_timeout_secs",
            "at most 3600",
        ),
    ] {
        assert_problem(&format!("[daemon]\n{line}\n"), 2, key, needle);
    }
}

#[test]
fn two_listeners_on_one_address_are_refused() {
    let text = r#"[daemon]
listen = ["127.0.0.1:10809"]

[[array]]
name = "a"
members = ["x"]
listen = ["127.0.0.1:10809"]
"#;
    assert_problem(text, 7, "listen", "also listened on at line 2");
}

#[test]
fn every_problem_is_reported_at_once_with_file_line_and_key() {
    let text = r#"[[array]]
name = "a"
members = ["x", "x"]
buffer_memory = "1M"

[[array]]
name = "a"
members = ["y"]
"#;
    let err = parse(text).unwrap_err();
    assert_eq!(err.list.len(), 3, "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("raidkit.toml:3: key `members`: \"x\" is also in"),
        "{shown}"
    );
    assert!(
        shown.contains("raidkit.toml:4: key `buffer_memory`: is below 64M"),
        "{shown}"
    );
    assert!(
        shown.contains("raidkit.toml:7: key `name`: array \"a\" is named twice"),
        "{shown}"
    );
    assert_eq!(shown.lines().count(), 3);
}

#[test]
fn a_file_that_cannot_be_read_says_so() {
    let err = Config::load(Path::new("/nonexistent/raidkit.toml")).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.starts_with("/nonexistent/raidkit.toml: cannot read the configuration:"),
        "{shown}"
    );
}

#[test]
fn an_empty_file_is_a_daemon_with_no_arrays() {
    let config = parse("").unwrap();
    assert!(config.arrays.is_empty());
    assert!(config.daemon.listen.is_empty());
}

#[test]
fn the_mdstat_file_defaults_beside_the_admin_socket() {
    let admin = Path::new("/run/raidkit/admin.sock");
    let config = parse("[daemon]\nadmin = \"/srv/r/admin.sock\"\n").unwrap();
    assert_eq!(
        config.daemon.mdstat_path(admin),
        Path::new("/run/raidkit/mdstat")
    );
    let config = parse("[daemon]\nmdstat = \"/var/lib/node/md/mdstat\"\n").unwrap();
    assert_eq!(
        config.daemon.mdstat_path(admin),
        Path::new("/var/lib/node/md/mdstat")
    );
    assert_eq!(
        parse("")
            .unwrap()
            .daemon
            .mdstat_path(Path::new("/tmp/t/a.sock")),
        Path::new("/tmp/t/mdstat")
    );
}

#[test]
fn an_mdstat_path_must_name_a_file_of_its_own() {
    assert_problem(
        "[daemon]\nmdstat = \"/run/raidkit/\"\n",
        2,
        "daemon.mdstat",
        "names no file",
    );
    assert_problem(
        "[daemon]\nadmin = \"/run/r/a\"\nmdstat = \"/run/r/a\"\n",
        3,
        "daemon.mdstat",
        "is daemon.admin's socket too",
    );
    assert_problem(
        "[daemon]\nunix = \"/run/r/nbd\"\nmdstat = \"/run/r/nbd\"\n",
        3,
        "daemon.mdstat",
        "is daemon.unix's socket too",
    );
    assert_problem(
        "[daemon]\nmdstat = 3\n",
        2,
        "mdstat",
        "expected path string",
    );
}

/// Found by the `config` fuzz target (docs/FUZZING.md): an hour of four digits in a time
/// window (`"22:30-1522:00"`) overflowed `u16` while its minutes were counted, before the
/// hour was checked, so `--check-config`, the daemon's start and a reload panicked instead of
/// naming the key.
#[test]
fn a_window_hour_too_large_to_count_in_minutes_is_refused_not_an_overflow() {
    let array = "[[array]]\nname = \"a\"\nmembers = [\"x\"]\n";
    for window in ["22:30-1522:00", "1093:00-05:00", "65535:65535-01:00"] {
        assert_problem(
            &format!("{array}background_window = \"{window}\"\n"),
            4,
            "background_window",
            "HH:MM-HH:MM",
        );
    }
}
