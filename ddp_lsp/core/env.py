"""Facts about where the code will run, supplied by front ends (never read by the core).

``MachineInfo`` comes only from a preflight report of the machine the job runs on, passed in
by a front end (the server's last preflight of the folder, ``ddp-lsp check --preflight
report.json``; see ``ddp_lsp.preflight.report.machine_info``). Without one there are no
machine facts: the core never asks the host it runs on, whose CPUs and GPUs are rarely the
training node's, so a finding cannot depend on where the linter happens to run. Rules that
need a machine fact stay silent without it, or use only what the code says. ``LaunchInfo``
comes from launch configuration next to the training file (see :mod:`ddp_lsp.launch`): an
Accelerate or DeepSpeed config, a torchrun command line, a SLURM script. Rules use these to
sharpen messages and to stay quiet where the launch makes a pattern correct.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MachineInfo:
    cpu_count: int | None
    source: str  # said in messages: where the numbers came from
    gpu_count: int | None = None
    cuda_available: bool | None = None
    nccl_available: bool | None = None
    shm_free_bytes: int | None = None
    local_world_size: int | None = None


@dataclass(frozen=True)
class LaunchInfo:
    nproc_per_node: int | None = None
    world_size: int | None = None
    num_nodes: int | None = None
    grad_accum_steps: int | None = None
    mixed_precision: str | None = None  # "fp16", "bf16", "no"
    launcher: str | None = None  # "torchrun", "accelerate", "deepspeed", "slurm"
    sources: tuple[str, ...] = ()  # files the facts were read from, for messages


@dataclass(frozen=True)
class Environment:
    machine: MachineInfo | None = None
    launch: LaunchInfo | None = None

    def cpu_count(self) -> tuple[int | None, str]:
        """CPUs available to the job and where that number came from; ``(None, "")`` without
        machine facts (never this host's count)."""
        if self.machine is None:
            return None, ""
        return self.machine.cpu_count, self.machine.source

    def procs_per_node(self) -> tuple[int | None, str]:
        if self.launch is not None and self.launch.nproc_per_node:
            src = ", ".join(self.launch.sources) or self.launch.launcher or "launch config"
            return self.launch.nproc_per_node, src
        if self.machine is not None and self.machine.local_world_size:
            return self.machine.local_world_size, self.machine.source
        if self.machine is not None and self.machine.gpu_count:
            return self.machine.gpu_count, f"{self.machine.gpu_count} GPUs ({self.machine.source})"
        return None, ""
