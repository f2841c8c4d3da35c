"""DDP401 missing-distributed-sampler.

## What it does
Finds a training `DataLoader` in distributed code that has neither `sampler=` nor
`batch_sampler=`: built with `shuffle=True`, iterated in this function by a loop that runs a
backward pass over a map-style dataset the analysis recognises, or built where the function
makes a `DistributedSampler` of the same dataset that no loader or batch sampler receives
(`sampler = DistributedSampler(ds) if args.distributed else None` and then a loader without
it: the fix passes `sampler=sampler`).

## Why is this bad?
Without a `DistributedSampler` every rank iterates the *whole* dataset. Each epoch does
world-size times the work: every rank reads every example (in the same order when the ranks
share a seed or do not shuffle), so the averaged gradient carries little more information than
one GPU's, the extra GPUs are mostly wasted, and epoch-based schedules run world-size times too
many steps per epoch of real data.

## Example
```python
loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=8)
```

## Use instead
```python
sampler = DistributedSampler(train_set)  # shuffles; call sampler.set_epoch(epoch) each epoch
loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=8)
```

## Fix
Replaces `shuffle=True` by `sampler=DistributedSampler(<dataset>)` (a `shuffle=` expression
moves into the sampler, and a loader without `shuffle=` gets
`sampler=DistributedSampler(<dataset>, shuffle=False)`, keeping its order). The import is added
once. Offered only when the dataset is a name it can repeat, and marked unsafe: each rank then
sees 1/world-size of the data, which changes steps per epoch, so review the schedule; then call
`set_epoch` every epoch (DDP402).

## Known false positives
Not reported: `IterableDataset`s and streaming datasets (webdataset, torchdata,
`load_dataset(..., streaming=True)`), datasets already split per rank
(`split_dataset_by_node`, `.shard(...)`, constructors given the rank or world size), loaders
handed to `accelerator.prepare`, `fabric.setup_dataloaders`, Ray Train's
`prepare_data_loader` or Lightning (`trainer.fit`, `*_dataloader` hooks), files that use
Accelerate or Lightning at all, the single-process branch of `if args.distributed: ... else:`,
evaluation loaders (`val_*`, `eval_*`, `test_*` names, `train=False`, `split="validation"`,
functions named like `evaluate`, loops only under `torch.no_grad()`), loaders built or
used on rank 0 only, and loaders given `*args` or `**kwargs` that may carry a sampler (a
`**kw` built in the same function as `dict(batch_size=..., num_workers=...)` or a dict literal
without a sampler key hides none and is checked). A loader without `shuffle=True` is reported only with evidence that it
trains (a backward pass in its loop) over a map-style dataset, because unshuffled loaders over
self-sharding datasets are common and deliberate.

Distributed code only: in a project, a function that no distributed entry point reaches on
every rank and that does nothing distributed itself (an export tool, a tokenizer, a plotting
script, a helper called on rank 0 only) is single-process code, and this rule is silent there.

Test code (with the project view, which knows the module's path): a module under a `tests`,
`test` or `gpu_tests` folder, or named `test_*.py`, `*_test.py`, `conftest.py` or
`*test_utils.py`. A distributed test feeds every rank the data and seeds it means to compare,
so this rule is silent there (F16 in docs/accuracy.md).

## References
- https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
- https://pytorch.org/tutorials/intermediate/ddp_series_multigpu.html
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import names as known_names
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _data as data_rules
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _patterns as patterns


def _star_may_hold_sampler(ctx: ChunkContext, call: ast.Call) -> bool:
    """``*args`` / ``**kwargs`` may carry the sampler, unless the call passes ``sampler=``
    itself or it is ``**kw`` of a dict built in the same function with literal keys and no
    sampler (``kw = dict(batch_size=b, num_workers=w)``, BarlowTwins' loaders)."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return True
    if any(kw.arg == "sampler" for kw in call.keywords):
        # An explicit `sampler=` (even None): `**kwargs` cannot carry another one (Python
        # raises on the duplicate), and a batch sampler beside it would be unusual.
        return False
    root = patterns.scope_root(ctx, call)
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        if not isinstance(kw.value, ast.Name):
            return True
        value = guards.assigned_value(ctx, kw.value.id, root, call)
        if (
            isinstance(value, ast.Call)
            and known_names.dotted(value.func) == "dict"
            and not value.args
        ):
            keys: list[str | None] = [k.arg for k in value.keywords]
        elif isinstance(value, ast.Dict):
            keys = [
                k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                for k in value.keys
            ]
        else:
            return True
        if any(k is None or k in ("sampler", "batch_sampler", "shuffle") for k in keys):
            return True
    return False


class MissingDistributedSampler(Rule):
    meta = RuleMeta(
        id="DDP401",
        name="missing-distributed-sampler",
        severity=Severity.WARNING,
        summary="Training DataLoader without a DistributedSampler: every rank reads all data.",
        fix=FixAvailability.SOMETIMES,
        distributed_only=True,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        calls = data_rules.dataloader_calls(ctx)
        if not calls or data_rules.uses_sampler_framework(ctx) or data_rules.in_test_module(ctx):
            return
        for call in calls:
            finding = self._check_call(ctx, call)
            if finding is not None:
                yield finding

    def _check_call(self, ctx: ChunkContext, call: ast.Call) -> Finding | None:
        if data_rules.has_star(call) and _star_may_hold_sampler(ctx, call):
            return None
        dataset = data_rules.arg(call, "dataset")
        if dataset is None:
            return None
        for name in ("sampler", "batch_sampler"):
            value = data_rules.arg(call, name)
            if value is not None and not data_rules.is_none(value):
                return None
        fn = ctx.enclosing_function(call)
        if fn is not None and (
            fn.name in data_rules.LIGHTNING_HOOKS or data_rules.is_eval_name(fn.name)
        ):
            return None
        root = patterns.scope_root(ctx, call)
        path = data_rules.assigned_path(ctx, call)
        if data_rules.is_eval_name(path) or data_rules.is_eval_name(known_names.dotted(dataset)):
            return None
        if data_rules.handed_to_framework(ctx, root, call, path):
            return None
        if ctx.runs_only_on_rank0(call) or data_rules.in_mode_branch(ctx, call):
            return None
        loops = data_rules.loops_over(ctx, root, path) if path else []
        if loops and all(
            ctx.runs_only_on_rank0(loop) or data_rules.under_no_grad(ctx, loop) for loop in loops
        ):
            return None  # evaluation: on rank 0 only, or without gradients
        kind = data_rules.dataset_kind(ctx, root, dataset)
        if kind in ("iterable", "sharded", "eval"):
            return None
        shuffle_kw = data_rules.keyword(call, "shuffle")
        shuffle = data_rules.arg(call, "shuffle")
        shuffled = data_rules.is_const(shuffle, True)
        left_out = _sampler_left_out(ctx, root, dataset)
        if left_out is not None:
            return ctx.finding(
                self,
                data_rules.callee_span(ctx, call.func),
                f"This `DataLoader` is built without the `{left_out}` made for its dataset: under "
                "DDP every rank iterates the whole dataset, so each epoch does world-size times "
                f"the work on the same examples; pass `sampler={left_out}`",
                fixes=[
                    Fix(
                        title=f"Add sampler={left_out}",
                        edits=tuple(text_edits.add_argument(ctx, call, f"sampler={left_out}")),
                        safe=False,
                        preferred=True,
                    )
                ]
                if data_rules.arg(call, "sampler") is None
                else [],
            )
        if not shuffled:
            # No shuffle: a training loader over a dataset we know is map-style, only.
            if kind != "map" or not any(data_rules.is_training_loop(loop) for loop in loops):
                return None
        fixes = []
        ds_text = (
            chunktext.segment(ctx.chunk, dataset)
            if known_names.dotted(dataset) is not None
            else None
        )
        explicit_none = data_rules.arg(call, "sampler") is not None  # sampler=None: edit, not add
        if (
            ds_text is not None
            and not explicit_none
            and (shuffle is None or shuffle_kw is not None)
        ):
            spelled, imports = data_rules.sampler_spelling(ctx)
            if shuffle_kw is None:
                new = f"sampler={spelled}({ds_text}, shuffle=False)"
                edits = text_edits.add_argument(ctx, call, new)
                title = f"Add {new}"
            else:
                if shuffled:
                    new = f"sampler={spelled}({ds_text})"
                else:
                    new = f"sampler={spelled}({ds_text}, shuffle={chunktext.segment(ctx.chunk, shuffle_kw.value)})"
                edits = text_edits.replace_argument(ctx, shuffle_kw, new)
                title = f"Replace {chunktext.segment(ctx.chunk, shuffle_kw)} with {new}"
            if edits:
                fixes.append(
                    Fix(
                        title=title, edits=tuple(edits), safe=False, preferred=True, imports=imports
                    )
                )
        what = "shuffles" if shuffled else "trains"
        ds_name = ds_text if ds_text is not None and "\n" not in ds_text else "dataset"
        return ctx.finding(
            self,
            data_rules.callee_span(ctx, call.func),
            f"This `DataLoader` {what} without a `sampler`: under DDP every rank iterates the "
            "whole dataset, so each epoch does world-size times the work on the same examples; "
            f"pass `sampler=DistributedSampler({ds_name})` and call `set_epoch(epoch)` every "
            "epoch",
            fixes=fixes,
        )


def _sampler_left_out(ctx: ChunkContext, root: ast.AST, dataset: ast.expr) -> str | None:
    """The name of a ``DistributedSampler`` this scope makes over the loader's dataset
    (``sampler = DistributedSampler(dataset) if args.distributed else None``) that no loader or
    batch sampler receives: the loader was meant to take it (a dropped ``sampler=`` argument)."""
    ds = known_names.dotted(dataset)
    if ds is None:
        return None
    made: dict[str, ast.Call] = {}
    for node in patterns.walk_scope(root):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not isinstance(target, ast.Name):
            continue
        for value in (
            (node.value.body, node.value.orelse)
            if isinstance(node.value, ast.IfExp)
            else (node.value,)
        ):
            if (
                isinstance(value, ast.Call)
                and known_names.last_name(value) == "DistributedSampler"
                and value.args
                and known_names.dotted(value.args[0]) == ds
            ):
                made[target.id] = value
    for name in sorted(made):
        handed = False
        for node in patterns.walk_scope(root):
            if not isinstance(node, ast.Call) or node is made[name]:
                continue
            callee = known_names.last_name(node) or ""
            if "Loader" not in callee and "Sampler" not in callee and "loader" not in callee:
                continue
            values = [*node.args, *(k.value for k in node.keywords)]
            if any(isinstance(v, ast.Name) and v.id == name for v in values):
                handed = True
                break
        if not handed:
            return name
    return None


_HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

"""

MissingDistributedSampler.cases = (
    Invalid(
        _HEAD
        + """\
from torch.utils.data.distributed import DistributedSampler


def get_audio_loader(args, dataset, is_train):
    sampler = DistributedSampler(dataset) if args.distributed and is_train else None
    shuffle = is_train and sampler is None
    loader = «DataLoader»(dataset, batch_size=args.batch_size, shuffle=shuffle, drop_last=is_train)
    return loader, sampler
""",
        fixed=_HEAD
        + """\
from torch.utils.data.distributed import DistributedSampler


def get_audio_loader(args, dataset, is_train):
    sampler = DistributedSampler(dataset) if args.distributed and is_train else None
    shuffle = is_train and sampler is None
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=shuffle, drop_last=is_train, sampler=sampler)
    return loader, sampler
""",
        note="the DistributedSampler made for the loader's dataset is left out of it (a dropped "
        "`sampler=`; seeded drop-sampler, open_clip's audio loader)",
    ),
    Valid(
        _HEAD
        + """\
from torch.utils.data import BatchSampler
from torch.utils.data.distributed import DistributedSampler


def get_loader(args, dataset):
    sampler = DistributedSampler(dataset) if args.distributed else None
    batches = BatchSampler(sampler, args.batch_size, drop_last=True)
    loader = DataLoader(dataset, batch_sampler=batches)
    probe = DataLoader(dataset, batch_size=1)
    return loader, probe
""",
        note="the sampler reaches a loader through a batch sampler: not left out",
    ),
    Invalid(
        _HEAD
        + """\
def loader_options(args):
    return {"multiprocessing_context": "forkserver"} if args.workers else {}


def get_loader(args, train_set):
    return «DataLoader»(train_set, shuffle=True, sampler=None, **loader_options(args))
""",
        note="`**kwargs` beside an explicit `sampler=` cannot carry another sampler",
    ),
    Valid(
        _HEAD
        + """\
from torch.utils.data.distributed import DistributedSampler

def main(args, dataset_train):
    if args.distributed:
        train_sampler = DistributedSampler(dataset_train)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset_train)
    data_loader = DataLoader(dataset_train, batch_size=args.batch_size, sampler=train_sampler,
                             num_workers=args.workers, pin_memory=True)
    return data_loader
""",
        note="torchvision references: the sampler is chosen per mode",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, batch_sampler):
    return DataLoader(dataset, batch_sampler=batch_sampler, num_workers=4)
""",
        note="batch_sampler given",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def main(model, dataset):
    accelerator = Accelerator()
    loader = DataLoader(dataset, batch_size=16, shuffle=True)
    model, loader = accelerator.prepare(model, loader)
""",
        note="accelerate shards the loader in prepare()",
    ),
    Valid(
        _HEAD
        + """\
def main(model, dataset, fabric):
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=16, shuffle=True))
""",
        note="Lightning Fabric installs the sampler",
    ),
    Valid(
        _HEAD
        + """\
import lightning as L

class DataModule(L.LightningDataModule):
    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=32, shuffle=True, num_workers=8)
""",
        note="Lightning injects a DistributedSampler into train_dataloader()",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, trainer, model):
    loader = DataLoader(dataset, batch_size=32, shuffle=True)
    trainer.fit(model, loader)
""",
        note="a loader given to a Lightning Trainer",
    ),
    Valid(
        _HEAD
        + """\
import webdataset as wds

def main(urls, model, optimizer):
    dataset = wds.WebDataset(urls, nodesplitter=wds.split_by_node).decode("torchrgb")
    loader = DataLoader(dataset, batch_size=None, num_workers=8)
    for epoch in range(10):
        for x, y in loader:
            model(x).sum().backward()
            optimizer.step()
""",
        note="webdataset shards by node and worker itself",
    ),
    Valid(
        _HEAD
        + """\
from torch.utils.data import IterableDataset

class Tokens(IterableDataset):
    def __iter__(self):
        yield from range(10)

def main(model, optimizer):
    loader = DataLoader(Tokens(), batch_size=8)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
""",
        note="an IterableDataset of this file",
    ),
    Valid(
        _HEAD
        + """\
def main(args, model, val_set):
    val_loader = DataLoader(val_set, batch_size=256, shuffle=False, num_workers=8)
    test_loader = DataLoader(val_set, batch_size=256, shuffle=True)
    return val_loader, test_loader
""",
        note="evaluation loaders by name",
    ),
    Valid(
        _HEAD
        + """\
import torchvision

def main(model, rank):
    dataset = torchvision.datasets.CIFAR10("data", train=False, download=True)
    loader = DataLoader(dataset, batch_size=256)
    if rank == 0:
        for x, y in loader:
            print(model(x).argmax(1))
""",
        note="evaluation on rank 0 only",
    ),
    Valid(
        _HEAD
        + """\
def main(model, dataset):
    if dist.get_rank() == 0:
        loader = DataLoader(dataset, batch_size=64, shuffle=True)
        for x in loader:
            print(model(x))
""",
        note="built on rank 0 only",
    ),
    Valid(
        _HEAD
        + """\
from datasets import load_dataset
from datasets.distributed import split_dataset_by_node

def main(rank, world_size, model, optimizer):
    ds = split_dataset_by_node(load_dataset("c4", streaming=True), rank=rank, world_size=world_size)
    loader = DataLoader(ds, batch_size=8)
    for batch in loader:
        model(batch).sum().backward()
        optimizer.step()
""",
        note="Hugging Face datasets split per node",
    ),
    Valid(
        _HEAD
        + """\
def main(full, indices, rank, world_size, model, optimizer):
    part = torch.utils.data.Subset(full, indices[rank::world_size])
    loader = DataLoader(part, batch_size=8, shuffle=True)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
""",
        note="a dataset sharded by rank by hand",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, model, optimizer):
    loader = DataLoader(dataset, batch_size=8)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
""",
        note="no shuffle over a dataset of unknown type: could shard itself",
    ),
    Valid(
        _HEAD
        + """\
def main(model, holdout):
    loader = DataLoader(holdout, batch_size=64, shuffle=True)
    with torch.no_grad():
        for x in loader:
            print(model(x))
""",
        note="iterated without gradients only: evaluation",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(model, dataset):
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    return [model(x) for x in loader]
""",
        note="inside an evaluation function",
    ),
    Valid(
        _HEAD
        + """\
from torch.utils.data.distributed import DistributedSampler

def build(args, train_set):
    if args.distributed:
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=64, sampler=sampler)
    else:
        loader = DataLoader(train_set, batch_size=64, shuffle=True)
    return loader
""",
        note="the single-process branch of a distributed set-up",
    ),
    Valid(
        _HEAD
        + """\
def build(world_size, train_set):
    if world_size == 1:
        return DataLoader(train_set, batch_size=64, shuffle=True)
    return None
""",
        note="a branch chosen by world size",
    ),
    Valid(
        _HEAD
        + """\
def main(args, trainset, testset):
    trainloader = DataLoader(trainset, batch_size=4, sampler=torch.utils.data.DistributedSampler(trainset))
    testloader = DataLoader(testset, batch_size=4, shuffle=True)
    valloader = DataLoader(testset, batch_size=4, shuffle=True)
""",
        note="evaluation loaders by name (CIFAR tutorial spelling)",
    ),
    Valid(
        """\
import torch
from torch.utils.data import DataLoader

def main(dataset):
    return DataLoader(dataset, batch_size=64, shuffle=True)
""",
        distributed=False,
        note="single-process code",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, train_set):
    train_loader = «DataLoader»(train_set, batch_size=64, shuffle=True, num_workers=8)
    return train_loader
""",
        fixed="""\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def main(args, train_set):
    train_loader = DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set), num_workers=8)
    return train_loader
""",
    ),
    Valid(
        _HEAD
        + """\
def main(args, dataset):
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=args.shuffle)
    return loader
""",
        note="shuffle from configuration and no evidence of training: not reported",
    ),
    Invalid(
        _HEAD
        + """\
from torch.utils.data.distributed import DistributedSampler as DS

def main(args, dataset):
    loader = torch.utils.data.«DataLoader»(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,  # randomise
    )
    return loader
""",
        fixed=_HEAD
        + """\
from torch.utils.data.distributed import DistributedSampler as DS

def main(args, dataset):
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=DS(dataset),  # randomise
    )
    return loader
""",
        note="the existing import alias is reused, the comment kept",
    ),
    Invalid(
        _HEAD
        + """\
def main(model, optimizer, epochs):
    train_ds = torch.utils.data.TensorDataset(torch.randn(512, 8))
    loader = «DataLoader»(
        train_ds,
        batch_size=32,
        num_workers=2,
    )
    for epoch in range(epochs):
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
""",
        fixed="""\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def main(model, optimizer, epochs):
    train_ds = torch.utils.data.TensorDataset(torch.randn(512, 8))
    loader = DataLoader(
        train_ds,
        batch_size=32,
        num_workers=2,
        sampler=DistributedSampler(train_ds, shuffle=False),
    )
    for epoch in range(epochs):
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
""",
        note="no shuffle, but a training loop over a map-style dataset: order kept",
    ),
    Invalid(
        _HEAD
        + """\
def train_and_evaluate(trainval_set):
    trainval_loader = «DataLoader»(trainval_set, batch_size=64, shuffle=True)
    return trainval_loader
""",
        fixed="""\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def train_and_evaluate(trainval_set):
    trainval_loader = DataLoader(trainval_set, batch_size=64, sampler=DistributedSampler(trainval_set))
    return trainval_loader
""",
        note="names that say train are not evaluation names",
    ),
    Invalid(
        _HEAD
        + """\
def main(train_set):
    return «DataLoader»(train_set, sampler=None, shuffle=True)
""",
        fixed=None,
        note="an explicit sampler=None: reported, no fix (a second sampler= would not parse)",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, dataset):
        self.train_loader = «DataLoader»(Flip(dataset), batch_size=8, shuffle=True)
""",
        fixed=None,
        note="the dataset is an expression: no fix rather than building it twice",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, train_set, val_set, model, optimizer):
    kw = dict(batch_size=args.batch_size, num_workers=args.workers, pin_memory=True)
    train_loader = «DataLoader»(train_set, shuffle=True, **kw)
    val_loader = DataLoader(val_set, **kw)
    for epoch in range(args.epochs):
        for x, y in train_loader:
            model(x).sum().backward()
            optimizer.step()
""",
        fixed="""\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def main(args, train_set, val_set, model, optimizer):
    kw = dict(batch_size=args.batch_size, num_workers=args.workers, pin_memory=True)
    train_loader = DataLoader(train_set, sampler=DistributedSampler(train_set), **kw)
    val_loader = DataLoader(val_set, **kw)
    for epoch in range(args.epochs):
        for x, y in train_loader:
            model(x).sum().backward()
            optimizer.step()
""",
        note="**kw of a dict built here with literal keys and no sampler hides nothing",
    ),
    Valid(
        _HEAD
        + """\
def main(args, train_set, sampler, model):
    kw = {"batch_size": args.batch_size, "sampler": sampler}
    train_loader = DataLoader(train_set, shuffle=False, **kw)
    for x, y in train_loader:
        model(x).sum().backward()
""",
        note="**kw carries the sampler",
    ),
)
