"""DDP105 syncbn-after-ddp-wrap.

## What it does
Finds `torch.nn.SyncBatchNorm.convert_sync_batchnorm(m)` where `m` (or `m.module`) was
already wrapped in `DistributedDataParallel` earlier in the same function or block of module
code.

## Why is this bad?
PyTorch documents that BatchNorm layers must be converted to SyncBatchNorm *before* the
model is wrapped in DDP. DDP inspects the module when it is constructed: it records the
parameters and the buffers it broadcasts, builds its gradient buckets, checks that
SyncBatchNorm layers live on a GPU, and logs whether the model uses SyncBatchNorm. Converting
afterwards swaps layers under a wrapper that was set up for the old ones, and the conversion
returns a new module whenever the converted module is itself a BatchNorm, which the DDP
wrapper then never sees.

## Example
```python
model = DDP(model.cuda(local_rank), device_ids=[local_rank])
model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
```

## Use instead
```python
model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
model = DDP(model.cuda(local_rank), device_ids=[local_rank])
```

## Fix
None: moving the conversion means reordering statements whose other effects we cannot see.

## Known false positives
Only an order visible in one function (or one run of module code) is reported: a model that
arrives as a parameter or an attribute set in another method is not, because whether the
caller wrapped it before or after cannot be told from here.

## References
- https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html#torch.nn.SyncBatchNorm.convert_sync_batchnorm
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import names as known_names
from ddp_lsp.core import triggers as rule_triggers
from ddp_lsp.core.facts import path_of
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, Related, RuleMeta, Severity
from ddp_lsp.rules import _patterns as patterns

CONVERT = "torch.nn.SyncBatchNorm.convert_sync_batchnorm"
_TRIGGERS = rule_triggers.qual_words({CONVERT})
_TRANSPARENT = frozenset({"torch.compile", CONVERT})


def _is_wrap(ctx: ChunkContext, value: ast.AST) -> bool:
    node = value
    while isinstance(node, ast.Call):
        qual = ctx.call_qualname(node)
        if qual == known_names.DDP:
            return True
        if qual not in _TRANSPARENT or not node.args:
            return False
        node = node.args[0]
    return False


def _last_assignment(
    ctx: ChunkContext, root: ast.AST, path: str, before: ast.AST
) -> ast.stmt | None:
    found: ast.stmt | None = None
    holders = {id(a) for a in ctx.ancestors(before)}
    for node in patterns.walk_scope(root):
        if not patterns.before(node, before) or id(node) in holders:
            continue
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        if any(path_of(t) == path for t in targets):
            assert isinstance(node, ast.stmt)
            if found is None or patterns.before(found, node):
                found = node
    return found


class SyncBnAfterDdpWrap(Rule):
    meta = RuleMeta(
        id="DDP105",
        name="syncbn-after-ddp-wrap",
        severity=Severity.ERROR,
        summary="SyncBatchNorm conversion of a model already wrapped in DDP: convert before wrapping.",
        fix=FixAvailability.NONE,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        return _TRIGGERS  # every finding is at a `convert_sync_batchnorm` (core/triggers.py)

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in ctx.calls_to(CONVERT):
            arg = (
                call.args[0]
                if call.args
                else next((k.value for k in call.keywords if k.arg == "module"), None)
            )
            if arg is None:
                continue
            if _is_wrap(ctx, arg):
                yield ctx.finding(
                    self,
                    call,
                    "`convert_sync_batchnorm` converts a model that is already wrapped in "
                    "DistributedDataParallel: convert the plain model first, then wrap it in DDP",
                )
                continue
            inner = arg
            if isinstance(arg, ast.Attribute) and arg.attr == "module":
                inner = arg.value
            path = path_of(inner)
            if path is None:
                continue
            root = patterns.scope_root(ctx, call)
            wrap = _last_assignment(ctx, root, path, call)
            if wrap is None or not _is_wrap(ctx, wrap.value):  # type: ignore[attr-defined]
                continue
            text = chunktext.segment(ctx.chunk, arg)
            subject = "it" if text == path else f"`{path}`"
            yield ctx.finding(
                self,
                call,
                f"`{text}` is converted to SyncBatchNorm after {subject} was wrapped in "
                "DistributedDataParallel: DDP set itself up for the old BatchNorm layers; "
                f"call `convert_sync_batchnorm` on the plain model before wrapping it",
                related=(Related(chunktext.span(ctx.chunk, wrap), "wrapped in DDP here"),),
            )


_HEAD = """\
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

SyncBnAfterDdpWrap.cases = (
    Valid(
        _HEAD
        + """\
def build(net, local_rank):
    model = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    return model
""",
        note="the documented order: convert, then wrap",
    ),
    Valid(
        _HEAD
        + """\
def build(model, args):
    if args.sync_bn:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model_without_ddp = model
    if args.distributed:
        model = DDP(model, device_ids=[args.gpu])
        model_without_ddp = model.module
    return model, model_without_ddp
""",
        note="torchvision references: conversion under a flag, before the wrap",
    ),
    Valid(
        _HEAD
        + """\
def convert(model):
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)
""",
        note="a parameter: the caller's order is not visible here",
    ),
    Valid(
        _HEAD
        + """\
def build(net, local_rank):
    model = DDP(net, device_ids=[local_rank])
    other = nn.SyncBatchNorm.convert_sync_batchnorm(net.head)
    return model, other
""",
        note="converting a different module",
    ),
    Invalid(
        _HEAD
        + """\
def build(net, local_rank):
    model = DDP(net.cuda(local_rank), device_ids=[local_rank])
    model = «nn.SyncBatchNorm.convert_sync_batchnorm(model)»
    return model
""",
        note="wrapped, then converted",
    ),
    Invalid(
        _HEAD
        + """\
from torch.nn import SyncBatchNorm

def build(net, local_rank):
    ddp_model = torch.compile(DDP(net, device_ids=[local_rank]))
    ddp_model.module = «SyncBatchNorm.convert_sync_batchnorm(ddp_model.module)»
    return ddp_model
""",
        note="converting the wrapped module through .module after the wrap",
    ),
)
