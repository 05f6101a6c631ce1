//! [`AlignedBuf`]: a zeroed heap buffer whose address is a multiple of its alignment (4096 or
//! more), the kind of buffer `O_DIRECT` transfers need (`Vec<u8>` gives no such promise: glibc
//! returns large blocks 16 bytes into a page).
//!
//! [`AlignedBuf::mapped`] takes its pages straight from the kernel (`mmap`) and gives them back
//! when dropped (`munmap`), never through the allocator's arenas: for long-lived pooled buffers
//! whose memory must be exactly what the pool accounts for (see its documentation).

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The alignment of buffers meant for direct I/O: a page, which is a multiple of every logical
/// block size a Linux block device or filesystem asks `O_DIRECT` memory to be aligned to.
pub const DIRECT_ALIGN: usize = 4096;

/// A zero-filled, fixed-length byte buffer aligned to [`DIRECT_ALIGN`] (or more).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// `None` for an empty buffer, which allocates nothing.
    layout: Option<Layout>,
    align: usize,
    /// Mapped from the kernel ([`AlignedBuf::mapped`]): `munmap` of `len` rounded up to a page
    /// when dropped, instead of the allocator's `dealloc`.
    mapped: bool,
}

// SAFETY: `AlignedBuf` owns its allocation exclusively, like a `Vec<u8>`; `&AlignedBuf` only
// gives shared access to plain bytes.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes at an address aligned to `align` (a power of two; at least
    /// [`DIRECT_ALIGN`] is used). Panics only if the allocator fails, as `vec!` does. An empty
    /// buffer allocates nothing.
    pub fn zeroed(len: usize, align: usize) -> AlignedBuf {
        let align = align.max(DIRECT_ALIGN);
        if len == 0 {
            return AlignedBuf {
                ptr: NonNull::dangling(),
                len,
                layout: None,
                align,
                mapped: false,
            };
        }
        // The allocation is a whole number of alignment units.
        let size = len.next_multiple_of(align);
        let layout = Layout::from_size_align(size, align).expect("power-of-two buffer alignment");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedBuf {
            ptr,
            len,
            layout: Some(layout),
            align,
            mapped: false,
        }
    }

    /// `len` zero bytes on pages mapped from the kernel (aligned to [`DIRECT_ALIGN`]), unmapped
    /// when dropped. Unlike [`AlignedBuf::zeroed`], whose blocks below glibc's mmap threshold
    /// come from per-thread arenas that keep them resident after they are freed (a buffer freed
    /// by one of 80 request threads stays in its arena for that arena's threads only), the
    /// memory is resident only while the buffer lives. For large buffers kept for reuse: the
    /// mapping costs a system call and a page fault per page when new. Panics if the kernel
    /// refuses the mapping (out of memory), as a failed allocation does.
    pub fn mapped(len: usize) -> AlignedBuf {
        if len == 0 {
            return AlignedBuf::zeroed(0, 0);
        }
        let size = len.next_multiple_of(DIRECT_ALIGN);
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            panic!(
                "cannot map {size} bytes for a buffer: {}",
                std::io::Error::last_os_error()
            );
        }
        AlignedBuf {
            ptr: NonNull::new(raw.cast::<u8>()).expect("mmap returned a null mapping"),
            len,
            layout: None,
            align: DIRECT_ALIGN,
            mapped: true,
        }
    }

    /// Whether the buffer's pages are mapped from the kernel ([`AlignedBuf::mapped`]).
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// The alignment of the buffer's address (an empty buffer has no address to speak of).
    pub fn align(&self) -> usize {
        self.align
    }
}

impl Default for AlignedBuf {
    /// An empty buffer (no allocation).
    fn default() -> AlignedBuf {
        AlignedBuf::zeroed(0, 0)
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `layout.size() >= len` initialised (zeroed) bytes owned by
        // `self` for as long as the borrow of `self`, or `len` is 0 and `ptr` is dangling but
        // non-null and aligned for `u8`, which an empty slice allows.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            let size = self.len.next_multiple_of(DIRECT_ALIGN);
            // SAFETY: `ptr..ptr + size` is exactly the mapping `mapped` made, owned by `self`.
            let done = unsafe { libc::munmap(self.ptr.as_ptr().cast(), size) };
            debug_assert_eq!(done, 0, "munmap of a buffer's own mapping failed");
            return;
        }
        if let Some(layout) = self.layout {
            // SAFETY: `ptr` was allocated by `alloc_zeroed` with exactly `layout`.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.align)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [0, 1, 4095, 4096, 4097, 1 << 20] {
            let mut b = AlignedBuf::zeroed(len, 512);
            assert_eq!(b.len(), len);
            assert!(len == 0 || (b.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN));
            assert!(b.iter().all(|&x| x == 0));
            b.fill(7);
            assert!(b.iter().all(|&x| x == 7));
        }
        assert_eq!(AlignedBuf::zeroed(10, 65536).as_ptr() as usize % 65536, 0);
    }

    #[test]
    fn mapped_buffers_are_aligned_and_zeroed() {
        for len in [0, 1, 4096, 65537, 1 << 20] {
            let mut b = AlignedBuf::mapped(len);
            assert_eq!((b.len(), b.is_mapped()), (len, len > 0));
            assert!(len == 0 || (b.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN));
            assert!(b.iter().all(|&x| x == 0));
            b.fill(7);
            assert!(b.iter().all(|&x| x == 7));
        }
    }
}
