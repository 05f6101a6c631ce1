//! The `raidkit` binary: create then examine (text and JSON), refusals exit non-zero with a
//! message naming the member, and help texts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn raidkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_raidkit"))
        .args(args)
        .output()
        .expect("run raidkit")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn paths(dir: &Path, prefix: &str, count: usize) -> Vec<PathBuf> {
    (0..count)
        .map(|i| dir.join(format!("{prefix}{i}")))
        .collect()
}

fn strs(paths: &[PathBuf]) -> Vec<&str> {
    paths.iter().map(|p| p.to_str().unwrap()).collect()
}

#[test]
fn create_then_examine_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let members = paths(dir.path(), "m", 4);
    let mut args = vec![
        "create", "--level", "raid5", "--chunk", "64K", "--name", "media",
    ];
    args.extend(["--size", "10M"]);
    args.extend(strs(&members));
    let out = raidkit(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("created raid5 array \"media\""),
        "{}",
        stdout(&out)
    );
    for m in &members {
        let meta = std::fs::metadata(m).unwrap();
        assert_eq!(meta.len(), 10 << 20);
        use std::os::unix::fs::MetadataExt;
        assert!(
            meta.blocks() * 512 <= 64 << 10,
            "sparse: {} blocks",
            meta.blocks()
        );
    }

    let out = raidkit(&["examine", members[2].to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "array name      media",
        "level           raid5",
        "role            2 of 4",
        "state           clean",
        "chunk bytes     65536 (64.0 KiB)",
        "data bytes      9437184 (9.0 MiB)",
    ] {
        assert!(text.contains(needle), "{needle:?} in:\n{text}");
    }
    // Dates in UTC, ISO 8601 (e.g. "2026-11-25T05:40:27Z"), not seconds since the epoch.
    let created = text.lines().find(|l| l.contains("created")).unwrap();
    let date = created.split_whitespace().nth(1).unwrap();
    assert!(
        date.len() == 20 && date.ends_with('Z') && date.as_bytes()[10] == b'T',
        "{created:?}"
    );

    let mut args = vec!["examine", "--json"];
    args.extend(strs(&members));
    let out = raidkit(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 4);
    for (role, sb) in list.iter().enumerate() {
        assert_eq!(sb["member"], members[role].to_str().unwrap());
        assert_eq!(sb["role"], role);
        assert_eq!(sb["level"], "raid5");
        assert_eq!(sb["array_name"], "media");
        assert_eq!(sb["chunk_bytes"], 65536);
        assert_eq!(sb["member_count"], 4);
        assert_eq!(sb["data_offset_bytes"], 1 << 20);
        assert_eq!(sb["data_bytes"], 9 << 20);
        assert_eq!(sb["array_size_bytes"], 3 * (9 << 20));
        assert_eq!(sb["events"], 1);
        assert_eq!(sb["state"], "clean");
        assert_eq!(sb["format_version"], 1);
        assert_eq!(sb["array_uuid"], list[0]["array_uuid"]);
        assert_eq!(sb["roles"].as_array().unwrap().len(), 4);
        assert_eq!(sb["roles"][role]["member_uuid"], sb["member_uuid"]);
    }
}

#[test]
fn level_aliases_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    for (alias, level) in [
        ("concat", "linear"),
        ("0", "raid0"),
        ("1", "raid1"),
        ("10", "raid10"),
        ("6", "raid6"),
    ] {
        let members = paths(dir.path(), alias, 4);
        let mut args = vec!["create", "-l", alias, "-s", "2M"];
        args.extend(strs(&members));
        let out = raidkit(&args);
        assert!(out.status.success(), "{alias}: {}", stderr(&out));
        let out = raidkit(&["examine", "--json", members[0].to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(v[0]["level"], level);
        assert_eq!(v[0]["chunk_bytes"], 128 << 10, "default chunk");
        assert_eq!(v[0]["array_name"], "raidkit", "default name");
    }
}

/// Members larger than the smallest: create says how much of each the array leaves unused
/// (as mdadm warns), for the striped and mirrored levels; linear uses every member whole and
/// equal members say nothing.
#[test]
fn create_names_the_space_a_larger_member_leaves_unused() {
    let dir = tempfile::tempdir().unwrap();
    let members = paths(dir.path(), "m", 3);
    for (m, mib) in members.iter().zip([64u64, 48, 64]) {
        std::fs::File::create(m)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
    }
    let out = raidkit(
        &["create", "-l", "5", "-c", "64K"]
            .iter()
            .copied()
            .chain(strs(&members))
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let notes: Vec<&str> = text.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(notes.len(), 2, "one note per larger member: {text}");
    for (note, m) in notes.iter().zip([&members[0], &members[2]]) {
        assert!(
            note.starts_with(&format!(
                "note: {}: 16.0 MiB of its 64.0 MiB unused",
                m.display()
            )),
            "{note}"
        );
        assert!(
            note.contains(&format!("smallest, {}", members[1].display())),
            "{note}"
        );
        assert!(note.contains("raidkit grow --size max"), "{note}");
    }

    for (level, prefix) in [("linear", "l"), ("1", "e")] {
        let members = paths(dir.path(), prefix, 2);
        let sizes = if level == "linear" {
            [64u64, 48]
        } else {
            [48, 48]
        };
        for (m, mib) in members.iter().zip(sizes) {
            std::fs::File::create(m)
                .unwrap()
                .set_len(mib << 20)
                .unwrap();
        }
        let out = raidkit(
            &["create", "-l", level]
                .iter()
                .copied()
                .chain(strs(&members))
                .collect::<Vec<_>>(),
        );
        assert!(out.status.success(), "{level}: {}", stderr(&out));
        assert!(
            !stdout(&out).contains("note: "),
            "{level}: {}",
            stdout(&out)
        );
    }
}

fn assert_fails(args: &[&str], needles: &[&str]) {
    let out = raidkit(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    let err = stderr(&out);
    assert!(err.starts_with("raidkit: error: "), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} in: {err}");
    }
}

#[test]
fn refusals_exit_non_zero_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let members = paths(dir.path(), "r", 3);
    let m = strs(&members);
    let out = raidkit(&["create", "-l", "raid1", "-s", "4M", m[0], m[1]]);
    assert!(out.status.success(), "{}", stderr(&out));
    let before: Vec<Vec<u8>> = members[..2]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert_fails(
        &["create", "-l", "raid0", m[0], m[1]],
        &[m[0], "carries a raidkit superblock", "--force"],
    );
    let after: Vec<Vec<u8>> = members[..2]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(before == after, "refused create wrote nothing");
    assert_fails(
        &["create", "-l", "raid5", "-s", "4M", m[2]],
        &["raid5 needs at least 3 members, 1 given"],
    );
    assert!(!members[2].exists(), "nothing created on a refusal");
    assert_fails(
        &["create", "-l", "raid1", "/nonexistent-dir/x", m[2]],
        &["/nonexistent-dir/x"],
    );
    std::fs::write(&members[2], vec![0u8; 2 << 20]).unwrap();
    assert_fails(&["examine", m[2]], &[m[2], "no raidkit superblock"]);
    assert_fails(
        &["examine", "/nonexistent/member"],
        &["/nonexistent/member", "does not exist"],
    );
    let out = raidkit(&["create", "-l", "raid7", m[2]]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown RAID level"),
        "{}",
        stderr(&out)
    );
    let out = raidkit(&["create", "-l", "raid1", "--chunk", "3X", m[2]]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not a number"), "{}", stderr(&out));
    let out = raidkit(&["create", "-l", "raid0", "-f", m[0], m[1]]);
    assert!(out.status.success(), "--force overwrites: {}", stderr(&out));
}

#[test]
fn help_texts() {
    for args in [
        &["--help"][..],
        &["create", "--help"],
        &["examine", "--help"],
    ] {
        let out = raidkit(args);
        assert!(out.status.success(), "{args:?}");
        let text = stdout(&out);
        assert!(text.contains("Usage: raidkit"), "{text}");
    }
    let text = stdout(&raidkit(&["create", "--help"]));
    for needle in [
        "--level", "--chunk", "--name", "--size", "--force", "concat", "MEMBER",
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
    assert!(stdout(&raidkit(&["examine", "--help"])).contains("--json"));
    assert!(!raidkit(&[]).status.success(), "no subcommand is an error");
}

/// `examine --scan` over a glob finds two arrays, their spare and one's journal, and writes
/// entries the daemon's configuration parser reads back to the same devices in role order.
#[test]
fn examine_scan_writes_config_entries_for_the_arrays_found() {
    let dir = tempfile::tempdir().unwrap();
    let home = paths(dir.path(), "home", 3);
    let spare = dir.path().join("home-spare");
    let journal = dir.path().join("home-journal");
    let mut args = vec!["create", "--level", "5", "--name", "home", "--size", "8M"];
    args.extend(["--spare", spare.to_str().unwrap()]);
    args.extend([
        "--journal",
        journal.to_str().unwrap(),
        "--journal-size",
        "2M",
    ]);
    args.extend(strs(&home));
    let out = raidkit(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let backup = paths(dir.path(), "backup", 2);
    let mut args = vec!["create", "--level", "1", "--name", "backup", "--size", "8M"];
    args.extend(strs(&backup));
    let out = raidkit(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(dir.path().join("not-raid"), vec![7u8; 1 << 20]).unwrap();

    let glob = format!("{}/*", dir.path().display());
    let out = raidkit(&["examine", "--scan", &glob]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let config =
        config::Config::parse(&text, Path::new("scan")).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let names: Vec<&str> = config
        .arrays
        .iter()
        .map(|a| a.name.get_ref().as_str())
        .collect();
    assert_eq!(names, ["backup", "home"], "{text}");
    let listed = |a: &config::ArrayConfig| -> Vec<String> {
        a.members.iter().map(|m| m.get_ref().clone()).collect()
    };
    let as_strings =
        |p: &[PathBuf]| -> Vec<String> { p.iter().map(|p| p.display().to_string()).collect() };
    assert_eq!(listed(&config.arrays[0]), as_strings(&backup), "{text}");
    assert_eq!(listed(&config.arrays[1]), as_strings(&home), "{text}");
    let home_entry = &config.arrays[1];
    assert_eq!(home_entry.spares[0].get_ref(), &spare.display().to_string());
    assert_eq!(
        home_entry.journal.as_ref().unwrap().get_ref(),
        &journal.display().to_string()
    );
    assert!(config.arrays[0].journal.is_none() && config.arrays[0].spares.is_empty());

    // A role not found is said in a comment; nothing found at all is an error.
    let some = [home[0].to_str().unwrap(), home[2].to_str().unwrap()];
    let out = raidkit(&["examine", "--scan", some[0], some[1]]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("# role 1 (member "),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("journal (uuid "), "{}", stdout(&out));
    let none = dir.path().join("not-raid");
    assert_fails(
        &["examine", "--scan", none.to_str().unwrap()],
        &["no raidkit array superblock on any of the 1 devices scanned"],
    );
    assert_fails(
        &["examine", "--scan", "/nonexistent/disk"],
        &["/nonexistent/disk: cannot open it to scan"],
    );
}
