//! Assembly's reading of the members' superblocks, torn ones included ([`read_for_assembly`]).

use std::sync::Arc;

use member::Member;

use crate::plan::AssembleError;
use crate::superblock::{
    member_of, read_superblock, splice_torn, ReadSuperblockError, Superblock, SuperblockError,
    SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET,
};

/// What [`read_for_assembly`] found.
#[derive(Debug)]
pub struct ReadForAssembly {
    /// Each member's name and superblock, in the order given (a torn one rebuilt).
    pub found: Vec<(String, Superblock)>,
    /// One line per torn superblock rebuilt: the member, why, from what, what it says.
    pub notes: Vec<String>,
}

/// Reads every member's superblock for assembly. A superblock that fails its checksum (a
/// rewrite torn by a power cut, or corruption) is rebuilt with `splice_torn`: its own fields
/// from its first sector, which a torn 4 KiB write leaves whole (one version, before or after
/// the rewrite), the rest from the freshest valid superblock of the array that sector names —
/// when every valid member of that array places the metadata areas alike (so the torn member,
/// made from the same template, does too) and the first sector agrees with that superblock in
/// everything array-wide. The rebuilt superblock then goes through [`crate::plan`] like any
/// other: stale, rebuilding, spare or in sync as its own fields say. Anything else is refused
/// as before (`AssembleError::BadSuperblock`, naming the member and the remedy): a superblock
/// with no valid peer, a version or feature this code does not read, a first sector that does
/// not name the peers' array or disagrees with them.
pub fn read_for_assembly(members: &[Arc<dyn Member>]) -> Result<ReadForAssembly, AssembleError> {
    let mut read = Vec::with_capacity(members.len());
    for m in members {
        let name = m.name().to_string();
        match read_superblock(m.as_ref()) {
            Ok(sb) => read.push(Ok(sb)),
            Err(ReadSuperblockError::Io(source)) => {
                return Err(AssembleError::Read { name, source })
            }
            Err(ReadSuperblockError::Invalid(source @ SuperblockError::Checksum { .. })) => {
                read.push(Err(source))
            }
            Err(ReadSuperblockError::Invalid(source)) => {
                return Err(AssembleError::BadSuperblock { name, source })
            }
        }
    }
    let valid: Vec<(usize, &Superblock)> = (read.iter().enumerate())
        .filter_map(|(i, r)| Some((i, r.as_ref().ok()?)))
        .collect();
    let mut found = Vec::with_capacity(members.len());
    let mut notes = Vec::new();
    for (m, r) in members.iter().zip(&read) {
        let name = m.name().to_string();
        let source = match r {
            Ok(sb) => {
                found.push((name, sb.clone()));
                continue;
            }
            Err(source) => source.clone(),
        };
        let refused = || AssembleError::BadSuperblock {
            name: name.clone(),
            source: source.clone(),
        };
        let mut raw = Box::new([0u8; SUPERBLOCK_BYTES]);
        m.read_at(&mut raw[..], SUPERBLOCK_OFFSET)
            .map_err(|source| AssembleError::Read {
                name: name.clone(),
                source,
            })?;
        let Some((peer_index, peer)) = freshest_peer(&valid, &raw) else {
            return Err(refused());
        };
        let sb = splice_torn(&raw, peer).ok_or_else(refused)?;
        notes.push(format!(
            "member {name}: {source}: a superblock rewrite torn by a power cut (or corruption); \
             rebuilt from its first sector, which holds its own fields ({}, events {}{}), and \
             member {}'s superblock (events {}) for the rest; written whole at the array's next \
             superblock write",
            match sb.role_index() {
                Some(r) => format!("role {r}"),
                None => "a spare".to_string(),
            },
            sb.events,
            match sb.recovery_offset_bytes {
                Some(at) => format!(", rebuilt up to data byte {at}"),
                None => String::new(),
            },
            members[peer_index].name(),
            peer.events,
        ));
        found.push((name, sb));
    }
    Ok(ReadForAssembly { found, notes })
}

/// The freshest valid superblock of the array `raw`'s first sector names (with the index of
/// its member), if every valid superblock of that array places the metadata areas alike.
fn freshest_peer<'a>(
    valid: &[(usize, &'a Superblock)],
    raw: &[u8; SUPERBLOCK_BYTES],
) -> Option<(usize, &'a Superblock)> {
    let &(index, peer) = valid
        .iter()
        .filter(|(_, sb)| member_of(&raw[..], &sb.array_uuid).is_some())
        .max_by_key(|(_, sb)| sb.events)?;
    let areas = |sb: &Superblock| {
        (
            sb.data_offset_bytes,
            sb.bitmap,
            sb.used_map,
            sb.bad_blocks,
            sb.checksum,
        )
    };
    let alike = valid
        .iter()
        .filter(|(_, sb)| sb.array_uuid == peer.array_uuid)
        .all(|(_, sb)| areas(sb) == areas(peer));
    alike.then_some((index, peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{create, ArrayState, CreateOptions, Role};

    fn array(level: &str) -> Vec<Arc<dyn Member>> {
        let members: Vec<_> = (0..3)
            .map(|_| member::open("mem:4M", &member::OpenOptions::default()).unwrap())
            .collect();
        create(
            &members,
            &CreateOptions::new(level.parse().unwrap(), "torn"),
        )
        .unwrap();
        members
    }

    fn write(m: &Arc<dyn Member>, bytes: &[u8]) {
        m.write_at(bytes, SUPERBLOCK_OFFSET).unwrap();
    }

    /// `m`'s superblock torn between `old` and `new`: the first sector of `first`, the rest of
    /// the other.
    fn tear(m: &Arc<dyn Member>, first: &Superblock, rest: &Superblock) {
        let mut bytes = rest.encode();
        bytes[..512].copy_from_slice(&first.encode()[..512]);
        write(m, &bytes[..]);
    }

    /// A rebuild checkpoint of member 2 torn either way (the other members already at the new
    /// events, or still at the old): the rebuilt superblock holds one whole version of the
    /// member's own fields, never more events than its freshest peer, and the peer's table.
    #[test]
    fn a_torn_superblock_is_rebuilt_from_its_first_sector_and_its_freshest_peer() {
        let members = array("raid5");
        let sb = |i: usize| read_superblock(members[i].as_ref()).unwrap();
        let mut old = sb(2);
        old.recovery_offset_bytes = Some(8192);
        let mut new = old.clone();
        new.events += 1;
        new.state = ArrayState::Dirty;
        new.recovery_offset_bytes = Some(65536);
        for (first, rest, events, recovery) in [
            (&old, &new, old.events, Some(8192)),
            (&new, &old, old.events, Some(65536)),
        ] {
            tear(&members[2], first, rest);
            let read = read_for_assembly(&members).unwrap();
            let rebuilt = &read.found[2].1;
            assert_eq!(read.found[2].0, members[2].name());
            assert_eq!(rebuilt.member_uuid, old.member_uuid);
            assert_eq!(rebuilt.role, Role::Active(2));
            assert_eq!(rebuilt.events, events, "never ahead of its peers");
            assert_eq!(rebuilt.recovery_offset_bytes, recovery);
            assert_eq!(rebuilt.roles, sb(0).roles);
            assert_eq!(rebuilt.bad_blocks, sb(0).bad_blocks);
            assert_eq!(read.notes.len(), 1, "{:?}", read.notes);
            let note = &read.notes[0];
            assert!(
                note.contains(members[2].name())
                    && note.contains("checksum mismatch")
                    && note.contains("torn by a power cut")
                    && note.contains("role 2"),
                "{note}"
            );
            crate::plan(&read.found, &Default::default()).expect("assembles");
        }
        // The peers a generation ahead: the member's own fields as its first sector has them.
        for m in &members[..2] {
            let mut own = read_superblock(m.as_ref()).unwrap();
            own.events = new.events;
            write(m, &own.encode()[..]);
        }
        tear(&members[2], &new, &old);
        let read = read_for_assembly(&members).unwrap();
        assert_eq!(read.found[2].1.events, new.events);
        assert_eq!(read.found[2].1.state, ArrayState::Dirty);
        assert_eq!(read.found[2].1.recovery_offset_bytes, Some(65536));
    }

    /// What cannot be proven this array's member as its peers describe it is refused as
    /// before, naming the member: no valid peer; a first sector of another array; one that
    /// disagrees with the peers array-wide (another chunk size); peers that place the metadata
    /// areas differently.
    #[test]
    fn a_torn_superblock_that_proves_nothing_is_refused() {
        let members = array("raid1");
        let good = read_superblock(members[1].as_ref()).unwrap();
        let refused = |members: &[Arc<dyn Member>]| match read_for_assembly(members) {
            Err(e @ AssembleError::BadSuperblock { .. }) => e.to_string(),
            other => panic!("not refused: {other:?}"),
        };
        let mut broken = good.encode();
        broken[4000] ^= 1;
        write(&members[1], &broken[..]);
        assert!(refused(&members[1..2]).contains(members[1].name()));
        let other = array("raid1");
        let foreign = read_superblock(other[0].as_ref()).unwrap();
        tear(&members[1], &foreign, &good);
        assert!(refused(&members).contains(members[1].name()));
        let mut chunk = good.clone();
        chunk.chunk_bytes *= 2;
        tear(&members[1], &chunk, &good);
        refused(&members);
        tear(&members[1], &good, &good);
        write(&members[1], &broken[..]);
        let mut moved = read_superblock(members[2].as_ref()).unwrap();
        moved.bad_blocks = None;
        moved.feature_incompat &= !crate::FEATURE_INCOMPAT_BAD_BLOCKS;
        write(&members[2], &moved.encode()[..]);
        refused(&members);
        // The same bytes with the peers alike: rebuilt.
        write(
            &members[2],
            &read_superblock(members[0].as_ref()).unwrap().encode()[..],
        );
        let mut own2 = read_superblock(members[0].as_ref()).unwrap();
        own2.member_uuid = moved.member_uuid;
        own2.role = moved.role;
        write(&members[2], &own2.encode()[..]);
        assert_eq!(read_for_assembly(&members).unwrap().notes.len(), 1);
    }
}
