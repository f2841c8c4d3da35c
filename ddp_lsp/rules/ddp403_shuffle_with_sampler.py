"""DDP403 shuffle-with-sampler.

## What it does
Finds `DataLoader(..., sampler=..., shuffle=True)` and `DataLoader(..., batch_sampler=...,
shuffle=True)`.

## Why is this bad?
`DataLoader` raises `ValueError: sampler option is mutually exclusive with shuffle` as soon as
it is built with both. A sampler decides the order itself: a `DistributedSampler` already
shuffles (differently every epoch once `set_epoch(epoch)` is called), so `shuffle=True` adds
nothing. The crash typically appears only when the distributed branch that creates the sampler
runs, that is, on the cluster.

## Example
```python
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, shuffle=True, sampler=sampler)
```

## Use instead
```python
sampler = DistributedSampler(dataset)  # shuffles; call sampler.set_epoch(epoch) every epoch
loader = DataLoader(dataset, batch_size=32, sampler=sampler)
```

## Fix
Removes `shuffle=True` with its comma; a comment on its line is kept. When the sampler is a
variable that is `None` outside distributed runs (`sampler = DistributedSampler(ds) if
distributed else None`), the fix writes `shuffle=(sampler is None)` instead, the torchvision
idiom, so single-process runs keep shuffling.

## Known false positives
None known: the combination always raises. `shuffle=` given as an expression (such as
`shuffle=(sampler is None)`) is not reported, and neither is `sampler=None`.

## References
- https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _data as data_rules
from ddp_lsp.rules import _patterns as patterns


class ShuffleWithSampler(Rule):
    meta = RuleMeta(
        id="DDP403",
        name="shuffle-with-sampler",
        severity=Severity.ERROR,
        summary="DataLoader with a sampler and shuffle=True raises ValueError: drop shuffle.",
        fix=FixAvailability.SOMETIMES,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in data_rules.dataloader_calls(ctx):
            shuffle_kw = data_rules.keyword(call, "shuffle")
            shuffle = data_rules.arg(call, "shuffle")
            if not data_rules.is_const(shuffle, True):
                continue
            which = "sampler"
            sampler = data_rules.arg(call, "sampler")
            if sampler is None or data_rules.is_none(sampler):
                sampler = data_rules.arg(call, "batch_sampler")
                which = "batch_sampler"
            if sampler is None or data_rules.is_none(sampler):
                continue
            root = patterns.scope_root(ctx, call)
            values = data_rules.values_of(root, sampler)
            if all(data_rules.is_none(v) for v in values):
                continue  # sampler=sampler where sampler is always None here
            maybe_none = any(data_rules.is_none(v) for v in values)
            fixes = []
            target = shuffle_kw if shuffle_kw is not None else shuffle
            assert target is not None
            if shuffle_kw is not None:
                sampler_text = chunktext.segment(ctx.chunk, sampler)
                if maybe_none and isinstance(sampler, ast.Name):
                    edits = text_edits.replace_argument(
                        ctx, shuffle_kw, f"shuffle=({sampler_text} is None)"
                    )
                    title = f"Replace shuffle=True with shuffle=({sampler_text} is None)"
                elif maybe_none:
                    edits = []
                    title = ""
                else:
                    edits = text_edits.remove_argument(ctx, call, shuffle_kw)
                    title = "Remove shuffle=True (the sampler decides the order)"
                if edits:
                    fixes.append(Fix(title=title, edits=tuple(edits), safe=True, preferred=True))
            yield ctx.finding(
                self,
                target,
                f"`shuffle=True` together with `{which}=` makes `DataLoader` raise ValueError "
                f"(they are mutually exclusive): the {which} already decides the order"
                + ("; a DistributedSampler shuffles by itself" if which == "sampler" else ""),
                fixes=fixes,
            )


_HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

"""

ShuffleWithSampler.cases = (
    Valid(
        _HEAD
        + """\
def build(dataset, args):
    train_sampler = DistributedSampler(dataset) if args.distributed else None
    return DataLoader(dataset, batch_size=32, shuffle=(train_sampler is None), sampler=train_sampler)
""",
        note="torchvision references: shuffle only when there is no sampler",
    ),
    Valid(
        _HEAD
        + """\
def build(dataset):
    sampler = DistributedSampler(dataset, shuffle=True)
    return DataLoader(dataset, batch_size=32, sampler=sampler, shuffle=False)
""",
        note="shuffle=False with a sampler is allowed",
    ),
    Valid(
        _HEAD
        + """\
def build(dataset):
    return DataLoader(dataset, batch_size=32, sampler=None, shuffle=True)
""",
        note="sampler=None is no sampler",
    ),
    Valid(
        _HEAD
        + """\
def build(dataset, shuffle):
    return DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset), shuffle=shuffle)
""",
        note="shuffle from a variable: unknown, not reported",
    ),
    Valid(
        _HEAD
        + """\
def build(dataset):
    sampler = None
    return DataLoader(dataset, batch_size=32, sampler=sampler, shuffle=True)
""",
        note="the sampler variable is None on every path",
    ),
    Invalid(
        _HEAD
        + """\
def build(dataset):
    sampler = DistributedSampler(dataset)
    return DataLoader(dataset, batch_size=32, «shuffle=True», sampler=sampler)
""",
        fixed=_HEAD
        + """\
def build(dataset):
    sampler = DistributedSampler(dataset)
    return DataLoader(dataset, batch_size=32, sampler=sampler)
""",
    ),
    Invalid(
        _HEAD
        + """\
def build(dataset):
    return DataLoader(dataset, sampler=DistributedSampler(dataset), «shuffle=True»)
""",
        fixed=_HEAD
        + """\
def build(dataset):
    return DataLoader(dataset, sampler=DistributedSampler(dataset))
""",
        note="last argument: the comma before it goes",
    ),
    Invalid(
        _HEAD
        + """\
def build(dataset):
    loader = DataLoader(
        dataset,
        batch_size=32,
        «shuffle=True»,  # randomise every epoch
        sampler=DistributedSampler(dataset),
        num_workers=4,
    )
    return loader
""",
        fixed=_HEAD
        + """\
def build(dataset):
    loader = DataLoader(
        dataset,
        batch_size=32,
        # randomise every epoch
        sampler=DistributedSampler(dataset),
        num_workers=4,
    )
    return loader
""",
        note="one argument per line: the line goes, its comment stays",
    ),
    Invalid(
        _HEAD
        + """\
def build(dataset, args):
    train_sampler = DistributedSampler(dataset) if args.distributed else None
    return DataLoader(dataset, batch_size=32, «shuffle=True», sampler=train_sampler)
""",
        fixed=_HEAD
        + """\
def build(dataset, args):
    train_sampler = DistributedSampler(dataset) if args.distributed else None
    return DataLoader(dataset, batch_size=32, shuffle=(train_sampler is None), sampler=train_sampler)
""",
        note="a sampler that is None without distributed: keep shuffling there",
    ),
    Invalid(
        _HEAD
        + """\
from torch.utils.data import BatchSampler

def build(dataset):
    batches = BatchSampler(DistributedSampler(dataset), batch_size=8, drop_last=True)
    return DataLoader(dataset, batch_sampler=batches,
                      «shuffle=True»)
""",
        fixed=_HEAD
        + """\
from torch.utils.data import BatchSampler

def build(dataset):
    batches = BatchSampler(DistributedSampler(dataset), batch_size=8, drop_last=True)
    return DataLoader(dataset, batch_sampler=batches)
""",
        note="batch_sampler is exclusive with shuffle too",
    ),
    Invalid(
        _HEAD
        + """\
def build(dataset, sampler):
    return DataLoader(dataset, 32, «True», sampler)
""",
        fixed=None,
        note="positional shuffle: reported, no fix",
    ),
)
