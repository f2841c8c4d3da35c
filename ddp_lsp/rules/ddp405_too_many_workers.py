"""DDP405 too-many-workers.

## What it does
Finds a `DataLoader` whose `num_workers` (a literal, a local `name = 16`, an `argparse`
default in the same function, or `os.cpu_count()` itself) times the processes per node is more
than the CPUs available.
The CPU count comes only from a preflight report of the training node (the server's last
preflight of the folder, `ddp-lsp check --preflight report.json`), never from the machine
running the linter; the processes per node from the launch configuration next to the script
(`torchrun --nproc_per_node` in `run.sh`, an Accelerate config...) or the GPUs preflight saw.
The message says where each number came from. Without a report the rule reports only what the
code says on any node: `num_workers=os.cpu_count()` in each of several processes per node.

## Why is this bad?
Every rank starts its own `num_workers` worker processes: 8 ranks with `num_workers=16` are
128 processes decoding and augmenting on the same host. Beyond the CPU count they only
contend (context switches, cache thrashing), the main processes that drive the GPUs get
starved, and each worker's prefetched (and pinned) batches add host memory until the node
swaps or the OOM killer ends the job.

## Example
```python
# run.sh: torchrun --nproc_per_node 8 train.py   (a 32-CPU node)
loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=16)
```

## Use instead
```python
cpus = len(os.sched_getaffinity(0))
workers = max(1, cpus // int(os.environ["LOCAL_WORLD_SIZE"]) - 1)  # Lightning's bound
loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=workers)
```

## Fix
None: the right number depends on the node the job runs on. The message suggests
`max(1, cpus // procs - 1)`, the bound PyTorch Lightning warns with.

## Known false positives
A report of another node than the one the job runs on gives the wrong CPU count: run the
preflight on the training node (`ddp-lsp preflight --json report.json`). When the processes
per node are unknown the rule counts one, so it reports only loaders that oversubscribe even
a single process. A `num_workers` it cannot resolve to a number is not reported, nor is a
number without a report (`num_workers=16` is fine on a 128-CPU node): the CPUs of the machine
running the editor or CI say nothing about the training node, so they are never used.

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/data.html#multi-process-data-loading
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#dataloaders
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import names as known_names
from ddp_lsp.core.env import Environment, LaunchInfo, MachineInfo
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _data as data_rules
from ddp_lsp.rules import _patterns as patterns


class TooManyWorkers(Rule):
    meta = RuleMeta(
        id="DDP405",
        name="too-many-workers",
        severity=Severity.WARNING,
        summary="num_workers times processes per node exceeds the CPUs available.",
        fix=FixAvailability.NONE,
        any_module=True,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        calls = data_rules.dataloader_calls(ctx)
        if not calls:
            return
        cpus, cpu_source = ctx.env.cpu_count()
        # A module that is not distributed code (a single-GPU script, a benchmark) runs as one
        # process, whatever the launch config next to it starts for the training script.
        procs, proc_source = ctx.env.procs_per_node() if ctx.facts.distributed else (None, "")
        if not cpus and not (procs and procs > 1):
            return  # no machine facts and one process (or unknown): nothing the code says
        for call in calls:
            if data_rules.has_star(call) and data_rules.arg(call, "num_workers") is None:
                continue
            expr = data_rules.arg(call, "num_workers")
            if not cpus:
                if procs and expr is not None and _is_cpu_count(ctx, expr):
                    yield self._every_cpu_per_rank(ctx, call, expr, procs, proc_source)
                continue
            root = patterns.scope_root(ctx, call)
            resolved = data_rules.resolve_int(ctx, root, expr)
            if resolved is None and expr is not None and _is_cpu_count(ctx, expr):
                resolved = (cpus, "")  # every CPU, in each of the processes
            if resolved is None:
                continue
            workers, how = resolved
            per_node = procs or 1
            if workers * per_node <= cpus:
                continue
            bound = max(1, cpus // per_node - 1)
            value = f"num_workers={workers}" + (f" ({how})" if how else "")
            if expr is not None and not how and data_rules.int_value(expr) is None:
                value = f"num_workers={chunktext.segment(ctx.chunk, expr)} (all {cpus} CPUs)"
            if procs:
                load = (
                    f"{value} × {procs} processes per node ({proc_source}) = "
                    f"{workers * procs} worker processes"
                )
            elif not ctx.facts.distributed:
                load = (
                    f"{value} starts {workers} worker processes (one process: not distributed code)"
                )
            else:
                load = (
                    f"{value} starts {workers} worker processes in each rank (processes per node "
                    "unknown: counted 1)"
                )
            yield ctx.finding(
                self,
                _target(call, expr),
                f"{load} for {cpus} CPUs ({cpu_source}): the workers contend for CPUs and "
                f"starve the processes driving the GPUs; use at most "
                f"max(1, cpus // procs - 1) = {bound}",
            )

    def _every_cpu_per_rank(
        self, ctx: ChunkContext, call: ast.Call, expr: ast.expr, procs: int, proc_source: str
    ) -> Finding:
        """No machine facts, but the code says it all: every rank starts one worker per CPU of
        the node, so ``procs`` ranks start ``procs`` times the CPUs, on any node."""
        text = chunktext.segment(ctx.chunk, expr)
        return ctx.finding(
            self,
            _target(call, expr),
            f"num_workers={text} (every CPU) × {procs} processes per node ({proc_source}) = "
            f"{procs} times the CPUs of the node in worker processes: the workers contend for "
            f"CPUs and starve the processes driving the GPUs; use at most "
            f"max(1, {text} // {procs} - 1)",
        )


def _target(call: ast.Call, expr: ast.expr | None) -> ast.AST:
    kw = data_rules.keyword(call, "num_workers")
    target = kw if kw is not None else expr
    assert target is not None
    return target


_CPU_COUNTS = frozenset(
    {"os.cpu_count", "multiprocessing.cpu_count", "psutil.cpu_count", "os.process_cpu_count"}
)


def _is_cpu_count(ctx: ChunkContext, expr: ast.expr) -> bool:
    """``os.cpu_count()``, ``multiprocessing.cpu_count()``, ``len(os.sched_getaffinity(0))``:
    every CPU of the node, in every process."""
    if not isinstance(expr, ast.Call):
        return False
    qual = ctx.call_qualname(expr) or ""
    if qual in _CPU_COUNTS:
        return True
    if (
        known_names.dotted(expr.func) == "len"
        and len(expr.args) == 1
        and isinstance(expr.args[0], ast.Call)
    ):
        return (ctx.call_qualname(expr.args[0]) or "") == "os.sched_getaffinity"
    return False


_HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

"""
# Machine facts come only from a preflight report, so cases that need a CPU count say so.
_NODE_16 = Environment(machine=MachineInfo(cpu_count=16, source="preflight on gpu01"))
_TORCHRUN_8 = Environment(
    launch=LaunchInfo(nproc_per_node=8, launcher="torchrun", sources=("run.sh",))
)

TooManyWorkers.cases = (
    Valid(
        _HEAD
        + """\
def main(dataset, sampler):
    return DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=1)
""",
        note="one worker fits any machine",
    ),
    Valid(
        _HEAD
        + """\
import os

def main(dataset, sampler):
    workers = max(1, os.cpu_count() // 8 - 1)
    return DataLoader(dataset, sampler=sampler, num_workers=workers)
""",
        note="computed from the machine: not a number the rule can judge",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, args):
    return DataLoader(dataset, sampler=sampler, num_workers=args.workers)
""",
        note="configuration from elsewhere",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler):
    return DataLoader(dataset, sampler=sampler, num_workers=0)
""",
        note="no workers",
    ),
    Invalid(
        _HEAD
        + """\
def main(dataset, sampler):
    return DataLoader(dataset, batch_size=64, sampler=sampler, «num_workers=512»)
""",
        fixed=None,
        env=_NODE_16,
    ),
    Invalid(
        _HEAD
        + """\
import argparse

def main(dataset, sampler):
    parser = argparse.ArgumentParser()
    parser.add_argument("-j", "--workers", default=4096, type=int)
    args = parser.parse_args()
    return DataLoader(dataset, sampler=sampler, «num_workers=args.workers»)
""",
        fixed=None,
        note="an argparse default",
        env=_NODE_16,
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler):
    return DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=512)
""",
        note="no preflight report: the CPUs of the machine running the linter are not used",
    ),
    Valid(
        _HEAD
        + """\
import os

def main(dataset, sampler):
    return DataLoader(dataset, sampler=sampler, num_workers=os.cpu_count())
""",
        note="no report and one process per node (as far as anyone knows): may use every CPU",
    ),
    Invalid(
        _HEAD
        + """\
import os

def main(dataset, sampler):
    return DataLoader(dataset, sampler=sampler, «num_workers=os.cpu_count()»)
""",
        fixed=None,
        note="no report, but 8 processes per node each with every CPU: over on any node",
        env=_TORCHRUN_8,
    ),
    Valid(
        """\
import os

import torch
from torch.utils.data import DataLoader

def main(dataset):
    return DataLoader(dataset, batch_size=64, num_workers=os.cpu_count())
""",
        note="a single-GPU script next to a torchrun launch config: one process, not 8",
        distributed=False,
        env=_TORCHRUN_8,
    ),
    Invalid(
        """\
import torch
from torch.utils.data import DataLoader

def main(dataset):
    return DataLoader(dataset, batch_size=64, «num_workers=32»)
""",
        fixed=None,
        note="a single-GPU script with more workers than the node's CPUs (any module)",
        distributed=False,
        env=_NODE_16,
    ),
)
