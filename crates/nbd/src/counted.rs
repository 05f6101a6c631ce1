//! [`Counted`]: an [`Export`] filter that counts every request as the client sent it.

use std::io;
use std::sync::Arc;

use iostats::{IoCounters, OpKind};

use crate::export::{Export, StatusExtent};

/// `inner` with every READ, WRITE, FLUSH, TRIM and WRITE_ZEROES counted in an
/// [`IoCounters`] (operations, bytes, errors, time from the call to its return, busy time)
/// before anything below sees it: the request as the client sent it. Block status and CACHE
/// hints are not I/O and pass uncounted. Costs two clock reads and a few relaxed atomic adds
/// per request.
pub struct Counted<E> {
    inner: E,
    counters: Arc<IoCounters>,
}

impl<E: Export> Counted<E> {
    pub fn new(inner: E) -> Counted<E> {
        Counted {
            inner,
            counters: Arc::new(IoCounters::new()),
        }
    }

    /// The export below.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// The counters (shared: the admin API reads them while the server serves).
    pub fn counters(&self) -> &Arc<IoCounters> {
        &self.counters
    }

    #[inline]
    fn count<T>(
        &self,
        kind: OpKind,
        bytes: u64,
        call: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let started = self.counters.begin();
        let result = call();
        self.counters.end(started, kind, bytes, result.is_ok());
        result
    }
}

impl<E: Export> Export for Counted<E> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let len = buf.len() as u64;
        self.count(OpKind::Read, len, || self.inner.read(offset, buf))
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let len = data.len() as u64;
        self.count(OpKind::Write, len, || self.inner.write(offset, data, fua))
    }

    fn flush(&self) -> io::Result<()> {
        self.count(OpKind::Flush, 0, || self.inner.flush())
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.count(OpKind::Trim, len, || self.inner.trim(offset, len))
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> io::Result<()> {
        self.count(OpKind::WriteZeroes, len, || {
            self.inner.write_zeroes(offset, len, may_trim)
        })
    }

    fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<StatusExtent>> {
        self.inner.block_status(offset, len)
    }

    fn preferred_block_size(&self) -> u32 {
        self.inner.preferred_block_size()
    }

    fn can_multi_conn(&self) -> bool {
        self.inner.can_multi_conn()
    }

    fn can_fast_zero(&self) -> bool {
        self.inner.can_fast_zero()
    }

    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.cache(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// 1 MiB of RAM; writes at offset 0 fail.
    struct Ram(Mutex<Vec<u8>>);

    impl Export for Ram {
        fn size(&self) -> u64 {
            1 << 20
        }
        fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            let o = offset as usize;
            buf.copy_from_slice(&self.0.lock().unwrap()[o..o + buf.len()]);
            Ok(())
        }
        fn write(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
            if offset == 0 {
                return Err(io::Error::other("refused"));
            }
            let o = offset as usize;
            self.0.lock().unwrap()[o..o + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn trim(&self, _offset: u64, _len: u64) -> io::Result<()> {
            Ok(())
        }
        fn write_zeroes(&self, _offset: u64, _len: u64, _may_trim: bool) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_request_is_counted_by_kind_and_passed_down() {
        let e = Counted::new(Ram(Mutex::new(vec![0; 1 << 20])));
        e.write(4096, &[7; 4096], false).unwrap();
        e.write(0, &[1; 512], true).unwrap_err();
        let mut buf = [0u8; 4096];
        e.read(4096, &mut buf).unwrap();
        assert_eq!(buf, [7; 4096], "passed down");
        e.flush().unwrap();
        e.trim(0, 1 << 20).unwrap();
        e.write_zeroes(8192, 8192, true).unwrap();
        e.cache(0, 4096).unwrap();
        e.block_status(0, 4096).unwrap();
        let s = e.counters().snapshot();
        assert_eq!((s.write.ops, s.write.bytes, s.write.errors), (2, 4608, 1));
        assert_eq!((s.read.ops, s.read.bytes, s.read.errors), (1, 4096, 0));
        assert_eq!(s.flush.ops, 1);
        assert_eq!((s.trim.ops, s.trim.bytes), (1, 1 << 20));
        assert_eq!((s.write_zeroes.ops, s.write_zeroes.bytes), (1, 8192));
        assert_eq!(s.ops(), 6, "block status and cache hints are not counted");
        assert_eq!(s.in_flight, 0);
    }
}
