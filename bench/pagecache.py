"""How much of a block device is in the page cache: mincore over a shared mapping of it.

Standard library only; shared by bench/direct.py and tests/python/test_direct_io.py (which
asserts with it that direct members leave nothing of theirs in the page cache)."""

import ctypes
import mmap
import os

PAGE = mmap.PAGESIZE

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def cached_bytes(dev):
    """Bytes of block device `dev` in the page cache (mincore over a shared mapping of it)."""
    fd = os.open(dev, os.O_RDONLY)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {dev}")
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {dev}")
            return sum(v & 1 for v in vec) * PAGE
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
