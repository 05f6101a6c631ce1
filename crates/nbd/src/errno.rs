//! Mapping `std::io::Error` from an export to the NBD error values.

use std::io;

use crate::codec::consts::*;

/// The NBD error value for an export error: known errnos and kinds map to their NBD
/// counterparts, everything else is `NBD_EIO`.
pub fn nbd_errno(error: &io::Error) -> u32 {
    if let Some(code) = error.raw_os_error() {
        if let Some(mapped) = from_os_errno(code) {
            return mapped;
        }
    }
    from_kind(error.kind())
}

fn from_os_errno(code: i32) -> Option<u32> {
    Some(match code {
        libc::EPERM | libc::EACCES | libc::EROFS => EPERM,
        libc::EIO => EIO,
        libc::ENOMEM => ENOMEM,
        libc::EINVAL => EINVAL,
        libc::ENOSPC | libc::EDQUOT | libc::EFBIG => ENOSPC,
        libc::EOVERFLOW => EOVERFLOW,
        libc::ENOTSUP => ENOTSUP,
        libc::ESHUTDOWN => ESHUTDOWN,
        _ => return None,
    })
}

fn from_kind(kind: io::ErrorKind) -> u32 {
    match kind {
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => EPERM,
        io::ErrorKind::InvalidInput => EINVAL,
        io::ErrorKind::OutOfMemory => ENOMEM,
        io::ErrorKind::StorageFull | io::ErrorKind::FileTooLarge | io::ErrorKind::QuotaExceeded => {
            ENOSPC
        }
        io::ErrorKind::Unsupported => ENOTSUP,
        _ => EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_os_errors_and_kinds() {
        let os = |c| nbd_errno(&io::Error::from_raw_os_error(c));
        assert_eq!(os(libc::EACCES), EPERM);
        assert_eq!(os(libc::EDQUOT), ENOSPC);
        assert_eq!(os(libc::EFBIG), ENOSPC);
        assert_eq!(os(libc::EOVERFLOW), EOVERFLOW);
        assert_eq!(os(libc::ESHUTDOWN), ESHUTDOWN);
        assert_eq!(os(libc::EBADF), EIO);
        let kind = |k| nbd_errno(&io::Error::new(k, "x"));
        assert_eq!(kind(io::ErrorKind::InvalidInput), EINVAL);
        assert_eq!(kind(io::ErrorKind::Unsupported), ENOTSUP);
        assert_eq!(kind(io::ErrorKind::OutOfMemory), ENOMEM);
        assert_eq!(kind(io::ErrorKind::Other), EIO);
    }
}
