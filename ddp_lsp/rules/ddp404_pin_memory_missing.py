"""DDP404 pin-memory-missing.

## What it does
Finds a `DataLoader` with `num_workers > 0` whose batches the code copies to a CUDA device
(`.cuda()`, `.to(<cuda device>)`, `non_blocking=True` in the loop over it, or the loader handed
to a helper together with a CUDA device or a GPU model) but which does not set `pin_memory`.

## Why is this bad?
A host-to-device copy can only run as DMA from page-locked (pinned) memory. From ordinary
pageable memory the CUDA driver first copies the batch into a pinned staging buffer on the
CPU, synchronously, so the copy cannot overlap with compute and `non_blocking=True` does
nothing. With `pin_memory=True` the loader's pin thread puts batches in pinned memory while
the GPU is busy, and the copy is cheap and asynchronous.

## Example
```python
loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=8)
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
```

## Use instead
```python
loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=8, pin_memory=True)
```

## Fix
Adds `pin_memory=True` as the last argument (on its own line when the call has one argument
per line).

## Known false positives
Pinning also helps with `num_workers=0`; the rule stays quiet there only because the main
process is then the bottleneck anyway. Not reported: an explicit `pin_memory=` of any value, a
`num_workers` it cannot resolve to a number (a literal, a local `name = 8`, or an `argparse`
default in the same function), loaders whose batches it does not see going to a GPU, and
calls with `**kwargs`. Pinned memory is page-locked host RAM: with many workers and large
batches on a host short of memory, `pin_memory=False` can be a deliberate choice; write it.

Any module: the bug is a bug in a single-process script too, so this rule runs in every
module (`RuleMeta.any_module`), also in one that is not distributed code at all (a single-GPU
script, a benchmark, a test), where no other rule runs, and in a project it reports in the
functions no distributed entry point reaches (a tokenizer, a plotting script, an export tool),
where the rules that need several ranks are silent.

## References
- https://pytorch.org/docs/stable/data.html#memory-pinning
- https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_lsp.core import edits as text_edits
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _data as data_rules
from ddp_lsp.rules import _patterns as patterns

_NOT_USES = ("len", "iter", "next", "print", "isinstance", "hasattr", "getattr")


class PinMemoryMissing(Rule):
    meta = RuleMeta(
        id="DDP404",
        name="pin-memory-missing",
        severity=Severity.INFORMATION,
        summary="DataLoader workers feed a GPU from pageable memory: set pin_memory=True.",
        fix=FixAvailability.ALWAYS,
        any_module=True,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in data_rules.dataloader_calls(ctx):
            if data_rules.has_star(call) or data_rules.arg(call, "pin_memory") is not None:
                continue
            root = patterns.scope_root(ctx, call)
            nw_expr = data_rules.arg(call, "num_workers")
            resolved = data_rules.resolve_int(ctx, root, nw_expr)
            if resolved is None or resolved[0] <= 0:
                continue
            workers = resolved[0]
            path = data_rules.assigned_path(ctx, call)
            if path is None:
                continue
            loops = data_rules.loops_over(ctx, root, path)
            if loops:
                feeds_gpu = data_rules.moves_to_cuda(ctx, root, loops)
            else:
                # Handed to a helper (train_one_epoch) together with a GPU model or device.
                index = data_rules.assignment_index(root)
                feeds_gpu = any(
                    data_rules.on_gpu(ctx, index, a)
                    for c in data_rules.calls_receiving(ctx, root, path)
                    if (getattr(c.func, "attr", None) or getattr(c.func, "id", "")) not in _NOT_USES
                    for a in [*c.args, *(kw.value for kw in c.keywords)]
                )
            if not feeds_gpu:
                continue
            edits = text_edits.add_argument(ctx, call, "pin_memory=True")
            fixes = (
                [Fix(title="Add pin_memory=True", edits=tuple(edits), safe=True, preferred=True)]
                if edits
                else []
            )
            kw = data_rules.keyword(call, "num_workers")
            yield ctx.finding(
                self,
                kw if kw is not None else data_rules.callee_span(ctx, call.func),
                f"{workers} loader workers feed a GPU from pageable memory: without "
                "`pin_memory=True` every host-to-device copy is staged synchronously and "
                "`non_blocking=True` cannot overlap it with compute; add `pin_memory=True`",
                fixes=fixes,
            )


_HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

"""

PinMemoryMissing.cases = (
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, model):
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8, pin_memory=True)
    for x, y in loader:
        model(x.cuda(non_blocking=True))
""",
        note="already pinned",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, model):
    loader = DataLoader(dataset, batch_size=64, sampler=sampler)
    for x, y in loader:
        model(x.cuda())
""",
        note="num_workers == 0: the main process is the bottleneck anyway",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, model):
    loader = DataLoader(dataset, sampler=sampler, num_workers=8, pin_memory=False)
    for x, y in loader:
        model(x.cuda())
""",
        note="an explicit pin_memory=False is a choice",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, model):
    dist.init_process_group("gloo")
    loader = DataLoader(dataset, sampler=sampler, num_workers=4)
    for x, y in loader:
        model(x)
""",
        note="CPU training: batches never go to a GPU",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, model, args):
    loader = DataLoader(dataset, sampler=sampler, num_workers=args.workers)
    for x, y in loader:
        model(x.cuda())
""",
        note="num_workers unknown here",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, model, loader_kwargs):
    loader = DataLoader(dataset, sampler=sampler, num_workers=4, **loader_kwargs)
    for x, y in loader:
        model(x.cuda())
""",
        note="pin_memory may be in **kwargs",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, model, rank):
    model = model.cuda(rank)
    loader = DataLoader(dataset, sampler=sampler, num_workers=4)
    stats = compute_mean_std(loader)
    return stats
""",
        note="handed to a helper with nothing that lives on the GPU",
    ),
    Invalid(
        _HEAD
        + """\
def main(dataset, sampler, model, local_rank):
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, «num_workers=8»)
    for x, y in loader:
        x = x.to(local_rank, non_blocking=True)
        model(x)
""",
        fixed=_HEAD
        + """\
def main(dataset, sampler, model, local_rank):
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8, pin_memory=True)
    for x, y in loader:
        x = x.to(local_rank, non_blocking=True)
        model(x)
""",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, sampler, model, device):
    loader = DataLoader(dataset, sampler=sampler, num_workers=4)
    for x, y in loader:
        model(x.to(device))
""",
        note="a device of unknown kind in a frame that never touches CUDA",
    ),
    Invalid(
        _HEAD
        + """\
def main(dataset, sampler, model, device, local_rank):
    torch.cuda.set_device(local_rank)
    loader = DataLoader(dataset, sampler=sampler, «num_workers=4»)
    for x, y in loader:
        model(x.to(device))
""",
        fixed=_HEAD
        + """\
def main(dataset, sampler, model, device, local_rank):
    torch.cuda.set_device(local_rank)
    loader = DataLoader(dataset, sampler=sampler, num_workers=4, pin_memory=True)
    for x, y in loader:
        model(x.to(device))
""",
        note="to(device) in a function that sets the CUDA device",
    ),
    Invalid(
        _HEAD
        + """\
import argparse

def main(dataset, sampler, model):
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=6)
    args = parser.parse_args()
    device = torch.device("cuda", int(args.local_rank))
    train_loader = DataLoader(
        dataset,
        sampler=sampler,
        «num_workers=args.num_workers»  # per process
    )
    for step, (images, labels) in enumerate(train_loader):
        model(images.to(device))
""",
        fixed=_HEAD
        + """\
import argparse

def main(dataset, sampler, model):
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=6)
    args = parser.parse_args()
    device = torch.device("cuda", int(args.local_rank))
    train_loader = DataLoader(
        dataset,
        sampler=sampler,
        num_workers=args.num_workers,  # per process
        pin_memory=True
    )
    for step, (images, labels) in enumerate(train_loader):
        model(images.to(device))
""",
        note="argparse default, one argument per line, comment kept",
    ),
    Invalid(
        _HEAD
        + """\
def main(dataset, sampler, model, rank):
    workers = 4
    model = model.cuda(rank)
    loader = DataLoader(dataset, sampler=sampler, «num_workers=workers»,)
    train_one_epoch(model, loader)
""",
        fixed=_HEAD
        + """\
def main(dataset, sampler, model, rank):
    workers = 4
    model = model.cuda(rank)
    loader = DataLoader(dataset, sampler=sampler, num_workers=workers, pin_memory=True,)
    train_one_epoch(model, loader)
""",
        note="handed to a training helper in a function that puts the model on a GPU",
    ),
)
