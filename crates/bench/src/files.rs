//! File-level tests, as a NAS test runs them: ext4 made on the export, then one large file
//! written and read sequentially, and many small files created, read and deleted. Without a
//! kernel NBD client the export reaches the kernel through nbdfuse (the export as a file) and a
//! loop device (`mount -o loop`), which needs root, /dev/fuse, a free loop device and the tools
//! (nbdfuse, fusermount3, mkfs.ext4, mount, umount: scripts/install-deps.sh). Each read phase
//! follows a remount, so it reads from the export, not from the page cache.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Tools the file tests run.
pub const TOOLS: &[&str] = &["nbdfuse", "fusermount3", "mkfs.ext4", "mount", "umount"];
/// Small files per directory.
const PER_DIR: u64 = 100;
/// Largest small-file count.
pub const MAX_SMALL_FILES: u64 = 1_000_000;

/// What the file tests do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileTest {
    /// Bytes of the one large file.
    pub large_bytes: u64,
    /// Number of small files.
    pub small_files: u64,
    /// Bytes of each small file.
    pub small_bytes: u64,
}

/// One phase's figures on one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileResult {
    pub target: String,
    /// `large-write` (written and synced), `large-read`, `small-create` (created, written and
    /// synced), `small-read`, `small-delete` (deleted and synced).
    pub phase: String,
    pub files: u64,
    pub bytes: u64,
    pub elapsed_s: f64,
    pub mb_s: f64,
    pub files_per_s: f64,
}

/// Why the file tests cannot run here, if they cannot: names what is missing and what to do.
pub fn check_environment(is_root: bool) -> Result<(), String> {
    if !is_root {
        return Err(
            "the file tests mount the export (nbdfuse + a loop device): run as root".into(),
        );
    }
    let missing: Vec<&str> = TOOLS.iter().copied().filter(|t| !on_path(t)).collect();
    if !missing.is_empty() {
        return Err(format!(
            "the file tests need {} (Debian: libnbd-bin, fuse3, e2fsprogs, mount; \
             scripts/install-deps.sh installs them)",
            missing.join(", ")
        ));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing: this machine or container has no FUSE".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("/dev/loop-control is missing: no loop devices here".into());
    }
    Ok(())
}

fn on_path(tool: &str) -> bool {
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&dirs)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|d| d.join(tool).is_file())
}

/// Runs the file tests on the export at `uri` (destroying its data: ext4 is made on it), in the
/// directory `work` (made empty by the caller, removed by it).
pub fn run(
    target: &str,
    uri: &str,
    work: &Path,
    test: &FileTest,
    progress: &dyn Fn(&str),
) -> Result<Vec<FileResult>, String> {
    let mnt = work.join("mnt");
    fs::create_dir_all(&mnt).map_err(|e| format!("creating {}: {e}", mnt.display()))?;
    progress("mkfs.ext4");
    let fuse = Fuse::start(uri, work)?;
    tool(
        Command::new("mkfs.ext4")
            .args(["-F", "-q", "-E", "nodiscard"])
            .arg(&fuse.disk),
    )?;
    fuse.stop()?;
    let mut out = Vec::new();
    let mut phase = |name: &str, files: u64, bytes: u64, took: Duration| {
        let s = took.as_secs_f64().max(1e-9);
        out.push(FileResult {
            target: target.to_string(),
            phase: name.to_string(),
            files,
            bytes,
            elapsed_s: s,
            mb_s: bytes as f64 / s / 1e6,
            files_per_s: files as f64 / s,
        });
    };
    let large = mnt.join("large");
    let small = mnt.join("small");
    let block = vec![0x5au8; 1 << 20];
    // Large file, written and synced.
    with_mount(uri, work, &mnt, || {
        progress("large-write");
        let took = timed(|| {
            let mut f = fs::File::create(&large).map_err(|e| io_err(&large, e))?;
            let mut left = test.large_bytes;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                f.write_all(&block[..n]).map_err(|e| io_err(&large, e))?;
                left -= n as u64;
            }
            f.sync_all().map_err(|e| io_err(&large, e))
        })?;
        phase("large-write", 1, test.large_bytes, took);
        Ok(())
    })?;
    with_mount(uri, work, &mnt, || {
        progress("large-read");
        let mut buf = vec![0u8; 1 << 20];
        let mut read = 0u64;
        let took = timed(|| {
            let mut f = fs::File::open(&large).map_err(|e| io_err(&large, e))?;
            loop {
                let n = f.read(&mut buf).map_err(|e| io_err(&large, e))?;
                if n == 0 {
                    return Ok(());
                }
                read += n as u64;
            }
        })?;
        if read != test.large_bytes {
            return Err(format!(
                "{}: read {read} bytes of {}",
                large.display(),
                test.large_bytes
            ));
        }
        phase("large-read", 1, read, took);
        fs::remove_file(&large).map_err(|e| io_err(&large, e))
    })?;
    // Small files: created, written and the filesystem synced.
    let path_of = |i: u64| {
        small
            .join(format!("d{}", i / PER_DIR))
            .join(format!("f{i}"))
    };
    let body = vec![0xa5u8; test.small_bytes as usize];
    with_mount(uri, work, &mnt, || {
        progress("small-create");
        let took = timed(|| {
            for i in 0..test.small_files {
                let p = path_of(i);
                if i % PER_DIR == 0 {
                    fs::create_dir_all(p.parent().expect("a file has a directory"))
                        .map_err(|e| io_err(&p, e))?;
                }
                fs::write(&p, &body).map_err(|e| io_err(&p, e))?;
            }
            sync_fs(&mnt)
        })?;
        phase(
            "small-create",
            test.small_files,
            test.small_files * test.small_bytes,
            took,
        );
        Ok(())
    })?;
    with_mount(uri, work, &mnt, || {
        progress("small-read");
        let mut buf = Vec::with_capacity(test.small_bytes as usize);
        let took = timed(|| {
            for i in 0..test.small_files {
                let p = path_of(i);
                buf.clear();
                fs::File::open(&p)
                    .and_then(|mut f| f.read_to_end(&mut buf))
                    .map_err(|e| io_err(&p, e))?;
                if buf.len() as u64 != test.small_bytes {
                    return Err(format!(
                        "{}: {} bytes, wrote {}",
                        p.display(),
                        buf.len(),
                        test.small_bytes
                    ));
                }
            }
            Ok(())
        })?;
        phase(
            "small-read",
            test.small_files,
            test.small_files * test.small_bytes,
            took,
        );
        progress("small-delete");
        let took = timed(|| {
            fs::remove_dir_all(&small).map_err(|e| io_err(&small, e))?;
            sync_fs(&mnt)
        })?;
        phase("small-delete", test.small_files, 0, took);
        Ok(())
    })?;
    Ok(out)
}

fn io_err(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<Duration, String> {
    let began = Instant::now();
    f()?;
    Ok(began.elapsed())
}

/// Syncs the filesystem holding `dir` (`syncfs` through a directory handle's `sync_all`, which
/// on Linux is fsync of the directory; then `sync -f` for the whole filesystem).
fn sync_fs(dir: &Path) -> Result<(), String> {
    tool(Command::new("sync").arg("-f").arg(dir))
}

/// Shows the export through a new nbdfuse, mounts it through a loop device on `mnt`, runs
/// `body`, unmounts and stops nbdfuse: everything is written back, and neither the
/// filesystem's cache nor the page cache of nbdfuse's file outlives the phase, so the next
/// phase reads from the export.
fn with_mount(
    uri: &str,
    work: &Path,
    mnt: &Path,
    body: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let fuse = Fuse::start(uri, work)?;
    tool(
        Command::new("mount")
            .args(["-o", "loop"])
            .arg(&fuse.disk)
            .arg(mnt),
    )?;
    let result = body();
    let umount = tool(Command::new("umount").arg(mnt));
    if umount.is_err() {
        let _ = Command::new("umount").arg("-l").arg(mnt).status();
    }
    result.and(umount).and(fuse.stop())
}

/// Runs a tool to its end; its failure names it with its stderr.
fn tool(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// nbdfuse showing the export as the file `disk`.
struct Fuse {
    dir: PathBuf,
    disk: PathBuf,
    child: Option<Child>,
}

impl Fuse {
    fn start(uri: &str, work: &Path) -> Result<Fuse, String> {
        let dir = work.join("fuse");
        fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let disk = dir.join("disk");
        let child = Command::new("nbdfuse")
            .arg(&disk)
            .arg(uri)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting nbdfuse: {e}"))?;
        let mut fuse = Fuse {
            dir,
            disk,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(c) = fuse.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    fuse.child = None;
                    return Err(format!(
                        "nbdfuse {uri} exited ({status}) before showing the export"
                    ));
                }
            }
            if fs::metadata(&fuse.disk)
                .map(|m| m.len() > 0)
                .unwrap_or(false)
            {
                return Ok(fuse);
            }
            if Instant::now() > deadline {
                return Err(format!("nbdfuse did not show {uri} within 20 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(mut self) -> Result<(), String> {
        self.unmount()
    }

    fn unmount(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let r = tool(Command::new("fusermount3").arg("-u").arg(&self.dir));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return r,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return r.and(Err("nbdfuse did not exit within 30 s".into()));
                }
            }
        }
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        let _ = self.unmount();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_root_is_refused_by_name() {
        let e = check_environment(false).unwrap_err();
        assert!(e.contains("run as root"), "{e}");
    }
}
