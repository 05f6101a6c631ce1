//! `raidkit examine --scan`: the `[[array]]` entries for the arrays found on a set of devices
//! (as `mdadm --examine --scan`), so a configuration can be started from what is on the disks.
//! This module is pure: the caller reads the superblocks; here they are grouped into arrays
//! and written as TOML the daemon reads back.

use std::collections::BTreeMap;

use ondisk::{Role, RoleState, Superblock, Uuid};
use serde::Serialize;

/// A device that carries an array superblock.
#[derive(Debug, Clone)]
pub struct ScannedMember {
    pub path: String,
    pub superblock: Superblock,
}

/// A device that carries a journal superblock.
#[derive(Debug, Clone)]
pub struct ScannedJournal {
    pub path: String,
    pub array_uuid: Uuid,
    pub journal_uuid: Uuid,
}

/// One array as found: its entry, and what the operator should know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedArray {
    pub name: String,
    pub uuid: Uuid,
    /// Active members by role.
    pub members: Vec<String>,
    pub spares: Vec<String>,
    pub journal: Option<String>,
    /// Comment lines written above the entry.
    pub notes: Vec<String>,
}

/// The `[[array]]` table, keys as the daemon reads them.
#[derive(Serialize)]
struct Entry<'a> {
    name: &'a str,
    uuid: String,
    members: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    spares: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    journal: Option<&'a str>,
}

#[derive(Serialize)]
struct Document<'a> {
    array: [Entry<'a>; 1],
}

/// Groups the devices into arrays (the newest superblock of each array — highest `events` —
/// says which member holds which role), ordered by name.
pub fn group(members: &[ScannedMember], journals: &[ScannedJournal]) -> Vec<ScannedArray> {
    let mut by_array: BTreeMap<Uuid, Vec<&ScannedMember>> = BTreeMap::new();
    for m in members {
        by_array.entry(m.superblock.array_uuid).or_default().push(m);
    }
    let mut arrays: Vec<ScannedArray> = by_array
        .into_values()
        .map(|found| one_array(&found, journals))
        .collect();
    arrays.sort_by(|a, b| a.name.cmp(&b.name).then(a.uuid.cmp(&b.uuid)));
    distinct_names(&mut arrays);
    arrays
}

fn one_array(found: &[&ScannedMember], journals: &[ScannedJournal]) -> ScannedArray {
    let newest = &found
        .iter()
        .max_by_key(|m| m.superblock.events)
        .expect("an array is found through at least one member")
        .superblock;
    let path_of = |uuid: Uuid| {
        found
            .iter()
            .find(|m| m.superblock.member_uuid == uuid)
            .map(|m| m.path.clone())
    };
    let mut notes = vec![format!(
        "{}, {} members, chunk {}, size {}, array uuid {}",
        newest.level,
        newest.member_count,
        crate::values::Size(newest.chunk_bytes).text(),
        crate::values::Size(newest.array_size_bytes).text(),
        newest.array_uuid
    )];
    let mut members = Vec::new();
    let mut spares = Vec::new();
    for (role, entry) in newest.roles.iter().enumerate() {
        let path = path_of(entry.member_uuid);
        match (entry.state, path) {
            (RoleState::Unused, _) => {}
            (RoleState::Spare, Some(path)) => spares.push(path),
            (RoleState::Active, Some(path)) => members.push(path),
            (RoleState::Faulty, Some(path)) => notes.push(format!(
                "{path}: role {role} is marked faulty; left out (replace it with `raidkit add`)"
            )),
            (RoleState::Missing, Some(path)) => {
                notes.push(format!(
                    "{path}: role {role} was missing when the array last ran; the assembly \
                     decides whether it can be added back"
                ));
                members.push(path);
            }
            (RoleState::Active | RoleState::Missing, None) => notes.push(format!(
                "role {role} (member {}) was not found among the scanned devices",
                entry.member_uuid
            )),
            (RoleState::Spare, None) => notes.push(format!(
                "a spare (member {}) was not found among the scanned devices",
                entry.member_uuid
            )),
            (RoleState::Faulty, None) => {}
        }
    }
    for m in found {
        let known = newest
            .roles
            .iter()
            .any(|r| r.member_uuid == m.superblock.member_uuid && r.state != RoleState::Unused);
        if !known && m.superblock.role == Role::Spare {
            spares.push(m.path.clone());
        } else if !known {
            notes.push(format!(
                "{}: an older member of this array (events {} < {}); left out",
                m.path, m.superblock.events, newest.events
            ));
        }
    }
    if newest.encryption.is_some() {
        notes.push(
            "encrypted: add key_file = \"PATH\" or passphrase_file = \"PATH\" (the daemon \
             never asks for a passphrase)"
                .to_string(),
        );
    }
    let journal = newest.journal.and_then(|j| {
        let found = journals.iter().find(|f| f.journal_uuid == j.uuid);
        if found.is_none() {
            notes.push(format!(
                "the array's journal (uuid {}) was not found: add journal = \"PATH\"",
                j.uuid
            ));
        }
        found.map(|f| f.path.clone())
    });
    ScannedArray {
        name: newest.name.clone(),
        uuid: newest.array_uuid,
        members,
        spares,
        journal,
        notes,
    }
}

/// Array names become valid config names (letters, digits, `.`, `_`, `-`), and two arrays
/// with one name (every array is called "raidkit" unless created with `--name`) get the start
/// of their UUID appended.
fn distinct_names(arrays: &mut [ScannedArray]) {
    for a in arrays.iter_mut() {
        let clean: String = a
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .take(48)
            .collect();
        a.name = if clean.is_empty() {
            "array".to_string()
        } else {
            clean
        };
    }
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for a in arrays.iter() {
        *count.entry(a.name.clone()).or_default() += 1;
    }
    for a in arrays.iter_mut() {
        if count[&a.name] > 1 {
            a.name = format!("{}-{}", a.name, &a.uuid.simple().to_string()[..8]);
        }
    }
}

/// The configuration text for `arrays`: one commented `[[array]]` table each.
pub fn render_scan(arrays: &[ScannedArray]) -> String {
    let mut out = String::new();
    for (i, a) in arrays.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for note in &a.notes {
            out += &format!("# {note}\n");
        }
        let doc = Document {
            array: [Entry {
                name: &a.name,
                uuid: a.uuid.to_string(),
                members: &a.members,
                spares: &a.spares,
                journal: a.journal.as_deref(),
            }],
        };
        out += &toml::to_string(&doc).expect("an entry of strings always serializes");
    }
    out
}
