//! `NbdMember`: a member served by an NBD server, possibly on another machine.
//!
//! A synchronous, pipelined client behind the [`Member`] trait: many threads issue requests on
//! one connection at once (see `conn.rs`), each request has a deadline, and a broken connection
//! fails every waiter at once and every later request fast until [`NbdMember::reconnect`].
//! Simple replies only; requests are split at the server's maximum (at most 32 MiB); a server
//! minimum block size > 1 is honoured by read-modify-write of the edge blocks.

mod conn;
mod handshake;
mod stream;
mod tls;
mod uri;

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::block_locks::{BlockLocks, Held};
use crate::error::{check_range, MemberError};
use crate::{Member, OpenOptions};
use conn::{Connection, Failure};
use nbd_codec::consts::*;
pub use tls::{client_identity, pem_certificates};
pub use uri::{is_nbd_uri, parse_nbd_uri, NbdAddress, NbdTarget, TlsSettings, DEFAULT_PORT};

/// Largest request sent to a server (the usual NBD maximum payload).
pub const MAX_REQUEST_BYTES: u64 = 32 << 20;
/// Requests one member call keeps in flight when it is split into pieces.
const PIPELINE_DEPTH: usize = 16;
/// Zero buffer used when the server cannot write zeroes itself.
const ZERO_BUFFER_BYTES: usize = 1 << 20;
static ZEROES: [u8; ZERO_BUFFER_BYTES] = [0; ZERO_BUFFER_BYTES];

/// Settings of remote (NBD) members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteOptions {
    /// Deadline of every request (and of connecting and the handshake). A request that misses
    /// it fails with `io::ErrorKind::TimedOut` and breaks the connection.
    pub io_timeout: Duration,
    /// Requests in flight on the connection; further callers wait for a slot.
    pub max_in_flight: usize,
    /// Also give file and block-device members `io_timeout` as their deadline: their calls run
    /// on worker threads ([`crate::Detached`]) and one stuck in the kernel is abandoned. Off by
    /// default: the hand-off costs CPU on every call.
    pub local_deadline: bool,
    /// Direct I/O or the page cache for file and block-device members (not remote ones; here
    /// for the same reason as `local_deadline`): by default direct for block devices only.
    pub member_cache: crate::MemberCache,
    /// How file and block-device members' reads and writes are submitted (io_uring or
    /// positional calls; `crate::uring`): by default io_uring where it measured faster.
    pub member_io: crate::MemberIo,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            io_timeout: Duration::from_secs(30),
            max_in_flight: 64,
            local_deadline: false,
            member_cache: crate::MemberCache::Auto,
            member_io: crate::MemberIo::Auto,
        }
    }
}

/// An error the NBD server returned for one request. It is the inner error of the `io::Error`
/// a member operation returns (`err.get_ref()` + `downcast_ref`), so callers can see the errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdServerError {
    pub member: String,
    pub op: &'static str,
    pub offset: u64,
    pub len: u64,
    /// The NBD error number (`NBD_EIO` = 5, ...; the same values as Linux errno).
    pub errno: u32,
}

impl fmt::Display for NbdServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "member {}: {} of {} bytes at offset {}: server returned {} (errno {})",
            self.member,
            self.op,
            self.len,
            self.offset,
            errno_name(self.errno),
            self.errno
        )
    }
}

impl std::error::Error for NbdServerError {}

/// The `io::ErrorKind` closest to an NBD error value.
fn errno_kind(errno: u32) -> io::ErrorKind {
    match errno {
        EPERM => io::ErrorKind::PermissionDenied,
        ENOMEM => io::ErrorKind::OutOfMemory,
        EINVAL => io::ErrorKind::InvalidInput,
        ENOSPC => io::ErrorKind::StorageFull,
        ENOTSUP => io::ErrorKind::Unsupported,
        _ => io::ErrorKind::Other,
    }
}

/// What a member call asks the connection to carry.
enum Data<'a, 'b> {
    /// Read into these buffers, one after the other.
    Read(&'a mut [&'b mut [u8]]),
    /// Write these buffers, one after the other.
    Write(&'a [&'b [u8]]),
    /// Writes of zero bytes (the server cannot write zeroes itself).
    Zeroes,
    /// No payload (write-zeroes).
    NoPayload,
}

/// A member on an NBD server (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`).
pub struct NbdMember {
    name: String,
    address: NbdAddress,
    remote: RemoteOptions,
    read_only: bool,
    size_bytes: u64,
    min_block_bytes: u64,
    max_request_bytes: u64,
    conn: RwLock<Arc<Connection>>,
    /// Held by writes when the server has a minimum block size (`crate::block_locks`).
    blocks: BlockLocks,
    /// Resolved once at open (it may take a name lookup).
    identity: crate::Identity,
}

impl fmt::Debug for NbdMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NbdMember")
            .field("name", &self.name)
            .field("description", &self.description())
            .finish()
    }
}

impl NbdMember {
    /// Connects to the export named by the URI `spec`.
    pub fn open(
        spec: &str,
        opts: &OpenOptions,
        remote: &RemoteOptions,
    ) -> Result<NbdMember, MemberError> {
        let address = parse_nbd_uri(spec).map_err(|reason| MemberError::BadUri {
            spec: spec.to_string(),
            reason,
        })?;
        let refused = |reason: String| MemberError::Refused {
            name: spec.to_string(),
            reason,
        };
        let conn = Connection::open(&address, remote.io_timeout, remote.max_in_flight).map_err(
            |source| MemberError::Io {
                name: spec.to_string(),
                action: "connect to",
                source,
            },
        )?;
        let info = *conn.info();
        if info.size_bytes == 0 {
            return Err(MemberError::Empty {
                name: spec.to_string(),
            });
        }
        if info.has(FLAG_READ_ONLY) && !opts.read_only {
            return Err(refused("the server exports it read-only".into()));
        }
        let min_block_bytes = u64::from(info.min_block_bytes);
        let server_max = info.max_block_bytes.map_or(MAX_REQUEST_BYTES, u64::from);
        let max_request_bytes =
            server_max.min(MAX_REQUEST_BYTES) / min_block_bytes * min_block_bytes;
        if max_request_bytes == 0 || !info.size_bytes.is_multiple_of(min_block_bytes) {
            return Err(refused(format!(
                "unusable block sizes: minimum {min_block_bytes}, maximum {server_max}, size {}",
                info.size_bytes
            )));
        }
        Ok(NbdMember {
            name: spec.to_string(),
            identity: identity_of(&address),
            address,
            remote: *remote,
            read_only: opts.read_only,
            size_bytes: info.size_bytes,
            min_block_bytes,
            max_request_bytes,
            conn: RwLock::new(Arc::new(conn)),
            blocks: BlockLocks::new(),
        })
    }

    /// The parsed address.
    pub fn address(&self) -> &NbdAddress {
        &self.address
    }

    /// What the server offers, in words; says when durability is not guaranteed.
    pub fn description(&self) -> String {
        let info = *self.connection().info();
        let flush = if info.has(FLAG_SEND_FLUSH) {
            "flush: NBD_CMD_FLUSH"
        } else {
            "durability NOT guaranteed: the server does not support flush"
        };
        let zero = if info.has(FLAG_SEND_WRITE_ZEROES) {
            "trim/zero: NBD_CMD_WRITE_ZEROES"
        } else if info.has(FLAG_SEND_TRIM) {
            "trim/zero: written zeroes (server trim does not promise zeroes)"
        } else {
            "trim/zero: written zeroes"
        };
        let tls = match &self.address.tls {
            None => "",
            Some(t) if t.verify_peer => "; TLS, server certificate verified",
            Some(_) => "; TLS, server NOT verified (tls-verify-peer=false)",
        };
        format!(
            "NBD export {} of {} bytes{tls}; {flush}; {zero}; minimum block {} bytes, requests up to {} bytes{}",
            self.address,
            self.size_bytes,
            self.min_block_bytes,
            self.max_request_bytes,
            if self.read_only { "; read-only" } else { "" }
        )
    }

    /// True while the connection works (no disconnect or missed deadline since it was opened).
    pub fn is_connected(&self) -> bool {
        self.connection().broken().is_none()
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> usize {
        self.connection().in_flight()
    }

    /// Connects again and redoes the handshake; fails if the export's size or minimum block size
    /// changed. On success new requests use the new connection.
    pub fn reconnect(&self) -> io::Result<()> {
        let conn = Connection::open(
            &self.address,
            self.remote.io_timeout,
            self.remote.max_in_flight,
        )
        .map_err(|e| annotate(&self.name, "reconnect", 0, 0, e.kind(), e.to_string()))?;
        let info = *conn.info();
        let server_max = info.max_block_bytes.map_or(MAX_REQUEST_BYTES, u64::from);
        if info.size_bytes != self.size_bytes
            || u64::from(info.min_block_bytes) != self.min_block_bytes
            || server_max < self.max_request_bytes
        {
            let reason = format!(
                "export changed: size {} (was {}), minimum block {} (was {}), maximum {}",
                info.size_bytes,
                self.size_bytes,
                info.min_block_bytes,
                self.min_block_bytes,
                server_max
            );
            return Err(annotate(
                &self.name,
                "reconnect",
                0,
                0,
                io::ErrorKind::InvalidData,
                reason,
            ));
        }
        *self.conn.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(conn);
        Ok(())
    }

    fn connection(&self) -> Arc<Connection> {
        Arc::clone(&self.conn.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn failure(&self, op: &'static str, offset: u64, len: u64, f: Failure) -> io::Error {
        failure(&self.name, op, offset, len, f)
    }

    /// [`Member::start`]: one request sent now and waited for by [`crate::Started::finish`],
    /// for a read or write that is aligned and fits one request, and for a flush; `None` for
    /// the rest (made inline as usual).
    fn start_request(&self, call: crate::StartCall<'_>) -> Option<crate::Started> {
        use crate::StartCall;
        let (op, cmd, offset, len, payload): (_, _, _, _, &[&[u8]]) = match call {
            StartCall::Read { offset, len } => ("read", CMD_READ, offset, len, &[]),
            // A write to a server with a minimum block size holds block locks until its reply
            // (`write_at`); a started call cannot carry them.
            StartCall::Write { .. } if self.min_block_bytes > 1 => return None,
            StartCall::Write { offset, bufs } => {
                let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
                self.check_writable("write", offset, len).ok()?;
                ("write", CMD_WRITE, offset, len, bufs)
            }
            StartCall::Flush => {
                if self.read_only || !self.connection().info().has(FLAG_SEND_FLUSH) {
                    return None;
                }
                ("flush", CMD_FLUSH, 0, 0, &[])
            }
            StartCall::Trim { .. } | StartCall::WriteZeroes { .. } => return None,
        };
        if cmd != CMD_FLUSH
            && (len == 0
                || len > self.max_request_bytes
                || !self.is_aligned(offset, len)
                || check_range(&self.name, op, offset, len, self.size_bytes).is_err())
        {
            return None;
        }
        let conn = self.connection();
        let timeout = self.remote.io_timeout;
        let ticket = match conn.submit(cmd, 0, offset, len as u32, payload, timeout) {
            Ok(ticket) => ticket,
            Err(f) => return Some(crate::Started::failed(self.failure(op, offset, len, f))),
        };
        let name = self.name.clone();
        Some(crate::Started::new(move |out| {
            let (reply, took) = conn.wait_timed(ticket, timeout);
            match reply {
                Ok(data) => {
                    out(&data);
                    (Ok(()), took)
                }
                Err(f) => (Err(failure(&name, op, offset, len, f)), took),
            }
        }))
    }

    fn check_writable(&self, op: &str, offset: u64, len: u64) -> io::Result<()> {
        check_range(&self.name, op, offset, len, self.size_bytes)?;
        if self.read_only {
            let reason = "refused: opened read-only".to_string();
            return Err(annotate(
                &self.name,
                op,
                offset,
                len,
                io::ErrorKind::PermissionDenied,
                reason,
            ));
        }
        Ok(())
    }

    /// The block locks a write of `[offset, offset + len)` holds (`crate::block_locks`): none
    /// when the server takes any byte range, as no read-modify-write happens then.
    fn hold(&self, offset: u64, len: u64) -> Option<Held<'_>> {
        let b = self.min_block_bytes;
        (b > 1).then(|| self.blocks.hold(b, offset, len))
    }

    fn is_aligned(&self, offset: u64, len: u64) -> bool {
        offset.is_multiple_of(self.min_block_bytes) && len.is_multiple_of(self.min_block_bytes)
    }

    /// The smallest block-aligned range holding `[offset, offset + len)`.
    fn aligned_outer(&self, offset: u64, len: u64) -> (u64, u64) {
        let b = self.min_block_bytes;
        (offset / b * b, (offset + len).div_ceil(b) * b)
    }

    /// Sends `[offset, offset + len)` as pieces of at most `piece_max` bytes, keeping up to
    /// `PIPELINE_DEPTH` in flight, and waits for all of them. The range must be aligned.
    fn transfer(
        &self,
        op: &'static str,
        cmd: u16,
        offset: u64,
        len: u64,
        mut data: Data<'_, '_>,
    ) -> io::Result<()> {
        assert!(
            self.is_aligned(offset, len),
            "{op} at {offset}+{len} is not block-aligned"
        );
        assert!(offset + len <= self.size_bytes);
        let piece_max = match data {
            Data::Zeroes => self.max_request_bytes.min(ZERO_BUFFER_BYTES as u64),
            _ => self.max_request_bytes,
        };
        let conn = self.connection();
        let timeout = self.remote.io_timeout;
        let mut queue = VecDeque::with_capacity(PIPELINE_DEPTH);
        let mut done = 0u64;
        while done < len || !queue.is_empty() {
            if done < len && queue.len() < PIPELINE_DEPTH {
                let piece = (len - done).min(piece_max);
                let range = done as usize..(done + piece) as usize;
                let payload = match &data {
                    Data::Write(parts) => sub_slices(parts, range.clone()),
                    Data::Zeroes => vec![&ZEROES[..range.len()]],
                    _ => Vec::new(),
                };
                let at = offset + done;
                let ticket = conn
                    .submit(cmd, 0, at, piece as u32, &payload, timeout)
                    .map_err(|f| self.failure(op, at, piece, f))?;
                queue.push_back((ticket, range));
                done += piece;
                continue;
            }
            let (ticket, range) = queue.pop_front().expect("queue holds the pending pieces");
            let at = offset + range.start as u64;
            let reply = conn
                .wait(ticket, timeout)
                .map_err(|f| self.failure(op, at, range.len() as u64, f))?;
            if let Data::Read(parts) = &mut data {
                assert_eq!(reply.len(), range.len());
                scatter(parts, range.start, &reply);
            }
        }
        Ok(())
    }

    fn write_unaligned(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let (start, end) = self.aligned_outer(offset, buf.len() as u64);
        let b = self.min_block_bytes;
        let _held = self.hold(offset, buf.len() as u64);
        let mut tmp = vec![0u8; (end - start) as usize];
        if offset != start {
            self.transfer(
                "write (reading the head block)",
                CMD_READ,
                start,
                b,
                Data::Read(&mut [&mut tmp[..b as usize]]),
            )?;
        }
        if (offset + buf.len() as u64) != end {
            let at = (end - b - start) as usize;
            self.transfer(
                "write (reading the tail block)",
                CMD_READ,
                end - b,
                b,
                Data::Read(&mut [&mut tmp[at..]]),
            )?;
        }
        let at = (offset - start) as usize;
        tmp[at..at + buf.len()].copy_from_slice(buf);
        self.transfer("write", CMD_WRITE, start, end - start, Data::Write(&[&tmp]))
    }

    /// Zeroes an aligned range: NBD_CMD_WRITE_ZEROES (may trim) when the server has it, else
    /// written zeroes.
    fn zero_aligned(&self, op: &'static str, offset: u64, len: u64) -> io::Result<()> {
        let info = *self.connection().info();
        if info.has(FLAG_SEND_WRITE_ZEROES) {
            self.transfer(op, CMD_WRITE_ZEROES, offset, len, Data::NoPayload)
        } else {
            self.transfer(op, CMD_WRITE, offset, len, Data::Zeroes)
        }
    }

    fn zero(&self, op: &'static str, offset: u64, len: u64) -> io::Result<()> {
        self.check_writable(op, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if self.is_aligned(offset, len) {
            let _held = self.hold(offset, len);
            return self.zero_aligned(op, offset, len);
        }
        let b = self.min_block_bytes;
        let inner_start = offset.div_ceil(b) * b;
        let inner_end = (offset + len) / b * b;
        if inner_start >= inner_end {
            return self.write_at(&vec![0u8; len as usize], offset);
        }
        self.write_at(&vec![0u8; (inner_start - offset) as usize], offset)?;
        self.write_at(&vec![0u8; (offset + len - inner_end) as usize], inner_end)?;
        let _held = self.hold(inner_start, inner_end - inner_start);
        self.zero_aligned(op, inner_start, inner_end - inner_start)
    }
}

impl Member for NbdMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn identity(&self) -> Option<crate::Identity> {
        Some(self.identity.clone())
    }

    fn len(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        check_range(&self.name, "read", offset, len, self.size_bytes)?;
        if len == 0 {
            return Ok(());
        }
        if self.is_aligned(offset, len) {
            return self.transfer("read", CMD_READ, offset, len, Data::Read(&mut [buf]));
        }
        let (start, end) = self.aligned_outer(offset, len);
        let mut tmp = vec![0u8; (end - start) as usize];
        self.transfer(
            "read",
            CMD_READ,
            start,
            end - start,
            Data::Read(&mut [&mut tmp]),
        )?;
        let at = (offset - start) as usize;
        buf.copy_from_slice(&tmp[at..at + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        self.check_writable("write", offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if self.is_aligned(offset, len) {
            let _held = self.hold(offset, len);
            return self.transfer("write", CMD_WRITE, offset, len, Data::Write(&[buf]));
        }
        self.write_unaligned(buf, offset)
    }

    /// One NBD read (or several of at most the server's maximum) for all of `bufs`, when the
    /// range is aligned to the server's block size; otherwise part by part.
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_range(&self.name, "read", offset, len, self.size_bytes)?;
        if len == 0 {
            return Ok(());
        }
        if !self.is_aligned(offset, len) {
            return crate::read_each(self, bufs, offset);
        }
        self.transfer("read", CMD_READ, offset, len, Data::Read(bufs))
    }

    /// One NBD write (or several of at most the server's maximum) for all of `bufs`, sent
    /// with one `writev` each, when aligned; otherwise part by part.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        self.check_writable("write", offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if !self.is_aligned(offset, len) {
            return crate::write_each(self, bufs, offset);
        }
        let _held = self.hold(offset, len);
        self.transfer("write", CMD_WRITE, offset, len, Data::Write(bufs))
    }

    fn flush(&self) -> io::Result<()> {
        let conn = self.connection();
        if self.read_only || !conn.info().has(FLAG_SEND_FLUSH) {
            return Ok(());
        }
        let timeout = self.remote.io_timeout;
        let ticket = conn
            .submit(CMD_FLUSH, 0, 0, 0, &[], timeout)
            .map_err(|f| self.failure("flush", 0, 0, f))?;
        conn.wait(ticket, timeout)
            .map(|_| ())
            .map_err(|f| self.failure("flush", 0, 0, f))
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        // NBD_CMD_TRIM does not promise zeroes, the member contract does: zero instead.
        self.zero("trim", offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.zero("write-zeroes", offset, len)
    }

    fn start(&self, call: crate::StartCall<'_>) -> Option<crate::Started> {
        self.start_request(call)
    }

    fn reconnect(&self) -> io::Result<()> {
        NbdMember::reconnect(self)
    }
}

/// Bytes `range` of the concatenation of `parts`, as slices of the parts.
/// The error of a failed request of member `name`.
fn failure(name: &str, op: &'static str, offset: u64, len: u64, f: Failure) -> io::Error {
    match f {
        Failure::Errno(errno) => io::Error::new(
            errno_kind(errno),
            NbdServerError {
                member: name.to_string(),
                op,
                offset,
                len,
                errno,
            },
        ),
        Failure::Broken { kind, reason } => annotate(name, op, offset, len, kind, reason),
    }
}

/// An error of member `name`'s `op` of `len` bytes at `offset`.
fn annotate(
    name: &str,
    op: &str,
    offset: u64,
    len: u64,
    kind: io::ErrorKind,
    reason: String,
) -> io::Error {
    io::Error::new(
        kind,
        format!("member {name}: {op} of {len} bytes at offset {offset}: {reason}"),
    )
}

fn sub_slices<'b>(parts: &[&'b [u8]], range: std::ops::Range<usize>) -> Vec<&'b [u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for part in parts {
        let end = start + part.len();
        let lo = range.start.max(start);
        let hi = range.end.min(end);
        if lo < hi {
            out.push(&part[lo - start..hi - start]);
        }
        start = end;
    }
    assert_eq!(
        out.iter().map(|s| s.len()).sum::<usize>(),
        range.len(),
        "range inside the parts"
    );
    out
}

/// Copies `data` into the concatenation of `parts`, starting at byte `at`.
fn scatter(parts: &mut [&mut [u8]], at: usize, data: &[u8]) {
    let mut start = 0;
    let mut copied = 0;
    for part in parts.iter_mut() {
        let end = start + part.len();
        let lo = at.max(start);
        let hi = (at + data.len()).min(end);
        if lo < hi {
            part[lo - start..hi - start].copy_from_slice(&data[lo - at..hi - at]);
            copied += hi - lo;
        }
        start = end;
    }
    assert_eq!(copied, data.len(), "reply inside the parts");
}

/// The identity of an NBD export, whatever its URI says. A TCP host is resolved to its first
/// address (so `localhost` and `127.0.0.1` are one server when they resolve alike); a Unix
/// socket path is made canonical when it exists.
fn identity_of(address: &NbdAddress) -> crate::Identity {
    let server = match &address.target {
        NbdTarget::Tcp { host, port } => {
            use std::net::ToSocketAddrs;
            match (host.as_str(), *port).to_socket_addrs() {
                Ok(mut addrs) => match addrs.next() {
                    Some(a) => a.to_string(),
                    None => format!("{host}:{port}"),
                },
                Err(_) => format!("{host}:{port}"),
            }
        }
        NbdTarget::Unix { path } => {
            let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            format!("unix:{}", canonical.display())
        }
    };
    crate::Identity::Nbd {
        server,
        export: address.export.clone(),
    }
}

#[cfg(test)]
mod vectored_tests {
    use super::{scatter, sub_slices};

    #[test]
    fn sub_slices_and_scatter_cross_part_boundaries() {
        let a: Vec<u8> = (0..10).collect();
        let b: Vec<u8> = (10..13).collect();
        let c: Vec<u8> = (13..20).collect();
        let parts: [&[u8]; 3] = [&a, &b, &c];
        for lo in 0..20 {
            for hi in lo..=20 {
                let got: Vec<u8> = sub_slices(&parts, lo..hi).concat();
                assert_eq!(got, (lo as u8..hi as u8).collect::<Vec<u8>>(), "{lo}..{hi}");
            }
        }
        for at in 0..20 {
            for len in 0..=(20 - at) {
                let (mut x, mut y, mut z) = (vec![0u8; 4], vec![0u8; 0], vec![0u8; 16]);
                let mut out: [&mut [u8]; 3] = [&mut x, &mut y, &mut z];
                let data: Vec<u8> = (100..100 + len as u8).collect();
                scatter(&mut out, at, &data);
                let whole = [x, y, z].concat();
                let mut want = vec![0u8; 20];
                want[at..at + len].copy_from_slice(&data);
                assert_eq!(whole, want, "at {at} len {len}");
            }
        }
    }
}
