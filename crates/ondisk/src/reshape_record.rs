//! The reshape record (`feature_incompat` bit 2, superblock bytes 3680..3744): an array whose
//! data is being moved to more members (docs/FORMAT.md "Reshape", docs/DESIGN.md "Reshape").
//! While the bit is set the superblock's `member_count` and role table are the NEW
//! geometry's, `array_size_bytes` the OLD array's size (what clients see until the move ends);
//! the record says how many members the old geometry has, the position below which the data is
//! in the new layout (`P_rec`), where the backup area of the critical section lies on every
//! member, and the reshape's generation (which backup parts are this reshape's).

use layout::{Geometry, Level};

/// `feature_incompat` bit 2: a reshape is in progress (bytes 3680..3744 say where it stands).
/// Incompatible because a reader that ignored it would map the addresses below the position
/// with the old geometry (or above it with the new): every byte moved so far would read wrong.
pub const FEATURE_INCOMPAT_RESHAPE: u64 = 1 << 2;

/// Superblock bytes of the record: 3680..3744.
pub(crate) const OFF_RESHAPE: usize = 3680;
const RECORD_BYTES: usize = 64;

/// Where a reshape stands, as every member's superblock records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReshapeRecord {
    /// Members of the old geometry (roles `0..old_member_count`); the superblock's
    /// `member_count` is the new geometry's.
    pub old_member_count: u32,
    /// `P_rec`: array bytes below it are in the new layout (a multiple of the new stripe's
    /// data bytes).
    pub position_bytes: u64,
    /// The backup area on every member (member bytes, 4 KiB-aligned, before the data).
    pub backup_offset_bytes: u64,
    pub backup_bytes: u64,
    /// Tells this reshape's backup parts from an earlier one's (the events count when the
    /// reshape was recorded).
    pub generation: u64,
}

fn err(reason: impl Into<String>) -> String {
    reason.into()
}

impl ReshapeRecord {
    /// Writes the record into the superblock's `bytes`.
    pub(crate) fn encode(&self, bytes: &mut [u8]) {
        let at = OFF_RESHAPE;
        bytes[at..at + 4].copy_from_slice(&self.old_member_count.to_le_bytes());
        bytes[at + 8..at + 16].copy_from_slice(&self.position_bytes.to_le_bytes());
        bytes[at + 16..at + 24].copy_from_slice(&self.backup_offset_bytes.to_le_bytes());
        bytes[at + 24..at + 32].copy_from_slice(&self.backup_bytes.to_le_bytes());
        bytes[at + 32..at + 40].copy_from_slice(&self.generation.to_le_bytes());
    }

    /// The record in the superblock's `bytes` when `feature_incompat` has bit 2; without it the
    /// range must be zero (refused otherwise). An error is the reason, for the field `reshape`.
    pub(crate) fn decode(
        bytes: &[u8],
        feature_incompat: u64,
    ) -> Result<Option<ReshapeRecord>, String> {
        let raw = &bytes[OFF_RESHAPE..OFF_RESHAPE + RECORD_BYTES];
        if feature_incompat & FEATURE_INCOMPAT_RESHAPE == 0 {
            return match raw.iter().all(|&b| b == 0) {
                true => Ok(None),
                false => Err(err(
                    "bytes 3680..3744 hold a reshape record without feature_incompat bit 2",
                )),
            };
        }
        let u64_at = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
        if u32_at(4) != 0 || raw[40..].iter().any(|&b| b != 0) {
            return Err(err("reserved bytes of the reshape record are not zero"));
        }
        Ok(Some(ReshapeRecord {
            old_member_count: u32_at(0),
            position_bytes: u64_at(8),
            backup_offset_bytes: u64_at(16),
            backup_bytes: u64_at(24),
            generation: u64_at(32),
        }))
    }

    /// Checks the record against the superblock it is in: a level that reshapes, fewer old
    /// members than new, a position within the old array on a new stripe, a backup area between
    /// the superblock's end and the data that overlaps no other area.
    pub(crate) fn validate(
        &self,
        level: Level,
        chunk_bytes: u64,
        member_count: u32,
        sb_end: u64,
        others: &[(&str, u64, u64)],
        data_offset_bytes: u64,
    ) -> Result<(), String> {
        if !matches!(level, Level::Raid0 | Level::Raid5 | Level::Raid6) {
            return Err(err(format!("a reshape recorded on a {level} array")));
        }
        let old = self.old_member_count as usize;
        if old < level.min_members() || self.old_member_count >= member_count {
            return Err(err(format!(
                "old member count {old} for {member_count} members of {level}"
            )));
        }
        let parity = member_count as usize - data_members(level, member_count as usize);
        let new_stripe = chunk_bytes * (member_count as u64 - parity as u64);
        if !self.position_bytes.is_multiple_of(new_stripe) {
            return Err(err(format!(
                "position {} not on a new stripe of {new_stripe} bytes",
                self.position_bytes
            )));
        }
        if !self.backup_offset_bytes.is_multiple_of(4096)
            || self.backup_offset_bytes < sb_end
            || self.backup_bytes == 0
            || self
                .backup_offset_bytes
                .checked_add(self.backup_bytes)
                .is_none_or(|end| end > data_offset_bytes)
        {
            return Err(err(format!(
                "backup area at {} ({} bytes) not 4 KiB-aligned between the superblock and the data at {data_offset_bytes}",
                self.backup_offset_bytes, self.backup_bytes
            )));
        }
        for &(name, offset, bytes) in others {
            if self.backup_offset_bytes < offset + bytes
                && offset < self.backup_offset_bytes + self.backup_bytes
            {
                return Err(err(format!(
                    "the backup area at {} overlaps the {name} at {offset} ({bytes} bytes)",
                    self.backup_offset_bytes
                )));
            }
        }
        Ok(())
    }

    /// The old and new geometry of a reshape recorded over roles of `data_bytes` each.
    pub fn geometries(
        &self,
        level: Level,
        chunk_bytes: u64,
        member_count: u32,
        data_bytes: u64,
    ) -> Result<(Geometry, Geometry), layout::LayoutError> {
        let old = Geometry::new(
            level,
            chunk_bytes,
            &vec![data_bytes; self.old_member_count as usize],
        )?;
        let new = Geometry::new(level, chunk_bytes, &vec![data_bytes; member_count as usize])?;
        Ok((old, new))
    }
}

fn data_members(level: Level, members: usize) -> usize {
    match level {
        Level::Raid5 => members - 1,
        Level::Raid6 => members - 2,
        _ => members,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ReshapeRecord {
        ReshapeRecord {
            old_member_count: 3,
            position_bytes: 3 * 65536 * 4,
            backup_offset_bytes: 65536,
            backup_bytes: 4096 + 2 * 65536,
            generation: 7,
        }
    }

    #[test]
    fn the_record_roundtrips_and_is_refused_without_its_bit() {
        let mut bytes = vec![0u8; 4096];
        record().encode(&mut bytes);
        assert_eq!(
            ReshapeRecord::decode(&bytes, FEATURE_INCOMPAT_RESHAPE),
            Ok(Some(record()))
        );
        let e = ReshapeRecord::decode(&bytes, 0).unwrap_err();
        assert!(e.contains("without feature_incompat bit 2"), "{e}");
        assert_eq!(ReshapeRecord::decode(&[0u8; 4096], 0), Ok(None));
        bytes[3700 + 40] = 1;
        assert!(ReshapeRecord::decode(&bytes, FEATURE_INCOMPAT_RESHAPE).is_err());
    }

    #[test]
    fn validate_refuses_what_cannot_be() {
        let ok = |r: ReshapeRecord, level: Level, members: u32| {
            r.validate(
                level,
                65536,
                members,
                8192,
                &[("bitmap", 8192, 4096)],
                1 << 20,
            )
        };
        assert_eq!(ok(record(), Level::Raid5, 4), Ok(()));
        assert!(ok(record(), Level::Raid1, 4).unwrap_err().contains("raid1"));
        assert!(ok(record(), Level::Raid5, 3).is_err(), "no more members");
        let odd = ReshapeRecord {
            position_bytes: 65536,
            ..record()
        };
        assert!(ok(odd, Level::Raid5, 4)
            .unwrap_err()
            .contains("not on a new stripe"));
        let overlapping = ReshapeRecord {
            backup_offset_bytes: 8192,
            ..record()
        };
        assert!(ok(overlapping, Level::Raid5, 4)
            .unwrap_err()
            .contains("overlaps the bitmap"));
        let past = ReshapeRecord {
            backup_offset_bytes: 1 << 20,
            ..record()
        };
        assert!(ok(past, Level::Raid5, 4).is_err(), "runs into the data");
    }
}
