//! `Hooked`: a member that runs a caller-given hook before each call, then forwards the call to
//! an inner member.
//!
//! For tests and tools that watch or steer a member's traffic without writing a member of their
//! own: count the bytes written, hold writes behind a gate, check an ordering rule before each
//! data write, fail calls while a flag is set. The hook sees each call ([`Call`]: what, where, how
//! many bytes) and either lets it through (`Ok`) or fails it with its own error (the inner member
//! is then not called).

use std::io;
use std::sync::Arc;

use crate::Member;

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `read_at` (a vectored read is one `Read` per buffer).
    Read,
    /// `write_at` (a vectored write is one `Write` per buffer).
    Write,
    /// `write_durable_at`.
    WriteDurable,
    /// `flush`.
    Flush,
    /// `trim`.
    Trim,
    /// `write_zeroes`.
    WriteZeroes,
    /// `reconnect`.
    Reconnect,
}

/// One call a [`Hooked`] member is about to pass on: `len` bytes at `offset` (both 0 for
/// `Flush` and `Reconnect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub op: Op,
    pub offset: u64,
    pub len: u64,
}

impl Call {
    /// True for the calls that change bytes: writes (durable or not), trims and write-zeroes.
    pub fn changes_bytes(&self) -> bool {
        matches!(
            self.op,
            Op::Write | Op::WriteDurable | Op::Trim | Op::WriteZeroes
        )
    }

    /// True for `write_at` and `write_durable_at`.
    pub fn is_write(&self) -> bool {
        matches!(self.op, Op::Write | Op::WriteDurable)
    }
}

/// The hook a [`Hooked`] member runs before each call.
pub type Hook = Arc<dyn Fn(&Call) -> io::Result<()> + Send + Sync>;

/// A member that runs its hook before each call and then forwards the call to `inner`; a call
/// the hook fails is not forwarded. Vectored calls go through `read_at`/`write_at` one buffer at
/// a time, so the hook sees every buffer. Size, identity and stuck calls are the inner member's.
pub struct Hooked {
    inner: Arc<dyn Member>,
    name: Option<String>,
    hook: Hook,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooked")
            .field("inner", &self.inner)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Hooked {
    /// Wraps `inner`, running `hook` before each call.
    pub fn new(
        inner: Arc<dyn Member>,
        hook: impl Fn(&Call) -> io::Result<()> + Send + Sync + 'static,
    ) -> Hooked {
        Hooked {
            inner,
            name: None,
            hook: Arc::new(hook),
        }
    }

    /// The same member under another name (what `name()` returns; the inner member's by default).
    pub fn named(mut self, name: &str) -> Hooked {
        self.name = Some(name.to_string());
        self
    }

    /// The wrapped member.
    pub fn inner(&self) -> &Arc<dyn Member> {
        &self.inner
    }

    fn run(&self, op: Op, offset: u64, len: u64) -> io::Result<()> {
        (self.hook)(&Call { op, offset, len })
    }
}

impl Member for Hooked {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_else(|| self.inner.name())
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn identity(&self) -> Option<crate::Identity> {
        self.inner.identity()
    }

    fn stuck_calls(&self) -> (usize, u64) {
        self.inner.stuck_calls()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.run(Op::Read, offset, buf.len() as u64)?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.run(Op::Write, offset, buf.len() as u64)?;
        self.inner.write_at(buf, offset)
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.run(Op::WriteDurable, offset, buf.len() as u64)?;
        self.inner.write_durable_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.run(Op::Flush, 0, 0)?;
        self.inner.flush()
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.run(Op::Trim, offset, len)?;
        self.inner.trim(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.run(Op::WriteZeroes, offset, len)?;
        self.inner.write_zeroes(offset, len)
    }

    fn reconnect(&self) -> io::Result<()> {
        self.run(Op::Reconnect, 0, 0)?;
        self.inner.reconnect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemMember;
    use std::sync::Mutex;

    #[test]
    fn the_hook_sees_every_call_and_can_fail_it() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let inner: Arc<dyn Member> = Arc::new(MemMember::new("m", 1 << 20).unwrap());
        let hooked = Hooked::new(Arc::clone(&inner), move |call: &Call| {
            log.lock().unwrap().push(*call);
            match call.op == Op::Trim {
                true => Err(io::Error::other("no trims here")),
                false => Ok(()),
            }
        })
        .named("watched");
        assert_eq!(hooked.name(), "watched");
        assert_eq!(hooked.len(), 1 << 20);
        hooked.write_at(b"abc", 4096).unwrap();
        hooked.write_durable_at(b"d", 8192).unwrap();
        let mut buf = [0u8; 3];
        hooked.read_at(&mut buf, 4096).unwrap();
        assert_eq!(&buf, b"abc");
        hooked.flush().unwrap();
        hooked.write_zeroes(4096, 1).unwrap();
        assert!(hooked.trim(4096, 3).is_err(), "the hook fails trims");
        hooked.read_at(&mut buf, 4096).unwrap();
        assert_eq!(
            &buf, b"\0bc",
            "the failed trim never reached the inner member"
        );
        let call = |op, offset, len| Call { op, offset, len };
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                call(Op::Write, 4096, 3),
                call(Op::WriteDurable, 8192, 1),
                call(Op::Read, 4096, 3),
                call(Op::Flush, 0, 0),
                call(Op::WriteZeroes, 4096, 1),
                call(Op::Trim, 4096, 3),
                call(Op::Read, 4096, 3),
            ]
        );
        assert!(call(Op::Trim, 0, 1).changes_bytes() && !call(Op::Trim, 0, 1).is_write());
        assert!(call(Op::WriteDurable, 0, 1).is_write());
        assert!(!call(Op::Read, 0, 1).changes_bytes() && !call(Op::Flush, 0, 0).changes_bytes());
    }
}
