"""The probe contract: a small typed unit with an id, a title, a timeout and a ``run``.

A probe reads the machine only through :class:`ProbeContext`, whose hooks (rlimits, disk usage,
CPU affinity, the filesystem root for /sys and /proc, subprocess, ``torch``) are the seams the
tests replace with fakes: two GPUs with broken P2P, a 64 MB /dev/shm, only ``lo`` up. Probes
never import torch at module import time; ``ctx.torch()`` imports it on first use so the
runner can run the torch-free probes before paying for the import.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ddp_lsp.preflight.schema import JsonValue, PreflightOptions, ProbeResult, Status


@dataclass(frozen=True)
class Outcome:
    """What ``Probe.run`` returns; the runner adds id, title and duration."""

    status: Status
    message: str
    values: Mapping[str, JsonValue] = field(default_factory=dict)
    fix: str | None = None
    references: tuple[str, ...] = ()
    #: For a skip: the job needs what was not checked (see ``ProbeResult.needed``).
    needed: bool = False


def ok(message: str, **values: JsonValue) -> Outcome:
    return Outcome(Status.PASS, message, values)


def skip(reason: str, **values: JsonValue) -> Outcome:
    return Outcome(Status.SKIP, reason, values)


def skip_needed(reason: str, needed: bool = True, **values: JsonValue) -> Outcome:
    """Not checked although the job relies on it (its backend or rank count needs it):
    ``--strict`` fails on it and the summary names it."""
    return Outcome(Status.SKIP, reason, values, needed=needed)


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


def _run_command(argv: list[str], timeout: float, env: Mapping[str, str]) -> CommandResult:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=dict(env), check=False
    )
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def _import_torch() -> ModuleType:
    import torch

    return torch


@dataclass(frozen=True)
class SystemHooks:
    """Every way a probe touches the machine. Defaults are the real thing."""

    root: str = "/"
    getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit
    disk_usage: Callable[[str], Any] = shutil.disk_usage
    cpu_affinity: Callable[[], set[int]] = field(default=lambda: os.sched_getaffinity(0))
    cpu_count: Callable[[], int | None] = os.cpu_count
    run: Callable[[list[str], float, Mapping[str, str]], CommandResult] = _run_command
    import_torch: Callable[[], ModuleType] = _import_torch
    hostname: Callable[[], str] = field(default=lambda: os.uname().nodename)
    #: Replaces torch.cuda for the GPU probes (tests: two fake GPUs); None = real torch.cuda.
    cuda_ops: Callable[[], Any] | None = None

    def path(self, *parts: str) -> str:
        """``/sys/...`` or ``/proc/...`` under the (possibly fake) root."""
        return os.path.join(self.root, *(p.lstrip("/") for p in parts))


@dataclass
class ProbeContext:
    """Shared by the probes of one run. ``previous`` holds results already finished, so the
    feasibility verdict can reuse the measured busbw instead of measuring twice."""

    options: PreflightOptions
    env: Mapping[str, str]
    hooks: SystemHooks = field(default_factory=SystemHooks)
    previous: dict[str, ProbeResult] = field(default_factory=dict)
    #: Prefix for any file a probe creates in /dev/shm; the runner deletes leftovers by it.
    shm_prefix: str = "ddp-lsp-pf"

    def torch(self) -> ModuleType:
        return self.hooks.import_torch()

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.env.get("PATH", os.defpath))

    def run(self, argv: list[str], timeout: float = 10.0) -> CommandResult:
        return self.hooks.run(argv, timeout, self.env)

    def local_world_size(self, gpu_count: int | None = None) -> int:
        """Ranks per node the user will start: explicit, else torchrun's LOCAL_WORLD_SIZE, else
        one per GPU (DDP's usual layout), else 2 so the CPU path still exercises a real group."""
        if self.options.world_size is not None:
            return self.options.world_size
        lws = self.env.get("LOCAL_WORLD_SIZE")
        if lws and lws.isdigit() and not self.options.torchrun:
            return int(lws)
        if gpu_count:
            return gpu_count
        return 2

    def backend(self, torch_mod: ModuleType | None = None) -> str:
        """The backend the user will use: explicit, else NCCL when CUDA and NCCL exist."""
        if self.options.backend:
            return self.options.backend
        if torch_mod is not None:
            try:
                if torch_mod.cuda.is_available() and torch_mod.distributed.is_nccl_available():
                    return "nccl"
            except Exception:  # a broken CUDA install must not stop the gloo path
                return "gloo"
        return "gloo"


@dataclass(frozen=True)
class Probe:
    """One probe. ``quick``: runs under ``--quick``; ``needs_torch``: run after torch import."""

    id: str
    title: str
    timeout_s: float
    run: Callable[[ProbeContext], Outcome]
    needs_torch: bool = False
    quick: bool = True
    references: tuple[str, ...] = ()


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
