//! [`Fence`]: one switch over every member of an array that, once closed, lets no byte more
//! reach any of them. For an array another process has taken over (its owner lease): from
//! then on two writers would corrupt it, and the process that lost it may still have requests,
//! background work and threads running on it. Reads still pass (they change nothing).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{Identity, Member, StartCall, Started};

/// The switch; clones share it. Open until [`Fence::close`].
#[derive(Debug, Clone, Default)]
pub struct Fence {
    closed: Arc<AtomicBool>,
}

impl Fence {
    pub fn new() -> Fence {
        Fence::default()
    }

    /// From now on every write, flush, trim, write-zeroes and reconnect of a member wrapped by
    /// this fence fails without reaching it (a call already past the check finishes).
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// `member` behind this fence.
    pub fn wrap(&self, member: Arc<dyn Member>) -> Arc<dyn Member> {
        Arc::new(Fenced {
            inner: member,
            fence: self.clone(),
        })
    }

    fn check(&self, member: &dyn Member, what: &str) -> io::Result<()> {
        if !self.is_closed() {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "member {}: {what} refused: the array was taken over by another process, this \
                 one writes nothing more to it",
                member.name()
            ),
        ))
    }
}

/// A member behind a [`Fence`]: every call forwarded (vectored ones as vectored calls) while
/// the fence is open.
#[derive(Debug)]
struct Fenced {
    inner: Arc<dyn Member>,
    fence: Fence,
}

impl Member for Fenced {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.fence.check(self, "write")?;
        self.inner.write_at(buf, offset)
    }

    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.inner.read_vectored_at(bufs, offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.fence.check(self, "write")?;
        self.inner.write_vectored_at(bufs, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.fence.check(self, "flush")?;
        self.inner.flush()
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.fence.check(self, "write")?;
        self.inner.write_durable_at(buf, offset)
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.fence.check(self, "trim")?;
        self.inner.trim(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.fence.check(self, "write-zeroes")?;
        self.inner.write_zeroes(offset, len)
    }

    fn reconnect(&self) -> io::Result<()> {
        self.fence.check(self, "reconnect")?;
        self.inner.reconnect()
    }

    fn identity(&self) -> Option<Identity> {
        self.inner.identity()
    }

    /// Started on the inner member while the fence is open (reads always); a call that
    /// changes bytes once it is closed is "started" as its refusal.
    fn start(&self, call: StartCall<'_>) -> Option<Started> {
        let what = match call {
            StartCall::Read { .. } => None,
            StartCall::Write { .. } => Some("write"),
            StartCall::Trim { .. } => Some("trim"),
            StartCall::WriteZeroes { .. } => Some("write-zeroes"),
            StartCall::Flush => Some("flush"),
        };
        if let Some(what) = what {
            if let Err(e) = self.fence.check(self, what) {
                return Some(Started::failed(e));
            }
        }
        self.inner.start(call)
    }

    fn stuck_calls(&self) -> (usize, u64) {
        self.inner.stuck_calls()
    }

    /// The inner member's while the fence is open (reads always); once it is closed a write
    /// has none, and its own call is refused.
    fn ring_target(&self, ask: crate::RingAsk) -> Option<crate::RingTarget<'_>> {
        if ask.write && self.fence.is_closed() {
            return None;
        }
        self.inner.ring_target(ask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemMember;

    #[test]
    fn a_closed_fence_lets_reads_through_and_nothing_else() {
        let inner: Arc<dyn Member> = Arc::new(MemMember::new("m", 1 << 20).unwrap());
        let fence = Fence::new();
        let fenced = fence.wrap(Arc::clone(&inner));
        let other = fence.wrap(Arc::new(MemMember::new("n", 1 << 20).unwrap()));
        fenced.write_at(b"abc", 0).unwrap();
        fenced.write_vectored_at(&[b"d", b"e"], 3).unwrap();
        fenced.flush().unwrap();
        fence.close();
        for m in [&fenced, &other] {
            let refused = [
                m.write_at(b"x", 0),
                m.write_vectored_at(&[b"x"], 0),
                m.write_durable_at(b"x", 0),
                m.flush(),
                m.trim(0, 4096),
                m.write_zeroes(0, 4096),
                m.reconnect(),
            ];
            for r in refused {
                let e = r.unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
                assert!(e.to_string().contains("taken over"), "{e}");
            }
        }
        let mut buf = [0u8; 5];
        fenced.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"abcde", "nothing reached the member after the close");
        let mut one = [0u8; 1];
        fenced
            .read_vectored_at(&mut [&mut buf[..], &mut one[..]], 0)
            .unwrap();
        assert_eq!(fenced.name(), "m");
    }

    /// A member that starts calls ahead (`Detached`) behind the fence: started calls pass while
    /// it is open; once closed, a started write or flush is its refusal and a read still runs.
    #[test]
    fn started_calls_pass_the_fence_as_calls_do() {
        let inner: Arc<dyn Member> = Arc::new(crate::Detached::new(
            Arc::new(MemMember::new("m", 1 << 20).unwrap()),
            std::time::Duration::from_secs(5),
        ));
        let fence = Fence::new();
        let fenced = fence.wrap(inner);
        let write = StartCall::Write {
            offset: 0,
            bufs: &[b"ab", b"c"],
        };
        let started = fenced.start(write).expect("Detached starts calls");
        started.finish(&mut |_| {}).0.unwrap();
        fence.close();
        for call in [write, StartCall::Flush] {
            let (result, _) = fenced.start(call).unwrap().finish(&mut |_| {});
            let e = result.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        }
        let mut got = Vec::new();
        let read = StartCall::Read { offset: 0, len: 4 };
        let (result, _) = fenced
            .start(read)
            .unwrap()
            .finish(&mut |d| got.extend_from_slice(d));
        result.unwrap();
        assert_eq!(got, b"abc\0");
    }
}
