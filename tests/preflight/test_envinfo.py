"""``ddp-lsp env``: the bug-report environment block, in a child process with the chosen
interpreter; it survives a missing nvidia-smi, a broken driver, a missing torch and a child that
hangs (fault injection: a PATH without nvidia-smi, a fake nvidia-smi, a venv without torch, a
fake interpreter that stops answering)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_lsp.preflight.envinfo import collect, main, render_markdown, torch_section
from tests.preflight.conftest import fake_exe
from tests.preflight.test_gpu_probes import TOPO_NVLINK, smi_script


def _env(path: Path, **extra: str) -> dict[str, str]:
    path.mkdir(parents=True, exist_ok=True)
    return {"PATH": str(path), "HOME": os.environ.get("HOME", "/tmp"), **extra}


def test_missing_nvidia_smi_is_said_and_everything_else_is_reported(tmp_path: Path) -> None:
    report = collect(
        sys.executable, 120, _env(tmp_path / "empty-bin", NCCL_DEBUG="INFO", SECRET_TOKEN="x")
    )
    machine = report["machine"]
    assert machine["nvidia_smi"] == {"error": "nvidia-smi not found on PATH"}
    assert "NVIDIA driver: nvidia-smi not found on PATH" in report["notes"]
    assert machine["cpu"]["usable"] >= 1 and machine["memory"]["total_bytes"] > 0
    assert machine["variables"] == {"NCCL_DEBUG": "INFO"}  # only the relevant variables
    assert machine["python"]["executable"]
    torch = report["torch"]
    try:
        import torch as real_torch
    except ImportError:
        assert "torch is not importable" in torch["error"]
    else:
        assert torch["version"] == real_torch.__version__
        assert torch["backends"]["gloo"] is True
        assert "torch" in machine["packages"]
    text = render_markdown(report)
    assert "**NVIDIA driver**: nvidia-smi not found on PATH" in text
    assert "NCCL_DEBUG=INFO" in text and "SECRET_TOKEN" not in text


def test_fake_driver_and_topology_are_parsed(tmp_path: Path) -> None:
    fake_exe(tmp_path / "bin", "nvidia-smi", smi_script(TOPO_NVLINK))
    report = collect(sys.executable, 120, _env(tmp_path / "bin"))
    smi = report["machine"]["nvidia_smi"]
    assert smi["driver"] == "570.86.15" and smi["cuda"] == "12.8"
    assert smi["gpus"] == ["NVIDIA L40S", "NVIDIA L40S"]
    assert "NV18" in smi["topology"]
    text = render_markdown(report)
    assert "570.86.15 (supports CUDA 12.8)" in text and "nvidia-smi topo -m" in text


def test_a_driver_that_does_not_answer_is_reported_not_fatal(tmp_path: Path) -> None:
    fake_exe(
        tmp_path / "bin",
        "nvidia-smi",
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver' >&2\n"
        "exit 9\n",
    )
    report = collect(sys.executable, 120, _env(tmp_path / "bin"))
    smi = report["machine"]["nvidia_smi"]
    assert smi["error"].startswith("nvidia-smi listed no GPU")
    assert "could not communicate" in smi["topology_error"]
    assert "torch" in report and "machine" in report


def test_interpreter_without_torch_says_so(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    report = collect(str(venv / "bin" / "python"), 120, _env(tmp_path / "empty-bin"))
    assert "torch is not importable" in report["torch"]["error"]
    assert "ModuleNotFoundError" in report["torch"]["error"]
    assert report["machine"]["python"]["executable"].startswith(str(venv))
    assert "torch" not in report["machine"]["packages"]
    assert "PyTorch**: not available: torch is not importable" in render_markdown(report)


def test_torch_that_crashes_on_import_is_a_section_error() -> None:
    def broken() -> object:
        raise OSError("libtorch_cuda.so: cannot open shared object file")

    assert "libtorch_cuda.so" in torch_section(broken)["error"]


def test_a_hung_child_is_killed_and_what_arrived_is_kept(tmp_path: Path) -> None:
    # An "interpreter" that reports the machine section, then hangs (as CUDA init can).
    fake = fake_exe(
        tmp_path / "bin",
        "fakepython",
        'echo \'{"section": "machine", "data": {"cpu": {"usable": 3}}}\'\n'
        f"exec {shutil.which('sleep')} 600\n",
    )
    report = collect(str(fake), 2, _env(tmp_path / "bin"))
    assert report["machine"] == {"cpu": {"usable": 3}}
    assert report["torch"] == {"error": "not reported"}
    assert report["notes"][0].startswith("timed out after 2 s")


def test_cli_json_and_bad_interpreter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--python", str(tmp_path / "nope"), "--json"]) == 2
    assert "cannot start" in capsys.readouterr().err
    assert main(["--json", "--timeout", "0"]) == 2


def test_the_env_command_never_imports_torch_in_its_own_process(tmp_path: Path) -> None:
    code = (
        "import sys; from ddp_lsp import cli; rc = cli.main(['env', '--json']); "
        "print(rc, 'torch' in sys.modules, file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert proc.stderr.strip().splitlines()[-1] == "0 False", proc.stderr
    assert json.loads(proc.stdout)["schema"] == "ddp-lsp-env/1"
