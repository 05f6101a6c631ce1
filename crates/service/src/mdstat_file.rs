//! The file in /proc/mdstat's format a process keeps for its arrays ([`MdstatFile`]): the
//! tools that watch md arrays by parsing /proc/mdstat (node_exporter's mdadm collector,
//! telegraf's mdstat input, scripts and the alert rules written on them) watch raidkit's once
//! pointed at it (`raidkit serve --mdstat PATH`, the daemon's `[daemon] mdstat`).
//!
//! A thread reads the arrays' statuses every [`POLL_INTERVAL`] (in-memory snapshots, off the
//! I/O path), renders them with `admin::mdstat::render` and, when the text changed (or the
//! file was removed), replaces the file atomically: written in full to a temporary file beside
//! it, then renamed over it, so a reader sees the old file or the new one, never a part. While
//! a rebuild, resync or scrub runs its progress changes, so the file is rewritten every poll;
//! idle, it is not written at all. No fsync: the file tells how things are now, and after a
//! power cut the process writes a new one. One thread, one text: nothing grows.
//!
//! The file is written once before the thread starts, so a path that cannot be written
//! refuses the start (before any array is claimed) and a file left by a killed process is
//! replaced at once. At a clean exit ([`MdstatFile::finish`]) it is left listing no array,
//! as /proc/mdstat reads when md runs none: the file always exists while the system is up,
//! and a tool sees the arrays go away (a process killed with SIGKILL leaves its last state;
//! the daemon under systemd is restarted and rewrites it). A write that fails while serving
//! is logged once (and once when it works again), and tried again at each poll.

use std::fs;
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use admin::server::Arrays;
use anyhow::Context;
use volume::VolumeStatus;

use crate::periodic::Periodic;

/// How often the statuses are read (and, while they change, the file rewritten).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Mode of the file: readable by everyone, as /proc/mdstat (monitoring agents run as their
/// own users).
const FILE_MODE: u32 = 0o644;

/// The arrays to list, by the names they are listed under, in order; an error is logged and
/// the file left as it is.
pub type Statuses = Box<dyn Fn() -> Result<Vec<(String, VolumeStatus)>, String> + Send>;

/// Keeps the file current until [`MdstatFile::finish`]; see the module documentation.
pub struct MdstatFile {
    path: PathBuf,
    keeping: Periodic,
}

impl MdstatFile {
    /// Writes the file for the arrays `statuses` lists now, then keeps it current from a
    /// thread of its own; `log` hears a write that fails and one that works again.
    pub fn start(path: &Path, statuses: Statuses, log: admin::Log) -> anyhow::Result<MdstatFile> {
        let first = render(&statuses().unwrap_or_default());
        write_atomic(path, &first)
            .with_context(|| format!("cannot write the mdstat file {}", path.display()))?;
        let mut keeper = Keeper {
            path: path.to_path_buf(),
            written: first,
            failing: None,
            statuses,
            log,
        };
        let keeping = Periodic::start("mdstat", POLL_INTERVAL, move || {
            keeper.refresh();
            ControlFlow::Continue(())
        })
        .context("starting the mdstat file's thread")?;
        Ok(MdstatFile {
            path: path.to_path_buf(),
            keeping,
        })
    }

    /// Stops keeping the file and leaves it listing no array (the process serves none now).
    pub fn finish(self) -> anyhow::Result<()> {
        let MdstatFile { path, keeping } = self;
        drop(keeping);
        write_atomic(&path, &render(&[]))
            .with_context(|| format!("cannot write the mdstat file {}", path.display()))
    }
}

/// The thread's state: what the file holds, and the error being reported.
struct Keeper {
    path: PathBuf,
    written: String,
    failing: Option<String>,
    statuses: Statuses,
    log: admin::Log,
}

impl Keeper {
    fn refresh(&mut self) {
        let result = (self.statuses)().and_then(|arrays| {
            let text = render(&arrays);
            if text != self.written || !self.path.exists() {
                write_atomic(&self.path, &text).map_err(|e| format!("cannot write it: {e}"))?;
                self.written = text;
            }
            Ok(())
        });
        let path = self.path.display();
        match result {
            Ok(()) => {
                if self.failing.take().is_some() {
                    (self.log)(&format!("mdstat file {path} written again"));
                }
            }
            Err(e) if self.failing.as_ref() != Some(&e) => {
                (self.log)(&format!(
                    "warning: mdstat file {path}: {e} (tried again every {} ms)",
                    POLL_INTERVAL.as_millis()
                ));
                self.failing = Some(e);
            }
            Err(_) => {}
        }
    }
}

/// The arrays an admin socket serves, under the names it serves them by (a daemon's: the
/// configuration's names, those `raidkit status --array` takes).
pub fn served_by(arrays: Arc<Arrays>) -> Statuses {
    Box::new(move || match arrays.statuses() {
        Ok(statuses) => Ok(statuses.into_iter().map(|(n, s)| (n, s.volume)).collect()),
        Err(e) => Err(format!("cannot read the arrays' status: {e}")),
    })
}

fn render(arrays: &[(String, VolumeStatus)]) -> String {
    admin::mdstat::render(arrays.iter().map(|(name, status)| (name.as_str(), status)))
}

/// Replaces `path` with `text` at once: written to `.NAME.PID.tmp` in the same directory,
/// then renamed over it (the temporary file is removed if anything fails).
pub fn write_atomic(path: &Path, text: &str) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let temporary = path.with_file_name(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&temporary)?;
        file.write_all(text.as_bytes())?;
        // The umask may have taken bits away.
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Mutex;
    use std::time::Instant;
    use volume::{ArrayHealth, MemberState, MemberStatus};

    fn raid1(name: &str, second: MemberState) -> VolumeStatus {
        let member = |role, name: &str, state| MemberStatus::new(Some(role), name, state);
        let members = vec![member(0, "a", MemberState::Active), member(1, "b", second)];
        let health = ArrayHealth::Active;
        VolumeStatus {
            events: 1,
            ..VolumeStatus::new(name, "raid1", 65536, 1 << 20, health, members)
        }
    }

    /// Waits (up to 5 s) until the file at `path` satisfies `check`, and returns its text.
    fn eventually(path: &Path, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = fs::read_to_string(path).unwrap_or_default();
            if check(&text) || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    type Shared = Arc<Mutex<Result<Vec<(String, VolumeStatus)>, String>>>;

    fn source(shared: &Shared) -> Statuses {
        let shared = Arc::clone(shared);
        Box::new(move || shared.lock().unwrap().clone())
    }

    fn logger() -> (admin::Log, Arc<Mutex<Vec<String>>>) {
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let heard = Arc::clone(&lines);
        (
            Arc::new(move |l: &str| heard.lock().unwrap().push(l.to_string())),
            lines,
        )
    }

    #[test]
    fn the_file_follows_the_arrays_and_lists_none_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mdstat");
        fs::write(&path, "left by a killed process").unwrap();
        let shared: Shared = Arc::new(Mutex::new(Ok(vec![(
            "home".to_string(),
            raid1("on-disk", MemberState::Active),
        )])));
        let (log, lines) = logger();
        let file = MdstatFile::start(&path, source(&shared), log).unwrap();
        // Written before start returns: the stale text is gone.
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("home : active raid1 a[0] b[1]\n"), "{text}");
        assert!(text.contains(" [2/2] [UU]\n"), "{text}");
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, FILE_MODE);
        // A member fails: the next poll rewrites it.
        *shared.lock().unwrap() = Ok(vec![(
            "home".to_string(),
            raid1("on-disk", MemberState::Faulty),
        )]);
        let text = eventually(&path, |t| t.contains("b[1](F)"));
        assert!(
            text.contains("home : active raid1 a[0] b[1](F)\n"),
            "{text}"
        );
        assert!(text.contains(" [2/1] [U_]\n"), "{text}");
        // Removed by someone: written again.
        fs::remove_file(&path).unwrap();
        let text = eventually(&path, |t| t.contains("b[1](F)"));
        assert!(text.contains("b[1](F)"), "{text}");
        // A status that cannot be read: logged once, the file kept as it was.
        *shared.lock().unwrap() = Err("no status".to_string());
        std::thread::sleep(POLL_INTERVAL * 3);
        assert!(fs::read_to_string(&path).unwrap().contains("b[1](F)"));
        *shared.lock().unwrap() = Ok(Vec::new());
        let text = eventually(&path, |t| !t.contains("home"));
        assert!(
            text.starts_with("Personalities : ") && !text.contains("home"),
            "{text}"
        );
        let heard = lines.lock().unwrap().clone();
        assert_eq!(heard.len(), 2, "{heard:?}");
        assert!(
            heard[0].contains("mdstat file") && heard[0].contains("no status"),
            "{heard:?}"
        );
        assert!(heard[1].ends_with("written again"), "{heard:?}");
        *shared.lock().unwrap() = Ok(vec![("home".to_string(), raid1("x", MemberState::Active))]);
        eventually(&path, |t| t.contains("home"));
        file.finish().unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "Personalities : [linear] [raid0] [raid1] [raid10] [raid5] [raid6] \n\
             unused devices: <none>\n"
        );
        // Nothing but the file is left in the directory.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["mdstat"]);
    }

    #[test]
    fn a_path_that_cannot_be_written_refuses_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("mdstat");
        let shared: Shared = Arc::new(Mutex::new(Ok(Vec::new())));
        let (log, _) = logger();
        let err = MdstatFile::start(&path, source(&shared), log)
            .err()
            .unwrap();
        let message = format!("{err:#}");
        assert!(
            message.contains(&format!("cannot write the mdstat file {}", path.display())),
            "{message}"
        );
        assert!(message.contains("No such file or directory"), "{message}");
        assert!(!dir.path().join("missing").exists());
    }
}
