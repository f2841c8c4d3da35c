"""ddp_lsp/_isolation.py: our own children never see the working directory on sys.path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_lsp._isolation import NEUTRAL_CWD, clean_path, python_argv


def test_clean_path_drops_every_spelling_of_the_working_directory(tmp_path: Path) -> None:
    other = tmp_path / "lib"
    other.mkdir()
    cwd = str(tmp_path)
    path = ["", ".", cwd, cwd + os.sep, str(other), "/no/such/dir"]
    assert clean_path(path, cwd) == [str(other), "/no/such/dir"]


def test_python_argv_runs_our_module_isolated_with_the_parents_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "Our" module lives where -I alone would not look (as ddp_lsp does for a PYTHONPATH or
    # --user install); the working directory is a repository with a planted json.py.
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "sec_isolation_probe.py").write_text(
        "import json, os, sys\n"
        "def main():\n"
        "    print(json.dumps({'cwd': os.getcwd(), 'path': sys.path,"
        " 'isolated': sys.flags.isolated}))\n"
        "    return 0\n"
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    marker = tmp_path / "ran"
    (repo / "json.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.syspath_prepend(str(ours))
    monkeypatch.chdir(repo)
    monkeypatch.syspath_prepend(str(repo))  # as `python -m` would have put it
    monkeypatch.setenv("PYTHONPATH", str(repo))  # and as a user's shell might
    argv = python_argv("sec_isolation_probe")
    assert argv[:3] == [sys.executable, "-I", "-c"]
    proc = subprocess.run(argv, cwd=NEUTRAL_CWD, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["cwd"] == NEUTRAL_CWD and seen["isolated"] == 1
    assert str(ours) in seen["path"]
    assert str(repo) not in seen["path"] and "" not in seen["path"]
    assert not marker.exists()
