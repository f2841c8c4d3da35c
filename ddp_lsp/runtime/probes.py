"""Cheap process-memory readings taken once per training step (stdlib only).

On CPU, PyTorch allocates tensor storage with the C allocator and frees it immediately when
the last reference goes (there is no caching allocator as on CUDA). So the glibc heap's
*in-use* bytes (``mallinfo2``: ``uordblks + hblkhd``) is the CPU counterpart of
``torch.cuda.memory_allocated``: exact to the byte, including tensors that only C++ holds
(the activations an autograd graph saved), and unaffected by the allocator keeping freed
pages. RSS is read too, but it alone misses small leaks: freed memory stays resident and new
small allocations reuse it, so RSS moves in page- and arena-sized jumps.

Each reading costs about a microsecond here (see docs/performance.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _load_heap_reader() -> Callable[[], int] | None:
    """Return a function giving the C heap's in-use bytes, or None off glibc (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2  # glibc >= 2.33; the older mallinfo() wraps at 2 GiB
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []

    def heap_in_use() -> int:
        info = fn()
        # uordblks: bytes in use in the arenas; hblkhd: bytes in mmap'ed chunks (large
        # tensors, above the mmap threshold, never touch the arenas).
        return int(info.uordblks + info.hblkhd)

    return heap_in_use


heap_in_use_bytes: Callable[[], int] | None = _load_heap_reader()


class RssReader:
    """Resident set size from ``/proc/self/statm`` via one ``pread`` on a kept descriptor."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._fd: int | None = None
        self._pid = -1
        self._open()

    def _open(self) -> None:
        self.close()
        self._pid = os.getpid()
        try:
            # /proc/self is resolved at open time: after a fork the descriptor still names
            # the parent, so __call__ reopens when the pid changed (DataLoader workers).
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = None

    def __call__(self) -> int | None:
        if self._pid != os.getpid():
            self._open()
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 128, 0).split()
        except OSError:
            return None
        return int(fields[1]) * self._page

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def __del__(self) -> None:
        self.close()
