"""Reading Python sources from disk: one reader, one size limit, one message, everywhere.

The CLI (``ddp-lsp check``), the project index (which reads every sibling of a checked file)
and the server's workspace pull and indexer all read files through :func:`read_source`, so a
``*.py`` that is not an ordinary file costs them a clear message instead of a hang or all of
memory:

- only regular files are read: a symlink to ``/dev/zero``, a FIFO (``mkfifo f.py``), a
  socket or a device is refused from its ``stat`` without being opened, and the file is opened
  with ``O_NONBLOCK`` and checked again with ``fstat`` (it may have been swapped meanwhile), so
  an ``open`` can never wait for a FIFO's writer and no read is ever attempted on a device;
- every read is capped at :data:`MAX_SOURCE_BYTES` + 1 bytes, so a file that grows while it is
  read (or lies about its size) still costs at most the limit;
- a symlink loop says "symlink loop", a dangling link "broken symlink", an unreadable file
  "permission denied": never a bare "no such file".

Nothing here imports the analysis core: the reader is plain I/O, used by front ends.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# Larger "Python" files are generated data, not training code, and the first analysis of a
# 5 MB module costs the core ~40 s and over 1 GB. Training scripts are far below this: a
# 20,000-line file is about 0.7 MB. Bytes on disk; the server compares a document's length
# in characters, which is never more than its UTF-8 bytes.
MAX_SOURCE_BYTES = 2_000_000


def too_large_message(size: int | None = None, limit: int = MAX_SOURCE_BYTES) -> str:
    """The one message for a source over the limit, to follow the file's name:
    ``f"{name} {too_large_message(size)}"``. ``size`` in bytes (or characters, for a buffer);
    None leaves it out (a message shown once per file while its size changes with edits)."""
    what = f"is {_mb(size)}, over" if size is not None else "is over"
    return (
        f"{what} the {_mb(limit)} limit for Python sources: not analysed "
        "(generated data, not training code? exclude it in [tool.ddp-lsp])"
    )


def _mb(n: int) -> str:
    mb = n / 1_000_000
    return f"{mb:.0f} MB" if mb >= 10 or mb == int(mb) else f"{mb:.1f} MB"


class ReadError(Exception):
    """A source that was not read; ``str(error)`` says why, for a human (no path in it).

    ``kind`` is a short machine-readable reason: ``too-large``, ``not-regular``, ``loop``,
    ``missing``, ``permission``, ``os-error``."""

    def __init__(self, message: str, kind: str, size: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.size = size


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _not_regular(mode: int, path: Path) -> ReadError:
    what = next((name for test, name in _KINDS if test(mode)), "not an ordinary file")
    via = ""
    if os.path.islink(path):
        try:
            via = f" (a symlink to {os.readlink(path)})"
        except OSError:
            via = " (through a symlink)"
    return ReadError(f"is {what}{via}, not a regular file: not read", "not-regular")


def _os_error(exc: OSError, path: Path) -> ReadError:
    code = exc.errno
    if code == errno.ELOOP:
        return ReadError("is a symlink loop (too many levels of symbolic links): not read", "loop")
    if code == errno.ENOENT:
        if os.path.islink(path):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return ReadError(f"is a broken symlink (to {target}, which does not exist)", "missing")
        return ReadError("no such file", "missing")
    if code in (errno.EACCES, errno.EPERM):
        return ReadError("permission denied: cannot read the file", "permission")
    if code == errno.ENXIO:  # open() of a socket, or a device with nothing behind it
        return ReadError("is not a regular file (a socket or device): not read", "not-regular")
    if code == errno.EISDIR:
        return ReadError("is a directory, not a regular file: not read", "not-regular")
    return ReadError(f"cannot read: {exc.strerror or exc}", "os-error")


def check_source(path: Path, limit: int = MAX_SOURCE_BYTES) -> os.stat_result:
    """The ``stat`` of ``path`` if :func:`read_source` would try to read it, else ReadError;
    opens nothing (for callers that decide from the size and mtime alone)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _os_error(exc, path) from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(st.st_mode, path)
    if st.st_size > limit:
        raise ReadError(too_large_message(st.st_size, limit), "too-large", st.st_size)
    return st


_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO swapped in after the stat: open does not wait
    | getattr(os, "O_NOCTTY", 0)  # a terminal swapped in: never becomes ours
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def read_source(path: Path | str, limit: int = MAX_SOURCE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or :class:`ReadError`.

    Never blocks on a FIFO, never reads a device, never reads more than ``limit`` + 1 bytes
    (however large the file claims or grows to be)."""
    path = Path(path)
    check_source(path, limit)  # refuse odd files before opening them at all
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        raise _os_error(exc, path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the stat and the open
            raise _not_regular(st.st_mode, path)
        if st.st_size > limit:
            raise ReadError(too_large_message(st.st_size, limit), "too-large", st.st_size)
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            try:
                chunk = os.read(fd, min(limit + 1 - got, 1 << 20))
            except BlockingIOError:  # only special files say so; regular files never block
                raise ReadError("cannot be read without waiting: not read", "not-regular") from None
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:  # it grew while being read
            raise ReadError(too_large_message(got, limit), "too-large", got)
        return b"".join(chunks)
    except OSError as exc:
        raise _os_error(exc, path) from None
    finally:
        os.close(fd)
