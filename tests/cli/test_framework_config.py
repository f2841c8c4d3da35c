"""``[[tool.ddp-lsp.framework]]``: the user's own helpers described like the framework tables,
through the CLI: applied when valid, reported with the file and the key when not."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import write

TRAIN = """\
import torch.distributed as dist
from infra.comm import sync_all


def finish(rank, model):
    if rank == 0:
        sync_all(model)
"""

GOOD = """\
[tool.ddp-lsp]
[[tool.ddp-lsp.framework]]
call = "infra.comm.sync_all"
means = ["collective"]
"""


def test_a_configured_collective_is_checked(cli_run, project: Path) -> None:
    write(project / "train.py", TRAIN)
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nselect = ["DDP103"]\n')
    r = cli_run("check", "train.py", "-q", "--no-project")
    assert r.rc == 0 and "DDP103" not in r.out
    write(project / "pyproject.toml", GOOD)
    r = cli_run("check", "train.py", "-q", "--no-project")
    assert r.rc == 1 and "train.py:7:9: DDP103" in r.out, r.out + r.err


def test_a_bad_entry_names_the_file_and_the_key(cli_run, project: Path) -> None:
    write(project / "train.py", TRAIN)
    write(project / "pyproject.toml", GOOD.replace('"collective"', '"collectve"'))
    r = cli_run("check", "train.py", "-q")
    assert r.rc == 2
    assert str(project / "pyproject.toml") in r.err
    assert "'framework'[0].means: 'collectve' is not a meaning" in r.err
    assert "Traceback" not in r.err
