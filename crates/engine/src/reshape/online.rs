//! An array served while it reshapes (docs/DESIGN.md "Reshape", "Two geometries and a
//! position"): [`OnlineReshape`] holds the old and the new geometry's arrays on the same
//! members (an [`ArrayTarget`]) and the position `P`. Array bytes below `P` are read and
//! written in the new layout, bytes from the end of the window being moved on in the old, and
//! a client request touching that window waits until it is moved. The mover
//! ([`OnlineReshape::step`]) moves one window at a time with the offline mover's code
//! ([`ReshapePlan::next`], [`copy_window`]: backup write in the critical section, copy), then
//! flushes and records the window's end before any client request is served from it in the new
//! layout.
//!
//! Why the two layouts never touch the same member bytes: new row `r` lies on member row `r`,
//! as old row `r` does. Client requests below `P` use new rows below `P / S_new`; the window
//! writes new rows `[P / S_new, (P + W) / S_new)` and reads old rows from `⌊P / S_old⌋`, which
//! is at least `P / S_new` (`S_new > S_old`); client requests at or past `P + W` use old rows
//! from `⌊(P + W) / S_old⌋ ≥ (P + W) / S_new`. Old rows the window destroys hold addresses
//! below `P` (the window rule, `P_rec = P` here) or, in the critical section, of the window
//! itself (its backup covers them). A client request in flight in the old layout when a window
//! starts is waited for if it overlaps the window (the mover reads what it wrote); one that
//! does not overlap uses old rows the window does not write.
//!
//! Why a crash loses nothing: the position is recorded (new layout flushed first) at the end
//! of every window, before the window's bytes are served from the new layout, so `P_rec = P`
//! whenever a client can write there: a resume re-copies only the window in progress, whose
//! old bytes no client changed (its requests waited) and which the window rule kept intact or
//! the backup holds. (The offline mover records less often; online, a client write to
//! `[P_rec, P)` would be lost by the re-copy.)

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::{copy_window, resume, ArrayTarget, ReshapePlan, ReshapeTarget};
use crate::{Array, IoError, MemberHealth};

/// An array mid-reshape, served from both geometries while the mover goes on. Thread-safe: the
/// client methods and [`OnlineReshape::step`] may be called from many threads at once (one
/// mover).
pub struct OnlineReshape {
    plan: ReshapePlan,
    target: ArrayTarget,
    state: Mutex<State>,
    /// Signalled when a window is moved or a client request leaves the old layout.
    changed: Condvar,
    /// The two arrays' state epochs last reconciled (see `reconcile_health`).
    epochs: Mutex<(u64, u64)>,
    /// Client requests served.
    requests: AtomicU64,
}

struct State {
    /// Array bytes below this are in the new layout; it is recorded.
    position: u64,
    /// The end of the window being moved (`[position, end)`): client requests touching it wait.
    moving: Option<u64>,
    /// Old-layout ranges of client requests in flight (one entry per request; as many as the
    /// caller has requests in flight). The mover waits for those overlapping its window.
    old_in_flight: Vec<(u64, u64)>,
    /// A window whose move failed, and why: requests touching it fail (`IoError::ReshapeWindow`)
    /// and the mover stops; a restart resumes from the record.
    broken: Option<(u64, u64, String)>,
}

/// A client request admitted: `[offset, split)` in the new layout, `[split, end)` in the old
/// (registered in flight until dropped).
struct Admitted<'a> {
    online: &'a OnlineReshape,
    split: u64,
    end: u64,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.split < self.end {
            let mut state = self.online.lock();
            let at = state
                .old_in_flight
                .iter()
                .position(|&r| r == (self.split, self.end))
                .expect("an admitted old-layout request is registered");
            state.old_in_flight.swap_remove(at);
            drop(state);
            self.online.changed.notify_all();
        }
    }
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl OnlineReshape {
    /// Serves the reshape recorded at `p_rec` over `target` (its old and new arrays on the same
    /// members, its backup area and recorder). First the offline resume: a complete backup at
    /// `p_rec` is written in place, and then the position after it is recorded (clients may
    /// write there in the new layout from now on). `target.used` must be `None`: clients change
    /// which regions hold data while the copy goes on, so every byte is copied.
    pub fn start(plan: ReshapePlan, target: ArrayTarget, p_rec: u64) -> io::Result<OnlineReshape> {
        assert!(
            target.used.is_none(),
            "an online reshape copies every byte (a used-regions image would go stale)"
        );
        assert_eq!(
            target.old.geometry(),
            plan.old(),
            "the old array is the plan's"
        );
        assert_eq!(
            target.new.geometry(),
            plan.new_geometry(),
            "the new array is the plan's"
        );
        let p = resume(&plan, &target, p_rec)?;
        if p != p_rec {
            target.flush_new()?;
            target.record(p)?;
        }
        let epochs = (target.old.state_epoch(), target.new.state_epoch());
        Ok(OnlineReshape {
            plan,
            target,
            state: Mutex::new(State {
                position: p,
                moving: None,
                old_in_flight: Vec::new(),
                broken: None,
            }),
            changed: Condvar::new(),
            epochs: Mutex::new(epochs),
            requests: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The size clients see: the old array's, until the reshape is finished by the caller.
    pub fn size_bytes(&self) -> u64 {
        self.target.old.size_bytes()
    }

    /// The recorded position: array bytes below it are in the new layout.
    pub fn position(&self) -> u64 {
        self.lock().position
    }

    /// Where the move ends (the new array's size).
    pub fn end(&self) -> u64 {
        self.plan.end()
    }

    /// True once every window is moved (and the end recorded).
    pub fn is_moved(&self) -> bool {
        self.position() == self.plan.end()
    }

    pub fn plan(&self) -> &ReshapePlan {
        &self.plan
    }

    /// The old geometry's array (roles `0..n`).
    pub fn old(&self) -> &Array {
        &self.target.old
    }

    /// The new geometry's array (roles `0..m`): the array once the reshape is finished.
    pub fn new_array(&self) -> &Array {
        &self.target.new
    }

    /// Client requests served so far (background work backs off while this moves).
    pub fn client_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The arrays and the rest, once moved (the caller records the end and serves the new
    /// array alone).
    pub fn into_target(self) -> ArrayTarget {
        self.target
    }

    fn admit(&self, offset: u64, len: u64) -> Result<Admitted<'_>, IoError> {
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= self.size_bytes())
            .unwrap_or_else(|| {
                panic!(
                    "request {offset}+{len} beyond array of {} bytes",
                    self.size_bytes()
                )
            });
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        loop {
            if let Some((start, stop, reason)) = &state.broken {
                if overlaps((offset, end), (*start, *stop)) {
                    return Err(IoError::ReshapeWindow {
                        start: *start,
                        end: *stop,
                        reason: reason.clone(),
                    });
                }
            }
            match state.moving {
                Some(stop) if len > 0 && overlaps((offset, end), (state.position, stop)) => {
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                _ => break,
            }
        }
        let split = state.position.clamp(offset, end);
        if split < end {
            state.old_in_flight.push((split, end));
        }
        Ok(Admitted {
            online: self,
            split,
            end,
        })
    }

    /// Runs `new` on the part of `[offset, offset + len)` below the position and `old` on the
    /// rest, each with its array, its offset and the part's start within the request.
    fn split_by(
        &self,
        offset: u64,
        len: u64,
        mut io: impl FnMut(&Array, u64, std::ops::Range<usize>) -> Result<(), IoError>,
    ) -> Result<(), IoError> {
        let admitted = self.admit(offset, len)?;
        let split = (admitted.split - offset) as usize;
        let result = (|| {
            if split > 0 {
                io(&self.target.new, offset, 0..split)?;
            }
            if admitted.split < admitted.end {
                io(&self.target.old, admitted.split, split..len as usize)?;
            }
            Ok(())
        })();
        drop(admitted);
        self.reconcile_health();
        result
    }

    /// Reads `buf.len()` bytes at `offset` (below [`OnlineReshape::size_bytes`]).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.split_by(offset, buf.len() as u64, |array, at, part| {
            array.read(at, &mut buf[part])
        })
    }

    /// Writes `buf` at `offset`.
    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<(), IoError> {
        self.split_by(offset, buf.len() as u64, |array, at, part| {
            array.write(at, &buf[part])
        })
    }

    /// Discards `[offset, offset + len)` (reads back zeroes).
    pub fn trim(&self, offset: u64, len: u64) -> Result<(), IoError> {
        self.split_by(offset, len, |array, at, part| {
            array.trim(at, part.len() as u64)
        })
    }

    /// Writes zeroes over `[offset, offset + len)`.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), IoError> {
        self.split_by(offset, len, |array, at, part| {
            array.write_zeroes(at, part.len() as u64)
        })
    }

    /// Makes every earlier completed write durable (both arrays: the members are the same, the
    /// new one has the added members too).
    pub fn flush(&self) -> Result<(), IoError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.target.old.flush()?;
        self.target.new.flush()
    }

    /// Moves the next window: waits for the client requests in flight in it (new ones touching
    /// it wait meanwhile), copies it (through the backup area in the critical section), flushes
    /// the new layout, records its end, and serves it from the new layout. Returns the position
    /// reached, `None` when every window was moved already. `buf` is the mover's buffer (at
    /// most one window, [`super::WINDOW_BYTES_MAX`]). On an error the window stays unserved
    /// (requests touching it fail) and every later call fails: what is recorded resumes when
    /// the array is started again.
    pub fn step(&self, buf: &mut Vec<u8>) -> io::Result<Option<u64>> {
        let window = {
            let mut state = self.lock();
            if let Some((start, end, reason)) = &state.broken {
                return Err(io::Error::other(format!(
                    "the reshape stopped moving array bytes {start}..{end}: {reason}"
                )));
            }
            let Some(window) = self.plan.next(state.position, state.position) else {
                return Ok(None);
            };
            assert!(
                !window.record_first,
                "the position is recorded every window"
            );
            state.moving = Some(window.end);
            while state
                .old_in_flight
                .iter()
                .any(|&r| overlaps(r, (window.start, window.end)))
            {
                state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            window
        };
        let result = copy_window(&self.target, &window, window.start, buf)
            .and_then(|()| self.target.flush_new())
            .and_then(|()| self.target.record(window.end));
        let mut state = self.lock();
        state.moving = None;
        match &result {
            Ok(()) => state.position = window.end,
            Err(e) => state.broken = Some((window.start, window.end, e.to_string())),
        }
        drop(state);
        self.changed.notify_all();
        self.reconcile_health();
        result.map(|()| Some(window.end))
    }

    /// A member one array stopped using (a fault) is stopped in the other too: the roles
    /// `0..n` are the same members, and a member one geometry no longer writes must not be
    /// read by the other.
    fn reconcile_health(&self) {
        let (old, new) = (&self.target.old, &self.target.new);
        let mut seen = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        let now = (old.state_epoch(), new.state_epoch());
        if *seen == now {
            return;
        }
        let out = |h: MemberHealth| matches!(h, MemberHealth::Faulty | MemberHealth::Missing);
        let (old_health, new_health) = (old.health_snapshot(), new.health_snapshot());
        for (role, (&o, &n)) in old_health.iter().zip(&new_health).enumerate() {
            if out(o) && !out(n) {
                new.fail_member(role);
            } else if out(n) && !out(o) {
                old.fail_member(role);
            }
        }
        *seen = (old.state_epoch(), new.state_epoch());
    }
}
