//! Pipelined rebuild: [`RebuildPipeline`] overlaps the write of one rebuild step to the new
//! member with the reads (from every surviving member in parallel) and the reconstruction of
//! the next step, so a member whose write speed is the limit is kept writing all the time.
//!
//! **Locking (why client writes are not lost).** As in [`Array::rebuild_step`], each step holds
//! the stripe locks of its rows from before its reads until its write has completed, so a
//! client write to those rows lands either wholly before the reads (and is rebuilt from) or
//! wholly after the write (and reaches the recovering member itself). The pipeline only makes
//! the lock sets of two consecutive steps overlap in time: step N's locks are held by the
//! calling thread while a writer thread writes step N, and meanwhile step N+1's locks are
//! taken and its data read and reconstructed. The writer thread itself never takes a lock.
//!
//! **Deadlock freedom.** Everybody else takes a request's locks at once in ascending table
//! order. The pipeline, holding step N's set, waits for step N+1's set only when all of its
//! table indexes are above all of step N's: so it too only ever waits for locks above every
//! lock it holds, and no cycle can form. When step N+1's indexes wrap around the table (or
//! overlap step N's), it tries them without waiting; if any is taken, it first finishes step
//! N (releasing its locks) and then waits — one pipeline bubble per wrap of the table.
//!
//! Errors: a source read error ends the overlap for that step — the previous write is
//! finished, the locks released, and the step is redone by [`Array::rebuild_step`], which
//! repairs and retries like a client read. A write error fails the new member (as in
//! `rebuild_step`), which ends the rebuild — except a lack of space, which is kept for
//! [`RebuildPipeline::take_no_space`] so the rebuild redoes those rows.

use std::sync::mpsc;
use std::thread::Scope;

use crate::error::IoError;
use crate::io::MemOp;
use crate::levels::repair;
use crate::locks::{Held, StripeLocks};
use crate::state::{FaultReason, MemberHealth};
use crate::Array;

/// Reconstructed buffers kept for reuse: one being written, one being filled.
const FREE_BUFFERS_MAX: usize = 2;

/// A write handed to the writer thread.
struct Job {
    offset: u64,
    buf: Vec<u8>,
}

/// A finished write, with its buffer back for reuse.
struct Done {
    offset: u64,
    result: Result<(), IoError>,
    buf: Vec<u8>,
}

/// The step whose write is in flight, and the locks of its rows.
struct Pending<'s> {
    _held: Held<'s>,
    indexes: Vec<usize>,
}

/// A rebuild of one recovering role in overlapping steps (see the module docs). Created by
/// [`Array::rebuild_pipeline`] inside a [`std::thread::scope`] (its writer thread lives there);
/// steps are given in any order of disjoint ranges. Dropping it waits for the write in flight.
pub struct RebuildPipeline<'s> {
    array: &'s Array,
    role: usize,
    jobs: Option<mpsc::SyncSender<Job>>,
    done: mpsc::Receiver<Done>,
    pending: Option<Pending<'s>>,
    free: Vec<Vec<u8>>,
    /// The lowest step whose write the member refused for lack of space (not yet reported).
    no_space: Option<(u64, IoError)>,
}

impl Array {
    /// Starts a pipelined rebuild of the recovering member of `role`; its writer thread runs
    /// in `scope` until the pipeline is dropped.
    pub fn rebuild_pipeline<'s>(
        &'s self,
        role: usize,
        scope: &'s Scope<'s, '_>,
    ) -> RebuildPipeline<'s> {
        assert!(role < self.member_count());
        let (jobs, job_rx) = mpsc::sync_channel::<Job>(1);
        let (done_tx, done) = mpsc::sync_channel::<Done>(1);
        std::thread::Builder::new()
            .name(format!("raidkit-rebuild-write-{role}"))
            .spawn_scoped(scope, move || {
                while let Ok(job) = job_rx.recv() {
                    let result = self.parts.member_io(MemOp::Write {
                        role,
                        offset: job.offset,
                        buf: &job.buf,
                    });
                    let reply = Done {
                        offset: job.offset,
                        result,
                        buf: job.buf,
                    };
                    if done_tx.send(reply).is_err() {
                        return;
                    }
                }
            })
            .expect("cannot start the rebuild writer thread");
        RebuildPipeline {
            array: self,
            role,
            jobs: Some(jobs),
            done,
            pending: None,
            free: Vec::new(),
            no_space: None,
        }
    }
}

impl<'s> RebuildPipeline<'s> {
    /// Rebuilds `[offset, offset+len)` of the role: reads and reconstructs it under its rows'
    /// locks, waits for the previous step's write, and hands this step's write to the writer.
    /// On return every earlier step is written (not flushed); this one may still be in flight
    /// ([`RebuildPipeline::drain`] waits for it). Does nothing once the role is no longer
    /// recovering (check [`Array::health_of`]).
    pub fn step(&mut self, offset: u64, len: u64) -> Result<(), IoError> {
        let (array, role) = (self.array, self.role);
        assert!(len > 0 && offset + len <= array.parts.geometry.member_data_bytes(role));
        let indexes =
            StripeLocks::indexes(array.parts.member_range_keys(role, offset, len).into_iter());
        let held = self.lock_next(&indexes);
        if array.health_of(role) != MemberHealth::Recovering {
            drop(held);
            self.drain();
            return Ok(());
        }
        let readable = array.present_snapshot();
        assert!(!readable[role], "a recovering member is never read");
        let mut buf = self.free.pop().unwrap_or_default();
        buf.resize(len as usize, 0);
        let (level, parts) = (array.level_io, &array.parts);
        if repair::reconstruct(level, parts, role, offset, &mut buf, &readable, true).is_err() {
            // Repair needs the rows' locks of the failing member: release ours first.
            drop(held);
            self.keep(buf);
            self.drain();
            return array.rebuild_step(role, offset, len);
        }
        self.drain();
        let jobs = self.jobs.as_ref().expect("writer runs until drop");
        if jobs.send(Job { offset, buf }).is_err() {
            panic!("the rebuild writer thread ended early");
        }
        self.pending = Some(Pending {
            _held: held,
            indexes,
        });
        Ok(())
    }

    /// Waits for the write in flight, if any, and releases its locks.
    pub fn drain(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let done = match self.done.recv() {
            Ok(done) => done,
            Err(_) => panic!("the rebuild writer thread ended with a write in flight"),
        };
        match done.result {
            Err(e) if e.is_no_space() => {
                // Not a fault of the new member: the step must be redone once there is space.
                if self
                    .no_space
                    .as_ref()
                    .is_none_or(|(at, _)| done.offset < *at)
                {
                    self.no_space = Some((done.offset, e));
                }
            }
            // As in `rebuild_step`: a write error fails the new member and ends the rebuild.
            Err(e) => {
                self.array
                    .try_fail_member(self.role, FaultReason::WriteError(e.to_string()));
            }
            Ok(()) => {}
        }
        drop(pending);
        self.keep(done.buf);
    }

    /// The lowest member offset of a finished step whose write the new member refused for lack
    /// of space (ENOSPC, EDQUOT), since the last call. The member is not failed for it: the
    /// rebuild must go back and redo from there (once there is space), or it would finish
    /// with those rows never written.
    pub fn take_no_space(&mut self) -> Option<(u64, IoError)> {
        self.no_space.take()
    }

    /// Takes the locks of the next step's rows (see the module docs on deadlock freedom).
    fn lock_next(&mut self, indexes: &[usize]) -> Held<'s> {
        let locks = &self.array.parts.locks;
        let keys = || indexes.iter().map(|&i| i as u64);
        if let Some(pending) = &self.pending {
            let above = match (indexes.first(), pending.indexes.last()) {
                (Some(first), Some(last)) => first > last,
                _ => false,
            };
            if above {
                return locks.lock(keys());
            }
            if let Some(held) = locks.try_lock_indexes(indexes) {
                return held;
            }
            self.drain();
        }
        locks.lock(keys())
    }

    fn keep(&mut self, buf: Vec<u8>) {
        if self.free.len() < FREE_BUFFERS_MAX {
            self.free.push(buf);
        }
    }
}

impl Drop for RebuildPipeline<'_> {
    fn drop(&mut self) {
        self.drain();
        // Closing the channel ends the writer thread; the scope joins it.
        self.jobs = None;
    }
}
