//! The owner record on a running volume (see [`crate::owner`] for what it is and how a second
//! assembly judges it): [`VolumeCore::claim_owner`] at assembly, [`crate::Volume::renew_owner`]
//! every [`ondisk::owner::LEASE_RENEW_INTERVAL`] while serving, [`crate::Volume::release_owner`]
//! at a clean stop.
//!
//! Every superblock write carries the owner (`MetaState::owner`). A claim, renewal or release
//! rewrites each member's superblock as last written, with only the owner record changed:
//! `events` is not bumped, so freshness is untouched (a member that missed a renewal is not
//! stale), and the write holds the metadata mutex, so it never interleaves with a state change.
//! Members whose last superblock write failed (their copy is not the array's current one) are
//! left alone. These writes are not flushed: a renewal only has to be visible to other readers,
//! and one lost to a crash leaves an older lease, which only looks more expired.

use std::sync::Arc;

use crate::volume::{Held, MetaState, VolumeCore};
use crate::TakenOver;
use ondisk::{Owner, SUPERBLOCK_OFFSET};

/// The same process: host, boot, namespace, pid and start time (not the lease times).
fn same_owner(a: &Owner, b: &Owner) -> bool {
    let (a, b) = (&a.process, &b.process);
    (a.host_id, a.boot_id, a.pid_namespace, a.pid, a.start_ticks)
        == (b.host_id, b.boot_id, b.pid_namespace, b.pid, b.start_ticks)
}

// The `pub(crate)` methods here that `Volume` offers are documented where it lists them
// (`forward_to_core!` in volume.rs).
impl VolumeCore {
    /// Records `owner` on every member (whatever record was there: assembly judged it gone).
    pub fn claim_owner(&self, owner: Owner) {
        let mut meta = self.lock_meta();
        meta.owner = Some(owner);
        self.rewrite_owner(&mut meta, |_| true);
    }

    pub(crate) fn renew_owner(&self) -> Result<(), TakenOver> {
        let (mine, wholes) = {
            let mut meta = self.lock_meta();
            let Some(mine) = meta.owner.clone() else {
                return Ok(());
            };
            let targets = self.owner_targets(&mut meta);
            let wholes: Vec<_> = targets.iter().map(|h| Arc::clone(&h.whole)).collect();
            (mine, wholes)
        };
        // Read without the metadata mutex: a slow remote member must not hold up state changes.
        for whole in wholes {
            let Ok(on_disk) = ondisk::read_superblock(whole.as_ref()) else {
                continue; // an unreadable member is the data path's business
            };
            if let Some(theirs) = on_disk.owner.filter(|o| !same_owner(o, &mine)) {
                return Err(TakenOver {
                    member: whole.name().to_string(),
                    owner: Box::new(theirs),
                });
            }
        }
        let mut meta = self.lock_meta();
        self.rewrite_owner(&mut meta, |_| true);
        Ok(())
    }

    pub(crate) fn release_owner(&self) {
        let mut meta = self.lock_meta();
        let Some(mine) = meta.owner.take() else {
            return;
        };
        self.rewrite_owner(&mut meta, |held| {
            ondisk::read_superblock(held.whole.as_ref())
                .map(|sb| sb.owner.is_none_or(|o| same_owner(&o, &mine)))
                .unwrap_or(false)
        });
    }

    pub(crate) fn owner(&self) -> Option<Owner> {
        self.lock_meta().owner.clone()
    }

    /// Rewrites the superblock of each target member `pick` accepts with `meta.owner`
    /// (renewed now), events unchanged. Write errors are left to the data path.
    fn rewrite_owner(&self, meta: &mut MetaState, pick: impl Fn(&Held) -> bool) {
        if let Some(owner) = &mut meta.owner {
            owner.renewed_secs = ondisk::now_secs();
        }
        let owner = meta.owner.clone();
        for held in self.owner_targets(meta) {
            if !pick(held) {
                continue;
            }
            held.sb.set_owner(owner.clone());
            // Durable before the next member's is written: a power cut tears at most one. A
            // durable write, not write + flush: a flush of a file member would also write back
            // every data page written since the last one, every renewal (10 s), with the
            // metadata lock held.
            let _ = held
                .whole
                .write_durable_at(&held.sb.encode()[..], SUPERBLOCK_OFFSET);
        }
    }

    /// The members whose superblock holds the array's current state: writable roles, spares
    /// and a replacement, whose last superblock write carried the current events.
    fn owner_targets<'m>(&self, meta: &'m mut MetaState) -> Vec<&'m mut Held> {
        let events = meta.events;
        let health = self.array.health_snapshot();
        let roles = meta.roles.iter_mut().enumerate();
        roles
            .filter(|(role, _)| health[*role].writable())
            .filter_map(|(_, held)| held.as_mut())
            .chain(meta.spares.iter_mut())
            .chain(meta.replacing.iter_mut().map(|(_, h)| h))
            .filter(|h| h.sb.events == events)
            .collect()
    }
}
