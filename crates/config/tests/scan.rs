//! `examine --scan`'s entries: arrays found on devices are grouped and written as TOML that the
//! configuration parser reads back to the same members.

use std::path::Path;
use std::sync::Arc;

use config::{group, render_scan, Config, ScannedJournal, ScannedMember};
use layout::Level;
use member::{MemMember, Member};
use ondisk::{create, read_superblock, CreateOptions, Uuid};

const MEMBER_BYTES: u64 = 16 << 20;

fn members(prefix: &str, count: usize) -> Vec<Arc<dyn Member>> {
    (0..count)
        .map(|i| {
            Arc::new(MemMember::new(&format!("{prefix}{i}"), MEMBER_BYTES).unwrap())
                as Arc<dyn Member>
        })
        .collect()
}

/// Creates an array and returns its devices as a scan finds them, under `/dev/<prefix>N`.
fn array(
    prefix: &str,
    level: Level,
    name: &str,
    count: usize,
    spares: usize,
) -> Vec<ScannedMember> {
    let all = members(prefix, count + spares);
    let mut opts = CreateOptions::new(level, name);
    opts.spares = all[count..].to_vec();
    create(&all[..count], &opts).unwrap();
    all.iter()
        .enumerate()
        .map(|(i, m)| ScannedMember {
            path: format!("/dev/{prefix}{i}"),
            superblock: read_superblock(m.as_ref()).unwrap(),
        })
        .collect()
}

fn parse_back(text: &str) -> Config {
    Config::parse(text, Path::new("scan.toml"))
        .unwrap_or_else(|e| panic!("the scan output does not parse: {e}\n{text}"))
}

#[test]
fn arrays_found_are_written_as_config_entries_that_parse_back() {
    let mut found = array("sd", Level::Raid5, "home", 4, 1);
    found.extend(array("vd", Level::Raid1, "backup", 2, 0));
    // The order devices are found in is not the role order.
    found.reverse();
    let arrays = group(&found, &[]);
    let text = render_scan(&arrays);
    let config = parse_back(&text);
    assert_eq!(config.arrays.len(), 2, "{text}");
    let backup = &config.arrays[0];
    assert_eq!(backup.name.get_ref(), "backup");
    let home = &config.arrays[1];
    assert_eq!(home.name.get_ref(), "home");
    let listed: Vec<&str> = home.members.iter().map(|m| m.get_ref().as_str()).collect();
    assert_eq!(
        listed,
        ["/dev/sd0", "/dev/sd1", "/dev/sd2", "/dev/sd3"],
        "{text}"
    );
    assert_eq!(home.spares[0].get_ref(), "/dev/sd4");
    let uuid: Uuid = home.uuid.as_ref().unwrap().get_ref().parse().unwrap();
    assert_eq!(
        uuid,
        found
            .iter()
            .find(|m| m.path == "/dev/sd0")
            .unwrap()
            .superblock
            .array_uuid
    );
    assert!(text.contains("# raid5, 4 members, chunk 128K"), "{text}");
}

#[test]
fn a_member_not_found_and_a_journal_not_found_are_noted() {
    let mut found = array("sd", Level::Raid5, "home", 4, 0);
    found.remove(2);
    let journal_uuid = Uuid::new_v4();
    for m in &mut found {
        m.superblock.journal = Some(ondisk::JournalRef {
            uuid: journal_uuid,
            kind: 1,
        });
    }
    let text = render_scan(&group(&found, &[]));
    assert!(text.contains("# role 2 (member "), "{text}");
    assert!(
        text.contains("was not found among the scanned devices"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "# the array's journal (uuid {journal_uuid}) was not found"
        )),
        "{text}"
    );
    assert_eq!(parse_back(&text).arrays[0].members.len(), 3);

    let journals = [ScannedJournal {
        path: "/dev/nvme0n1p3".to_string(),
        array_uuid: found[0].superblock.array_uuid,
        journal_uuid,
    }];
    let config = parse_back(&render_scan(&group(&found, &journals)));
    assert_eq!(
        config.arrays[0].journal.as_ref().unwrap().get_ref(),
        "/dev/nvme0n1p3"
    );
}

#[test]
fn arrays_sharing_a_name_get_distinct_names() {
    let mut found = array("sd", Level::Raid1, "raidkit", 2, 0);
    found.extend(array("vd", Level::Raid1, "raidkit", 2, 0));
    found.extend(array("xd", Level::Raid0, "my array!", 2, 0));
    let text = render_scan(&group(&found, &[]));
    let config = parse_back(&text);
    let names: Vec<&str> = config
        .arrays
        .iter()
        .map(|a| a.name.get_ref().as_str())
        .collect();
    assert_eq!(names[0], "my-array-");
    assert!(
        names[1].starts_with("raidkit-") && names[2].starts_with("raidkit-"),
        "{names:?}"
    );
    assert_ne!(names[1], names[2]);
}

#[test]
fn an_older_member_is_left_out_with_a_note() {
    let mut found = array("sd", Level::Raid1, "home", 2, 0);
    let mut stale = found[1].clone();
    stale.path = "/dev/old".to_string();
    stale.superblock.member_uuid = Uuid::new_v4();
    stale.superblock.events = 0;
    found.push(stale);
    for m in &mut found[..2] {
        m.superblock.events += 5;
    }
    let text = render_scan(&group(&found, &[]));
    assert!(
        text.contains("# /dev/old: an older member of this array"),
        "{text}"
    );
    assert_eq!(parse_back(&text).arrays[0].members.len(), 2);
}
