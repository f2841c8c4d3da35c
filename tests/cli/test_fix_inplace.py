"""``--fix`` writes into the file: mode, owner and hard links stay; nothing is ever lost.

A rename over the original (the usual atomic write) gives a new inode: owned by whoever ran
the fix, split from the file's other hard links, and it rewrites a read-only file without a
word. The fix is written into the file's own inode instead, after its new text is staged and
flushed elsewhere, so a full disk fails before the original changes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from ddp_lsp import sources
from tests.cli.conftest import BUGGY, FIXED_LINE, write

ARGS = ("fix", "train.py", "--select", "DDP201", "--jobs", "1")


def _temps(project: Path) -> list[str]:
    return [p.name for p in project.iterdir() if "ddp-lsp" in p.name]


def test_hard_link_is_kept(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY)
    other = project / "same_file.txt"
    os.link(path, other)
    inode = path.stat().st_ino
    r = cli_run(*ARGS)
    assert r.rc == 0, r.err
    assert path.stat().st_ino == inode and other.stat().st_ino == inode
    assert path.stat().st_nlink == 2
    assert FIXED_LINE in other.read_text()  # both names see the fix
    assert _temps(project) == []


def test_mode_is_kept(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY)
    path.chmod(0o640)
    assert cli_run(*ARGS).rc == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and FIXED_LINE in path.read_text()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_owner_is_kept(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY)
    os.chown(path, 4321, 4321)  # another user's file, fixed by root
    assert cli_run(*ARGS).rc == 0
    st = path.stat()
    assert (st.st_uid, st.st_gid) == (4321, 4321) and FIXED_LINE in path.read_text()


def test_read_only_file_is_refused(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY)
    path.chmod(0o444)
    r = cli_run(*ARGS)
    assert r.rc == 2
    assert "error: train.py: the file is read-only" in r.err and "not fixed" in r.err
    assert path.read_text() == BUGGY and stat.S_IMODE(path.stat().st_mode) == 0o444


def test_longer_text_on_a_full_disk_changes_nothing(
    cli_run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(project / "train.py", BUGGY)

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sources.os, "posix_fallocate", full, raising=False)
    r = cli_run(*ARGS)
    assert r.rc == 2 and "No space left on device; the file is unchanged" in r.err
    assert path.read_text() == BUGGY and _temps(project) == []


def test_write_failing_half_way_restores_the_original(
    cli_run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(project / "train.py", BUGGY)
    real_pwrite = os.pwrite
    failed: list[int] = []

    def half_then_enospc(fd: int, data: bytes, offset: int) -> int:
        if not failed:  # the fix's write: half of it lands, then the disk is full
            failed.append(fd)
            real_pwrite(fd, bytes(data[: len(data) // 2]), offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(sources.os, "posix_fallocate", lambda *a: None, raising=False)
    monkeypatch.setattr(sources.os, "pwrite", half_then_enospc)
    r = cli_run(*ARGS)
    assert failed and r.rc == 2
    assert "cannot write: No space left on device; the file is unchanged" in r.err
    assert path.read_text() == BUGGY and _temps(project) == []


def test_when_even_the_restore_fails_the_fixed_text_is_kept(
    cli_run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(project / "train.py", BUGGY)

    def broken(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sources.os, "pwrite", broken)
    r = cli_run(*ARGS)
    assert r.rc == 2 and "the original could not be restored: the fixed text is in" in r.err
    (kept,) = _temps(project)
    assert FIXED_LINE in (project / kept).read_text()
    assert path.read_text() == BUGGY  # nothing was written (every write failed)
