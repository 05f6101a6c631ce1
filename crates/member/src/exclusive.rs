//! What a member *is* ([`Identity`]: the same file under two names is one member) and the
//! exclusive hold an array keeps on its local members while it uses them, so that a second
//! raidkit (or this one, through a second name) cannot assemble the same array and corrupt it.
//!
//! - Regular files: an open-file-description lock (`F_OFD_SETLK`, write lock over the whole
//!   file), released when the file is closed. OFD locks conflict between any two opens, also
//!   inside one process, and are unaffected by other code closing unrelated descriptors of the
//!   same file (which drops classic POSIX locks).
//! - Block devices: `O_EXCL` at open, the kernel's exclusive claim (also refused while the device
//!   is mounted or claimed by md, device-mapper or another exclusive opener).
//!
//! Read-only opens (`examine`, `serve --read-only`) take no hold and are never refused by one.
//! The kernel does not say who holds an OFD lock (`/proc/locks` shows pid -1), so on a conflict
//! [`holder_of`] looks through `/proc/*/fdinfo` for the descriptor that carries it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::Holder;

/// What a member is, independent of the name it was given: two members with equal identities
/// are the same storage.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// A regular file: its filesystem's device and its inode.
    File { dev: u64, ino: u64 },
    /// A block device: its device number.
    BlockDevice { rdev: u64 },
    /// An NBD export: the server's socket address (resolved) or socket path (canonical), and
    /// the export name.
    Nbd { server: String, export: String },
}

impl Identity {
    /// The identity of an open file or block device.
    pub(crate) fn of_file(file: &File) -> io::Result<Identity> {
        let meta = file.metadata()?;
        Ok(if meta.file_type().is_file() {
            Identity::File {
                dev: meta.dev(),
                ino: meta.ino(),
            }
        } else {
            Identity::BlockDevice { rdev: meta.rdev() }
        })
    }
}

/// Takes the exclusive hold on a regular file opened for writing. `Ok(false)`: another open
/// file description holds a conflicting lock.
pub(crate) fn lock_file(file: &File) -> io::Result<bool> {
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value, the fields that matter are
    // set below, and the pointer passed to fcntl points at it for the duration of the call.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = 0;
    lock.l_len = 0; // to the end of the file, however it grows
                    // SAFETY: F_OFD_SETLK takes a pointer to a `struct flock`, which `lock` is.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// How long [`lock_file_waiting`] waits for a hold that no process carries to go away.
pub(crate) const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// [`lock_file`], waiting up to `wait` for a hold that no live process carries
/// (`has_live_holder`, [`holder_of`] in use): when a process holding the member dies (kill -9,
/// a crash) with reads or writes in its io_uring, the kernel keeps the file's open description
/// — and so its OFD lock — until the ring's teardown, which runs after the process is gone; a
/// restart or a `grow` run again at once found its member "in use" by nobody
/// (tests/python/test_grow.py's kill -9 reshape round did). A hold a live process carries is
/// refused at once.
pub(crate) fn lock_file_waiting(
    file: &File,
    wait: std::time::Duration,
    has_live_holder: impl Fn() -> bool,
) -> io::Result<bool> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        if lock_file(file)? {
            return Ok(true);
        }
        if has_live_holder() || std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Who holds `path` (a member that could not be claimed), as far as `/proc` tells: for a
/// regular file the process whose open descriptor carries the OFD lock, for a block device the
/// mount point or the processes that have it open. `None` when nothing can be found (another
/// PID namespace, a lock over NFS, no permission to look).
pub fn holder_of(path: &Path) -> Option<Holder> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.file_type().is_file() {
        let holders = processes_with(|target, fdinfo| {
            target.dev() == meta.dev()
                && target.ino() == meta.ino()
                && fdinfo
                    .lines()
                    .any(|l| l.starts_with("lock:") && l.contains("OFDLCK"))
        });
        return describe_processes(&holders);
    }
    let rdev = meta.rdev();
    if let Some(mount) = mount_point_of_device(rdev) {
        return Some(Holder::Others(format!("it is mounted at {mount}")));
    }
    let holders = processes_with(|target, _| {
        use std::os::unix::fs::FileTypeExt;
        target.file_type().is_block_device() && target.rdev() == rdev
    });
    describe_processes(&holders)
}

/// Processes (pid, command line) with an open descriptor for which `matches(stat, fdinfo)`.
fn processes_with(matches: impl Fn(&std::fs::Metadata, &str) -> bool) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let hit = fds.flatten().any(|fd| {
            let Ok(target) = std::fs::metadata(fd.path()) else {
                return false;
            };
            let fdinfo = entry.path().join("fdinfo").join(fd.file_name());
            let info = std::fs::read_to_string(fdinfo).unwrap_or_default();
            matches(&target, &info)
        });
        if hit {
            found.push((pid, command_line(pid)));
        }
    }
    found
}

fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut line = text.join(" ");
    if line.chars().count() > 120 {
        line = line.chars().take(117).collect::<String>() + "...";
    }
    line
}

fn describe_processes(holders: &[(u32, String)]) -> Option<Holder> {
    let me = std::process::id();
    if holders.iter().any(|(pid, _)| *pid == me) {
        return Some(Holder::ThisProcess);
    }
    let parts: Vec<String> = holders
        .iter()
        .take(4)
        .map(|(pid, cmd)| format!("pid {pid}: {cmd}"))
        .collect();
    (!parts.is_empty()).then(|| Holder::Others(format!("held by {}", parts.join("; "))))
}

/// The mount point of the filesystem on block device `rdev`, from `/proc/self/mountinfo`.
fn mount_point_of_device(rdev: u64) -> Option<String> {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let wanted = format!("{major}:{minor}");
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let device = fields.nth(2)?;
        let mount_point = fields.nth(1)?;
        (device == wanted).then(|| mount_point.replace("\\040", " "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn member_file(dir: &Path) -> impl Fn() -> File + '_ {
        let path = dir.join("m.img");
        std::fs::write(&path, [0u8; 4096]).unwrap();
        move || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap()
        }
    }

    #[test]
    fn a_hold_no_live_process_carries_is_waited_for_until_it_goes() {
        // The hold of a process that died with I/O in its io_uring outlives it briefly: here
        // a descriptor dropped 150 ms later, with no live holder reported.
        let dir = tempfile::tempdir().unwrap();
        let open = member_file(dir.path());
        let dying = open();
        assert!(lock_file(&dying).unwrap());
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            drop(dying);
        });
        let start = Instant::now();
        let got = lock_file_waiting(&open(), Duration::from_secs(5), || false).unwrap();
        release.join().unwrap();
        assert!(got, "the hold went away and the member was not claimed");
        assert!(
            start.elapsed() >= Duration::from_millis(100),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_live_holder_is_refused_at_once_and_a_hold_that_stays_after_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let open = member_file(dir.path());
        let holder = open();
        assert!(lock_file(&holder).unwrap());
        let start = Instant::now();
        assert!(!lock_file_waiting(&open(), Duration::from_secs(5), || true).unwrap());
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        let start = Instant::now();
        assert!(!lock_file_waiting(&open(), Duration::from_millis(200), || false).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(200));
    }

    #[test]
    fn a_second_lock_on_the_same_file_is_refused_and_its_holder_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.img");
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap()
        };
        let first = open();
        assert!(lock_file(&first).unwrap());
        let second = open();
        assert!(
            !lock_file(&second).unwrap(),
            "OFD locks conflict in one process"
        );
        assert_eq!(holder_of(&path), Some(Holder::ThisProcess));
        drop(first);
        assert!(
            lock_file(&second).unwrap(),
            "closing the file releases the lock"
        );
    }

    #[test]
    fn two_names_of_one_file_have_one_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.img");
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let link = dir.path().join("link.img");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let other = dir.path().join("other.img");
        std::fs::write(&other, [0u8; 4096]).unwrap();
        let id = |p: &Path| Identity::of_file(&File::open(p).unwrap()).unwrap();
        assert_eq!(id(&path), id(&link));
        assert_eq!(id(&path), id(&dir.path().join(".").join("m.img")));
        assert_ne!(id(&path), id(&other));
    }
}
