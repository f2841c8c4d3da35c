"""What a warm ``ddp-lsp check FILE`` of an unchanged project imports (docs/performance.md,
"The fixed costs of a warm check"): the snapshot answers, so the project computation
(``project/flow.py`` and the stages, resolution and reach it imports) is never imported, and
neither are modules only some runs use (``tempfile``, ``difflib``) nor torch. Each run is a
fresh interpreter (``-X importtime`` lists what it imported); the cold run, which computes,
shows that the probe sees the computation when it is there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent.parent / "project" / "fixtures"
# (`-X importtime` lists what `import` statements import: flow.py itself, imported by the
# package's __getattr__, shows only through the modules it imports.)
NOT_WARM = (
    "ddp_lsp.project.flowstages",
    "ddp_lsp.project.resolve",
    "ddp_lsp.project.reach",
    "tempfile",
    "difflib",
    "torch",
)


def _imports(root: Path, cache: Path) -> set[str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ddp_lsp", "check", "--exit-zero", "main.py"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {
        line.split("|")[2].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "self [us]" not in line
    }


def test_a_warm_check_of_an_unchanged_project_imports_no_computation(tmp_path: Path) -> None:
    root = tmp_path / "deit"
    shutil.copytree(FIXTURES / "deit", root)
    cold = _imports(root, tmp_path / "cache")
    assert "ddp_lsp.project.flowstages" in cold  # computed: the probe sees it
    warm = _imports(root, tmp_path / "cache")
    assert "ddp_lsp.project.snapshot" in warm
    assert sorted(m for m in warm if m in NOT_WARM) == []


def test_nor_after_lines_moved(tmp_path: Path) -> None:
    """Facts whose cited lines moved since they were computed (a line added above them) are
    read through the stored map of moved lines (flowlines.moved), not the computation."""
    root = tmp_path / "deit"
    shutil.copytree(FIXTURES / "deit", root)
    cache = tmp_path / "cache"
    _imports(root, cache)
    main = root / "main.py"
    main.write_text("# a line above every fact\n" + main.read_text())
    _imports(root, cache)  # the early cutoff: the facts stand, their lines moved (stored)
    snapshots = [p for p in (cache / "ddp-lsp").rglob("projects/*.json") if p.stem.isalnum()]
    assert len(snapshots) == 1 and '"moved":{"main.py"' in snapshots[0].read_text()
    warm = _imports(root, cache)
    assert sorted(m for m in warm if m in NOT_WARM) == []
