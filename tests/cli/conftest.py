"""Fixtures for the CLI tests: run ``ddp_lsp.cli.main`` in-process in a temporary project.

``cli(*args)`` runs the command with the working directory set to ``project`` (a temporary
directory with its own ``.git``, so it is the repository root for SARIF and GitHub paths)
and returns ``(exit status, stdout, stderr)``.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddp_lsp import cli

# A distributed training step with one DDP201 finding (clip before unscale_) on line 10.
BUGGY = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, opt, scaler, loader):
    model = DDP(model)
    for x in loader:
        loss = model(x)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
"""
BUGGY_LINE = 11  # 1-based row of the clip
FIXED_LINE = "        scaler.unscale_(opt)\n"
CLEAN = "import os\n\nprint(os.getcwd())\n"


@dataclass
class Result:
    rc: int
    out: str
    err: str


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def cli_run(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Result]:
    def run(*args: str, stdin: bytes | None = None) -> Result:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        capsys.readouterr()
        rc = cli.main(list(args))
        cap = capsys.readouterr()
        return Result(rc, cap.out, cap.err)

    return run


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_bytes(text.encode("utf-8"))
    return path
