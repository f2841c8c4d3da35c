"""The preflight is honest about the job: the backend and ranks come from the training script
(read statically), NCCL the machine cannot run is a failure, skips are counted and named, and
``--strict`` fails on skips the job needs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ddp_lsp.preflight.cli import main
from ddp_lsp.preflight.report import not_checked, render_markdown, render_text, summary_line
from ddp_lsp.preflight.schema import PreflightOptions, PreflightReport, ProbeResult, Status
from ddp_lsp.preflight.scriptinfo import load_script, options_with_facts, read_script

HEAD = "import torch\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\n"


@pytest.mark.parametrize(
    ("body", "backend"),
    [
        ('dist.init_process_group("nccl")\n', "nccl"),
        ('dist.init_process_group(backend="NCCL", init_method="env://")\n', "nccl"),
        ('dist.init_process_group("cuda:nccl,cpu:gloo")\n', "nccl"),
        ("dist.init_process_group(dist.Backend.GLOO)\n", "gloo"),
        ('BACKEND = "gloo"\ndef setup():\n    dist.init_process_group(BACKEND)\n', "gloo"),
        (
            "import argparse\np = argparse.ArgumentParser()\n"
            'p.add_argument("--dist-backend", default="nccl")\nargs = p.parse_args()\n'
            "dist.init_process_group(backend=args.dist_backend)\n",
            "nccl",
        ),
        # Decided at run time: the machine decides, as in the job.
        ('dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")\n', None),
        ("dist.init_process_group()\n", None),
        ("def setup(backend):\n    dist.init_process_group(backend)\n", None),
        # A parameter shadows a module-level name: the caller decides.
        ('backend = "nccl"\ndef setup(backend):\n    dist.init_process_group(backend)\n', None),
        # Two calls that disagree: the code does not fix one backend.
        ('dist.init_process_group("nccl")\ndist.init_process_group("gloo")\n', None),
        ('b = "nccl"\nb = "gloo"\ndist.init_process_group(b)\n', None),
    ],
)
def test_backend_is_read_only_when_the_code_fixes_it(body: str, backend: str | None) -> None:
    assert read_script(HEAD + body).backend == backend


def test_ranks_and_dataloader_facts_are_read() -> None:
    facts = read_script(
        HEAD
        + "from torch.utils.data import DataLoader\nWORKERS = 6\n"
        + "def run(rank):\n"
        + '    dist.init_process_group("gloo", rank=rank, world_size=4)\n'
        + "    a = DataLoader(ds, batch_size=32, num_workers=WORKERS, pin_memory=True)\n"
        + "    b = DataLoader(ds, num_workers=2, prefetch_factor=4)\n"
        + "if __name__ == '__main__':\n    mp.spawn(run, nprocs=3)\n"
    )
    assert (facts.world_size, facts.world_size_line, facts.world_size_how) == (
        3,
        11,
        "mp.spawn(nprocs=3)",
    )
    assert (facts.num_workers, facts.pin_memory, facts.prefetch_factor) == (6, True, 4)
    # Without spawn, init_process_group's literal world_size is the rank count.
    assert read_script(HEAD + 'dist.init_process_group("gloo", world_size=4)\n').world_size == 4
    assert (
        read_script(HEAD + "mp.spawn(run, nprocs=torch.cuda.device_count())\n").world_size is None
    )


def test_explicit_options_win_over_the_script() -> None:
    facts = read_script(HEAD + 'dist.init_process_group("nccl")\nmp.spawn(f, nprocs=4)\n')
    got = options_with_facts(PreflightOptions(), facts, "train.py")
    assert (got.backend, got.backend_source, got.world_size, got.world_size_source) == (
        "nccl",
        "train.py:4",
        4,
        "train.py:5",
    )
    kept = options_with_facts(PreflightOptions(backend="gloo", world_size=2), facts, "train.py")
    assert (kept.backend, kept.backend_source, kept.world_size) == ("gloo", None, 2)


def test_unreadable_or_broken_scripts_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read --script"):
        load_script(str(tmp_path / "missing.py"))
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    with pytest.raises(ValueError, match="is not valid Python"):
        load_script(str(bad))
    assert main(["--script", str(bad), "--probe", "limits"]) == 2


def _report(*probes: ProbeResult, quick: bool = False) -> PreflightReport:
    return PreflightReport(
        host="h",
        python="/py",
        python_version="3.11",
        platform="Linux",
        created="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        probes=probes,
        options=PreflightOptions(quick=quick).to_json(),
    )


def test_skips_the_job_needs_fail_under_strict_and_are_named() -> None:
    p2p = ProbeResult("gpu.p2p", "P2P", Status.SKIP, "no CUDA device", needed=True)
    topo = ProbeResult("gpu.topo", "topo", Status.SKIP, "nvidia-smi not found")
    limits = ProbeResult("limits", "limits", Status.PASS, "ok")
    report = _report(limits, topo, p2p)
    assert report.exit_code() == 0
    assert report.exit_code(strict=True) == 1
    assert _report(limits, topo).exit_code(strict=True) == 0  # a skip the job does not need
    line = summary_line(report, unicode=False)
    assert "1 skip" not in line and "2 skip (1 needed by the job)" in line
    assert line.endswith("not checked: gpu.p2p*, gpu.topo")
    gaps = not_checked(report)
    assert gaps[0] == "not checked although the job needs it (*): gpu.p2p (no CUDA device)"
    assert gaps[1] == "not checked: gpu.topo (nvidia-smi not found)"
    assert "not run (--quick)" not in "\n".join(gaps)  # a full run: not_checked says nothing
    assert "not checked although the job needs it" in render_text(report, unicode=False)
    assert "gpu.p2p" in render_markdown(report).split("not checked although")[1]
    # The flag survives the JSON round trip (cache, --json, the server).
    again = PreflightReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again.exit_code(strict=True) == 1


def test_quick_runs_say_which_probes_they_left_out() -> None:
    gaps = not_checked(_report(ProbeResult("limits", "limits", Status.PASS, "ok"), quick=True))
    assert any(
        g.startswith("not run (--quick): ") and "dist.correctness" in g and "dist.busbw" in g
        for g in gaps
    )


@pytest.mark.torch
def test_nccl_in_the_script_on_a_machine_without_it_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine can run NCCL")
    script = tmp_path / "train.py"
    script.write_text(HEAD + "def main():\n    dist.init_process_group(backend='nccl')\n")
    out_file = tmp_path / "r.json"
    code = main(
        [
            "--script",
            str(script),
            "--probe",
            "dist.handshake",
            "--json",
            str(out_file),
            "--no-color",
        ]
    )
    text = capsys.readouterr().out
    assert code == 1
    assert "job from train.py: backend 'nccl' (train.py:5, a literal)" in text
    report = PreflightReport.from_json(json.loads(out_file.read_text()))
    handshake = report.probe("dist.handshake")
    assert handshake is not None and handshake.status is Status.FAIL
    assert "init_process_group('nccl') at train.py:5" in handshake.message
    assert "fails at start-up" in handshake.message
    # Without the script the same machine passes on gloo: the script is what made it honest.
    assert main(["--probe", "dist.handshake", "--no-color"]) == 0
    assert replace(report, probes=()).exit_code() == 0
