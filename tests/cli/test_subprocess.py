"""A few real processes: the console script, ``python -m ddp_lsp``, pipes and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import BUGGY, BUGGY_LINE, FIXED_LINE, write

EXE = Path(sys.executable).parent / "ddp-lsp"


def run(
    args: list[str], cwd: Path, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, timeout=120, env=env)


@pytest.mark.skipif(not EXE.exists(), reason="the ddp-lsp console script is not installed")
def test_console_script(tmp_path: Path) -> None:
    write(tmp_path / "train.py", BUGGY)
    proc = run([str(EXE), "check", "train.py", "--select", "DDP201"], tmp_path)
    assert proc.returncode == 1
    assert f"train.py:{BUGGY_LINE}:9: DDP201".encode() in proc.stdout
    assert proc.stderr == b""


def test_python_dash_m(tmp_path: Path) -> None:
    write(tmp_path / "train.py", BUGGY)
    proc = run([sys.executable, "-m", "ddp_lsp", "fix", "train.py", "--select", "DDP201"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert FIXED_LINE in (tmp_path / "train.py").read_text()


def test_stdin_pipe_and_fix_to_stdout(tmp_path: Path) -> None:
    proc = run(
        [sys.executable, "-m", "ddp_lsp", "check", "-", "--fix", "--select", "DDP201"],
        tmp_path,
        BUGGY.encode(),
    )
    assert proc.returncode == 0, proc.stderr
    assert FIXED_LINE.encode() in proc.stdout and b"Fixed 1 finding." in proc.stderr


def test_config_error_no_traceback(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.ddp-lsp]\nselect = 3\n")
    write(tmp_path / "train.py", BUGGY)
    proc = run([sys.executable, "-m", "ddp_lsp", "check", "train.py"], tmp_path)
    assert proc.returncode == 2
    assert b"must be a list of strings" in proc.stderr and b"Traceback" not in proc.stderr


def test_many_files_through_the_pool(tmp_path: Path) -> None:
    """Enough input that the automatic choice starts worker processes."""
    for i in range(24):
        write(
            tmp_path / f"m{i}.py", BUGGY + "\n".join(f"V{i}_{k} = {k}" for k in range(1500)) + "\n"
        )
    proc = run(
        [sys.executable, "-m", "ddp_lsp", "check", ".", "--select", "DDP201", "-q"], tmp_path
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.count(b": DDP201 ") == 24 and proc.stderr == b""


def test_check_imports_neither_pygls_nor_torch(tmp_path: Path) -> None:
    write(tmp_path / "train.py", BUGGY)
    code = (
        "import sys; from ddp_lsp import cli; rc = cli.main(['check', 'train.py', '-q']); "
        "print(rc, 'pygls' in sys.modules, 'torch' in sys.modules)"
    )
    proc = run([sys.executable, "-c", code], tmp_path)
    assert proc.stdout.decode().splitlines()[-1] == "1 False False", proc.stderr


def test_broken_pipe_is_quiet(tmp_path: Path) -> None:
    # Far more output than a pipe buffers, so the writer really meets a closed pipe.
    many = BUGGY + "".join(
        BUGGY.split("\n\n\n", 1)[1].replace("def train", f"def train{k}") for k in range(40)
    )
    for i in range(30):
        write(tmp_path / f"m{i}.py", many)
    cmd = f"{sys.executable} -m ddp_lsp check . --select DDP201 | head -n 1"
    proc = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, timeout=120)
    assert proc.stdout.count(b"\n") == 1
    assert b"Traceback" not in proc.stderr and b"BrokenPipe" not in proc.stderr
