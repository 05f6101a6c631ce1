//! Test fixtures: a Vec-backed export, an in-process server on a Unix socket or TCP port, and
//! a raw blocking client built on the crate's own codec.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nbd::codec::consts::*;
use nbd::codec::*;
use std::future::Future;

use nbd::{Export, Exports, Listener, ServerConfig, StatusExtent};

/// A RAM export that counts flushes and can delay chosen requests.
pub struct MemExport {
    pub bytes: Mutex<Vec<u8>>,
    pub flushes: AtomicU64,
    pub fua_writes: AtomicU64,
    /// Reads at this offset sleep first (to force out-of-order completion).
    pub slow_offset: Option<u64>,
    pub slow_for: Duration,
    /// Seed for random per-request jitter (0 = none), in microseconds up to this bound.
    pub jitter_us: u64,
    pub multi_conn: bool,
}

impl MemExport {
    pub fn new(size: usize) -> Self {
        MemExport {
            bytes: Mutex::new(vec![0; size]),
            flushes: AtomicU64::new(0),
            fua_writes: AtomicU64::new(0),
            slow_offset: None,
            slow_for: Duration::from_millis(300),
            jitter_us: 0,
            multi_conn: true,
        }
    }

    fn range(&self, offset: u64, len: usize) -> std::ops::Range<usize> {
        let size = self.bytes.lock().unwrap().len();
        let start = offset as usize;
        assert!(
            start + len <= size,
            "server let an out-of-range request through"
        );
        start..start + len
    }

    fn jitter(&self, offset: u64) {
        if self.slow_offset == Some(offset) {
            std::thread::sleep(self.slow_for);
        }
        if self.jitter_us > 0 {
            let spread = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            std::thread::sleep(Duration::from_micros(spread % self.jitter_us));
        }
    }
}

impl Export for MemExport {
    fn size(&self) -> u64 {
        self.bytes.lock().unwrap().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.jitter(offset);
        let r = self.range(offset, buf.len());
        buf.copy_from_slice(&self.bytes.lock().unwrap()[r]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        self.jitter(offset);
        let r = self.range(offset, data.len());
        self.bytes.lock().unwrap()[r].copy_from_slice(data);
        if fua {
            self.fua_writes.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_zeroes(offset, len, true)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> io::Result<()> {
        let r = self.range(offset, len as usize);
        self.bytes.lock().unwrap()[r].fill(0);
        Ok(())
    }
    fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<StatusExtent>> {
        // Report 4 KiB-aligned all-zero blocks as zero, the rest as data.
        let bytes = self.bytes.lock().unwrap();
        let mut out: Vec<StatusExtent> = Vec::new();
        let (mut at, end) = (offset, offset + u64::from(len));
        while at < end {
            let next = ((at / 4096 + 1) * 4096).min(end);
            let zero = bytes[at as usize..next as usize].iter().all(|b| *b == 0);
            match out.last_mut() {
                Some(last) if last.zero == zero => last.length += (next - at) as u32,
                _ => out.push(StatusExtent {
                    length: (next - at) as u32,
                    hole: false,
                    zero,
                }),
            }
            at = next;
        }
        Ok(out)
    }
    fn preferred_block_size(&self) -> u32 {
        (3 * 64) << 10 // A 3-data-member stripe: advertised rounded up to 256 KiB.
    }
    fn can_multi_conn(&self) -> bool {
        self.multi_conn
    }
}

pub enum Transport {
    Unix,
    Tcp,
}

/// An in-process server on its own runtime thread; dropping it shuts the server down.
pub struct TestServer {
    pub uri: String,
    pub unix_path: Option<PathBuf>,
    pub tcp_addr: Option<std::net::SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

static SOCKET_COUNTER: AtomicU64 = AtomicU64::new(0);

impl TestServer {
    pub fn start(export: Arc<dyn Export>, config: ServerConfig, transport: Transport) -> Self {
        let name = config.export_name.clone();
        Self::start_with(transport, &name, move |listener, stop| async move {
            nbd::serve(listener, export, config, stop).await.unwrap();
        })
    }

    /// A server of several exports (`uri` names the first one, or "" if there is none).
    pub fn start_exports(
        exports: Arc<Exports>,
        config: ServerConfig,
        transport: Transport,
    ) -> Self {
        let name = exports.names().first().cloned().unwrap_or_default();
        Self::start_with(transport, &name, move |listener, stop| async move {
            nbd::serve_exports(listener, exports, config, stop)
                .await
                .unwrap();
        })
    }

    fn start_with<F, Fut>(transport: Transport, name: &str, serve: F) -> Self
    where
        F: FnOnce(Listener, std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut
            + Send
            + 'static,
        Fut: Future<Output = ()>,
    {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let name = name.to_string();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = match transport {
                    Transport::Unix => Listener::bind_unix(unique_socket_path()).unwrap(),
                    Transport::Tcp => Listener::bind_tcp("127.0.0.1:0".parse().unwrap())
                        .await
                        .unwrap(),
                };
                let facts = (
                    listener.uri(&name),
                    listener.unix_path().map(|p| p.to_path_buf()),
                    listener.tcp_addr(),
                );
                ready_tx.send(facts).unwrap();
                let stop = Box::pin(async {
                    let _ = stop_rx.await;
                });
                serve(listener, stop).await;
            });
        });
        let (uri, unix_path, tcp_addr) = ready_rx.recv().unwrap();
        TestServer {
            uri,
            unix_path,
            tcp_addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn connect(&self) -> RawClient {
        let stream: Box<dyn ReadWrite> = match (&self.unix_path, self.tcp_addr) {
            (Some(p), _) => Box::new(UnixStream::connect(p).unwrap()),
            (None, Some(a)) => {
                let s = TcpStream::connect(a).unwrap();
                s.set_nodelay(true).unwrap();
                Box::new(s)
            }
            _ => unreachable!(),
        };
        RawClient {
            stream,
            structured: false,
        }
    }

    /// Signals shutdown and waits for `serve` to return.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread panicked");
        }
    }

    /// Signals shutdown without waiting.
    pub fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn unique_socket_path() -> PathBuf {
    let n = SOCKET_COUNTER.fetch_add(1, Ordering::SeqCst);
    std::env::temp_dir().join(format!("nbd-test-{}-{n}.sock", std::process::id()))
}

pub trait ReadWrite: Read + Write + Send {
    fn set_timeout(&self, d: Duration);
    /// The socket's descriptor, where there is one socket under the stream.
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}
impl ReadWrite for UnixStream {
    fn set_timeout(&self, d: Duration) {
        self.set_read_timeout(Some(d)).unwrap();
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}
impl ReadWrite for TcpStream {
    fn set_timeout(&self, d: Duration) {
        self.set_read_timeout(Some(d)).unwrap();
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

impl RawClient {
    /// Waits, reading nothing, until the server has shut the connection down (the socket
    /// reports the peer's hang-up: POLLRDHUP); how long that took. Fails after `bound`. Unlike
    /// reading to the end, this leaves a client that never reads its replies never reading.
    pub fn hung_up_within(&self, bound: Duration) -> Duration {
        let started = std::time::Instant::now();
        loop {
            let left = bound.saturating_sub(started.elapsed());
            assert!(
                !left.is_zero(),
                "the server did not hang up within {bound:?}"
            );
            let mut fd = libc::pollfd {
                fd: self.stream.raw_fd().expect("a plain socket"),
                events: libc::POLLRDHUP,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd, for the duration of the call.
            let n = unsafe { libc::poll(&mut fd, 1, ms) };
            if n > 0 && fd.revents & (libc::POLLRDHUP | libc::POLLHUP) != 0 {
                return started.elapsed();
            }
        }
    }
}

/// A reply as the raw client saw it.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub cookie: u64,
    pub error: u32,
    pub data: Vec<u8>,
    pub descriptors: Vec<BlockDescriptor>,
}

impl Reply {
    /// The reply to a request that succeeded and returns no data.
    pub fn done(cookie: u64) -> Reply {
        Reply {
            cookie,
            error: 0,
            data: vec![],
            descriptors: vec![],
        }
    }
}

pub struct RawClient {
    pub stream: Box<dyn ReadWrite>,
    pub structured: bool,
}

impl RawClient {
    pub fn read_exact(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; n];
        self.stream.read_exact(&mut buf)?;
        Ok(buf)
    }

    /// Greeting and client flags (fixed newstyle + no zeroes).
    pub fn start(&mut self) -> Greeting {
        self.stream.set_timeout(Duration::from_secs(20));
        let g = Greeting::decode(&self.read_exact(Greeting::SIZE).unwrap()).unwrap();
        assert_eq!(g.handshake_flags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        self.send_raw(&ClientFlags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).encode());
        g
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    pub fn send_option(&mut self, option: &ClientOption) {
        let (code, data) = option.encode();
        self.send_raw(
            &OptionHeader {
                option: code,
                length: data.len() as u32,
            }
            .encode(),
        );
        self.send_raw(&data);
    }

    pub fn option_reply(&mut self) -> (u32, OptionReply) {
        let h =
            OptionReplyHeader::decode(&self.read_exact(OptionReplyHeader::SIZE).unwrap()).unwrap();
        let data = self.read_exact(h.length as usize).unwrap();
        (h.option, OptionReply::decode(h.reply_type, &data).unwrap())
    }

    /// Replies up to and including the final one (ACK or an error).
    /// Sends `option` and asserts the server refuses it with exactly one error reply of
    /// `reply_type`.
    pub fn expect_option_error(&mut self, option: &ClientOption, reply_type: u32) {
        let r = self.option_replies(option);
        assert!(
            matches!(r[..], [OptionReply::Error { reply_type: t, .. }] if t == reply_type),
            "{option:?}: expected error {reply_type:#x}, got {r:?}"
        );
    }

    pub fn option_replies(&mut self, option: &ClientOption) -> Vec<OptionReply> {
        self.send_option(option);
        let mut out = Vec::new();
        loop {
            let (code, reply) = self.option_reply();
            assert_eq!(code, option.encode().0);
            let last = matches!(reply, OptionReply::Ack | OptionReply::Error { .. });
            out.push(reply);
            if last {
                return out;
            }
        }
    }

    /// Full handshake to transmission via GO; returns (size, transmission flags).
    pub fn go(&mut self, structured: bool, meta: bool) -> (u64, u16) {
        self.start();
        if structured {
            let r = self.option_replies(&ClientOption::StructuredReply { has_data: false });
            assert_eq!(r, vec![OptionReply::Ack]);
            self.structured = true;
        }
        if meta {
            let req = MetaContextRequest {
                name: String::new(),
                queries: vec!["base:allocation".into()],
            };
            let r = self.option_replies(&ClientOption::SetMetaContext(req));
            assert_eq!(r.len(), 2, "{r:?}");
        }
        let r = self.option_replies(&ClientOption::Go(InfoRequest {
            name: String::new(),
            requests: vec![INFO_BLOCK_SIZE],
        }));
        assert_eq!(r.last(), Some(&OptionReply::Ack), "{r:?}");
        export_info(&r)
    }

    pub fn request(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, length: u32) {
        self.send_raw(
            &Request {
                flags,
                kind,
                cookie,
                offset,
                length,
            }
            .encode(),
        );
    }

    pub fn write(&mut self, cookie: u64, offset: u64, data: &[u8], flags: u16) {
        let mut bytes = Request {
            flags,
            kind: CMD_WRITE,
            cookie,
            offset,
            length: data.len() as u32,
        }
        .encode()
        .to_vec();
        bytes.extend_from_slice(data);
        self.send_raw(&bytes);
    }

    /// Reads one complete reply. `read_len` is the data length expected for a successful
    /// simple read reply (ignored with structured replies).
    pub fn reply(&mut self, read_len: usize) -> io::Result<Reply> {
        let magic = self.read_exact(4)?;
        let magic = u32::from_be_bytes([magic[0], magic[1], magic[2], magic[3]]);
        if magic == SIMPLE_REPLY_MAGIC {
            let mut bytes = magic.to_be_bytes().to_vec();
            bytes.extend(self.read_exact(12)?);
            let s = SimpleReply::decode(&bytes).unwrap();
            let data = if s.error == 0 {
                self.read_exact(read_len)?
            } else {
                Vec::new()
            };
            return Ok(Reply {
                cookie: s.cookie,
                error: s.error,
                data,
                descriptors: Vec::new(),
            });
        }
        assert_eq!(
            magic, STRUCTURED_REPLY_MAGIC,
            "unknown reply magic {magic:#x}"
        );
        self.structured_reply(magic)
    }

    fn structured_reply(&mut self, magic: u32) -> io::Result<Reply> {
        let mut reply = Reply {
            cookie: 0,
            error: 0,
            data: Vec::new(),
            descriptors: Vec::new(),
        };
        let mut first = Some(magic);
        loop {
            let mut bytes = match first.take() {
                Some(m) => m.to_be_bytes().to_vec(),
                None => self.read_exact(4)?,
            };
            bytes.extend(self.read_exact(16)?);
            let h = ChunkHeader::decode(&bytes).unwrap();
            let payload = self.read_exact(h.length as usize)?;
            reply.cookie = h.cookie;
            match Chunk::decode(&h, &payload).unwrap() {
                Chunk::OffsetData { data, .. } => reply.data.extend(data),
                Chunk::BlockStatus {
                    descriptors,
                    context_id,
                } => {
                    assert_eq!(context_id, 1);
                    reply.descriptors = descriptors;
                }
                Chunk::Error { error, .. } | Chunk::ErrorOffset { error, .. } => {
                    reply.error = error
                }
                Chunk::None | Chunk::OffsetHole { .. } => {}
            }
            if h.is_done() {
                return Ok(reply);
            }
        }
    }

    /// True when the server has closed the connection (EOF) within the read timeout.
    pub fn is_closed(&mut self) -> bool {
        self.stream.set_timeout(Duration::from_secs(10));
        let mut byte = [0u8; 1];
        loop {
            match self.stream.read(&mut byte) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

/// The seed of a random test (`RAIDKIT_SEED` replays it).
pub fn seed() -> u64 {
    testsupport::seed("nbd")
}

#[allow(unused_imports)] // not every test file draws random numbers
pub use testsupport::Rng;

pub fn config(name: &str) -> ServerConfig {
    ServerConfig {
        export_name: name.into(),
        description: "test export".into(),
        ..ServerConfig::default()
    }
}

/// The size and transmission flags of the `INFO_EXPORT` reply among `replies`.
pub fn export_info(replies: &[OptionReply]) -> (u64, u16) {
    replies
        .iter()
        .find_map(|r| match r {
            OptionReply::Info(Info::Export {
                size,
                transmission_flags,
            }) => Some((*size, *transmission_flags)),
            _ => None,
        })
        .expect("INFO_EXPORT")
}
