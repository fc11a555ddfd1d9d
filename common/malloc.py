"""The C allocator's thresholds for a process that moves large buffers (a broker).

glibc's malloc serves a request above ``M_MMAP_THRESHOLD`` with a fresh ``mmap``, and gives
free memory at the top of its heap above ``M_TRIM_THRESHOLD`` back to the kernel. A broker
allocates and frees buffers of hundreds of kilobytes per request (a produce request's
batches, the records a follower fetches, the bytes read for it), and with the defaults
(thresholds that float up from 128 KiB as large blocks are freed) many of those come back
as fresh pages: a page fault and a zeroed page every 4 KiB. Under a fast acks=all producer
that was about a quarter of a broker's system time (docs/kafka-protocol.md, "Benchmark").
With the thresholds raised, a freed buffer stays in the heap for the next request; the
price is that a broker keeps up to ``TRIM_THRESHOLD_BYTES`` of freed memory instead of
returning it.

Only where the C library is glibc (``mallopt``); elsewhere, and where the operator set
glibc's own ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_``, nothing changes.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
"""Blocks up to this size come from the heap (a replica fetch answer is at most 10 MiB)."""
TRIM_THRESHOLD_BYTES = 128 << 20
"""Free memory the heap keeps at its top before giving it back."""
OPERATOR_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_large_buffers() -> bool:
    """Raise both thresholds for this process; True if glibc took them."""
    if any(v in os.environ for v in OPERATOR_VARIABLES):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 on success, 0 on an option it does not take (musl's is a stub).
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
