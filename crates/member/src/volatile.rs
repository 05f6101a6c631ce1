//! Whether a member's storage lives in RAM that a power loss empties ([`volatile_storage`]):
//! a file on tmpfs or ramfs (statfs `f_type`), a RAM block device (brd's `/dev/ramN`, zram), a
//! loop device over a file on those, or a RAM member (`mem:SIZE`). A write-back journal there
//! loses every write it acknowledged at the next power cut; `raidkit` refuses one without an
//! explicit flag.
//!
//! What cannot be told from here (an NBD export, a disk with a volatile write cache that lies
//! about flushes) is reported as not volatile.

use std::fmt;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::{is_nbd_uri, ram_spec};

/// statfs `f_type` of tmpfs (<linux/magic.h>).
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// statfs `f_type` of ramfs (<linux/magic.h>; not in the `libc` crate).
const RAMFS_MAGIC: i64 = 0x8584_58f6;
/// Loop devices over loop devices over ...: followed this deep at most.
const LOOP_DEPTH_MAX: usize = 4;

/// Why a member's storage is volatile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Volatile {
    /// A file on a RAM filesystem: `"tmpfs"` or `"ramfs"`.
    RamFilesystem(&'static str),
    /// A RAM block device, by its kernel name (`ram0`, `zram1`).
    RamBlockDevice(String),
    /// A RAM member (`mem:SIZE`): gone with the process.
    RamMember,
}

impl Volatile {
    /// A short name for status output: `tmpfs`, `ramfs`, `ram0`, `mem`.
    pub fn kind(&self) -> &str {
        match self {
            Volatile::RamFilesystem(fs) => fs,
            Volatile::RamBlockDevice(name) => name,
            Volatile::RamMember => "mem",
        }
    }
}

impl fmt::Display for Volatile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Volatile::RamFilesystem(fs) => write!(f, "on {fs}, a filesystem in RAM"),
            Volatile::RamBlockDevice(name) => write!(f, "on {name}, a RAM block device"),
            Volatile::RamMember => write!(f, "a RAM member (mem:SIZE or sim:CLASS:SIZE)"),
        }
    }
}

/// Whether the member `spec` (as the user typed it: a path, `mem:SIZE`, an NBD URI) is stored
/// in RAM. A path that does not exist yet is judged by the nearest directory above it that
/// does (where it would be created).
pub fn volatile_storage(spec: &str) -> io::Result<Option<Volatile>> {
    if ram_spec(spec) {
        return Ok(Some(Volatile::RamMember));
    }
    if is_nbd_uri(spec) || spec.is_empty() {
        return Ok(None);
    }
    volatile_path(&existing_ancestor(Path::new(spec)), 0)
}

fn volatile_path(path: &Path, depth: usize) -> io::Result<Option<Volatile>> {
    let meta = std::fs::metadata(path)?;
    if meta.file_type().is_block_device() {
        return volatile_block_device(meta.rdev(), depth);
    }
    Ok(match crate::sys::statfs_type(path)? {
        TMPFS_MAGIC => Some(Volatile::RamFilesystem("tmpfs")),
        RAMFS_MAGIC => Some(Volatile::RamFilesystem("ramfs")),
        _ => None,
    })
}

/// A RAM disk by its sysfs name, or a loop device whose backing file is volatile.
fn volatile_block_device(rdev: u64, depth: usize) -> io::Result<Option<Volatile>> {
    let (major, minor) = crate::space::split_dev(rdev);
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let Ok(target) = std::fs::read_link(&sys) else {
        return Ok(None);
    };
    // A partition's sysfs directory sits inside its disk's: `.../ram0/ram0p1`.
    let names: Vec<String> = target
        .iter()
        .rev()
        .take(2)
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    if let Some(name) = names.iter().find(|n| is_ram_disk_name(n)) {
        return Ok(Some(Volatile::RamBlockDevice(name.clone())));
    }
    let backing = std::fs::read_to_string(sys.join("loop/backing_file")).unwrap_or_default();
    let backing = backing.trim_end();
    if backing.is_empty() || depth >= LOOP_DEPTH_MAX {
        return Ok(None);
    }
    volatile_path(Path::new(backing), depth + 1)
}

/// The kernel names of RAM block devices: brd's `ramN`, `zramN`.
fn is_ram_disk_name(name: &str) -> bool {
    let digits = |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("ram").is_some_and(digits) || name.strip_prefix("zram").is_some_and(digits)
}

/// `path` if it exists, else the nearest existing directory above it (`.` for a bare name).
fn existing_ancestor(path: &Path) -> PathBuf {
    let mut at = path;
    loop {
        if at.exists() {
            return at.to_path_buf();
        }
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => return PathBuf::from("."),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_disk_names() {
        for name in ["ram0", "ram15", "zram0", "zram3"] {
            assert!(is_ram_disk_name(name), "{name}");
        }
        for name in ["ram", "zram", "nvme0n1", "ramdisk", "sda", "loop0", "dm-0"] {
            assert!(!is_ram_disk_name(name), "{name}");
        }
    }

    #[test]
    fn files_under_dev_shm_and_ram_members_are_volatile() {
        let shm = Path::new("/dev/shm");
        assert!(shm.is_dir(), "this test needs /dev/shm (a tmpfs on Linux)");
        let dir = tempfile::tempdir_in(shm).unwrap();
        let file = dir.path().join("journal");
        std::fs::write(&file, b"x").unwrap();
        let tmpfs = Some(Volatile::RamFilesystem("tmpfs"));
        let spec = |p: &Path| p.display().to_string();
        assert_eq!(volatile_storage(&spec(&file)).unwrap(), tmpfs);
        // Not created yet: judged by the directory it would be created in.
        let later = dir.path().join("a/b/journal");
        assert_eq!(volatile_storage(&spec(&later)).unwrap(), tmpfs);
        assert_eq!(
            volatile_storage("mem:64M").unwrap(),
            Some(Volatile::RamMember)
        );
        assert_eq!(volatile_storage("nbd://localhost/x").unwrap(), None);
    }

    #[test]
    fn agrees_with_the_mount_table_elsewhere() {
        // The crate's own directory: volatile exactly when the mount table says tmpfs/ramfs
        // (a second source: /proc/self/mountinfo instead of statfs).
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let fs = crate::filesystem_of(dir).unwrap();
        let in_ram = matches!(fs.fs_type.as_str(), "tmpfs" | "ramfs");
        let got = volatile_storage(&dir.display().to_string()).unwrap();
        assert_eq!(got.is_some(), in_ram, "{fs:?}: {got:?}");
    }
}
