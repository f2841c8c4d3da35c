"""DDP508 backend-not-on-machine.

## What it does
When a preflight result for the machine is known, finds
`init_process_group(backend="nccl")` (or `"nccl"` as the first argument) on a machine where
the preflight found no NCCL in the installed torch, or no CUDA device.

## Why is this bad?
NCCL runs only on NVIDIA GPUs and only in CUDA builds of PyTorch. On a CPU-only build
`init_process_group("nccl")` raises `RuntimeError: Distributed package doesn't have NCCL built
in`; without a visible GPU every rank fails as soon as NCCL creates its communicator. The job
dies at start-up after it was scheduled.

## Example
```python
# preflight on laptop: torch 2.13.0+cpu, no NCCL
dist.init_process_group(backend="nccl")
```

## Use instead
```python
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend=backend)
```

## Fix
None: choose the backend from the machine (`gloo` on CPU), or run where NCCL exists.

## Known false positives
Silent without a preflight result, and for backends that are not a string literal. A preflight
of another machine than the one the job runs on gives wrong answers: run it where the job runs.

## References
- https://pytorch.org/docs/stable/distributed.html#backends
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import names as known_names
from ddp_lsp.core import pgbackend
from ddp_lsp.core.env import Environment, MachineInfo
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, RuleMeta, Severity


class BackendNotOnMachine(Rule):
    meta = RuleMeta(
        id="DDP508",
        name="backend-not-on-machine",
        severity=Severity.ERROR,
        summary='backend="nccl" where the machine has no NCCL or no GPU (known from a preflight).',
        fix=FixAvailability.NONE,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        machine = ctx.env.machine
        if machine is None:
            return
        if machine.nccl_available is False:
            why = "the installed torch has no NCCL"
        elif machine.cuda_available is False or machine.gpu_count == 0:
            why = "there is no CUDA device"
        else:
            return
        for call in ctx.calls_to(known_names.INIT_PROCESS_GROUP):
            backend = pgbackend.backend_argument(call)
            if not (isinstance(backend, ast.Constant) and isinstance(backend.value, str)):
                continue  # chosen at run time: the machine decides
            # "cuda:nccl,cpu:gloo" only uses NCCL for CUDA tensors: still needs NCCL to start.
            if pgbackend.literal_backend(backend.value) != "nccl":
                continue
            yield ctx.finding(
                self,
                backend,
                f"backend {backend.value!r} but {why} ({machine.source}): "
                'init_process_group fails at start-up; use "gloo" on CPU, or pick the backend '
                "with `torch.cuda.is_available()`",
            )


_HEAD = """\
import torch
import torch.distributed as dist

"""
_CPU_BUILD = Environment(
    machine=MachineInfo(
        cpu_count=2,
        source="preflight on laptop",
        gpu_count=0,
        cuda_available=False,
        nccl_available=False,
    )
)
_GPU_NODE = Environment(
    machine=MachineInfo(
        cpu_count=64,
        source="preflight on gpu01",
        gpu_count=8,
        cuda_available=True,
        nccl_available=True,
    )
)

BackendNotOnMachine.cases = (
    Valid(
        _HEAD + 'def setup():\n    dist.init_process_group(backend="nccl")\n',
        note="no preflight result: the machine is unknown",
    ),
    Valid(
        _HEAD + 'def setup():\n    dist.init_process_group(backend="nccl")\n',
        note="a GPU node with NCCL",
        env=_GPU_NODE,
    ),
    Valid(
        _HEAD
        + 'def setup():\n    backend = "nccl" if torch.cuda.is_available() else "gloo"\n'
        + "    dist.init_process_group(backend=backend)\n",
        note="the backend is chosen at run time",
        env=_CPU_BUILD,
    ),
    Valid(
        _HEAD + 'def setup():\n    dist.init_process_group("gloo")\n',
        env=_CPU_BUILD,
    ),
    Invalid(
        _HEAD + 'def setup():\n    dist.init_process_group(backend=«"nccl"»)\n',
        env=_CPU_BUILD,
    ),
    Invalid(
        _HEAD + 'def setup():\n    dist.init_process_group(«"cuda:nccl,cpu:gloo"»)\n',
        env=_CPU_BUILD,
    ),
)
