//! [`AssembleOptions`]: how to assemble and start a volume.

use ondisk::AssemblyPlanOptions;
use uuid::Uuid;

/// How to assemble.
#[derive(Clone, Debug, Default)]
pub struct AssembleOptions {
    /// Start a RAID 5/6 array that is both dirty and degraded without a journal to replay,
    /// risking the write hole (`serve --start-dirty-degraded`, md's start_dirty_degraded):
    /// the volume then reports the array ranges at risk ([`crate::AtRisk`]).
    pub start_dirty_degraded: bool,
    /// The journal the caller replays into the volume before anything else reads or writes it
    /// (`export::JournalLayer::attach`, which calls [`crate::Volume::journal_replayed`]).
    /// When it is the array's own journal (same UUID as the superblocks' reference), a dirty
    /// and degraded RAID 5/6 array starts without `start_dirty_degraded`: the replay makes
    /// every stripe that was being written consistent (docs/DESIGN.md, durability contract).
    /// The volume's background work (rebuild, resync) waits for that replay.
    pub journal_replay: Option<Uuid>,
    /// Members to use as spares: blank ones receive a spare superblock; members already
    /// carrying this array's spare superblock may also be passed among the members.
    pub spares: Vec<std::sync::Arc<dyn member::Member>>,
    /// When members are declared faulty.
    pub fault_policy: engine::FaultPolicy,
    /// Background (rebuild, resync, scrub) rate limits.
    pub speed_limits: crate::status::SpeedLimits,
    /// Assemble for writing as this process: refuse an array another live process owns, then
    /// record this one as its owner (`ondisk::owner`) until `release_owner`. `None`: neither
    /// (read-only use, tests).
    pub owner: Option<ondisk::owner::ThisHost>,
    /// Take the array from an owner on another host that still looks alive (its lease has not
    /// run out): the operator knows that host is gone. Never overrides a process that runs on
    /// this host.
    pub force_owner: bool,
}

impl AssembleOptions {
    /// What the assembly decision is told of these options.
    pub fn plan_options(&self) -> AssemblyPlanOptions {
        AssemblyPlanOptions {
            start_dirty_degraded: self.start_dirty_degraded,
            journal_replay: self.journal_replay,
            owner: self.owner.clone(),
            force_owner: self.force_owner,
        }
    }
}
