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

:func:`decode_source` decodes the bytes as the interpreter would (BOM, PEP 263 cookie; UTF-16
refused with a reason) and :func:`write_in_place` writes fixed text back into the file's own
inode without ever losing the original (``ddp-lsp check --fix``).

Nothing here imports the analysis core: the reader is plain I/O, used by front ends.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import stat
import tokenize
from dataclasses import dataclass
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


class SourceError(Exception):
    """A file that cannot be checked or written; the message says why, for a human."""


# -- decoding, encoding and writing back (ddp-lsp check --fix) ------------------------------


@dataclass(frozen=True)
class Source:
    text: str
    encoding: str  # as tokenize.detect_encoding names it; "utf-8-sig" keeps the BOM


def decode_source(data: bytes) -> Source:
    """Decode like the interpreter: a BOM or a PEP 263 cookie, else UTF-8.

    Line endings are kept as they are (``bytes.decode`` does not translate them), so a CRLF
    file is analysed, fixed and written back as CRLF.
    """
    wide = _wide_encoding(data)
    if wide is not None:
        # Python reads source as UTF-8 (or a PEP 263 ASCII-compatible codec): a coding comment
        # cannot help a UTF-16 file, whose every ASCII character comes with a NUL byte.
        raise SourceError(
            f"the file is {wide}, which Python cannot read as source; save it as UTF-8 "
            "(Windows editors and PowerShell's `>` redirection write UTF-16)"
        )
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        # detect_encoding also raises when the first two lines are not UTF-8 and there is no
        # cookie; that is a decoding problem, reported as one below.
        if "invalid or missing encoding declaration" not in str(exc):
            raise SourceError(f"cannot determine the encoding: {exc}") from None
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        line = data.count(b"\n", 0, exc.start) + 1
        raise SourceError(
            f"cannot decode as {encoding}: byte 0x{bad} on line {line} is invalid; save the "
            "file as UTF-8 or declare its encoding with a PEP 263 comment "
            "(# -*- coding: latin-1 -*-)"
        ) from None
    return Source(text, encoding)


def _wide_encoding(data: bytes) -> str | None:
    """ "UTF-16"/"UTF-32" (with what says so) when ``data`` is in one of them, else None."""
    for bom, name in (
        (codecs.BOM_UTF32_LE, "UTF-32"),  # before UTF-16 LE: it starts with the same bytes
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if data.startswith(bom):
            return f"{name} (it starts with a {name} byte order mark)"
    head = data[:200]
    if len(head) >= 8:
        # No BOM: ASCII text in UTF-16 has a NUL in every other byte, which no UTF-8 or
        # latin-1 Python source has.
        even, odd = head[0::2], head[1::2]
        if odd.count(0) >= len(odd) * 0.9 and even.count(0) == 0:
            return "UTF-16 (little-endian, without a byte order mark)"
        if even.count(0) >= len(even) * 0.9 and odd.count(0) == 0:
            return "UTF-16 (big-endian, without a byte order mark)"
    return None


def encode_source(text: str, encoding: str) -> bytes:
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise SourceError(
            f"the fixed text cannot be encoded as {encoding} ({exc.reason}); not written"
        ) from None


def write_in_place(path: Path, data: bytes, expected: bytes) -> None:
    """Write ``data`` into ``path``'s own inode, so that its mode, owner, ACLs and hard links
    stay what they were (a rename would give a file owned by whoever ran ``--fix``, with a
    default mode, and split a hard link from its other names).

    ``expected`` is what was analysed; if the file changed meanwhile (an editor saved it),
    nothing is written. A file without any write permission bit is refused, not rewritten
    (root could write it, but a read-only file says "do not change me").

    Never losing the original on a failed write:

    1. the new bytes go to a temporary file first (next to the file when that directory is
       writable) and are fsynced: a full disk fails here, before the file is touched;
    2. the file is grown to the new size with ``posix_fallocate`` where that exists, so a
       full disk fails before its bytes change;
    3. the bytes are written over the old ones, the file truncated and fsynced;
    4. if step 3 fails anyway, the original bytes (held in memory) are written back; if even
       that fails, the error names the temporary file that holds the fixed text.
    """
    real = Path(os.path.realpath(path))  # write through a symlink, keep the link
    try:
        fd = os.open(real, os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except PermissionError:
        raise SourceError("the file is read-only (no write permission): not fixed") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError("not a regular file: not written")
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            mode = stat.S_IMODE(st.st_mode)
            raise SourceError(
                f"the file is read-only (mode {mode:o}): not fixed; make it writable to fix it"
            )
        if _read_fd(fd, len(expected) + 1) != expected:
            raise SourceError("the file changed while it was being fixed; not written")
        tmp = _stage(real, data)
        try:
            _overwrite(fd, data, len(expected))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            try:
                # Drop what the fallocate added first: the bytes past the original's end.
                os.ftruncate(fd, len(expected))
                _overwrite(fd, expected, len(expected))
            except OSError:
                raise SourceError(
                    f"cannot write ({reason}), and the original could not be restored: the "
                    f"fixed text is in {tmp}"
                ) from None
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise SourceError(f"cannot write: {reason}; the file is unchanged") from None
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while got < limit:
        chunk = os.read(fd, min(limit - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _stage(real: Path, data: bytes) -> str:
    """The fixed bytes in an fsynced temporary file (next to ``real`` when possible); its path.
    Any failure here (a full disk) leaves the original untouched and no temporary behind."""
    import tempfile  # here: the server's start-up imports this module and never writes

    places = [str(real.parent), None]  # None: the system's temporary directory
    last: OSError | None = None
    for where in places:
        try:
            fd, tmp = tempfile.mkstemp(dir=where, prefix=f".{real.name}.", suffix=".ddp-lsp-fixed")
        except OSError as exc:
            last = exc
            continue
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp
    assert last is not None
    raise last


def _overwrite(fd: int, data: bytes, old_size: int) -> None:
    if len(data) > old_size and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, len(data))  # ENOSPC here changes nothing
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
    view = memoryview(data)
    offset = 0
    if not hasattr(os, "pwrite"):  # Windows
        os.lseek(fd, 0, os.SEEK_SET)
    while offset < len(data):
        if hasattr(os, "pwrite"):
            offset += os.pwrite(fd, view[offset:], offset)
        else:
            offset += os.write(fd, view[offset:])
    os.ftruncate(fd, len(data))
    os.fsync(fd)


# -- checking one file (runs in a worker process for big inputs) ---------------------------
