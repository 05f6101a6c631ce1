//! `raidkit grow` on a stopped array, the whole of it but the command line (docs/DESIGN.md
//! "Reshape"): [`grow`] resumes a reshape the members record, or grows as asked — `--size max`
//! (`ondisk::grow_size_max`), members appended to a linear array (`ondisk::grow_add_linear`),
//! or members added to a RAID 0/5/6 array by moving its data: the reshape is recorded (the new
//! members' superblocks first, `ondisk::reshape_start`), the data moved window by window by
//! `engine::reshape` over two engine arrays on the members' data areas with the backup area of
//! every member, the position recorded in the superblocks, and the new geometry recorded
//! (`ondisk::reshape_finish`). The caller sees what happens through [`GrowEvent`]s (the
//! progress bar and the messages are the front end's).

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engine::reshape::{self, ArrayTarget, BackupArea, ReshapePlan, RunOptions};
use engine::{Array, ArrayConfig};
use layout::Level;
use member::{Member, Window};
use ondisk::{GrowError, GrowReport, Reshaping};

/// Window of the copy outside the critical section (rounded to new stripes).
pub const WINDOW_BYTES: u64 = 4 << 20;
/// The position is recorded at least this often (bounds the work redone after a stop).
pub const RECORD_EVERY_BYTES: u64 = 256 << 20;

/// How [`grow`] runs.
#[derive(Clone, Copy, Debug)]
pub struct GrowOptions {
    /// Overwrite new members that carry a superblock or data.
    pub force: bool,
    /// The mover's window outside the critical section.
    pub window_bytes: u64,
    /// The position is recorded when it is this far past the recorded one.
    pub record_every_bytes: u64,
}

impl Default for GrowOptions {
    fn default() -> Self {
        GrowOptions {
            force: false,
            window_bytes: WINDOW_BYTES,
            record_every_bytes: RECORD_EVERY_BYTES,
        }
    }
}

/// What [`grow`] tells its caller as it goes.
pub enum GrowEvent<'a> {
    /// This member's superblock, torn by a stop during an earlier run, was rewritten from its
    /// peers (`ondisk::repair_torn_superblocks`).
    Repaired(&'a str),
    /// The members record a reshape that stopped: it is resumed.
    Resuming(&'a Reshaping),
    /// A reshape was recorded (position 0): the data moves next.
    Recorded(&'a Reshaping),
    /// The copy starts (or goes on) at array byte `at` of `end`.
    Moving { at: u64, end: u64 },
    /// A window was copied: the copy is at array byte `at` of `end`.
    Moved { at: u64, end: u64 },
}

/// Why [`grow`] did not finish.
#[derive(Debug)]
pub enum GrowAddError {
    /// Refused or failed before or after the data moved (the text names the array, the member
    /// and what to do).
    Grow(GrowError),
    /// The copy stopped (an I/O error, or the caller's observer said stop); what is durable
    /// resumes when [`grow`] runs again with the same members.
    Stopped { array: String, error: io::Error },
    /// A member failed a read or write while the data moved: the copy stopped at once (after
    /// the window in progress); what is durable resumes. `survives`: the level goes on without
    /// it, so a rerun without this member finishes the reshape degraded (its role recorded
    /// missing; a spare rebuilds it after); else (RAID 0) the member must be made readable.
    MemberFailed {
        array: String,
        member: String,
        reason: String,
        position: u64,
        survives: bool,
    },
}

impl fmt::Display for GrowAddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrowAddError::Grow(e) => write!(f, "{e}"),
            GrowAddError::Stopped { array, error } => write!(
                f,
                "array {array}: the reshape stopped: {error}; nothing is lost: run the same \
                 raidkit grow command again to resume it"
            ),
            GrowAddError::MemberFailed {
                array,
                member,
                reason,
                position,
                survives: true,
            } => write!(
                f,
                "array {array}: member {member} failed during the reshape ({reason}); the \
                 reshape stopped at array byte {position} and nothing is lost: run the same \
                 raidkit grow command without {member} (its role is recorded missing and the \
                 reshape finishes degraded), then give the array a spare (raidkit add) to \
                 rebuild onto"
            ),
            GrowAddError::MemberFailed {
                array,
                member,
                reason,
                position,
                survives: false,
            } => write!(
                f,
                "array {array}: member {member} failed during the reshape ({reason}); the \
                 reshape stopped at array byte {position}, and the array cannot do without \
                 this member: make it readable again (or copy it to a new disk) and run the \
                 same raidkit grow command again to resume"
            ),
        }
    }
}

impl std::error::Error for GrowAddError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GrowAddError::Grow(e) => Some(e),
            GrowAddError::Stopped { error, .. } => Some(error),
            GrowAddError::MemberFailed { .. } => None,
        }
    }
}

impl From<GrowError> for GrowAddError {
    fn from(e: GrowError) -> Self {
        GrowAddError::Grow(e)
    }
}

/// Grows the stopped array of `members` (every member and spare) with `new` (members to add,
/// none of them also in `members`): resumes
/// a reshape the members record (then `new` may be empty: the members mid-reshape are all in
/// `members`), else `--size max` when `new` is empty, a linear append, or a reshape of RAID
/// 0/5/6. `observe` sees each step; an error it returns stops the copy (resumable).
pub fn grow(
    members: &[Arc<dyn Member>],
    new: &[Arc<dyn Member>],
    options: &GrowOptions,
    observe: &mut dyn FnMut(GrowEvent<'_>) -> io::Result<()>,
) -> Result<GrowReport, GrowAddError> {
    let all: Vec<Arc<dyn Member>> = members.iter().chain(new).cloned().collect();
    for name in ondisk::repair_torn_superblocks(&all)? {
        observe(GrowEvent::Repaired(&name)).map_err(|error| GrowAddError::Stopped {
            array: name.clone(),
            error,
        })?;
    }
    if let Some(state) = reshape_state_of(&all)? {
        observe(GrowEvent::Resuming(&state)).map_err(|error| GrowAddError::Stopped {
            array: state.array.clone(),
            error,
        })?;
        return move_data(&all, state, options, observe);
    }
    if let Some(mut report) = already_added(&all, new) {
        if ondisk::reshape_settle(&all)? > 0 {
            report.notes = vec![format!(
                "the reshape had finished but a stop cut its last superblock rewrite, now done \
                 (events {})",
                report.events
            )];
        }
        return Ok(report);
    }
    if new.is_empty() {
        return Ok(ondisk::grow_size_max(members)?);
    }
    let linear = matches!(
        ondisk::read_superblock(members[0].as_ref()).map(|sb| sb.level),
        Ok(Level::Linear) | Err(_)
    );
    if linear {
        return Ok(ondisk::grow_add_linear(members, new, options.force)?);
    }
    let state = ondisk::reshape_start(members, new, options.force)?;
    observe(GrowEvent::Recorded(&state)).map_err(|error| GrowAddError::Stopped {
        array: state.array.clone(),
        error,
    })?;
    move_data(&all, state, options, observe)
}

/// When every member of `all` (old and new) carries a superblock of one array and the freshest
/// records no reshape, while some member still records one (a stop cut the last superblock
/// rewrite of a reshape) or the freshest names each of `new` in its role table: the members
/// were added already. Nothing to do but settle the members behind (the caller).
fn already_added(all: &[Arc<dyn Member>], new: &[Arc<dyn Member>]) -> Option<GrowReport> {
    let sbs: Vec<ondisk::Superblock> = all
        .iter()
        .map(|m| ondisk::read_superblock(m.as_ref()).ok())
        .collect::<Option<_>>()?;
    let fresh = sbs.iter().max_by_key(|sb| sb.events)?;
    let named = |sb: &ondisk::Superblock| {
        sb.role_index().is_some_and(|r| {
            r < fresh.member_count as usize && fresh.roles[r].member_uuid == sb.member_uuid
        })
    };
    let one_array = sbs.iter().all(|sb| sb.array_uuid == fresh.array_uuid);
    let end_cut = sbs
        .iter()
        .any(|sb| sb.reshape.is_some() && sb.events + 1 == fresh.events);
    let named_new = !new.is_empty() && sbs[all.len() - new.len()..].iter().all(named);
    if fresh.reshape.is_some() || !one_array || !(end_cut || named_new) {
        return None;
    }
    Some(GrowReport {
        array: format!("\"{}\" {}", fresh.name, fresh.array_uuid),
        old_size: fresh.array_size_bytes,
        new_size: fresh.array_size_bytes,
        new_space: ondisk::NewSpace::NoRedundancy,
        events: fresh.events,
        notes: vec![
            "every member given is a member of the array already (the grow had finished): \
             nothing was changed"
                .to_string(),
        ],
    })
}

/// The reshape recorded on `members`, if any (members that carry no superblock of this array
/// are not part of it: only when every one does is it read).
fn reshape_state_of(members: &[Arc<dyn Member>]) -> Result<Option<Reshaping>, GrowError> {
    let carrying = members
        .iter()
        .filter(|m| ondisk::read_superblock(m.as_ref()).is_ok())
        .count();
    if carrying != members.len() {
        return Ok(None);
    }
    ondisk::reshape_open(members)
}

/// A member of the move that remembers its first failed operation (the engine degrades
/// around a failed member; the move stops on it instead, naming it).
#[derive(Debug)]
struct Watched {
    inner: Arc<dyn Member>,
    failed: Mutex<Option<String>>,
}

impl Watched {
    fn note<T>(&self, what: &str, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| format!("{what}: {e}"));
        }
        result
    }

    fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Member for Watched {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.note("read", self.inner.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.note("write", self.inner.write_at(buf, offset))
    }
    fn flush(&self) -> io::Result<()> {
        self.note("flush", self.inner.flush())
    }
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.note("write", self.inner.write_durable_at(buf, offset))
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.note("trim", self.inner.trim(offset, len))
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.note("write zeroes", self.inner.write_zeroes(offset, len))
    }
    fn identity(&self) -> Option<member::Identity> {
        self.inner.identity()
    }
}

/// Moves the data of the array mid-reshape in `state` (`members`: the order of `state.sbs`)
/// from its recorded position to the end, then records the new geometry. A member that fails
/// an operation stops the move after the window in progress ([`GrowAddError::MemberFailed`]).
fn move_data(
    members: &[Arc<dyn Member>],
    state: Reshaping,
    options: &GrowOptions,
    observe: &mut dyn FnMut(GrowEvent<'_>) -> io::Result<()>,
) -> Result<GrowReport, GrowAddError> {
    let watched: Vec<Arc<Watched>> = members
        .iter()
        .map(|m| {
            Arc::new(Watched {
                inner: m.clone(),
                failed: Mutex::new(None),
            })
        })
        .collect();
    let members: Vec<Arc<dyn Member>> = watched
        .iter()
        .map(|w| w.clone() as Arc<dyn Member>)
        .collect();
    let members = &members[..];
    let array = state.array.clone();
    let given: Vec<bool> = state.roles.iter().map(Option::is_some).collect();
    let role_of: Vec<Option<usize>> = (0..members.len())
        .map(|i| state.roles.iter().position(|r| *r == Some(i)))
        .collect();
    let new_geometry = state.new.clone();
    let position = Arc::new(std::sync::atomic::AtomicU64::new(
        state.record.position_bytes,
    ));
    // The first failed member, if any, as the error the move stops with.
    let member_failed = || -> Option<GrowAddError> {
        let (i, reason) = watched
            .iter()
            .enumerate()
            .find_map(|(i, w)| w.failure().map(|r| (i, r)))?;
        let mut present = given.clone();
        if let Some(r) = role_of[i] {
            present[r] = false;
        }
        Some(GrowAddError::MemberFailed {
            array: array.clone(),
            member: watched[i].name().to_string(),
            reason,
            position: position.load(std::sync::atomic::Ordering::SeqCst),
            survives: role_of[i].is_none() || new_geometry.survives(&present),
        })
    };
    let stopped = |error: io::Error| match member_failed() {
        Some(failed) => failed,
        None => GrowAddError::Stopped {
            array: array.clone(),
            error,
        },
    };
    let fresh = state.fresh.clone();
    let fresh = &fresh;
    let roles = state.roles.clone();
    let record = state.record;
    assert_eq!(
        BackupArea::bytes_per_member(&state.new),
        record.backup_bytes,
        "the backup area the superblock records is the mover's"
    );
    let data_bytes = fresh.roles[0].data_bytes;
    let window_of = |r: usize, offset: u64, len: u64| -> Option<Arc<dyn Member>> {
        roles[r].map(|i| Arc::new(Window::new(members[i].clone(), offset, len)) as Arc<dyn Member>)
    };
    let array_of = |count: usize| -> Result<Array, GrowAddError> {
        let a = Array::new(
            ArrayConfig {
                level: fresh.level,
                chunk_bytes: fresh.chunk_bytes,
                member_count: count,
                member_data_bytes: vec![data_bytes; count],
            },
            (0..count)
                .map(|r| window_of(r, fresh.data_offset_bytes, data_bytes))
                .collect(),
        )
        .map_err(|e| {
            GrowError::Refused(format!(
                "array {array}: cannot build the {count}-member geometry: {e}"
            ))
        })?;
        a.set_gather_wait(Duration::ZERO);
        Ok(a)
    };
    let n = record.old_member_count as usize;
    let m = fresh.member_count as usize;
    let plan = ReshapePlan::new(state.old.clone(), state.new.clone(), options.window_bytes)
        .map_err(|e| GrowError::Refused(format!("array {array}: {e}")))?;
    let backup = BackupArea::new(
        (0..m)
            .map(|r| window_of(r, record.backup_offset_bytes, record.backup_bytes))
            .collect(),
        &state.new,
        record.generation,
    );
    let p_rec = record.position_bytes;
    let used = ondisk::reshape_used_image(members, &state)?;
    let mut state = state;
    if !state.unrecorded_missing.is_empty() {
        // The members not given are recorded missing before anything moves without them.
        ondisk::reshape_record_position(members, &mut state, p_rec)?;
    }
    let shared = Arc::new(Mutex::new(state));
    let recorder_state = shared.clone();
    let recorder_members: Vec<Arc<dyn Member>> = members.to_vec();
    let recorded = position.clone();
    let target = ArrayTarget {
        old: array_of(n)?,
        new: array_of(m)?,
        backup,
        recorder: Box::new(move |p| {
            let mut state = recorder_state.lock().unwrap();
            ondisk::reshape_record_position(&recorder_members, &mut state, p)
                .map_err(io::Error::other)?;
            recorded.store(p, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }),
        used,
    };
    let p = reshape::resume(&plan, &target, p_rec).map_err(stopped)?;
    let end = plan.end();
    observe(GrowEvent::Moving { at: p, end }).map_err(stopped)?;
    reshape::run(
        &plan,
        &target,
        p,
        p_rec,
        RunOptions {
            record_every_bytes: options.record_every_bytes,
            progress: &mut |at| {
                if watched.iter().any(|w| w.failure().is_some()) {
                    return Err(io::Error::other("a member failed"));
                }
                observe(GrowEvent::Moved { at, end })
            },
        },
    )
    .map_err(stopped)?;
    if let Some(failed) = member_failed() {
        return Err(failed);
    }
    drop(target);
    let state = Arc::try_unwrap(shared)
        .unwrap_or_else(|_| panic!("the recorder still holds the reshape state"))
        .into_inner()
        .unwrap();
    // Every byte is moved and the end recorded: no resume reads the backup area again, so it
    // is zeroed (and flushed) before the end's superblocks, leaving no copy of array data
    // behind (docs/FORMAT.md "Reshape").
    let holders: Vec<&Arc<dyn Member>> =
        state.roles.iter().flatten().map(|&i| &members[i]).collect();
    for m in &holders {
        m.write_zeroes(record.backup_offset_bytes, record.backup_bytes)
            .and_then(|()| m.flush())
            .map_err(|e| {
                member_failed().unwrap_or_else(|| GrowAddError::Stopped {
                    array: array.clone(),
                    error: io::Error::other(format!(
                        "member {}: cannot zero the reshape backup area: {e}",
                        m.name()
                    )),
                })
            })?;
    }
    ondisk::reshape_finish(members, &state).map_err(|e| match member_failed() {
        Some(failed) => failed,
        None => GrowAddError::Grow(e),
    })
}
