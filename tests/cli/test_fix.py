"""``--fix``, ``fix``, ``--diff`` and ``--unsafe-fixes``: what is written, and how.

Fixes keep the file's encoding, BOM, line endings and permission bits, and are written
atomically: a failure leaves the old file and no temporary file behind.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ddp_lsp import config, sources
from ddp_lsp.cli import jobs as cli_jobs
from tests.cli.conftest import BUGGY, FIXED_LINE, write


def test_fix_writes_and_reports_nothing_left(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--fix", "--select", "DDP201")
    assert r.rc == 0, r.out + r.err
    assert "Fixed 1 finding." in r.out
    text = path.read_text()
    assert FIXED_LINE + "        torch.nn.utils.clip_grad_norm_" in text
    # Idempotent: a second run changes nothing.
    r = cli_run("fix", "train.py", "--select", "DDP201")
    assert r.rc == 0 and path.read_text() == text


def test_fix_command_is_check_fix(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY)
    assert cli_run("fix", "train.py", "--select", "DDP201").rc == 0
    assert FIXED_LINE in path.read_text()


def test_diff_writes_nothing_and_exits_1(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--diff", "--select", "DDP201")
    assert r.rc == 1
    assert r.out.startswith("--- a/train.py\n+++ b/train.py\n")
    assert "+" + FIXED_LINE in r.out
    assert "Would fix 1 finding." in r.err
    assert path.read_text() == BUGGY
    # Nothing to fix: no diff, exit 0.
    r = cli_run("check", "train.py", "--diff", "--select", "DDP5")
    assert (r.rc, r.out) == (0, "")


def test_diff_applies_with_patch_semantics(cli_run, project: Path) -> None:
    """The diff is a real unified diff: applying it by hand gives what --fix writes."""
    import difflib

    path = write(project / "train.py", BUGGY)
    diff = cli_run("check", "train.py", "--diff", "--select", "DDP201").out
    cli_run("check", "train.py", "--fix", "--select", "DDP201")
    fixed = path.read_text()
    expected = "".join(
        difflib.unified_diff(
            BUGGY.splitlines(True), fixed.splitlines(True), "a/train.py", "b/train.py"
        )
    )
    assert diff == expected


def test_crlf_stays_crlf(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY.replace("\n", "\r\n").encode())
    r = cli_run("check", "train.py", "--select", "DDP201")
    assert r.rc == 1 and "train.py:11:9: DDP201" in r.out
    cli_run("fix", "train.py", "--select", "DDP201")
    data = path.read_bytes()
    assert FIXED_LINE.replace("\n", "\r\n").encode() in data
    assert data.count(b"\n") == data.count(b"\r\n")


def test_bom_is_kept(cli_run, project: Path) -> None:
    path = write(project / "train.py", b"\xef\xbb\xbf" + BUGGY.encode())
    r = cli_run("check", "train.py", "--select", "DDP201")
    assert "train.py:11:9: DDP201" in r.out  # the BOM is not a column
    cli_run("fix", "train.py", "--select", "DDP201")
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and not data.startswith(b"\xef\xbb\xbf" * 2)
    assert FIXED_LINE.encode() in data


def test_coding_cookie_encoding_is_kept(cli_run, project: Path) -> None:
    source = "# -*- coding: latin-1 -*-\n# Auteur: José\n" + BUGGY
    path = write(project / "train.py", source.encode("latin-1"))
    r = cli_run("check", "train.py", "--select", "DDP201")
    assert r.rc == 1 and "train.py:13:9: DDP201" in r.out
    cli_run("fix", "train.py", "--select", "DDP201")
    data = path.read_bytes()
    assert "José".encode("latin-1") in data and "José".encode() not in data
    assert FIXED_LINE.encode() in data


def test_file_mode_is_kept(cli_run, project: Path) -> None:
    path = write(project / "train.py", BUGGY)
    path.chmod(0o751)
    cli_run("fix", "train.py", "--select", "DDP201")
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert FIXED_LINE in path.read_text()


def test_symlink_target_is_fixed_and_link_kept(cli_run, project: Path) -> None:
    target = write(project / "real" / "train.py", BUGGY)
    link = project / "link.py"
    link.symlink_to(target)
    cli_run("fix", "link.py", "--select", "DDP201")
    assert link.is_symlink()
    assert FIXED_LINE in target.read_text()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names fds through /proc")
def test_failed_replace_leaves_old_file_and_no_temp(
    cli_run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(project / "train.py", BUGGY)
    other = write(project / "other.py", BUGGY)

    real_fsync = os.fsync

    def full_disk(fd: int) -> None:  # the staged copy of train.py's fix cannot be flushed
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".train.py."):
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(sources.os, "fsync", full_disk)
    r = cli_run("fix", ".", "--select", "DDP201", "--jobs", "1")
    assert r.rc == 2
    assert "error: train.py: cannot read or write: No space left on device" in r.err
    assert path.read_text() == BUGGY
    assert FIXED_LINE in other.read_text()  # the other file is still fixed
    assert sorted(p.name for p in project.iterdir()) == [".git", "other.py", "train.py"]


def test_file_changed_during_fix_is_not_overwritten(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(project / "train.py", BUGGY)
    real_fix = cli_jobs._fix

    def edit_meanwhile(text, settings, unsafe, env):  # type: ignore[no-untyped-def]
        out = real_fix(text, settings, unsafe, env)
        path.write_text(BUGGY + "# saved by the editor\n")
        return out

    monkeypatch.setattr(cli_jobs, "_fix", edit_meanwhile)
    job = cli_jobs.Job("train.py", str(path), config.Settings(select=("DDP201",)), "fix", False)
    outcome = cli_jobs.check_job(job)
    assert (
        outcome.report.error is not None
        and "changed while it was being fixed" in outcome.report.error
    )
    assert path.read_text().endswith("# saved by the editor\n")
    assert [p.name for p in project.iterdir() if "tmp" in p.name] == []


def test_unencodable_fix_is_not_written() -> None:
    with pytest.raises(sources.SourceError, match="cannot be encoded as ascii"):
        sources.encode_source("x = 'é'\n", "ascii")


def test_unsafe_fixes_flag_marks_and_applies(
    cli_run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finding whose only fix is unsafe: not applied by --fix, applied by --unsafe-fixes."""
    from dataclasses import replace

    from ddp_lsp.core import engine

    real = engine.analyze

    def unsafe_only(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        res = real(source, *args, **kwargs)
        findings = tuple(
            replace(f, fixes=tuple(replace(x, safe=False) for x in f.fixes)) for f in res.findings
        )
        return replace(res, findings=findings)

    monkeypatch.setattr(engine, "analyze", unsafe_only)
    path = write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--select", "DDP201", "--jobs", "1")
    assert "[*]" not in r.out and "more fixable with `--unsafe-fixes`" in r.out
    r = cli_run("fix", "train.py", "--select", "DDP201", "--jobs", "1")
    assert r.rc == 1 and path.read_text() == BUGGY
    r = cli_run("fix", "train.py", "--unsafe-fixes", "--select", "DDP201", "--jobs", "1")
    assert r.rc == 0 and FIXED_LINE in path.read_text()
