"""DDP507 gpu-index-not-on-machine.

## What it does
When a preflight result for the machine is known, finds fixed GPU indices the machine does not
have: `torch.device("cuda:3")`, `torch.device("cuda", 3)`, `.to("cuda:3")`, `device="cuda:3"`,
`.cuda(3)`, `torch.cuda.set_device(3)`, `device_ids=[3]`, `output_device=3` on a host where the
preflight found fewer GPUs (or none).

## Why is this bad?
CUDA numbers the GPUs a process can see from 0 to N-1. An index past that fails at run time
with `RuntimeError: CUDA error: invalid device ordinal`, after the job was scheduled and the
other ranks started; with `CUDA_VISIBLE_DEVICES` set per process (one GPU each), every index
but 0 fails.

## Example
```python
# preflight on gpu01: 2 GPUs
device = torch.device("cuda:3")
```

## Use instead
```python
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank)
```

## Fix
None: the right index is the process's local rank (DDP504 offers that rewrite for fixed
indices in general).

## Known false positives
Silent without a preflight result (run "Run preflight" in the editor, or pass
`--preflight report.json` to `ddp-lsp check`). A preflight of another machine than the one the
job runs on gives wrong answers: run it where the job runs.

## References
- https://pytorch.org/docs/stable/notes/cuda.html#cuda-semantics
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core.env import Environment, MachineInfo
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, RuleMeta, Severity

_CUDA_STRING = re.compile(r"^cuda:(\d+)$")
_DEVICE_KEYWORDS = ("device", "map_location", "output_device")


def _int(node: ast.AST) -> int | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    ):
        return node.value
    return None


def _cuda_string(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        m = _CUDA_STRING.match(node.value.strip())
        if m:
            return int(m.group(1))
    return None


def indices(ctx: ChunkContext, call: ast.Call) -> Iterator[tuple[ast.AST, int, str]]:
    """(node, GPU index, how it is written) for every fixed GPU index a call names."""
    qual = ctx.call_qualname(call)
    func = call.func
    if qual == "torch.device" and call.args:
        idx = _cuda_string(call.args[0])
        if idx is not None:
            yield call.args[0], idx, f'"cuda:{idx}"'
        elif (
            isinstance(call.args[0], ast.Constant)
            and call.args[0].value == "cuda"
            and len(call.args) > 1
        ):
            idx = _int(call.args[1])
            if idx is not None:
                yield call.args[1], idx, f'torch.device("cuda", {idx})'
        return
    if qual == "torch.cuda.set_device" and call.args:
        idx = _int(call.args[0])
        if idx is not None:
            yield call.args[0], idx, f"torch.cuda.set_device({idx})"
        return
    if isinstance(func, ast.Attribute) and func.attr == "cuda" and call.args:
        idx = _int(call.args[0])
        if idx is not None:
            yield call.args[0], idx, f".cuda({idx})"
    if isinstance(func, ast.Attribute) and func.attr == "to":
        for arg in call.args[:1]:
            idx = _cuda_string(arg)
            if idx is not None:
                yield arg, idx, f'.to("cuda:{idx}")'
    for kw in call.keywords:
        if kw.arg in _DEVICE_KEYWORDS:
            idx = _cuda_string(kw.value)
            if idx is None and kw.arg == "output_device":
                idx = _int(kw.value)
            if idx is not None:
                yield kw.value, idx, f"{kw.arg}={ast.unparse(kw.value)}"
        elif kw.arg == "device_ids" and isinstance(kw.value, (ast.List, ast.Tuple)):
            for elt in kw.value.elts:
                idx = _int(elt)
                if idx is None:
                    idx = _cuda_string(elt)
                if idx is not None:
                    yield elt, idx, f"device_ids=[{idx}]"


class GpuIndexNotOnMachine(Rule):
    meta = RuleMeta(
        id="DDP507",
        name="gpu-index-not-on-machine",
        severity=Severity.ERROR,
        summary="A fixed GPU index the machine does not have (known from a preflight).",
        fix=FixAvailability.NONE,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        machine = ctx.env.machine
        if machine is None or machine.gpu_count is None:
            return
        have = f"{machine.gpu_count} GPU" + ("s" if machine.gpu_count != 1 else "")
        if machine.gpu_count == 0:
            have = "no GPU"
        seen: set[int] = set()
        for call in ctx.calls():
            for node, index, written in indices(ctx, call):
                if index < machine.gpu_count or id(node) in seen:
                    continue
                seen.add(id(node))
                yield ctx.finding(
                    self,
                    node,
                    f"`{written}` names GPU {index}, but {machine.source} found {have}: CUDA "
                    "raises 'invalid device ordinal' here at run time; use the local rank "
                    '(`torch.device("cuda", local_rank)`)',
                )


_HEAD = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""
_TWO_GPUS = Environment(machine=MachineInfo(cpu_count=16, source="preflight on gpu01", gpu_count=2))
_CPU_ONLY = Environment(
    machine=MachineInfo(
        cpu_count=2, source="preflight on laptop", gpu_count=0, nccl_available=False
    )
)

GpuIndexNotOnMachine.cases = (
    Valid(
        _HEAD
        + """\
def setup(model):
    device = torch.device("cuda:3")
    return model.to(device)
""",
        note="no preflight result: the machine is unknown",
    ),
    Valid(
        _HEAD
        + """\
def setup(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    model = model.to(torch.device("cuda", local_rank))
    return DDP(model, device_ids=[local_rank], output_device=local_rank)
""",
        note="indices from the local rank",
        env=_TWO_GPUS,
    ),
    Valid(
        _HEAD
        + """\
def setup(model):
    return model.to("cuda:1")
""",
        note="an index the machine has",
        env=_TWO_GPUS,
    ),
    Invalid(
        _HEAD
        + """\
def setup(model, x):
    device = torch.device(«"cuda:3"»)
    torch.cuda.set_device(«2»)
    x = x.cuda(«5»)
    return DDP(model.to(device), device_ids=[«3»])
""",
        env=_TWO_GPUS,
    ),
    Invalid(
        _HEAD
        + """\
def setup(model):
    return model.to(«"cuda:0"»)
""",
        note="no GPU at all on the measured machine",
        env=_CPU_ONLY,
    ),
)
