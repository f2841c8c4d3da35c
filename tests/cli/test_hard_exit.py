"""``check`` and ``fix`` leave without freeing what they built (``__main__._hard_exit``): the
report flushed, the exit code kept; other commands return normally. (The real processes of
tests/cli/test_subprocess.py check the output and codes end to end.)"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

import ddp_lsp.__main__ as entry
from tests.cli.conftest import BUGGY, write


class Left(Exception):
    pass


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    got: list[int] = []

    def fake_exit(code: int) -> None:
        got.append(code)
        raise Left

    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(entry, "drop_cwd", lambda: None)  # pytest's own sys.path stays
    monkeypatch.setattr(logging, "shutdown", lambda: None)  # pytest's handlers stay open
    return got


def test_check_exits_hard_with_its_code(
    tmp_path: Path, exits: list[int], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    write(tmp_path / "train.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ddp-lsp", "check", "train.py", "--select", "DDP201"])
    with pytest.raises(Left):
        entry.run()
    assert exits == [1]  # a finding
    assert "DDP201" in capsys.readouterr().out


def test_other_commands_return(exits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["ddp-lsp", "--version"])
    assert entry.run() == 0
    monkeypatch.setattr(sys, "argv", ["ddp-lsp", "rules"])
    assert entry.run() == 0
    assert exits == []


def test_a_profiled_check_exits_normally(
    tmp_path: Path, exits: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """cProfile and coverage write their data at exit: a hard exit would lose it."""
    write(tmp_path / "train.py", BUGGY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ddp-lsp", "check", "train.py", "--select", "DDP201"])
    sys.setprofile(lambda *args: None)
    try:
        assert entry.run() == 1
    finally:
        sys.setprofile(None)
    assert exits == []
