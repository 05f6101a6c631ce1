//! The space a file member takes on its filesystem: which filesystem holds a path and how full
//! it is ([`filesystem_of`]: statvfs, mount point and type from `/proc/self/mountinfo`), how
//! much of a sparse file is allocated ([`allocated_bytes`]), and reserving a file's blocks up
//! front ([`preallocate`], fallocate) so a full filesystem cannot refuse its writes later.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::sys::{self, Fallocate};

/// The filesystem holding a path, as `statvfs` and the mount table see it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilesystemSpace {
    /// Where it is mounted (`/` when the mount table cannot be read).
    pub mount_point: PathBuf,
    /// Its type (`ext4`, `tmpfs`, ...; empty when unknown).
    pub fs_type: String,
    /// Its device number (`st_dev` of files on it): equal for paths on the same filesystem.
    pub device: u64,
    /// Bytes an unprivileged writer may still allocate.
    pub free_bytes: u64,
    pub size_bytes: u64,
}

/// The filesystem holding `path` (a file or directory that exists).
pub fn filesystem_of(path: &Path) -> io::Result<FilesystemSpace> {
    let device = std::fs::metadata(path)?.dev();
    let (free_bytes, size_bytes) = sys::statvfs(path)?;
    let canonical = std::fs::canonicalize(path)?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let (mount_point, fs_type) = mount_of(&mounts, device, &canonical)
        .unwrap_or_else(|| (PathBuf::from("/"), String::new()));
    Ok(FilesystemSpace {
        mount_point,
        fs_type,
        device,
        free_bytes,
        size_bytes,
    })
}

/// Bytes of `path` allocated on its filesystem (`st_blocks`: a sparse file's holes take none).
pub fn allocated_bytes(path: &Path) -> io::Result<u64> {
    Ok(std::fs::metadata(path)?.blocks() * 512)
}

/// Allocates `[offset, offset + len)` of the regular file at `path` (fallocate, size kept), so
/// writes there never find the filesystem full. Fails with `StorageFull` when the space is not
/// there, `Unsupported` on a filesystem without fallocate.
pub fn preallocate(path: &Path, offset: u64, len: u64) -> io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    sys::fallocate(&file, Fallocate::Allocate, offset, len)
}

/// The mount point and type of the mount of `device` holding `path` (the longest mount point
/// that is a prefix of `path`; by prefix alone when no mount has that device number, as for
/// btrfs subvolumes).
fn mount_of(mountinfo: &str, device: u64, path: &Path) -> Option<(PathBuf, String)> {
    let (major, minor) = split_dev(device);
    let want = format!("{major}:{minor}");
    let mounts: Vec<(String, PathBuf, String)> = mountinfo.lines().filter_map(parse_line).collect();
    let best = |same_dev: bool| {
        mounts
            .iter()
            .filter(|(dev, point, _)| (!same_dev || *dev == want) && path.starts_with(point))
            .max_by_key(|(_, point, _)| point.as_os_str().len())
            .map(|(_, point, fs)| (point.clone(), fs.clone()))
    };
    best(true).or_else(|| best(false))
}

/// `(major:minor, mount point, fs type)` of one `/proc/self/mountinfo` line.
fn parse_line(line: &str) -> Option<(String, PathBuf, String)> {
    let fields: Vec<&str> = line.split(' ').collect();
    let dash = fields.iter().position(|f| *f == "-")?;
    let dev = fields.get(2)?.to_string();
    let point = PathBuf::from(unescape(fields.get(4)?));
    let fs_type = fields.get(dash + 1)?.to_string();
    Some((dev, point, fs_type))
}

/// Undoes the mount table's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let text = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// glibc's `major`/`minor` of a device number.
pub(crate) fn split_dev(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
30 22 0:45 / /mnt/my\\040disk rw shared:9 - tmpfs tmpfs rw,size=204800k
31 22 259:2 /srv /data rw shared:1 - ext4 /dev/nvme0n1p2 rw
";

    #[test]
    fn finds_the_mount_by_device_and_longest_prefix() {
        let dev = |major: u64, minor: u64| (major << 8) | minor;
        let got = mount_of(MOUNTINFO, dev(0, 45), Path::new("/mnt/my disk/a.img"));
        assert_eq!(got, Some(("/mnt/my disk".into(), "tmpfs".into())));
        // A bind mount of the same device: the longest matching prefix wins.
        let got = mount_of(MOUNTINFO, dev(259, 2), Path::new("/data/x"));
        assert_eq!(got, Some(("/data".into(), "ext4".into())));
        let got = mount_of(MOUNTINFO, dev(259, 2), Path::new("/home/x"));
        assert_eq!(got, Some(("/".into(), "ext4".into())));
        // Unknown device (a btrfs subvolume): by prefix alone.
        let got = mount_of(MOUNTINFO, dev(0, 99), Path::new("/mnt/my disk/b"));
        assert_eq!(got, Some(("/mnt/my disk".into(), "tmpfs".into())));
    }

    #[test]
    fn this_filesystem_and_preallocation() {
        let dir = tempfile::tempdir().unwrap();
        let path = testsupport::server::sparse_file(&dir.path().join("m"), 1 << 20);
        let fs = filesystem_of(&path).unwrap();
        assert!(fs.size_bytes > 0 && fs.free_bytes <= fs.size_bytes);
        assert!(path.starts_with(&fs.mount_point), "{fs:?}");
        assert_eq!(fs.device, filesystem_of(dir.path()).unwrap().device);
        assert_eq!(allocated_bytes(&path).unwrap(), 0, "a new sparse file");
        match preallocate(&path, 0, 1 << 20) {
            Ok(()) => assert!(allocated_bytes(&path).unwrap() >= 1 << 20),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}"),
        }
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            1 << 20,
            "size kept"
        );
    }
}
