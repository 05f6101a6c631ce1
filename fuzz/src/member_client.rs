//! `member::NbdMember` against a server that says whatever the input says. The input is a list
//! of chunks (each a little-endian `u16` length and that many bytes; the last may be short).
//! The fake server writes chunk 0 (the greeting) when the member connects, then one chunk after
//! each option or request the member sends; when the member sends nothing for [`STALL`] (it
//! waits for bytes a chunk left out) it writes every chunk left at once and closes, as it does
//! when the chunks run out or the member sends `NBD_CMD_DISC`. (Writing one chunk per stall
//! instead let an input of thousands of empty chunks keep the member waiting past its 10 s
//! deadline, which AFL++ counted as hangs.) The member opens the export and runs [`exercise`]: every
//! error is an answer, only a panic or a hang is a crash.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use member::{Member, NbdMember, OpenOptions, RemoteOptions};
use nbd_codec::consts::{CMD_DISC, CMD_WRITE, OPTS_MAGIC, REQUEST_MAGIC};

/// Silence from the member after which the next chunk is written anyway.
const STALL: Duration = Duration::from_millis(2);
/// Largest option or write payload the fake server reads (the member sends far less).
const MESSAGE_MAX: usize = 4 << 20;

/// The fake server's listening socket of this process.
struct Fake {
    listener: UnixListener,
    uri: String,
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
        Fake { listener, uri }
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
    let chunks = chunks(data);
    let fake = fake();
    std::thread::scope(|scope| {
        let server = scope.spawn(|| {
            let (stream, _) = fake.listener.accept().expect("accept the member");
            serve(stream, &chunks);
        });
        let remote = RemoteOptions {
            io_timeout: Duration::from_secs(10),
            max_in_flight: 8,
            ..RemoteOptions::default()
        };
        let opts = OpenOptions {
            exclusive: false,
            ..OpenOptions::default()
        };
        if let Ok(member) = NbdMember::open(&fake.uri, &opts, &remote) {
            exercise(&member);
        }
        server.join().expect("fake server thread");
    });
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
fn serve(stream: UnixStream, chunks: &[&[u8]]) {
    stream.set_read_timeout(Some(STALL)).expect("read timeout");
    let mut conn = Conn {
        stream,
        chunks: chunks.iter(),
    };
    let _ = conn.run();
    let _ = conn.stream.shutdown(Shutdown::Both);
}

struct Conn<'a, 'b> {
    stream: UnixStream,
    chunks: std::slice::Iter<'a, &'b [u8]>,
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

    /// Reads exactly `buf`; silence from the member writes what is left (see the module doc).
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), Stop> {
        let mut at = 0;
        while at < buf.len() {
            match self.stream.read(&mut buf[at..]) {
                Ok(0) => return Err(Stop::Done),
                Ok(n) => at += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return self.flood();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn skip(&mut self, len: usize) -> Result<(), Stop> {
        if len > MESSAGE_MAX {
            return Err(Stop::Done);
        }
        let mut buf = vec![0u8; len];
        self.fill(&mut buf)
    }
}
