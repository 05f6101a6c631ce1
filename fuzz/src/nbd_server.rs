//! The NBD server as a client meets it: one `nbd::serve_exports` per fuzzing process, on a Unix
//! socket, serving two small in-memory exports ("rw", and the read-only "ro"); each input is
//! one connection whose bytes are sent whole while the replies are read and dropped, until the
//! server closes. The exports assert that every call is within their size (the server must
//! refuse anything else at the edge), and a server that neither answers nor closes within
//! [`CLOSE_DEADLINE`] after the client's end of input is a crash too.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nbd::codec::consts::*;
use nbd::codec::{ClientFlags, ClientOption, InfoRequest, MetaContextRequest};
use nbd::{Export, Exports, Listener, ServerConfig, StatusExtent};

/// Bytes of the writable export: not a multiple of 4 KiB or of the preferred block size, so
/// requests at and past the end meet odd edges.
const RW_BYTES: usize = (192 << 10) + 1000;
/// Bytes of the read-only export.
const RO_BYTES: usize = 64 << 10;
/// After the client's end of input the server must finish and close within this.
const CLOSE_DEADLINE: Duration = Duration::from_secs(20);

/// An export in memory that treats a call outside its bounds as the server's bug.
struct MemExport {
    bytes: Mutex<Vec<u8>>,
    read_only: bool,
}

impl MemExport {
    fn new(len: usize, read_only: bool) -> Self {
        MemExport {
            bytes: Mutex::new(vec![0; len]),
            read_only,
        }
    }

    fn range(&self, offset: u64, len: u64) -> std::ops::Range<usize> {
        let size = self.size();
        let end = offset.checked_add(len);
        assert!(
            end.is_some_and(|end| end <= size),
            "the server let through a request of {len} bytes at {offset} on an export of {size}"
        );
        offset as usize..(offset + len) as usize
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn writable(&self) {
        assert!(
            !self.read_only,
            "the server let a write reach a read-only export"
        );
    }
}

impl Export for MemExport {
    fn size(&self) -> u64 {
        self.lock().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let r = self.range(offset, buf.len() as u64);
        buf.copy_from_slice(&self.lock()[r]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
        self.writable();
        let r = self.range(offset, data.len() as u64);
        self.lock()[r].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.writable();
        let r = self.range(offset, len);
        self.lock()[r].fill(0);
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> io::Result<()> {
        self.writable();
        let r = self.range(offset, len);
        self.lock()[r].fill(0);
        Ok(())
    }
    fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<StatusExtent>> {
        assert!(len > 0, "the server asked for the status of 0 bytes");
        let r = self.range(offset, u64::from(len));
        let bytes = self.lock();
        // 4 KiB-aligned pieces: all-zero ones are holes, the rest data.
        let mut out: Vec<StatusExtent> = Vec::new();
        let mut at = r.start;
        while at < r.end {
            let next = ((at / 4096 + 1) * 4096).min(r.end);
            let zero = bytes[at..next].iter().all(|b| *b == 0);
            let piece = (next - at) as u32;
            match out.last_mut() {
                Some(last) if last.zero == zero => last.length += piece,
                _ => out.push(StatusExtent {
                    length: piece,
                    hole: zero,
                    zero,
                }),
            }
            at = next;
        }
        Ok(out)
    }
    fn preferred_block_size(&self) -> u32 {
        3 * (64 << 10) // a 3-data-member stripe, rounded up by the server
    }
    fn can_multi_conn(&self) -> bool {
        !self.read_only
    }
    fn can_fast_zero(&self) -> bool {
        !self.read_only
    }
    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.range(offset, len);
        Ok(())
    }
}

/// The server of this process.
struct Server {
    path: PathBuf,
    rw: Arc<MemExport>,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(start)
}

/// The listener's limits: small enough that every bound is met quickly, big enough for a
/// maximum request.
fn config(name: &str, read_only: bool) -> ServerConfig {
    ServerConfig {
        export_name: name.into(),
        description: format!("fuzz export {name}"),
        read_only,
        max_request_bytes: 1 << 20,
        max_in_flight_per_conn: 4,
        max_blocking_calls: 4,
        max_buffer_bytes: 8 << 20,
        max_idle_buffer_bytes: 4 << 20,
        max_option_bytes: 8 << 10,
        max_options_per_conn: 64,
        ..ServerConfig::default()
    }
}

/// Starts the server on its own runtime thread (lazily, in the process AFL forked: threads do
/// not survive a fork). Its socket is named after the process; ones left by processes that
/// are gone are removed.
fn start() -> Server {
    let dir = std::env::temp_dir().join("raidkit-fuzz");
    std::fs::create_dir_all(&dir).expect("create the fuzz socket directory");
    remove_dead_sockets(&dir);
    let path = dir.join(format!("{}.sock", std::process::id()));
    let rw = Arc::new(MemExport::new(RW_BYTES, false));
    let ro = Arc::new(MemExport::new(RO_BYTES, true));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (socket, export) = (path.clone(), Arc::clone(&rw));
    std::thread::Builder::new()
        .name("fuzz-nbd-server".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("tokio runtime");
            runtime.block_on(async move {
                let listener = Listener::bind_unix(&socket).expect("bind the fuzz socket");
                let exports = Exports::new();
                let (rw, ro): (Arc<dyn Export>, Arc<dyn Export>) = (export, ro);
                exports.add(rw, config("rw", false)).expect("add rw");
                exports.add(ro, config("ro", true)).expect("add ro");
                ready_tx.send(()).expect("signal ready");
                nbd::serve_exports(listener, exports, config("", false), std::future::pending())
                    .await
                    .expect("a valid server configuration");
            });
        })
        .expect("spawn the server thread");
    ready_rx.recv().expect("the server started");
    Server { path, rw }
}

fn remove_dead_sockets(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_suffix(".sock"));
        if pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// One connection: `bytes` sent whole (then end of input) while every reply is read, until
/// the server closes. One thread does both, with the socket non-blocking: `poll` says which
/// way it can move (a thread to write and one to read cost a thread per input).
fn exchange(bytes: &[u8]) {
    let server = server();
    server.rw.lock().fill(0);
    let stream = UnixStream::connect(&server.path).expect("connect to the fuzz server");
    stream
        .set_nonblocking(true)
        .expect("make the client's socket non-blocking");
    let mut unsent = bytes;
    if unsent.is_empty() {
        let _ = stream.shutdown(Shutdown::Write);
    }
    let mut writing = !unsent.is_empty();
    let mut sink = vec![0u8; 64 << 10];
    loop {
        let events = libc::POLLIN | if writing { libc::POLLOUT } else { 0 };
        let revents =
            crate::poll(&stream, events, CLOSE_DEADLINE).expect("poll the client's socket");
        if revents == 0 {
            panic!(
                "the server neither replied nor closed within {CLOSE_DEADLINE:?} of the client's end of input"
            );
        }
        if writing && revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0 {
            match (&stream).write(unsent) {
                Ok(n) => {
                    unsent = &unsent[n..];
                    if unsent.is_empty() {
                        let _ = stream.shutdown(Shutdown::Write);
                        writing = false;
                    }
                }
                Err(e) if is_retry(&e) => {}
                // The server may close before reading everything (a protocol error): fine.
                Err(_) => writing = false,
            }
        }
        if revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0 {
            match (&stream).read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if is_retry(&e) => {}
                Err(_) => break,
            }
        }
    }
}

/// A non-blocking call that did nothing and may be made again.
fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// The client's bytes from the first one: client flags, options, and whatever follows.
pub fn nbd_handshake(data: &[u8]) {
    exchange(data);
}

/// A valid handshake chosen by `data[0]`, then `data[1..]` as transmission requests (the
/// server takes requests pipelined behind the last option):
/// - bit 0: `NBD_OPT_STRUCTURED_REPLY`; bit 1 (with bit 0): `SET_META_CONTEXT base:allocation`;
/// - bit 2: the read-only export; bit 3: `NBD_OPT_EXPORT_NAME` instead of `NBD_OPT_GO`;
/// - bit 4: no `NO_ZEROES` client flag.
pub fn nbd_requests(data: &[u8]) {
    let Some((&choice, requests)) = data.split_first() else {
        return;
    };
    let mut bytes = handshake(choice);
    bytes.extend_from_slice(requests);
    exchange(&bytes);
}

/// The client's side of a successful handshake (see [`nbd_requests`]).
pub fn handshake(choice: u8) -> Vec<u8> {
    let flags = if choice & 0x10 != 0 {
        FLAG_C_FIXED_NEWSTYLE
    } else {
        FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES
    };
    let mut out = ClientFlags(flags).encode().to_vec();
    let name = if choice & 0x04 != 0 { "ro" } else { "rw" };
    if choice & 0x01 != 0 {
        out.extend(ClientOption::StructuredReply { has_data: false }.encode_message());
        if choice & 0x02 != 0 {
            let meta = MetaContextRequest {
                name: name.into(),
                queries: vec![META_BASE_ALLOCATION.into()],
            };
            out.extend(ClientOption::SetMetaContext(meta).encode_message());
        }
    }
    let select = if choice & 0x08 != 0 {
        ClientOption::ExportName(name.into())
    } else {
        ClientOption::Go(InfoRequest {
            name: name.into(),
            requests: vec![INFO_BLOCK_SIZE],
        })
    };
    out.extend(select.encode_message());
    out
}
