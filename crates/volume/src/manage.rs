//! Operator actions on a running volume (fail, remove, add, replace, scrub, speed limits) and
//! `status`. Each action changes the engine's member state and records it in the
//! superblocks (events + 1) before returning.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::{FaultReason, MemberHealth};
use member::Member;
use uuid::Uuid;

use crate::status::{
    ArrayHealth, FilesystemStatus, MemberState, MemberStatus, SpeedLimits, TaskKind, TaskStatus,
    VolumeStatus,
};
use crate::volume::{Held, MetaState, VolumeCore, VolumeError};
use crate::work::WorkState;
use ondisk::{read_superblock, ReadSuperblockError};
use ondisk::{Role, Superblock, MAX_MEMBERS};

/// The bytes a whole member needs to take any role of the array.
fn member_bytes_needed(meta: &MetaState) -> u64 {
    let t = &meta.template;
    let largest = (0..meta.roles.len()).map(|r| t.roles[r].data_bytes).max();
    t.data_offset_bytes + largest.unwrap_or(0)
}

/// What a member name given by the operator refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Role(usize),
    Spare(usize),
    Replacement(usize),
}

// The `pub(crate)` methods here that `Volume` offers are documented where it lists them
// (`forward_to_core!` in volume.rs).
impl VolumeCore {
    fn resolve(&self, meta: &MetaState, name: &str) -> Result<Target, VolumeError> {
        let count = meta.roles.len();
        if let Some(n) = name
            .strip_prefix("role ")
            .and_then(|n| n.trim().parse::<usize>().ok())
        {
            if n < count {
                return Ok(Target::Role(n));
            }
        }
        let named = |h: &Held| h.whole.name() == name;
        if let Some(role) = meta
            .roles
            .iter()
            .position(|h| h.as_ref().is_some_and(named))
        {
            return Ok(Target::Role(role));
        }
        if let Some(i) = meta.spares.iter().position(named) {
            return Ok(Target::Spare(i));
        }
        match &meta.replacing {
            Some((role, h)) if named(h) => Ok(Target::Replacement(*role)),
            _ => Err(VolumeError::NoSuchMember {
                name: name.to_string(),
            }),
        }
    }

    pub(crate) fn fail(&self, member: &str) -> Result<(), VolumeError> {
        let target = self.resolve(&self.lock_meta(), member)?;
        let refuse = |reason: String| VolumeError::Refused {
            what: format!("fail {member}"),
            reason,
        };
        match target {
            Target::Role(role) => match self.array.health_of(role) {
                MemberHealth::InSync | MemberHealth::Recovering => {
                    if !self.array.try_fail_member(role, FaultReason::Requested) {
                        return Err(refuse(format!(
                            "it holds the last copy of some data of this {} array",
                            self.level()
                        )));
                    }
                }
                MemberHealth::Faulty | MemberHealth::Missing => {}
            },
            Target::Spare(_) => return Err(refuse("it is a spare; remove it instead".into())),
            Target::Replacement(role) => {
                self.array.cancel_replace(role);
                self.lock_meta().replacing = None;
            }
        }
        let mut meta = self.lock_meta();
        self.write_superblocks(&mut meta)?;
        drop(meta);
        self.work.resume();
        self.work.notify();
        Ok(())
    }

    pub(crate) fn remove(&self, member: &str) -> Result<(), VolumeError> {
        let mut meta = self.lock_meta();
        match self.resolve(&meta, member)? {
            Target::Spare(i) => {
                meta.spares.remove(i);
            }
            Target::Replacement(role) => {
                self.array.cancel_replace(role);
                meta.replacing = None;
            }
            Target::Role(role) => match self.array.health_of(role) {
                MemberHealth::Faulty => {
                    self.array.detach_member(role);
                    meta.roles[role] = None;
                }
                MemberHealth::Missing => return Ok(()),
                state => {
                    return Err(VolumeError::Refused {
                        what: format!("remove {member}"),
                        reason: format!(
                            "it is {} in role {role}; fail it first",
                            if state == MemberHealth::InSync {
                                "active"
                            } else {
                                "rebuilding"
                            }
                        ),
                    })
                }
            },
        }
        self.write_superblocks(&mut meta)
    }

    pub(crate) fn take_spare(&self, name: &str) -> Result<Arc<dyn Member>, VolumeError> {
        let mut meta = self.lock_meta();
        let Target::Spare(i) = self.resolve(&meta, name)? else {
            return Err(VolumeError::Refused {
                what: format!("take spare {name}"),
                reason: "it is not a spare of this array".into(),
            });
        };
        let held = meta.spares.remove(i);
        if let Err(e) = self.write_superblocks(&mut meta) {
            meta.spares.insert(i, held);
            return Err(e);
        }
        drop(meta);
        let zeros = [0u8; ondisk::SUPERBLOCK_BYTES];
        let erased = (held.whole.write_at(&zeros, ondisk::SUPERBLOCK_OFFSET))
            .and_then(|()| held.whole.flush());
        erased.map_err(|e| VolumeError::Superblock {
            name: name.to_string(),
            source: std::io::Error::new(
                e.kind(),
                format!(
                    "taken out of the array, but erasing its superblock failed ({e}): it still \
                     says it is this array's spare"
                ),
            ),
        })?;
        Ok(held.whole)
    }

    pub(crate) fn spare_sizes(&self) -> Vec<(String, u64)> {
        let meta = self.lock_meta();
        let sizes = meta.spares.iter();
        sizes
            .map(|h| (h.whole.name().to_string(), h.whole.len()))
            .collect()
    }

    pub(crate) fn member_bytes_needed(&self) -> u64 {
        member_bytes_needed(&self.lock_meta())
    }

    pub(crate) fn held_member(&self, identity: &member::Identity) -> Option<Arc<dyn Member>> {
        let meta = self.lock_meta();
        let found = every_held(&meta)
            .find(|h| h.whole.identity().as_ref() == Some(identity))
            .map(|h| Arc::clone(&h.whole));
        found
    }

    pub(crate) fn add(&self, member: Arc<dyn Member>) -> Result<(), VolumeError> {
        let mut meta = self.lock_meta();
        if self.try_re_add(&mut meta, &member)? {
            drop(meta);
            self.work.resume();
            self.work.notify();
            return Ok(());
        }
        let faulty_holder = (0..meta.roles.len()).find(|&r| {
            self.array.health_of(r) == MemberHealth::Faulty
                && meta.roles[r]
                    .as_ref()
                    .is_some_and(|h| ondisk::same_member(&h.whole, &member))
        });
        if let Some(role) = faulty_holder {
            self.array.detach_member(role);
            meta.roles[role] = None;
        }
        let held = self.new_spare(&meta, member)?;
        meta.spares.push(held);
        self.write_superblocks(&mut meta)?;
        drop(meta);
        self.work.resume();
        self.work.notify();
        Ok(())
    }

    /// Checks a member for `add`/`replace` and builds its spare superblock.
    fn new_spare(&self, meta: &MetaState, member: Arc<dyn Member>) -> Result<Held, VolumeError> {
        let name = member.name().to_string();
        let bad = |reason: String| VolumeError::BadMember {
            name: name.clone(),
            reason,
        };
        if !self.level().has_redundancy() {
            return Err(bad(format!(
                "a {} array has no use for spares",
                self.level()
            )));
        }
        let in_use = every_held(meta).any(|h| ondisk::same_member(&h.whole, &member));
        if in_use {
            return Err(bad("is already part of this array".into()));
        }
        match read_superblock(member.as_ref()) {
            Ok(sb) if sb.array_uuid != self.uuid() => {
                return Err(bad(format!(
                    "belongs to another array (\"{}\" {}); wipe it first",
                    sb.name, sb.array_uuid
                )))
            }
            Ok(_) | Err(ReadSuperblockError::Invalid(ondisk::SuperblockError::NoMagic)) => {}
            Err(e) => return Err(bad(format!("cannot be checked: {e}"))),
        }
        let slots_used =
            meta.roles.len() + meta.spares.len() + usize::from(meta.replacing.is_some());
        if slots_used >= MAX_MEMBERS {
            return Err(bad(format!(
                "the array already has {MAX_MEMBERS} members and spares"
            )));
        }
        let needed = member_bytes_needed(meta);
        if member.len() < needed {
            return Err(bad(format!(
                "too small: {} bytes, a member of this array needs {needed}",
                member.len()
            )));
        }
        let t = &meta.template;
        let mut sb: Superblock = t.clone();
        sb.member_uuid = Uuid::new_v4();
        sb.role = Role::Spare;
        sb.data_bytes = member.len() - t.data_offset_bytes;
        sb.member_bytes = member.len();
        sb.recovery_offset_bytes = None;
        sb.replace_offset_bytes = None;
        if let Some(at) = &sb.bad_blocks {
            // A new spare has lost nothing: its list starts empty (both copies).
            ondisk::badblocks::write_blank(member.as_ref(), &sb.array_uuid, at)
                .map_err(|e| bad(format!("cannot write its bad-block list: {e}")))?;
        }
        let bad = crate::badblocks::BadBlocks::blank(&member, &sb);
        Ok(Held {
            whole: member,
            sb,
            bad,
            checksums: Arc::clone(&self.checksums),
        })
    }

    pub(crate) fn replace(&self, member: &str, with: Arc<dyn Member>) -> Result<(), VolumeError> {
        let mut meta = self.lock_meta();
        let refuse = |reason: String| VolumeError::Refused {
            what: format!("replace {member}"),
            reason,
        };
        let Target::Role(role) = self.resolve(&meta, member)? else {
            return Err(refuse(
                "only a member holding a role can be replaced".into(),
            ));
        };
        if meta.replacing.is_some() {
            return Err(refuse("another replace is in progress".into()));
        }
        if self.array.health_of(role) != MemberHealth::InSync {
            return Err(refuse(format!(
                "role {role} is not in sync; add a spare instead"
            )));
        }
        let mut held = self.new_spare(&meta, with)?;
        held.sb.replace_offset_bytes = Some(0);
        let data_bytes = meta.template.roles[role].data_bytes;
        self.array
            .start_replace(role, held.window(data_bytes))
            .map_err(|e| refuse(e.to_string()))?;
        meta.replacing = Some((role, held));
        self.write_superblocks(&mut meta)?;
        drop(meta);
        self.work.resume();
        self.work.notify();
        Ok(())
    }

    /// Gives the first spare big enough the missing or faulty `role`: it starts recovering.
    /// False when no spare fits.
    pub(crate) fn promote_spare(&self, role: usize) -> Result<bool, VolumeError> {
        let mut meta = self.lock_meta();
        let needed = meta.template.roles[role].data_bytes;
        let Some(i) = meta.spares.iter().position(|h| h.sb.data_bytes >= needed) else {
            return Ok(false);
        };
        let held = meta.spares.remove(i);
        self.install(&mut meta, role, held)?;
        Ok(true)
    }

    /// Puts `held` into `role` (missing or faulty) as a recovering member from offset 0.
    fn install(
        &self,
        meta: &mut MetaState,
        role: usize,
        mut held: Held,
    ) -> Result<(), VolumeError> {
        if self.array.health_of(role) == MemberHealth::Faulty {
            self.array.detach_member(role);
        }
        let needed = meta.template.roles[role].data_bytes;
        held.sb.role = Role::Active(role as u32);
        held.sb.data_bytes = needed;
        held.sb.recovery_offset_bytes = Some(0);
        held.sb.replace_offset_bytes = None;
        meta.template.roles[role].member_uuid = held.sb.member_uuid;
        let window = held.window(needed);
        let whole = Arc::clone(&held.whole);
        meta.roles[role] = Some(held);
        meta.partial_rebuild[role] = None;
        if let Err(e) = self.array.attach_member(role, window) {
            return Err(VolumeError::Refused {
                what: format!("rebuild role {role}"),
                reason: e.to_string(),
            });
        }
        self.mark_write_mostly(meta, role);
        self.adopt_used_map(role, Some(Arc::clone(&whole)));
        self.adopt_bitmap(role, whole);
        self.write_superblocks(meta)
    }

    /// The old member of a role being replaced failed: the new one is rebuilt instead.
    pub(crate) fn replace_becomes_rebuild(&self, role: usize) -> Result<(), VolumeError> {
        let mut meta = self.lock_meta();
        self.array.cancel_replace(role);
        let Some((_, held)) = meta.replacing.take() else {
            return Ok(());
        };
        self.install(&mut meta, role, held)
    }

    /// A write to the replacement failed: the replace is dropped, the role keeps its member.
    pub(crate) fn abandon_replace(&self, role: usize) -> Result<(), VolumeError> {
        let mut meta = self.lock_meta();
        self.array.cancel_replace(role);
        meta.replacing = None;
        self.write_superblocks(&mut meta)
    }

    /// Where the copy onto `role`'s replacement starts: the offset its superblock records.
    pub(crate) fn replace_offset(&self, role: usize) -> u64 {
        let meta = self.lock_meta();
        match &meta.replacing {
            Some((r, held)) if *r == role => held.sb.replace_offset_bytes.unwrap_or(0),
            _ => 0,
        }
    }

    /// Records that the replacement of `role` holds the role's data below `offset`, after
    /// making it durable there (a clean shutdown mid-copy; the next start resumes here).
    pub(crate) fn checkpoint_replace(&self, role: usize, offset: u64) -> Result<(), VolumeError> {
        let Some(new) = self.array.replacement(role) else {
            return Ok(());
        };
        if new.flush().is_err() {
            return self.abandon_replace(role);
        }
        let mut meta = self.lock_meta();
        match meta.replacing.as_mut() {
            Some((r, held)) if *r == role => held.sb.replace_offset_bytes = Some(offset),
            _ => return Ok(()),
        }
        self.write_superblocks(&mut meta)
    }

    /// The copy is complete: the new member's data is made durable, the superblocks record
    /// it in the role (the old member keeps its old superblock, now stale), then the engine
    /// swaps the members. Until the swap every write reaches both.
    pub(crate) fn finish_replace(&self, role: usize) -> Result<(), VolumeError> {
        let Some(new) = self.array.replacement(role) else {
            return self.abandon_replace(role);
        };
        if new.flush().is_err() {
            return self.abandon_replace(role);
        }
        let mut meta = self.lock_meta();
        let Some((_, mut held)) = meta.replacing.take() else {
            return Ok(());
        };
        let needed = meta.template.roles[role].data_bytes;
        held.sb.role = Role::Active(role as u32);
        held.sb.data_bytes = needed;
        held.sb.recovery_offset_bytes = None;
        held.sb.replace_offset_bytes = None;
        meta.template.roles[role].member_uuid = held.sb.member_uuid;
        let whole = Arc::clone(&held.whole);
        meta.roles[role] = Some(held);
        self.adopt_used_map(role, Some(Arc::clone(&whole)));
        self.adopt_bitmap(role, whole);
        self.write_superblocks(&mut meta)?;
        self.array.finish_replace(role);
        self.mark_write_mostly(&meta, role);
        Ok(())
    }

    /// Reads only when no other copy can serve from the members named (RAID 1, 10; md's
    /// write-mostly). Every name must be a member or spare of the array; a spare named is
    /// marked when it takes a role. Replaces the list given before.
    pub(crate) fn set_write_mostly(&self, names: &[String]) -> Result<(), VolumeError> {
        let refused = |reason: String| VolumeError::Refused {
            what: "mark members write-mostly".to_string(),
            reason,
        };
        if !names.is_empty() && !self.array.geometry().is_mirrored() {
            return Err(refused(format!(
                "a {} array has one copy of its data: write-mostly applies to raid1 and raid10",
                self.array.geometry().level()
            )));
        }
        let mut meta = self.lock_meta();
        let known: Vec<&str> = (meta.roles.iter().flatten())
            .chain(&meta.spares)
            .map(|h| h.whole.name())
            .collect();
        if let Some(unknown) = names.iter().find(|n| !known.contains(&n.as_str())) {
            return Err(refused(format!(
                "{unknown:?} is not a member or spare of array {:?} (its members: {})",
                self.name(),
                known.join(", ")
            )));
        }
        meta.write_mostly = names.to_vec();
        for role in 0..meta.roles.len() {
            self.mark_write_mostly(&meta, role);
        }
        Ok(())
    }

    /// Gives the engine's role `role` the write-mostly mark its member's name says.
    fn mark_write_mostly(&self, meta: &MetaState, role: usize) {
        let named = meta.roles[role]
            .as_ref()
            .is_some_and(|h| meta.write_mostly.iter().any(|n| n == h.whole.name()));
        self.array.set_write_mostly(role, named);
    }

    /// `whole` now holds `role`: it receives the whole bitmap, then every bitmap update. A
    /// failed write fails it (it is then rebuilt or dropped like any faulty member).
    fn adopt_bitmap(&self, role: usize, whole: Arc<dyn Member>) {
        let Some(bitmap) = &self.bitmap else { return };
        if let Err(e) = bitmap.set_target(role, Some(whole)) {
            self.array
                .try_fail_member(role, FaultReason::WriteError(format!("bitmap: {e}")));
        }
    }

    pub(crate) fn scrub(&self, repair: bool) -> Result<(), VolumeError> {
        if !self.level().has_redundancy() {
            return Err(VolumeError::Refused {
                what: "scrub".into(),
                reason: format!("a {} array has no redundancy to check", self.level()),
            });
        }
        let mut state = self.work.lock();
        state.scrub_request = Some(repair);
        state.last_scrub = None;
        // A new request starts from the beginning.
        state.scrub_position = None;
        state.deferred_progress = None;
        drop(state);
        self.work.resume();
        self.work.notify();
        Ok(())
    }

    pub(crate) fn defer_background(&self, reason: Option<String>) {
        self.work.set_deferred(reason);
    }

    pub(crate) fn set_speed_limits(&self, limits: SpeedLimits) {
        let max = limits.max_bytes_per_sec.max(1);
        let limits = SpeedLimits {
            min_bytes_per_sec: limits.min_bytes_per_sec.clamp(1, max),
            max_bytes_per_sec: max,
        };
        self.work.lock().limits = limits;
        self.work.notify();
    }

    pub(crate) fn speed_limits(&self) -> SpeedLimits {
        self.work.limits()
    }

    pub(crate) fn set_fault_policy(&self, policy: engine::FaultPolicy) {
        self.array.set_fault_policy(policy);
    }

    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.work.is_busy() && self.next_task().is_none() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            self.work
                .wait_change((deadline - now).min(Duration::from_millis(20)));
        }
    }

    pub(crate) fn member_status(&self) -> Vec<MemberStatus> {
        let mut members = self.status().members;
        members.retain(|m| m.role.is_some() && m.state != MemberState::ReplacementTarget);
        members
    }

    pub(crate) fn member_io_stats(&self) -> Vec<iostats::IoSnapshot> {
        self.array.member_io_stats()
    }

    pub(crate) fn status(&self) -> VolumeStatus {
        let meta = self.lock_meta();
        let work = self.work.lock();
        let health = self.array.health_snapshot();
        let progress = |role: usize, kind: TaskKind| {
            work.current
                .as_ref()
                .filter(|t| t.kind == kind && t.role == Some(role))
                .map(|t| t.done_bytes)
        };
        let replacing_role = meta.replacing.as_ref().map(|(r, _)| *r);
        let mut members: Vec<MemberStatus> = Vec::new();
        for (role, h) in health.iter().enumerate() {
            let stats = self.array.fault_stats(role);
            let held = meta.roles[role].as_ref();
            let state = match h {
                MemberHealth::InSync if replacing_role == Some(role) => MemberState::Replacing,
                MemberHealth::InSync => MemberState::Active,
                MemberHealth::Recovering => MemberState::Rebuilding,
                MemberHealth::Faulty => MemberState::Faulty,
                MemberHealth::Missing => MemberState::Missing,
            };
            let rebuild_offset_bytes = (state == MemberState::Rebuilding).then(|| {
                progress(role, TaskKind::Rebuild)
                    .or(held.and_then(|h| h.sb.recovery_offset_bytes))
                    .unwrap_or(0)
            });
            let stuck = held.map_or((0, 0), |h| h.whole.stuck_calls());
            let speed = self.array.member_speed(role);
            members.push(MemberStatus {
                role: Some(role),
                name: held.map(|h| h.whole.name().to_string()).unwrap_or_default(),
                state,
                write_mostly: speed.write_mostly,
                slow: speed.slow,
                latency_us: speed.latency_us,
                peers_latency_us: speed.peers_latency_us,
                read_errors: stats.read_errors,
                write_errors: stats.write_errors,
                timeouts: stats.timeouts,
                stuck_calls: stuck.0 as u64,
                abandoned_calls: stuck.1,
                no_space_errors: stats.no_space_errors,
                filesystem: held
                    .filter(|_| stats.no_space_errors > 0)
                    .and_then(|h| FilesystemStatus::of_member(h.whole.name())),
                rebuild_offset_bytes,
            });
        }
        if let Some((role, held)) = &meta.replacing {
            members.push(plain_status(
                Some(*role),
                held,
                MemberState::ReplacementTarget,
            ));
            members.last_mut().expect("pushed").rebuild_offset_bytes =
                Some(progress(*role, TaskKind::Replace).unwrap_or(0));
        }
        members.extend(
            meta.spares
                .iter()
                .map(|h| plain_status(None, h, MemberState::Spare)),
        );
        VolumeStatus {
            name: self.name().to_string(),
            uuid: self.uuid(),
            level: crate::status::level_name(self.level()),
            chunk_bytes: self.chunk_bytes(),
            size_bytes: self.size_bytes(),
            health: self.health(&meta, &health),
            members,
            task: work
                .current
                .clone()
                .or_else(|| self.waiting_task(&meta, &work)),
            speed_limits: work.limits,
            last_scrub: work.last_scrub.clone(),
            events: meta.events,
            bitmap: self.bitmap_status(),
            used_map: self.used_map_status(),
            unsynced_bytes: self.array.unsynced_units() * self.sync_unit_array_bytes(),
            at_risk: self.at_risk(),
            bad_blocks: self.bad_block_status(&meta),
            checksum: self.checksum_status(&meta),
            read_balance: Some(self.array.read_balance().to_string()),
        }
    }

    /// Every range recorded in the lists of the members holding roles.
    pub(crate) fn bad_block_status(&self, meta: &MetaState) -> Vec<crate::status::BadBlockStatus> {
        let geometry = self.geometry();
        let mut out = Vec::new();
        for (role, held) in meta.roles.iter().enumerate() {
            let Some((held, bad)) = held.as_ref().and_then(|h| Some((h, h.bad.as_ref()?))) else {
                continue;
            };
            for r in bad.ranges() {
                let (stripe_array_offset, array_offset) =
                    crate::badblocks::array_offset_of(geometry, role, r.offset);
                out.push(crate::status::BadBlockStatus {
                    role,
                    member: held.whole.name().to_string(),
                    member_offset: r.offset,
                    len: r.len,
                    array_offset,
                    stripe_array_offset,
                });
            }
        }
        out
    }

    /// The checksum counters, when the array keeps checksums.
    fn checksum_status(&self, meta: &MetaState) -> Option<crate::ChecksumStatus> {
        let alg = meta.template.checksum?.alg;
        let stats = &self.checksums.stats;
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        Some(crate::ChecksumStatus {
            algorithm: alg.name().to_string(),
            verified_blocks: load(&stats.verified),
            mismatches: load(&stats.mismatches),
            rehashed: load(&stats.rehashed),
            settled: load(&stats.settled),
        })
    }

    /// Outside the background window, with nothing running: the scrub or resync that waits for
    /// it, at the position it keeps, with the reason.
    fn waiting_task(&self, meta: &MetaState, work: &WorkState) -> Option<TaskStatus> {
        let reason = work.deferred.clone()?;
        let paused = |t: TaskStatus| TaskStatus {
            bytes_per_sec: 0,
            eta_secs: None,
            paused: Some(reason.clone()),
            ..t
        };
        if let Some(progress) = work.deferred_progress.clone() {
            return Some(paused(progress));
        }
        // Never started since the window closed: where it would start.
        let (chunk, units) = (self.chunk_bytes(), self.array.sync_unit_count());
        let unit_bytes = self.sync_unit_array_bytes();
        let (kind, done) = match (meta.resync, work.scrub_request) {
            (Some(r), _) => {
                let kind = match r.kind {
                    crate::work::Resync::AfterCrash => TaskKind::Resync,
                    crate::work::Resync::Initial => TaskKind::InitialSync,
                };
                (kind, r.offset / unit_bytes)
            }
            (None, Some(repair)) => {
                let kind = if repair {
                    TaskKind::Repair
                } else {
                    TaskKind::Scrub
                };
                let at = work.scrub_position.as_ref().filter(|p| p.repair == repair);
                (kind, at.map_or(0, |p| p.unit))
            }
            (None, None) => return None,
        };
        Some(paused(TaskStatus {
            kind,
            role: None,
            done_bytes: done * chunk,
            total_bytes: units * chunk,
            bytes_per_sec: 0,
            eta_secs: None,
            of_member_bytes: None,
            paused: None,
        }))
    }

    fn health(&self, meta: &MetaState, health: &[MemberHealth]) -> ArrayHealth {
        let readable: Vec<bool> = health.iter().map(|h| h.readable()).collect();
        if !self.array.geometry().survives(&readable) {
            ArrayHealth::Failed
        } else if meta.replacing.is_some() || health.contains(&MemberHealth::Recovering) {
            ArrayHealth::Rebuilding
        } else if readable.contains(&false) {
            ArrayHealth::Degraded
        } else if meta.resync.is_some() || self.array.unsynced_units() > 0 {
            ArrayHealth::Resyncing
        } else if self.is_dirty() {
            ArrayHealth::Active
        } else {
            ArrayHealth::Clean
        }
    }
}

fn plain_status(role: Option<usize>, held: &Held, state: MemberState) -> MemberStatus {
    let (stuck, abandoned) = held.whole.stuck_calls();
    MemberStatus {
        stuck_calls: stuck as u64,
        abandoned_calls: abandoned,
        ..MemberStatus::new(role, held.whole.name(), state)
    }
}

/// Every member the array holds: its roles', its spares and a replace's target.
fn every_held(meta: &MetaState) -> impl Iterator<Item = &Held> {
    let replacing = meta.replacing.iter().map(|(_, h)| h);
    meta.roles
        .iter()
        .flatten()
        .chain(&meta.spares)
        .chain(replacing)
}
