"""The GitHub Actions example (examples/ci/) does what docs/ci.md says, and its toy script
passes the gate here as it would on a CPU runner (and fails it with --leak)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci" / "ddp-lsp.yml"


def test_workflow_runs_check_uploads_sarif_and_smallruns() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "ddp-lsp check --format sarif" in text
    assert "github/codeql-action/upload-sarif" in text and "security-events: write" in text
    assert "ddp-lsp check --format github" in text  # the gate
    assert "ddp-lsp smallrun" in text and "--nproc-per-node 2" in text
    assert "examples/ci/train_toy.py" in text
    # Every `run:` step names only commands ddp-lsp has.
    from ddp_lsp.cli import USAGE

    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("run: ddp-lsp", "ddp-lsp ")):
            command = line.split("ddp-lsp ", 1)[1].split()[0]
            assert f"  {command} " in USAGE, command


def _smallrun(tmp_path: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "smallrun.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddp_lsp",
            "smallrun",
            "--timeout",
            "120",
            "--json",
            str(out),
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(ROOT / "examples" / "ci" / "train_toy.py"),
            "--epochs",
            "2",
            "--limit-batches",
            "10",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    return proc.returncode, json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.torch
@pytest.mark.slow
def test_toy_script_passes_and_its_leaking_variant_fails(tmp_path: Path) -> None:
    rc, result = _smallrun(tmp_path)
    assert rc == 0, result
    rc, result = _smallrun(tmp_path, "--leak")
    assert rc == 1
    assert "leak" in json.dumps(result).lower()
