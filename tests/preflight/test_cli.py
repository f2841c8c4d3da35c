"""``ddp-lsp preflight`` end to end: the real CPU/gloo path, JSON output, exit codes, --strict,
and argument errors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ddp_lsp.preflight.cli import main
from ddp_lsp.preflight.report import machine_facts
from ddp_lsp.preflight.schema import SCHEMA_ID, PreflightReport


@pytest.mark.torch
def test_quick_cpu_run_uses_gloo_for_real_and_says_what_was_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    out_file = tmp_path / "report.json"
    code = main(["--quick", "--backend", "gloo", "--json", str(out_file), "--no-color"])
    text = capsys.readouterr().out
    data = json.loads(out_file.read_text())
    assert data["schema"] == SCHEMA_ID
    report = PreflightReport.from_json(data)
    assert code == report.exit_code()
    handshake = report.probe("dist.handshake")
    assert handshake is not None and handshake.status.value == "pass", handshake
    assert handshake.values["backend"] == "gloo" and handshake.values["world_size"] == 2
    assert report.probe("dist.busbw") is None and report.probe("feasibility") is None  # --quick
    assert report.torch and report.torch.startswith("2.")
    cuda = report.probe("cuda.basic")
    assert cuda is not None
    if report.cuda is None:  # the CPU build CI installs
        assert cuda.status.value == "skip" and "CPU-only" in cuda.message
        assert "not checked: " in text and "cuda.basic (CPU-only torch build" in text
    assert "ok   dist.handshake" in text
    # The keys the language server reads come out of a real run.
    facts = machine_facts(report)
    assert facts.cpu_count is not None and 1 <= facts.cpu_count <= (os.cpu_count() or 1)
    assert facts.shm_free_bytes is not None and facts.shm_total_bytes is not None
    assert facts.recommended_num_workers is not None and facts.local_world_size == 2
    if report.cuda is None:
        assert facts.nccl_available is False and facts.gpu_count == 0


def test_strict_turns_a_warning_into_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    assert main(["--probe", "env.lint", "--no-color"]) == 0
    assert "WARN env.lint" in capsys.readouterr().out
    assert main(["--probe", "env.lint", "--strict"]) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["--python", "/nonexistent/python", "--probe", "limits"],
        ["--probe", "no.such.probe"],
        ["--world-size", "0"],
        ["--backend", "mpi"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2


def test_model_file_parameter_estimate_reaches_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.py"
    model.write_text(
        "import torch.nn as nn\nH = 1024\nnet = nn.Sequential(nn.Linear(H, 4 * H), nn.Linear(4 * H, H))\n"
    )
    seen = {}

    def fake_run(python, options, on_probe=None, **kw):  # type: ignore[no-untyped-def]
        seen["params"] = options.params
        return PreflightReport(
            host="h",
            python=python,
            python_version="",
            platform="",
            created="2026-01-01T00:00:00+00:00",
            duration_s=0.0,
            probes=(),
        )

    monkeypatch.setattr("ddp_lsp.preflight.client.run_preflight_sync", fake_run)
    assert main(["--model-file", str(model), "--probe", "feasibility"]) == 0
    assert seen["params"] == 2 * 1024 * 4096 + 4096 + 1024
    assert "8,393,728 parameters" in capsys.readouterr().out


def test_model_file_with_unresolved_layers_gives_no_parameter_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.py"
    model.write_text(
        "import torch.nn as nn\nnet = nn.Sequential(nn.Linear(64, 128), nn.Linear(cfg.d, cfg.v))\n"
    )
    seen = {}

    def fake_run(python, options, on_probe=None, **kw):  # type: ignore[no-untyped-def]
        seen["params"] = options.params
        return PreflightReport(
            host="h",
            python=python,
            python_version="",
            platform="",
            created="2026-01-01T00:00:00+00:00",
            duration_s=0.0,
            probes=(),
        )

    monkeypatch.setattr("ddp_lsp.preflight.client.run_preflight_sync", fake_run)
    assert main(["--model-file", str(model), "--probe", "feasibility"]) == 0
    assert seen["params"] is None
    out = capsys.readouterr().out
    assert ">= 8,320 parameters" in out and "1 layers unresolved: not used for a verdict" in out


def test_cli_module_never_imports_torch() -> None:
    import subprocess

    code = (
        "import sys; from ddp_lsp.preflight import cli, client, report, schema, paramcount; "
        "from ddp_lsp.preflight import envinfo, scriptinfo; "
        "import ddp_lsp.preflight.probes; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
