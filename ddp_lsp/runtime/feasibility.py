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
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddp_lsp import proctree
from ddp_lsp.preflight.commmodel import (
    AlphaBeta,
    Bucket,
    Projection,
    StepParts,
    fit_alpha_beta,
    project,
    straggler_wait,
    verdict_label,
)
from ddp_lsp.runtime.feasibility_hook import (
    ENV_DIR,
    ENV_SHARED_STEPS,
    ENV_SHARED_THREADS,
    ENV_STEPS,
    ENV_SWEEP,
    ENV_WARMUP,
)

SHIM_DIR = Path(__file__).resolve().parent / "_shim"  # the sitecustomize smallrun uses too
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
EXIT_OK, EXIT_ERROR = 0, 2

#: torchrun options that take no value (everything else before the script takes one).
_TORCHRUN_FLAGS = {
    "--standalone",
    "--no-python",
    "--no_python",
    "--run-path",
    "--run_path",
    "--module",
    "-m",
    "--tee-log",
    "--virtual-local-rank",
    "--virtual_local_rank",
}
_TORCHRUN_NAMES = {"torchrun"}


class CommandError(ValueError):
    """The training command cannot be run the way feasibility needs."""


@dataclass(frozen=True)
class Entry:
    """The user's entry point: the interpreter, ``-m module`` or a script, and its arguments."""

    python: str
    target: str
    module: bool
    args: tuple[str, ...]
    python_opts: tuple[str, ...] = ()

    def torchrun(self, nproc: int) -> list[str]:
        cmd = [self.python, *self.python_opts, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc-per-node", str(nproc)]
        if self.module:
            cmd.append("-m")
        return [*cmd, self.target, *self.args]


def _is_python(word: str) -> bool:
    name = os.path.basename(word)
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


def parse_command(command: Sequence[str]) -> Entry:
    """Find the entry point in ``python train.py ...``, ``python -m pkg.train ...``,
    ``train.py ...`` or ``torchrun [options] train.py ...`` (also ``python -m
    torch.distributed.run``): torchrun's own options are dropped, feasibility chooses the
    number of processes itself."""
    words = list(command)
    if not words:
        raise CommandError("no training command after '--'")
    python = sys.executable
    opts: list[str] = []
    if _is_python(words[0]):
        python = words[0]
        words = words[1:]
        while words and words[0].startswith("-") and words[0] != "-m":
            if words[0] in ("-c", "-"):
                raise CommandError("give the training script or module, not -c code or stdin")
            opts.append(words[0])
            if words[0] in ("-W", "-X"):
                opts.append(words[1] if len(words) > 1 else "")
                words = words[1:]
            words = words[1:]
        if words[:2] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
            words = ["torchrun", *words[2:]]
    elif os.path.basename(words[0]) in _TORCHRUN_NAMES:
        found = shutil.which(words[0])
        if found:
            sibling = Path(found).resolve().parent / "python"
            if sibling.exists():
                python = str(sibling)
    if words and os.path.basename(words[0]) in _TORCHRUN_NAMES:
        words = words[1:]
        module = False
        while words and words[0].startswith("-"):
            flag = words[0]
            words = words[1:]
            if flag in ("-m", "--module"):
                module = True
            elif flag in ("--no-python", "--no_python"):
                raise CommandError("torchrun --no-python runs a non-Python program: not supported")
            elif "=" in flag or flag in _TORCHRUN_FLAGS:
                continue
            elif words:
                words = words[1:]  # the option's value
        if not words:
            raise CommandError("torchrun command without a training script")
        return Entry(python, words[0], module, tuple(words[1:]), tuple(opts))
    if not words:
        raise CommandError("no training script in the command")
    if words[0] == "-m":
        if len(words) < 2:
            raise CommandError("python -m without a module")
        return Entry(python, words[1], True, tuple(words[2:]), tuple(opts))
    first = os.path.basename(words[0])
    if first in ("accelerate", "deepspeed", "lightning", "srun", "mpirun"):
        raise CommandError(
            f"{first} launches its own processes: give the command that runs the training "
            "script itself (python train.py ...)"
        )
    if not words[0].endswith(".py") and not Path(words[0]).is_file():
        raise CommandError(f"{words[0]!r} is not a Python script, a module (-m) or torchrun")
    return Entry(python, words[0], False, tuple(words[1:]), tuple(opts))


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
        while proc.poll() is None:
            if time.monotonic() - started > timeout_s:
                timed_out = True
                break
            for info in proctree.descendants(proc.pid).values():
                seen.setdefault(info.pid, info.start)
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
        ranks[int(data.get("rank", -1))] = data
    log_text = log_path.read_text(encoding="utf-8", errors="replace")[-20000:]
    return RunResult(nproc, proc.returncode, ranks, log_text, time.monotonic() - started, timed_out)


# -- analysis -----------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def step_parts(rank: dict[str, Any], phase: str = "main") -> StepParts:
    """The mean step of one rank, split: the step time is the phase's wall time over its steps
    (true throughput, pauses included); data, backward and optimizer are measured; exposed
    all-reduce is the tail of backward after the last bucket was ready; the rest is forward."""
    recs = rank["records"][phase]
    step = rank["wall"][phase] / rank["steps"][phase]
    data = _mean([r["data"] for r in recs])
    exposed = _mean([r["exposed"] or 0.0 for r in recs])
    if rank.get("cuda") and any("backward_gpu" in r for r in recs):
        backward = _mean([r.get("backward_gpu", r["backward"]) for r in recs])
    else:
        backward = _mean([r["backward"] for r in recs])
    optimizer = _mean([r["optimizer"] for r in recs])
    bwd_compute = max(0.0, backward - exposed)
    forward = max(0.0, step - data - backward - optimizer)
    return StepParts(data, forward, bwd_compute, exposed, optimizer)


def step_stdev(rank: dict[str, Any], phase: str = "main") -> float:
    """Standard deviation of the step time (consecutive optimizer steps' end times)."""
    ends = [r["t_end"] for r in rank["records"][phase] if "t_end" in r]
    steps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    return statistics.stdev(steps) if len(steps) >= 3 else 0.0


def cpu_rank_step(single: dict[str, Any], nproc: int, t_phase: float) -> tuple[float, str]:
    """One CPU rank's step when ``nproc`` ranks share the host's cores, from the one-process
    run at a rank's thread count (``t_phase``).

    The rank's main process computed with ``k`` threads and got ``s`` cores on average (its CPU
    seconds over wall time). If ``s < k`` something else was runnable: with a fair scheduler
    ``s = k*C/(L+k)`` gives the other load ``L`` on ``C`` cores (none when it got ``k``). ``nproc`` ranks of ``k``
    threads then get ``k*C/(L+nproc*k)`` cores each (at most ``k``), and a step takes longer in
    proportion. The ranks' DataLoader workers count too: all of them together cannot use more
    than the ``C`` cores (``nproc`` times the run's CPU seconds per step, workers included).
    """
    phase = "shared" if single["steps"].get("shared") else "main"
    steps = single["steps"][phase]
    wall = single["wall"][phase]
    cores = int(single.get("cpus") or 0)
    own = (single.get("own_cpu_s") or {}).get(phase)
    total = (single.get("cpu_s") or {}).get(phase)
    k = int(single.get("shared_threads") or single.get("threads") or 1)
    if not cores or not own or wall <= 0:
        return t_phase, ""
    got = min(float(k), own / wall)
    # A process that got all the cores it asked for tells nothing about other load: take none.
    other = max(0.0, cores * k / got - k) if 0 < got < 0.98 * k else 0.0
    share = k * min(1.0, cores / (other + nproc * k))
    t = t_phase * max(1.0, got / share) if share > 0 else t_phase
    why = ""
    if t > t_phase * 1.02:
        why = (
            f"one process got {got:.2f} of {cores} cores at {k} thread(s) (other load ~{other:.1f}"
            f" runnable); {nproc} ranks get ~{share:.2f} each: a rank steps in ~{_ms(t)}"
        )
    if total and steps:
        bound = nproc * (total / steps) / cores
        if bound > t:
            why = (
                f"{nproc} ranks need {nproc * total / steps * 1e3:.0f} ms of CPU per step (their "
                f"DataLoader workers included) from {cores} cores: a rank steps in >= {_ms(bound)}"
            )
            t = bound
    return t, why


def buckets_of(rank: dict[str, Any]) -> list[Bucket]:
    """DDP's buckets as the comm hook saw them in the steady steps (DDP rebuilds its buckets
    after the first iteration), with each bucket's median ready time within backward."""
    recs = rank["records"]["main"]
    by_index: dict[int, list[tuple[int, float]]] = {}
    rounds = max(1, round(_mean([r["comm_rounds"] for r in recs]) or 1))
    for r in recs:
        bwd = r["backward"] - (r["exposed"] or 0.0)
        seen: set[int] = set()
        for index, nbytes, ready, _done in r["buckets"]:
            if index in seen:
                continue  # accumulation without no_sync: counted through ``rounds``
            seen.add(index)
            frac = min(1.0, max(0.0, (ready or 0.0) / bwd)) if bwd > 0 else 1.0
            by_index.setdefault(index, []).append((nbytes, frac))
    out = []
    for index in sorted(by_index):
        items = by_index[index]
        out.append(Bucket(items[-1][0], statistics.median(f for _, f in items)))
    return out * rounds


@dataclass
class Analysis:
    entry: Entry
    single: dict[str, Any]
    multi: dict[str, Any] | None
    nproc: int
    device: str
    t1: float
    t1_shared: float
    parts1: StepParts
    parts_n: StepParts | None
    t_n: float | None
    measured_speedup: float | None
    buckets: list[Bucket]
    grad_bytes: int
    model: AlphaBeta | None
    model_source: str
    predicted: Projection | None
    projections: list[Projection]
    node_projections: list[Projection]
    advice: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def batch(self) -> int | None:
        value = self.single.get("batch")
        return int(value) if value else None


def _sweep_points(rank: dict[str, Any]) -> list[tuple[float, float]]:
    return [(float(b), float(t)) for b, t in rank.get("sweep") or []]


def preflight_sweep(path: Path) -> tuple[list[tuple[float, float]], int, str]:
    """The dist.busbw sweep of a ``ddp-lsp preflight --json`` file: (bytes, seconds) points."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for probe in data.get("probes", []):
        if probe.get("id") == "dist.busbw":
            values = probe.get("value") or {}
            rows = values.get("sweep") or []
            points = [(float(r["bytes"]), float(r["time_us"]) / 1e6) for r in rows]
            if points:
                return points, int(values.get("world_size", 2)), str(values.get("backend", "?"))
    raise CommandError(f"{path}: no dist.busbw sweep in this preflight report")


def analyse(
    entry: Entry,
    single: dict[str, Any],
    multi: dict[int, dict[str, Any]] | None,
    nproc: int,
    *,
    sweep: tuple[list[tuple[float, float]], int, str] | None = None,
    inter_node: AlphaBeta | None = None,
    project_ranks: Sequence[int] = (2, 4, 8, 16),
    project_nodes: Sequence[int] = (2, 4, 8),
) -> Analysis:
    cuda = bool(single.get("cuda"))
    device = "GPU" if cuda else "CPU"
    t1 = single["wall"]["main"] / single["steps"]["main"]
    t1_shared = (
        single["wall"]["shared"] / single["steps"]["shared"]
        if single["steps"].get("shared")
        else t1
    )
    parts1 = step_parts(single)
    buckets = buckets_of(single)
    notes: list[str] = []
    if not buckets and single.get("ddp"):
        notes.append("DDP's comm hook never ran in the one-process run")
    if not single.get("ddp"):
        notes.append(
            "the one-process run built no DistributedDataParallel: gradient buckets are "
            "taken from the DDP run"
        )
    rank0 = multi.get(0) if multi else None
    if not buckets and rank0 is not None:
        buckets = buckets_of(rank0)
    grad_bytes = sum(b.nbytes for b in buckets)
    model: AlphaBeta | None = None
    model_source = ""
    around = [float(b.nbytes) for b in buckets]
    if sweep is not None:
        points, world, backend = sweep
        model = fit_alpha_beta(
            points, world, around, f"preflight dist.busbw ({backend}, {world} ranks)"
        )
        model_source = model.source
    elif rank0 is not None and _sweep_points(rank0):
        backend = str(rank0.get("backend", "?"))
        model = fit_alpha_beta(
            _sweep_points(rank0),
            nproc,
            around,
            f"all_reduce sweep at the bucket sizes on the job's process group "
            f"({backend}, {nproc} ranks)",
        )
        model_source = model.source
    parts_n = t_n = measured = None
    if multi:
        per_rank = {r: step_parts(d) for r, d in multi.items()}
        # Ranks wait for each other every step: the slowest sets the pace.
        t_n = max(d["wall"]["main"] / d["steps"]["main"] for d in multi.values())
        parts_n = per_rank[0]
        measured = nproc * t1 / t_n
        if measured > nproc * 1.1:
            notes.append(
                f"more than x{nproc}: one process ran slower per sample than one rank does"
                + (
                    f" (its {single.get('threads')} threads contend for the cores; a rank "
                    f"runs {cpu_ranks_threads(nproc)}; compare with OMP_NUM_THREADS set)"
                    if not cuda
                    else ""
                )
            )
        b1, bn = single.get("batch"), rank0.get("batch") if rank0 else None
        if b1 and bn and b1 != bn:
            measured = nproc * t1 * bn / (t_n * b1)
            notes.append(f"per-rank batch {bn} under DDP vs {b1} alone: speed-up in samples/s")
    # CPU ranks share the host's cores: one rank computes at the thread count it gets there
    # (measured in the one-process run's extra phase); a GPU rank owns its device.
    rank_compute = t1_shared if not cuda else t1
    if not cuda:
        rank_compute, why = cpu_rank_step(single, nproc, rank_compute)
        if why:
            notes.append(why)
    bwd_for_overlap = parts1.backward
    # The spread of the steps a rank will run: at a rank's thread count where that was timed
    # (the full-thread steps of an oversubscribed host spread far more than a rank's).
    sigma = step_stdev(single, "shared" if single["steps"].get("shared") else "main")
    predicted = None
    comm_scale = 1.0
    projections: list[Projection] = []
    node_projections: list[Projection] = []
    if model is not None and buckets:
        predicted = project(
            t1, rank_compute, bwd_for_overlap, buckets, model, nproc, cuda, 1, 1.0, sigma
        )
        # Beyond the local ranks: each rank computes as the measured DDP ranks did (their
        # step without the exposed all-reduce), the all-reduce is the model's. CPU ranks
        # expose all of it, so the model is calibrated to what the job's all-reduce cost
        # (cores shared with compute, waits for the slower rank) against the sweep's.
        base = (t_n - parts_n.comm) if (t_n is not None and parts_n is not None) else rank_compute
        bwd = parts_n.backward if parts_n is not None else bwd_for_overlap
        modelled = predicted.comm_s
        if not cuda and parts_n is not None and modelled > 0:
            comm_scale = parts_n.comm / modelled
            if comm_scale > 1.5 or comm_scale < 0.67:
                notes.append(
                    f"the all-reduce inside the job cost x{comm_scale:.1f} what the sweep "
                    f"measured ({_ms(parts_n.comm)} vs {_ms(modelled)} per step): ranks share "
                    "the cores with compute and wait for the slower rank; projections use "
                    "the job's cost"
                )
        for n in sorted(set(project_ranks) | {nproc}):
            # The measured base already waited for the slower of the local ranks.
            extra = max(0.0, straggler_wait(sigma, n) - straggler_wait(sigma, nproc))
            p = project(t1, base, bwd, buckets, model, n, cuda, 1, comm_scale)
            projections.append(
                Projection(
                    n,
                    1,
                    p.step_s + extra,
                    p.comm_s,
                    p.exposed_s + extra,
                    n * t1 / (p.step_s + extra) if p.step_s + extra > 0 else 0.0,
                )
            )
        if inter_node is not None:
            for m in project_nodes:
                n = m * nproc
                p = project(t1, base, bwd, buckets, inter_node, n, cuda)
                node_projections.append(
                    Projection(n, m, p.step_s, p.comm_s, p.exposed_s, p.speedup)
                )
    analysis = Analysis(
        entry,
        single,
        rank0,
        nproc,
        device,
        t1,
        t1_shared,
        parts1,
        parts_n,
        t_n,
        measured,
        buckets,
        grad_bytes,
        model,
        model_source,
        predicted,
        projections,
        node_projections,
        notes=notes,
    )
    analysis.advice = advise(analysis)
    return analysis


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def advise(a: Analysis) -> list[str]:
    """What to change, each with the number that motivates it."""
    out: list[str] = []
    ddp = (a.multi or a.single).get("ddp") or {}
    parts = a.parts_n or a.parts1
    step = a.t_n or a.t1
    comm_share = parts.comm / step if step else 0.0
    model = a.model
    n = a.nproc
    if model is not None and a.buckets and comm_share >= 0.1:
        modelled = sum(model.time(b.nbytes, n) for b in a.buckets)
        # What the all-reduce costs in this job: measured where there was a DDP run, else
        # the model's price; savings are scaled the same way.
        comm = parts.comm if a.parts_n is not None else modelled
        scale = comm / modelled if modelled > 0 else 1.0
        out.append(
            f"bigger per-rank batch: the all-reduce costs ~{_ms(comm)} per step whatever the "
            f"batch, now {comm_share:.0%} of the step; twice the batch halves that share"
        )
        out.append(
            "gradient accumulation under `with model.no_sync():` for k-1 of every k "
            f"micro-batches: one all-reduce per k (k=4 skips 3 of 4, ~{_ms(comm)} each)"
        )
        if str(ddp.get("grad_dtype", "float32")) == "float32" and a.grad_bytes:
            half = sum(model.time(b.nbytes / 2, n) for b in a.buckets)
            out.append(
                "bf16 gradients on the wire: `model.register_comm_hook(None, "
                "default_hooks.bf16_compress_hook)` (NCCL) halves "
                f"{_bytes(a.grad_bytes)} -> {_bytes(a.grad_bytes / 2)}, "
                f"~{_ms((modelled - half) * scale)} less"
            )
        latency = len(a.buckets) * 2 * (n - 1) * model.alpha_s
        if modelled > 0 and latency / modelled > 0.3:
            out.append(
                f"larger bucket_cap_mb: {len(a.buckets)} buckets pay {_ms(latency)} of latency "
                f"({latency / modelled:.0%} of the all-reduce's price)"
            )
        elif len(a.buckets) == 1 and a.device == "GPU" and a.grad_bytes > 2 * MiB:
            out.append("smaller bucket_cap_mb: one bucket starts reducing only when backward ends")
    if ddp and not ddp.get("gradient_as_bucket_view") and a.grad_bytes:
        out.append(
            "DistributedDataParallel(..., gradient_as_bucket_view=True): saves a copy of "
            f"{_bytes(a.grad_bytes)} of gradients per step and that much memory"
        )
    if ddp.get("find_unused_parameters"):
        out.append(
            "find_unused_parameters=True walks the autograd graph every step: set it False "
            "(or static_graph=True) if every parameter gets a gradient"
        )
    recs = (a.multi or a.single)["records"]["main"]
    calls = _mean([r["backward_calls"] for r in recs])
    rounds = _mean([r["comm_rounds"] for r in recs])
    if calls > 1.5 and rounds > 1.5:
        out.append(
            f"{calls:.0f} backward passes per optimizer step and {rounds:.0f} all-reduces: "
            "accumulate under `model.no_sync()` so only the last micro-batch reduces"
        )
    if step and parts.data / step >= 0.15:
        out.append(
            f"the loop waits {_ms(parts.data)} per step for data ({parts.data / step:.0%}): "
            "more DataLoader workers, pin_memory=True, persistent_workers=True"
        )
    return out


def render(a: Analysis) -> str:
    lines: list[str] = []
    batch = a.batch
    e = a.entry
    cmd = " ".join(shlex.quote(x) for x in (*(["-m"] if e.module else []), e.target, *e.args))
    lines.append(f"DDP feasibility  {cmd}  (1 process, then {a.nproc} ranks under torchrun)")
    ddp = (a.multi or a.single).get("ddp") or {}
    params = ddp.get("params")
    grad = (
        f"gradients {_bytes(a.grad_bytes)} in {len(a.buckets)} bucket(s)"
        f" ({', '.join(_bytes(b.nbytes) for b in a.buckets[:6])}{'...' if len(a.buckets) > 6 else ''})"
        if a.buckets
        else "gradient buckets: not seen"
    )
    lines.append(f"  model: {params:,} trainable parameters, {grad}" if params else f"  {grad}")

    def sps(t: float, ranks: int) -> str:
        return f"{ranks * batch / t:.1f} samples/s" if batch else f"{ranks / t:.2f} steps/s"

    def split(p: StepParts) -> str:
        return (
            f"data {_ms(p.data)} | forward {_ms(p.forward)} | backward {_ms(p.backward)} | "
            f"exposed all-reduce {_ms(p.comm)} | optimizer {_ms(p.optimizer)}"
        )

    threads = a.single.get("threads")
    lines.append(
        f"  1 process : step {_ms(a.t1)}, {sps(a.t1, 1)}"
        + (
            f" ({threads} thread{'s' if threads != 1 else ''})"
            if a.device == "CPU" and threads
            else ""
        )
    )
    lines.append(f"              {split(a.parts1)}")
    if a.t_n is not None and a.parts_n is not None:
        backend = (a.multi or {}).get("backend", "?")
        lines.append(
            f"  {a.nproc} ranks   : step {_ms(a.t_n)}, {sps(a.t_n, a.nproc)} ({backend}, "
            f"{a.device}) -> measured speed-up x{a.measured_speedup:.2f}"
        )
        lines.append(f"              {split(a.parts_n)}")
        name, value = a.parts_n.dominant()
        lines.append(f"  dominant cost per rank: {name}, {_ms(value)} of {_ms(a.t_n)}")
    if a.multi is not None and a.device == "GPU":
        util = a.multi.get("gpu_util")
        h2d = a.multi.get("h2d_gbps")
        lines.append(
            "  GPU: "
            + (f"utilisation {util:.0f}%" if util is not None else "utilisation n/a (no NVML)")
            + (f", host-to-device {h2d:.1f} GB/s pinned" if h2d else "")
        )
    if a.model is not None:
        lines.append(
            f"  all-reduce model: {a.model.alpha_s * 1e6:.0f} us/hop + "
            f"busbw {a.model.busbw_Bps / 1e9:.2f} GB/s near the buckets [{a.model_source}]"
        )
    if a.predicted is not None:
        overlap = (
            "overlapped with backward"
            if a.device == "GPU"
            else "not hidden (ranks share the cores)"
        )
        pred = a.predicted
        line = (
            f"  model check: predicted x{pred.speedup:.2f} on {a.nproc} ranks from the one-process "
            f"run (rank compute {_ms(pred.step_s - pred.exposed_s)}, all-reduce {_ms(pred.comm_s)}, "
            f"{overlap})"
        )
        if a.measured_speedup:
            err = pred.speedup / a.measured_speedup - 1
            line += f"; measured x{a.measured_speedup:.2f} ({err:+.0%})"
        lines.append(line)
    if a.projections:
        where = "GPUs on one node" if a.device == "GPU" else "CPU ranks, each with cores of its own"
        cells = ", ".join(
            f"{p.ranks}: x{p.speedup:.1f} ({p.efficiency:.0%})" for p in a.projections
        )
        lines.append(f"  projection, {where}: {cells}")
    if a.node_projections:
        cells = ", ".join(
            f"{p.nodes} nodes ({p.ranks} ranks): x{p.speedup:.1f} ({p.efficiency:.0%})"
            for p in a.node_projections
        )
        lines.append(f"  projection across nodes: {cells}")
    elif a.projections:
        lines.append(
            "  projection across nodes: give --inter-node-gbps (busbw of `ddp-lsp preflight "
            "--torchrun` across the nodes) to get one"
        )
    lines.append("  verdict: " + verdict_line(a))
    for item in a.advice:
        lines.append(f"  -> {item}")
    for note in a.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines) + "\n"


def verdict_line(a: Analysis) -> str:
    if a.measured_speedup is not None:
        eff = a.measured_speedup / a.nproc
        label = verdict_label(eff)
        name, value = a.parts_n.dominant() if a.parts_n else ("?", 0.0)
        return (
            f"{label}: x{a.measured_speedup:.2f} on {a.nproc} {a.device} ranks "
            f"({eff:.0%} scaling efficiency); dominant cost {name}"
        )
    if a.predicted is not None:
        label = verdict_label(a.predicted.efficiency)
        return f"{label} (predicted, not measured): x{a.predicted.speedup:.2f} on {a.nproc} ranks"
    return "no verdict: the DDP run did not complete"


def to_json(a: Analysis) -> dict[str, Any]:
    def parts(p: StepParts | None) -> dict[str, Any] | None:
        if p is None:
            return None
        return {
            "data_s": p.data,
            "forward_s": p.forward,
            "backward_s": p.backward,
            "exposed_allreduce_s": p.comm,
            "optimizer_s": p.optimizer,
            "dominant": p.dominant()[0],
        }

    def proj(p: Projection) -> dict[str, Any]:
        return {
            "ranks": p.ranks,
            "nodes": p.nodes,
            "step_s": p.step_s,
            "allreduce_s": p.comm_s,
            "exposed_s": p.exposed_s,
            "speedup": p.speedup,
            "efficiency": p.efficiency,
        }

    return {
        "schema": "ddp-lsp-feasibility/1",
        "command": a.entry.torchrun(a.nproc),
        "device": a.device,
        "ranks": a.nproc,
        "batch_per_rank": a.batch,
        "single": {"step_s": a.t1, "shared_core_step_s": a.t1_shared, "parts": parts(a.parts1)},
        "ddp": {
            "step_s": a.t_n,
            "parts": parts(a.parts_n),
            "backend": (a.multi or {}).get("backend"),
            "gpu_util": (a.multi or {}).get("gpu_util"),
            "h2d_gbps": (a.multi or {}).get("h2d_gbps"),
            "settings": (a.multi or a.single).get("ddp"),
        },
        "measured_speedup": a.measured_speedup,
        "grad_bytes": a.grad_bytes,
        "buckets": [{"bytes": b.nbytes, "ready_frac": b.ready_frac} for b in a.buckets],
        "allreduce_model": (
            {
                "alpha_s": a.model.alpha_s,
                "busbw_gbps": a.model.busbw_Bps / 1e9,
                "source": a.model_source,
            }
            if a.model
            else None
        ),
        "predicted": proj(a.predicted) if a.predicted else None,
        "projections": [proj(p) for p in a.projections],
        "node_projections": [proj(p) for p in a.node_projections],
        "verdict": verdict_line(a),
        "advice": a.advice,
        "notes": a.notes,
    }


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


def cpu_ranks_threads(nproc: int) -> int:
    """Threads per rank when ``nproc`` CPU ranks run under torchrun: torchrun sets
    OMP_NUM_THREADS=1 for several processes unless the user set it."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return 1 if nproc > 1 else max(1, len(os.sched_getaffinity(0)))


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
