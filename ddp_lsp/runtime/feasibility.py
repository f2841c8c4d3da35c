"""``ddp-lsp feasibility -- <training command>``: is DDP worth it, from the user's own steps.

The user's entry point runs twice under ``torchrun --standalone`` with our step-timing hooks
(:mod:`ddp_lsp.runtime.feasibility_hook`, injected through a ``sitecustomize`` on
``PYTHONPATH``; the script is not edited): once as one process, once as DDP over the local
devices (every GPU, or CPU ranks with gloo where there is none). Each run stops by itself
after the warm-up and the measured steps. This process never imports torch.

What comes back: samples/s of both runs and the measured speed-up; each rank's step split into
data wait, forward, backward compute, exposed all-reduce and optimizer; gradient bytes and
DDP's buckets; GPU utilisation and host-to-device bandwidth on GPUs. The all-reduce cost
model (:mod:`ddp_lsp.preflight.commmodel`, alpha-beta at the real bucket sizes, fitted on an
all-reduce sweep measured on the job's own process group or taken from a preflight JSON)
predicts the measured speed-up from the one-process run (the check of the model) and
projects to more ranks and nodes. The verdict names the dominant cost and what to change.

The user's command is executed because the user asked for it: it is their training job.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddp_lsp import proctree
from ddp_lsp.preflight.commmodel import AlphaBeta
from ddp_lsp.runtime import hostload
from ddp_lsp.runtime.feasibility_analysis import (
    Analysis,
    advise,
    analyse,
    buckets_of,
    cpu_rank_step,
    cpu_ranks_threads,
    preflight_sweep,
    step_parts,
    step_stdev,
)
from ddp_lsp.runtime.feasibility_entry import CommandError, Entry, parse_command
from ddp_lsp.runtime.feasibility_hook import (
    ENV_DIR,
    ENV_SHARED_STEPS,
    ENV_SHARED_THREADS,
    ENV_STEPS,
    ENV_SWEEP,
    ENV_WARMUP,
)
from ddp_lsp.runtime.feasibility_report import render, to_json, verdict_line

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "SHIM_DIR",
    "Analysis",
    "CommandError",
    "Entry",
    "FeasibilityConfig",
    "advise",
    "analyse",
    "buckets_of",
    "cpu_rank_step",
    "cpu_ranks_threads",
    "main",
    "parse_command",
    "preflight_sweep",
    "render",
    "run_feasibility",
    "step_parts",
    "step_stdev",
    "sweep_sizes",
    "to_json",
    "verdict_line",
]

SHIM_DIR = Path(__file__).resolve().parent / "_shim"  # the sitecustomize smallrun uses too
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_ERROR = 0, 2


@dataclass
class RunResult:
    nproc: int
    returncode: int | None
    ranks: dict[int, dict[str, Any]]
    log: str
    duration_s: float
    timed_out: bool = False

    def error(self) -> str | None:
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f} s (raise --timeout?)" + self._tail()
        if not self.ranks:
            return "no rank reported: the script never stepped an optimizer" + self._tail()
        ended = [r for r in self.ranks.values() if r.get("ended") != "steps"]
        if ended:
            r = ended[0]
            if not r.get("ddp") and r.get("count", 0) == 0:
                return "the script ended before its first optimizer.step()" + self._tail()
            return (
                f"the script ended after {r.get('count', 0)} optimizer steps, before the "
                "warm-up and measured steps were done (lower --steps/--warmup, or give it "
                "more data/epochs)"
            )
        if len(self.ranks) < self.nproc:
            missing = sorted(set(range(self.nproc)) - set(self.ranks))
            return f"rank(s) {missing} did not report" + self._tail()
        return None

    def _tail(self) -> str:
        lines = [ln for ln in self.log.splitlines() if ln.strip()][-12:]
        return ("\n  " + "\n  ".join(lines)) if lines else ""


def _run(
    entry: Entry,
    nproc: int,
    workdir: Path,
    env_extra: dict[str, str],
    timeout_s: float,
) -> RunResult:
    rundir = workdir / f"run-{nproc}"
    rundir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIM_DIR), env.get("PYTHONPATH", "")) if p)
    env["DDP_LSP_PACKAGE_ROOT"] = str(PACKAGE_ROOT)
    env[ENV_DIR] = str(rundir)
    env.update(env_extra)
    log_path = rundir / "output.log"
    started = time.monotonic()
    proctree.set_child_subreaper()
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                entry.torchrun(nproc),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise CommandError(f"cannot start {entry.python!r}: {exc.strerror}") from exc
        seen: dict[int, int] = {}
        timed_out = False
        load: list[hostload.Sample] = []
        while proc.poll() is None:
            if time.monotonic() - started > timeout_s:
                timed_out = True
                break
            tree = proctree.descendants(proc.pid)
            for info in tree.values():
                seen.setdefault(info.pid, info.start)
            point = hostload.sample([proc.pid, *tree])
            if point is not None:
                load.append(point)
            time.sleep(0.1)
        # Ranks leave with os._exit after writing their results; DataLoader workers and a
        # slow agent may linger: nothing of this run outlives it.
        proctree.kill_tree(proc.pid, seen, 3.0, marker=(ENV_DIR, str(rundir)))
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        proctree.reap_children()
    ranks: dict[int, dict[str, Any]] = {}
    for path in rundir.glob("rank-*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        # The host's other load over each measured phase (the rank's own monotonic bounds).
        data["other_load"] = {
            phase: value
            for phase, (start, end) in (data.get("mono") or {}).items()
            if (value := hostload.other_load(load, start, end)) is not None
        }
        ranks[int(data.get("rank", -1))] = data
    log_text = log_path.read_text(encoding="utf-8", errors="replace")[-20000:]
    return RunResult(nproc, proc.returncode, ranks, log_text, time.monotonic() - started, timed_out)


# -- the command --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FeasibilityConfig:
    command: tuple[str, ...]
    steps: int = 50
    warmup: int = 5
    shared_steps: int = 20
    nproc: int | None = None
    timeout_s: float = 600.0
    preflight: Path | None = None
    inter_node_gbps: float | None = None
    inter_node_latency_us: float = 20.0


def sweep_sizes(bucket_bytes: Sequence[int]) -> list[int]:
    """Where the all-reduce is timed: every distinct bucket size, and a decade around them
    so the latency term has small sizes to stand on."""
    sizes = {int(b) for b in bucket_bytes if b > 0}
    if sizes:
        lo, hi = min(sizes), max(sizes)
        s = max(4096, lo // 16)
        while s <= hi * 2:
            sizes.add(s)
            s *= 4
    return sorted(sizes)


def run_feasibility(cfg: FeasibilityConfig) -> tuple[Analysis | None, str]:
    entry = parse_command(cfg.command)
    workdir = Path(tempfile.mkdtemp(prefix="ddp-lsp-feasibility-"))
    try:
        cpu_n = cfg.nproc or 2
        # With OMP_NUM_THREADS set, one process already runs at a CPU rank's thread count.
        shared_steps = 0 if os.environ.get("OMP_NUM_THREADS", "").isdigit() else cfg.shared_steps
        base = {ENV_STEPS: str(cfg.steps), ENV_WARMUP: str(cfg.warmup)}
        one = _run(
            entry,
            1,
            workdir,
            {
                **base,
                ENV_SHARED_STEPS: str(shared_steps),
                ENV_SHARED_THREADS: str(cpu_ranks_threads(cpu_n)),
            },
            cfg.timeout_s,
        )
        problem = one.error()
        if problem:
            return None, f"one-process run: {problem}\n"
        single = one.ranks[0]
        gpus = int(single.get("device_count") or 0) if single.get("cuda") else 0
        nproc = cfg.nproc or (gpus if gpus >= 2 else 2)
        sweep = preflight_sweep(cfg.preflight) if cfg.preflight is not None else None
        inter = None
        if cfg.inter_node_gbps:
            inter = AlphaBeta(
                cfg.inter_node_latency_us / 1e6,
                cfg.inter_node_gbps * 1e9,
                f"given: {cfg.inter_node_gbps:g} GB/s busbw, {cfg.inter_node_latency_us:g} us/hop",
            )
        if single.get("cuda") and gpus < nproc:
            # NCCL refuses two ranks on one GPU: no DDP run here. The one-GPU steps and a
            # preflight sweep (from the machine the job will run on) still give a prediction.
            analysis = analyse(entry, single, None, nproc, sweep=sweep, inter_node=inter)
            analysis.notes.append(
                f"{gpus} GPU(s) visible: no DDP run over {nproc} GPUs here (one GPU per rank); "
                + (
                    "the prediction rests on the one-GPU steps and the preflight's sweep"
                    if sweep
                    else "give --preflight with a dist.busbw sweep for a prediction"
                )
            )
            return analysis, ""
        sizes = sweep_sizes([b.nbytes for b in buckets_of(single)]) if single.get("ddp") else []
        if cfg.preflight is not None:
            sizes = []
        if not sizes:
            sizes = [64 << 10, 1 << 20, 4 << 20, 16 << 20, 25 << 20]
        multi = _run(
            entry, nproc, workdir, {**base, ENV_SWEEP: ",".join(map(str, sizes))}, cfg.timeout_s
        )
        problem = multi.error()
        if problem:
            return None, f"DDP run ({nproc} ranks): {problem}\n"
        if not multi.ranks[0].get("ddp"):
            return None, (
                f"DDP run ({nproc} ranks): the script built no DistributedDataParallel under "
                "torchrun (does it wrap the model when RANK/WORLD_SIZE are set?)\n"
            )
        analysis = analyse(entry, single, multi.ranks, nproc, sweep=sweep, inter_node=inter)
        return analysis, ""
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ddp-lsp feasibility",
        description=(
            "Run the training command for a bounded number of steps as one process, then as "
            "DDP over the local devices (GPUs, or CPU ranks with gloo), and say whether DDP is "
            "worth it, from the measured steps. The script is run under torchrun with timing "
            "hooks; it is not edited. Example: ddp-lsp feasibility -- python train.py --lr 3e-4"
        ),
    )
    p.add_argument("--steps", type=int, default=50, help="measured steps per run (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="steps before measuring (default 5)")
    p.add_argument(
        "--shared-steps",
        type=int,
        default=20,
        help="CPU only: extra one-process steps at the thread count of one CPU rank (default 20)",
    )
    p.add_argument("--nproc", type=int, help="ranks of the DDP run (default: GPUs, or 2 on CPU)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    p.add_argument("--json", dest="json_file", help="also write the result as JSON to FILE")
    p.add_argument(
        "--preflight",
        help="a `ddp-lsp preflight --json` report: take the all-reduce sweep from its dist.busbw",
    )
    p.add_argument(
        "--inter-node-gbps", type=float, help="bus bandwidth between nodes (GB/s) to project nodes"
    )
    p.add_argument(
        "--inter-node-latency-us", type=float, default=20.0, help="latency per hop between nodes"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    return p


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    ns = _parser().parse_args(args)
    command = list(ns.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        sys.stderr.write("ddp-lsp feasibility: give the training command after '--'\n")
        return EXIT_ERROR
    for name in ("steps", "warmup", "timeout"):
        if getattr(ns, name) <= 0:
            sys.stderr.write(f"ddp-lsp feasibility: --{name} must be positive\n")
            return EXIT_ERROR
    if ns.nproc is not None and ns.nproc < 2:
        sys.stderr.write("ddp-lsp feasibility: --nproc must be at least 2\n")
        return EXIT_ERROR
    cfg = FeasibilityConfig(
        tuple(command),
        steps=ns.steps,
        warmup=ns.warmup,
        shared_steps=max(0, ns.shared_steps),
        nproc=ns.nproc,
        timeout_s=ns.timeout,
        preflight=Path(ns.preflight) if ns.preflight else None,
        inter_node_gbps=ns.inter_node_gbps,
        inter_node_latency_us=ns.inter_node_latency_us,
    )
    try:
        analysis, problem = run_feasibility(cfg)
    except (CommandError, OSError, ValueError) as exc:
        sys.stderr.write(f"ddp-lsp feasibility: {exc}\n")
        return EXIT_ERROR
    if analysis is None:
        sys.stderr.write(f"ddp-lsp feasibility: {problem}")
        return EXIT_ERROR
    sys.stdout.write(render(analysis))
    if ns.json_file:
        try:
            Path(ns.json_file).write_text(json.dumps(to_json(analysis), indent=1), encoding="utf-8")
        except OSError as exc:
            sys.stderr.write(f"ddp-lsp feasibility: cannot write {ns.json_file}: {exc.strerror}\n")
            return EXIT_ERROR
    return EXIT_OK
