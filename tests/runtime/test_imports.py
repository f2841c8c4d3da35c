"""The runtime package stays cheap to import: torch loads only when a torch-backed name is used."""

from __future__ import annotations

import subprocess

from tests.runtime.conftest import PYTHON, REPO, child_env

PROBE = (
    "import sys, ddp_lsp.runtime, ddp_lsp.runtime.smallrun, ddp_lsp.runtime.stats,"
    " ddp_lsp.runtime.feasibility;"
    "print('torch' in sys.modules)"
)


def test_importing_the_runtime_and_the_supervisor_does_not_import_torch() -> None:
    out = subprocess.run(
        [PYTHON, "-c", PROBE], cwd=REPO, env=child_env(), capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False", out.stderr


def test_the_shim_does_nothing_outside_a_small_run_and_chains_to_an_existing_sitecustomize(
    tmp_path: object,
) -> None:
    from pathlib import Path

    from ddp_lsp.runtime.smallrun import SHIM_DIR

    other = Path(str(tmp_path))
    (other / "sitecustomize.py").write_text("import builtins; builtins.CHAINED = True\n")
    env = child_env()
    env["PYTHONPATH"] = f"{SHIM_DIR}:{other}:{REPO}"
    env.pop("DDP_LSP_SMALLRUN_DIR", None)
    code = (
        "import builtins, sys; print(getattr(builtins, 'CHAINED', False), 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [PYTHON, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "False"], out.stderr
