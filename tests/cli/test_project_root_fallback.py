"""Which project a file belongs to when nothing marks one, and what ``-v`` says about it.

A folder of training scripts with no pyproject.toml and no .git (a fresh clone without its
metadata, a copy on a cluster) used to be analysed file by file, losing every cross-file
finding. As ruff does, the folder given on the command line (or the working directory, for
files named there) is now the project; ``-v`` names the root and why it was chosen.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ddp_lsp.project import build
from tests.cli.conftest import Result

FIXTURES = Path(__file__).parent.parent / "project" / "fixtures"


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.fixture
def loose(tmp_path: Path) -> Path:
    """The ``shared`` fixture (main_ddp.py passes a DDP model to engine.py) without markers."""
    folder = tmp_path / "jobs" / "loose"
    shutil.copytree(FIXTURES / "shared", folder)
    (folder / "pyproject.toml").unlink()
    if build.project_root(folder) is not None:
        pytest.skip("the temporary directory is inside a project")
    return folder


def _codes(r: Result, name: str) -> list[str]:
    return [f["code"] for f in json.loads(r.out) if Path(f["filename"]).name == name]


def test_folder_given_is_the_project(cli_run, loose: Path, monkeypatch) -> None:
    monkeypatch.chdir(loose.parent.parent)  # elsewhere: the folder given wins, not the cwd
    r = cli_run("check", str(loose), "--format", "json", "-v")
    assert "DDP101" in _codes(r, "engine.py")
    assert (
        "project root jobs/loose: no pyproject.toml or .git at or above it: the folder given"
        in r.err
    )


def test_file_named_from_its_folder_uses_the_working_directory(
    cli_run, loose: Path, monkeypatch
) -> None:
    monkeypatch.chdir(loose)
    r = cli_run("check", "engine.py", "--format", "json", "-v")
    assert "DDP101" in _codes(r, "engine.py")
    assert "project root .: no pyproject.toml or .git at or above it: the working directory" in (
        r.err
    )


def test_file_named_outside_the_working_directory_uses_its_folder(
    cli_run, loose: Path, tmp_path: Path, monkeypatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = cli_run("check", str(loose / "engine.py"), "--format", "json", "-v")
    assert "DDP101" in _codes(r, "engine.py")
    assert f"project root {loose}: no pyproject.toml or .git at or above it" in r.err


def test_a_marker_is_named(cli_run, loose: Path, monkeypatch) -> None:
    (loose / ".git").mkdir()
    (loose / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(loose)
    r = cli_run("check", ".", "-v", "-q")
    assert "project root .: it has pyproject.toml and .git" in r.err


def test_home_directory_is_never_the_fallback(cli_run, loose: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(loose))
    monkeypatch.chdir(loose)
    r = cli_run("check", ".", "--format", "json", "-v")
    assert _codes(r, "engine.py") == [] and "project root" not in r.err
