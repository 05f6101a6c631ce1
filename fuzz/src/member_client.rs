//! `member::NbdMember` against a server that says whatever the input says. The input is a list
//! of chunks (each a little-endian `u16` length and that many bytes; the last may be short).
//! The fake server writes chunk 0 (the greeting) when the member connects, then one chunk after
//! each option or request the member sends; when the member waits for bytes a chunk left out
//! (every other thread of the process asleep, and nothing sent) it
//! writes every chunk left at once and closes, as it does when the chunks run out or the member
//! sends `NBD_CMD_DISC`. (Writing one chunk per wait instead let an input of thousands of empty
//! chunks keep the member waiting past its 10 s deadline, which AFL++ counted as hangs.) The
//! member opens the export and runs [`exercise`]: every error is an answer, only a panic or a
//! hang is a crash.
//!
//! The wait is found by looking, not by a timer: a fixed silence (it was 2 ms) is met by nearly
//! every input (a reply shorter than the member asked for), so each run slept 2–10 ms (a timer
//! fires late on a loaded machine), and a member that was only slow to be scheduled got the
//! rest of the input early, so the same input took different paths. [`STALL_MAX`] of silence
//! still ends a wait, for a member thread that never sleeps.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use member::{Member, NbdMember, OpenOptions, RemoteOptions};
use nbd_codec::consts::{CMD_DISC, CMD_WRITE, OPTS_MAGIC, REQUEST_MAGIC};

/// Silence from the member after which every chunk left is written even though some thread of
/// the process is awake (one that never sleeps would otherwise keep the member waiting out its
/// deadline).
const STALL_MAX: Duration = Duration::from_millis(200);
/// How long the fake server waits for the member's bytes before it looks again whether the
/// member waits for its own (poll returns at once when bytes come).
const POLL: Duration = Duration::from_millis(1);
/// Largest option or write payload the fake server reads (the member sends far less).
const MESSAGE_MAX: usize = 4 << 20;

/// The fake server of this process: one thread, started at the first input (in the process AFL++
/// forked: threads do not survive a fork) and kept for the next ones, that serves one
/// connection per input it is handed.
struct Fake {
    uri: String,
    /// The next input, for the connection the member is about to make.
    inputs: SyncSender<Vec<u8>>,
    /// One message each time the fake server has finished a connection.
    done: Mutex<Receiver<()>>,
}

fn fake() -> &'static Fake {
    static FAKE: OnceLock<Fake> = OnceLock::new();
    FAKE.get_or_init(|| {
        let dir = std::env::temp_dir().join("raidkit-fuzz");
        std::fs::create_dir_all(&dir).expect("create the fuzz socket directory");
        let path: PathBuf = dir.join(format!("{}-member.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("bind the fake server's socket");
        let uri = format!("nbd+unix:///export?socket={}", path.display());
        let (inputs, inputs_rx) = sync_channel::<Vec<u8>>(1);
        let (done_tx, done) = sync_channel(1);
        std::thread::Builder::new()
            .name("fuzz-fake-server".into())
            .spawn(move || {
                let me = thread_id();
                while let Ok(data) = inputs_rx.recv() {
                    let (stream, _) = listener.accept().expect("accept the member");
                    serve(stream, &chunks(&data), me);
                    done_tx
                        .send(())
                        .expect("the fuzz target waits for the fake server");
                }
            })
            .expect("spawn the fake server's thread");
        Fake {
            uri,
            inputs,
            done: Mutex::new(done),
        }
    })
}

/// Splits the input into chunks (see the module documentation).
pub fn chunks(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([data[0], data[1]]));
        let rest = &data[2..];
        let (chunk, next) = rest.split_at(len.min(rest.len()));
        out.push(chunk);
        data = next;
    }
    out
}

/// Joins chunks into an input (for seeds).
pub fn join(chunks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        out.extend_from_slice(
            &u16::try_from(c.len())
                .expect("chunk fits u16")
                .to_le_bytes(),
        );
        out.extend_from_slice(c);
    }
    out
}

pub fn member_replies(data: &[u8]) {
    let fake = fake();
    let done = fake.done.lock().unwrap_or_else(|p| p.into_inner());
    fake.inputs
        .send(data.to_vec())
        .expect("the fake server's thread runs");
    let remote = RemoteOptions {
        io_timeout: Duration::from_secs(10),
        max_in_flight: 8,
        ..RemoteOptions::default()
    };
    let opts = OpenOptions {
        exclusive: false,
        ..OpenOptions::default()
    };
    // Every open connects (the URI is the fake server's), so the fake server always has its
    // connection and always finishes.
    if let Ok(member) = NbdMember::open(&fake.uri, &opts, &remote) {
        exercise(&member);
    }
    done.recv()
        .expect("the fake server finished the connection");
}

/// What the member is asked to do once open: one of each operation, unaligned ones (read-
/// modify-write of edge blocks when the server's minimum block is larger than 1), and one
/// read that is split into pipelined requests when the server's maximum is small.
pub fn exercise(member: &NbdMember) {
    let len = member.len();
    let _ = member.description();
    let mut buf = vec![0u8; 4096];
    let _ = member.read_at(&mut buf, 0);
    let _ = member.write_at(&buf, 0);
    let mut odd = vec![0u8; 1000];
    let _ = member.read_at(&mut odd, 1);
    let _ = member.write_at(&odd, 513);
    let _ = member.flush();
    let _ = member.trim(0, 8192);
    let _ = member.write_zeroes(4096, 4096);
    let mut big = vec![0u8; len.min(256 << 10) as usize];
    let _ = member.read_at(&mut big, 0);
    let tail_len = len.min(512);
    let mut tail = vec![0u8; tail_len as usize];
    let _ = member.read_at(&mut tail, len - tail_len);
    let _ = member.is_connected();
}

/// The fake server's side of one connection.
fn serve(stream: UnixStream, chunks: &[&[u8]], me: u32) {
    let mut conn = Conn {
        stream,
        chunks: chunks.iter(),
        me,
    };
    let _ = conn.run();
    let _ = conn.stream.shutdown(Shutdown::Both);
}

struct Conn<'a, 'b> {
    stream: UnixStream,
    chunks: std::slice::Iter<'a, &'b [u8]>,
    /// The fake server's own thread (the one thread [`Conn::member_waits`] does not look at).
    me: u32,
}

/// Why the fake server stops.
enum Stop {
    /// No chunk left, or the member said goodbye.
    Done,
    Io,
}

impl From<io::Error> for Stop {
    fn from(_: io::Error) -> Stop {
        Stop::Io
    }
}

impl Conn<'_, '_> {
    fn run(&mut self) -> Result<(), Stop> {
        self.next_chunk()?;
        let mut flags = [0u8; 4];
        self.fill(&mut flags)?;
        loop {
            let mut magic = [0u8; 4];
            self.fill(&mut magic)?;
            if magic == OPTS_MAGIC.to_be_bytes()[..4] {
                let mut rest = [0u8; 12];
                self.fill(&mut rest)?;
                let len = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]) as usize;
                self.skip(len)?;
            } else if magic == REQUEST_MAGIC.to_be_bytes() {
                let mut rest = [0u8; 24];
                self.fill(&mut rest)?;
                let kind = u16::from_be_bytes([rest[2], rest[3]]);
                let len = u32::from_be_bytes([rest[20], rest[21], rest[22], rest[23]]) as usize;
                if kind == CMD_DISC {
                    return Err(Stop::Done);
                }
                if kind == CMD_WRITE {
                    self.skip(len)?;
                }
            } else {
                return Err(Stop::Done);
            }
            self.next_chunk()?;
        }
    }

    /// Writes the next chunk; none left ends the connection.
    fn next_chunk(&mut self) -> Result<(), Stop> {
        let chunk = self.chunks.next().ok_or(Stop::Done)?;
        self.stream.write_all(chunk)?;
        Ok(())
    }

    /// Writes every chunk left, then ends the connection.
    fn flood(&mut self) -> Result<(), Stop> {
        while self.next_chunk().is_ok() {}
        Err(Stop::Done)
    }

    /// Reads exactly `buf`; a member that waits for bytes instead gets what is left (see the
    /// module documentation).
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), Stop> {
        let mut at = 0;
        while at < buf.len() {
            if !self.readable(Duration::ZERO)? {
                let silent = Instant::now();
                loop {
                    if self.member_waits()? || silent.elapsed() >= STALL_MAX {
                        return self.flood();
                    }
                    if self.readable(POLL)? {
                        break;
                    }
                }
            }
            match self.stream.read(&mut buf[at..]) {
                Ok(0) => return Err(Stop::Done),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Whether the member has sent bytes (or closed) within `wait`.
    fn readable(&self, wait: Duration) -> Result<bool, Stop> {
        Ok(crate::poll(&self.stream, libc::POLLIN, wait)? != 0)
    }

    /// Whether the member waits for the fake server: every other thread of the process (the
    /// member's caller and its reader thread among them) stays asleep between two looks at
    /// them, no thread woke in between (the context-switch counts are the same), and the
    /// member has sent nothing after that. Then nothing but the fake server can wake the
    /// member (or its own deadline). A thread that is awake, or one that comes or goes, means
    /// "not yet": the caller waits a little and looks again.
    fn member_waits(&self) -> Result<bool, Stop> {
        let Some(first) = asleep_threads(self.me) else {
            return Ok(false);
        };
        let Some(second) = asleep_threads(self.me) else {
            return Ok(false);
        };
        Ok(first == second && !self.readable(Duration::ZERO)?)
    }

    fn skip(&mut self, len: usize) -> Result<(), Stop> {
        if len > MESSAGE_MAX {
            return Err(Stop::Done);
        }
        let mut buf = vec![0u8; len];
        self.fill(&mut buf)
    }
}

/// The calling thread's id (as /proc/self/task names it).
fn thread_id() -> u32 {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    u32::try_from(tid).expect("a thread id is positive")
}

/// Every thread of this process but `me` with its voluntary and involuntary context switches,
/// in id order, if every one of them is asleep (`S`, waiting for an event); `None` when one is
/// not (running, runnable, or gone while looked at).
fn asleep_threads(me: u32) -> Option<Vec<(u32, u64, u64)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let entry = entry.ok()?;
        let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
        if tid == me {
            continue;
        }
        // One read of a buffer larger than the file (`read_to_string` reads it in pieces).
        let mut buf = [0u8; 4096];
        let n = std::fs::File::open(entry.path().join("status"))
            .and_then(|mut f| f.read(&mut buf))
            .ok()?;
        let status = std::str::from_utf8(&buf[..n]).ok()?;
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
        };
        if !field("State:")?.starts_with('S') {
            return None;
        }
        let voluntary = field("voluntary_ctxt_switches:")?.parse().ok()?;
        let involuntary = field("nonvoluntary_ctxt_switches:")?.parse().ok()?;
        out.push((tid, voluntary, involuntary));
    }
    out.sort_unstable();
    Some(out)
}
