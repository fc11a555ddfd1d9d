"""Which pages of a file are in the page cache: ``mincore`` over a mapping of it (Linux)."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os


def resident_pages(path: str, start: int, end: int) -> int:
    """Pages of ``path`` in ``[start, end)`` that are in the page cache (``mincore``)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    page = os.sysconf("SC_PAGE_SIZE")
    start -= start % page  # mincore takes a page-aligned address
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        buf = (ctypes.c_char * len(mm)).from_buffer(mm)
        try:
            addr = ctypes.addressof(buf) + start
            n = (end - start + page - 1) // page
            vec = (ctypes.c_ubyte * n)()
            rc = libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(end - start), vec)
            assert rc == 0, os.strerror(ctypes.get_errno())
            return sum(v & 1 for v in vec)
        finally:
            del buf
