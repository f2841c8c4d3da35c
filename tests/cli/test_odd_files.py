"""Files named ``*.py`` that are not ordinary files: none hangs or exhausts memory.

Each kind (a symlink to a device, a FIFO, a socket, a symlink loop, a huge file, an unreadable
file) is checked three ways: as part of ``check dir/``, as a sibling of the one file checked
(the project index reads every file of the project), and directly through the one reader,
``ddp_lsp.sources.read_source``. Every test runs under an alarm, so a regression fails the
test instead of hanging the suite.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ddp_lsp import sources
from ddp_lsp.sources import MAX_SOURCE_BYTES, ReadError, read_source, too_large_message
from tests.cli.conftest import BUGGY, BUGGY_LINE, write

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs, sockets and devices: POSIX")


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    """Fail (not hang) when something blocks: SIGALRM interrupts a blocking open or read."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError("blocked on an odd file")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _device(p: Path) -> None:
    p.symlink_to("/dev/zero")  # read whole: allocates until MemoryError


def _fifo(p: Path) -> None:
    os.mkfifo(p)  # opened for reading: waits forever for a writer


def _socket(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()  # the socket file stays


def _loop(p: Path) -> None:
    p.symlink_to(p.name)


def _huge(p: Path) -> None:
    # A generated table over the limit (the limit is the same for CLI, index and server).
    p.write_text("X = [\n" + "    1,\n" * (MAX_SOURCE_BYTES // 7 + 10) + "]\n")


def _unreadable(p: Path) -> None:
    p.write_text("x = 1\n")
    p.chmod(0)


KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "device": (_device, "is a character device (a symlink to /dev/zero), not a regular file"),
    "fifo": (_fifo, "is a named pipe (FIFO), not a regular file"),
    "socket": (_socket, "is a socket, not a regular file"),
    "loop": (_loop, "is a symlink loop"),
    "huge": (_huge, "over the 2 MB limit for Python sources: not analysed"),
    "unreadable": (_unreadable, "permission denied"),
}


@pytest.fixture
def as_unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root reads a mode-000 file anyway: then refuse its open the way the kernel would."""
    if os.geteuid() != 0:
        return
    real_open = os.open

    def fake_open(path: object, flags: int, *args: object) -> int:
        p = Path(os.fsdecode(path))  # type: ignore[arg-type]
        if p.exists() and stat.S_IMODE(p.stat().st_mode) == 0:
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sources.os, "open", fake_open)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_odd_file_in_directory_is_reported_and_others_checked(
    kind: str, cli_run, project: Path, as_unreadable: None
) -> None:
    make, message = KINDS[kind]
    write(project / "pyproject.toml", "[project]\nname = 'p'\n")
    write(project / "train.py", BUGGY)
    make(project / "odd.py")
    r = cli_run("check", ".", "--select", "DDP201", "-q")
    assert r.rc == 2, r.err
    lines = [line for line in r.err.splitlines() if "odd.py" in line]
    assert len(lines) == 1, r.err  # one clear message, not one per front (index and check)
    assert lines[0].startswith("error: odd.py: ") and message in lines[0]
    assert "no such file" not in r.err
    assert f"train.py:{BUGGY_LINE}:9: DDP201" in r.out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_odd_sibling_of_the_checked_file(
    kind: str, cli_run, project: Path, as_unreadable: None
) -> None:
    """``check train.py`` indexes the whole project: an odd sibling must not hang it."""
    make, message = KINDS[kind]
    write(project / "pyproject.toml", "[project]\nname = 'p'\n")
    write(project / "train.py", BUGGY)
    make(project / "odd.py")
    r = cli_run("check", "train.py", "--select", "DDP201", "-q", "-v")
    assert r.rc == 1, r.err
    assert f"train.py:{BUGGY_LINE}:9: DDP201" in r.out
    warned = [line for line in r.err.splitlines() if "odd.py" in line]
    assert len(warned) == 1 and message in warned[0], r.err
    assert "left out of the project index" in warned[0]


def test_huge_sibling_is_quiet_without_verbose(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", "[project]\nname = 'p'\n")
    write(project / "train.py", BUGGY)
    _huge(project / "table.py")
    r = cli_run("check", "train.py", "--select", "DDP201", "-q")
    assert r.rc == 1 and r.err == ""


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_read_source_refuses(kind: str, tmp_path: Path, as_unreadable: None) -> None:
    make, message = KINDS[kind]
    p = tmp_path / "odd.py"
    make(p)
    with pytest.raises(ReadError) as info:
        read_source(p)
    assert message.split(" (")[0].split(",")[0] in str(info.value)


def test_symlink_loop_named_on_the_command_line_is_not_missing(cli_run, project: Path) -> None:
    (project / "a.py").symlink_to("b.py")
    (project / "b.py").symlink_to("a.py")
    r = cli_run("check", "a.py")
    assert r.rc == 2
    assert "error: a.py: is a symlink loop" in r.err and "no such file" not in r.err


def test_dangling_symlink_says_so(cli_run, project: Path) -> None:
    (project / "gone.py").symlink_to("nowhere.py")
    r = cli_run("check", "gone.py")
    assert r.rc == 2 and "is a broken symlink (to nowhere.py" in r.err


def test_read_is_capped_even_when_the_size_lies(tmp_path: Path, monkeypatch) -> None:
    """A file that grows after its stat (or a file system that reports 0) costs at most the
    limit: read_source never reads more than limit + 1 bytes."""
    p = tmp_path / "grows.py"
    p.write_bytes(b"#" * 5000)
    real_fstat = os.fstat

    def small_fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, *st[1:6], 10, *st[7:]))

    reads: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(sources, "check_source", lambda path, limit: None)
    monkeypatch.setattr(sources.os, "fstat", small_fstat)
    monkeypatch.setattr(sources.os, "read", counting_read)
    with pytest.raises(ReadError) as info:
        read_source(p, limit=1000)
    assert info.value.kind == "too-large"
    assert sum(reads) == 1001


def test_one_limit_and_one_message_everywhere() -> None:
    from ddp_lsp.lsp import state, workspace
    from ddp_lsp.project import index

    assert index.MAX_FILE_BYTES == workspace.MAX_FILE_BYTES == MAX_SOURCE_BYTES
    assert state.MAX_ANALYSED_CHARS == MAX_SOURCE_BYTES
    assert too_large_message(5_200_000).startswith("is 5.2 MB, over the 2 MB limit")
    assert too_large_message().startswith("is over the 2 MB limit")


def test_stdin_over_the_limit(cli_run, project: Path) -> None:
    r = cli_run("check", "-", stdin=b"x = 1\n" * (MAX_SOURCE_BYTES // 6 + 1))
    assert r.rc == 2 and "over the 2 MB limit" in r.err
