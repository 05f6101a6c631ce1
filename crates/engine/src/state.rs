//! Member health: the per-role state machine, fault counters and the fault policy.
//!
//! | from | to | trigger |
//! |---|---|---|
//! | `InSync` | `Faulty` | write/flush/trim error (not a lack of space: [`is_no_space`]), read errors over the policy's limit, a request slower than the timeout, `fail_member` |
//! | `Recovering` | `Faulty` | the same faults on the member being rebuilt |
//! | `Missing`, `Faulty` | `Recovering` | [`Array::attach_member`]: a new or returning member starts its rebuild |
//! | `Recovering` | `InSync` | [`Array::finish_rebuild`]: every row was rebuilt |
//! | `Faulty` | `Missing` | [`Array::detach_member`]: the faulty member is removed |
//!
//! A policy-driven fault ([`Array::try_fail_member`]) never takes the last copy of any data: when
//! the array would not survive without the member, it stays and the request that hit the error
//! fails instead (only the ranges that cannot be served).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When a member is declared faulty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FaultPolicy {
    /// More read errors than this within `read_error_window` fail the member.
    pub read_errors_max: u32,
    /// The window over which read errors are counted.
    pub read_error_window: Duration,
    /// A member request slower than this fails the member.
    pub io_timeout: Duration,
}

impl Default for FaultPolicy {
    fn default() -> FaultPolicy {
        FaultPolicy {
            read_errors_max: 20,
            read_error_window: Duration::from_secs(60),
            io_timeout: Duration::from_secs(30),
        }
    }
}

/// The engine's view of one role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberHealth {
    /// Read and written.
    InSync,
    /// Being rebuilt: written (every write reaches it) but not read until the rebuild ends.
    Recovering,
    /// Failed while running: neither read nor written.
    Faulty,
    /// No member for the role.
    Missing,
}

impl MemberHealth {
    pub(crate) fn code(self) -> u8 {
        match self {
            MemberHealth::InSync => 0,
            MemberHealth::Recovering => 1,
            MemberHealth::Faulty => 2,
            MemberHealth::Missing => 3,
        }
    }
    pub(crate) fn from_code(code: u8) -> MemberHealth {
        match code {
            0 => MemberHealth::InSync,
            1 => MemberHealth::Recovering,
            2 => MemberHealth::Faulty,
            3 => MemberHealth::Missing,
            other => panic!("unknown member health code {other}"),
        }
    }
    /// Data may be read from it.
    pub fn readable(self) -> bool {
        self == MemberHealth::InSync
    }
    /// Writes must reach it.
    pub fn writable(self) -> bool {
        matches!(self, MemberHealth::InSync | MemberHealth::Recovering)
    }
}

/// Why a member was declared faulty.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultReason {
    /// `fail_member` (operator or test).
    Requested,
    /// A write, flush, trim or write-zeroes failed.
    WriteError(String),
    /// Too many read errors within the window.
    ReadErrors { count: u32, window_secs: u64 },
    /// A request took longer than the timeout (or the member reported a timeout).
    Timeout { millis: u64 },
    /// A read error could not be repaired by rewriting the data.
    Unrepairable(String),
}

impl std::fmt::Display for FaultReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultReason::Requested => write!(f, "failed on request"),
            FaultReason::WriteError(e) => write!(f, "write error: {e}"),
            FaultReason::ReadErrors { count, window_secs } => {
                write!(f, "{count} read errors within {window_secs} s")
            }
            FaultReason::Timeout { millis } => write!(f, "request took {millis} ms (timeout)"),
            FaultReason::Unrepairable(e) => write!(f, "unrepairable read error: {e}"),
        }
    }
}

/// Error counters of one role (reset when a new member takes the role).
#[derive(Debug, Default)]
pub(crate) struct FaultCounters {
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    timeouts: AtomicU64,
    /// Write-type requests refused for lack of space (not faults: see [`is_no_space`]).
    no_space_errors: AtomicU64,
    /// Times of recent read errors (at most `read_errors_max + 1` kept).
    recent_reads: Mutex<VecDeque<Instant>>,
    last_fault: Mutex<Option<FaultReason>>,
}

impl FaultCounters {
    /// Counts a request slower than the timeout (or reported as timed out).
    pub(crate) fn note_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed write-type request.
    pub(crate) fn note_write_error(&self) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a write-type request refused for lack of space.
    pub(crate) fn note_no_space(&self) {
        self.no_space_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Records why the member was last declared faulty.
    pub(crate) fn record(&self, reason: FaultReason) {
        *self.last_fault.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> FaultStats {
        FaultStats {
            read_errors: self.read_errors.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            no_space_errors: self.no_space_errors.load(Ordering::Relaxed),
            last_fault: self
                .last_fault
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|r| r.to_string()),
        }
    }

    /// Records a read error; true when the policy's limit is now exceeded.
    pub(crate) fn note_read_error(&self, policy: &FaultPolicy) -> bool {
        self.read_errors.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut recent = self.recent_reads.lock().unwrap_or_else(|p| p.into_inner());
        recent.push_back(now);
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > policy.read_error_window)
        {
            recent.pop_front();
        }
        let limit = policy.read_errors_max as usize;
        while recent.len() > limit + 1 {
            recent.pop_front();
        }
        recent.len() > limit
    }

    pub(crate) fn reset(&self) {
        self.read_errors.store(0, Ordering::Relaxed);
        self.write_errors.store(0, Ordering::Relaxed);
        self.timeouts.store(0, Ordering::Relaxed);
        self.no_space_errors.store(0, Ordering::Relaxed);
        self.recent_reads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// A snapshot of one role's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FaultStats {
    pub read_errors: u64,
    pub write_errors: u64,
    pub timeouts: u64,
    /// Writes the member refused for lack of space (ENOSPC, EDQUOT): counted, never a fault.
    pub no_space_errors: u64,
    /// Why the member was last declared faulty, if it was.
    pub last_fault: Option<String>,
}

/// True when a member refused a request for lack of space: `ENOSPC` (the filesystem or pool
/// under a sparse file member is full) or `EDQUOT` (a quota). That is a condition of the
/// storage the member lives on — usually shared by every member on the same filesystem — not
/// a fault of the member: failing it would throw redundancy away and fix nothing. The request
/// fails with that error instead (the NBD client sees `ENOSPC`).
pub fn is_no_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}
