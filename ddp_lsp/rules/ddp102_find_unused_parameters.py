"""DDP102 find-unused-parameters.

## What it does
Finds `DistributedDataParallel(..., find_unused_parameters=True)`, and the same flag passed
through accelerate's `DistributedDataParallelKwargs` and Lightning's `DDPStrategy` (or
`strategy="ddp_find_unused_parameters_true"`).

## Why is this bad?
With the flag on, DDP walks the autograd graph from the forward's outputs after *every*
forward to find the parameters that will get no gradient, and marks them ready by hand. The
traversal costs CPU time on each step, and since readiness is only known after it, bucketed
all-reduce overlaps less with the backward pass; the slow-down is commonly 15-30 %. The flag
is only needed when some parameters really go unused in a forward (conditional branches,
frozen heads); otherwise it is pure overhead, and it is often left on after the model that
needed it changed.

## Example
```python
model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
```

## Use instead
```python
# every parameter takes part in every forward:
model = DDP(model, device_ids=[local_rank])
# the same parameters go unused in every iteration:
model = DDP(model, device_ids=[local_rank], static_graph=True)
```

## Fix
Removes the argument. The fix is not preferred and is unsafe: if some parameters really go
unused, DDP then stops with "Expected to have finished reduction in the prior iteration"
at the second step. Run a step with `TORCH_DISTRIBUTED_DEBUG=DETAIL` first, which names the
parameters that got no gradient.

## Known false positives
Information only: models with genuinely conditional branches (mixture of experts, multi-task
heads used per batch) need the flag. A value that is not the literal `True` is not reported.

Not reported: the flag set where the same function builds one optimizer per sub-network in a
loop over the networks (`for unet in self.unets: Adam(unet.parameters())`, a cascade trained
one stage at a time): the networks are trained apart, one per step, so the others'
parameters really go unused and the flag is needed.

## References
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
- https://pytorch.org/docs/stable/notes/ddp.html#internal-design
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity

# Callables that take DDP's own `find_unused_parameters` / `static_graph` keywords: the
# framework tables' `takes-ddp-kwargs` entries (DDP, accelerate's kwargs handler, Lightning's
# DDPStrategy).
_DDP_LIKE = framework_tables.BUILTIN.calls(framework_tables.Meaning.TAKES_DDP_KWARGS)
_FLAG = "find_unused_parameters"
# Arguments that turn it on by name: the tables' `finds-unused-parameters` entries (Lightning's
# `strategy="ddp_find_unused_parameters_true"`), as (keyword, string).
_FINDS_UNUSED = framework_tables.BUILTIN.arguments(framework_tables.Meaning.FINDS_UNUSED_PARAMETERS)


class FindUnusedParameters(Rule):
    meta = RuleMeta(
        id="DDP102",
        name="find-unused-parameters",
        severity=Severity.INFORMATION,
        summary="find_unused_parameters=True traverses the graph every step: remove it if no parameter goes unused.",
        fix=FixAvailability.SOMETIMES,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in ctx.calls():
            qual = ctx.call_qualname(call)
            if qual in _DDP_LIKE:
                kw = next((k for k in call.keywords if k.arg == _FLAG), None)
                if kw is None or not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is True
                ):
                    continue
                if _trains_networks_apart(ctx, call):
                    continue  # F37: the flag is needed
                static = any(k.arg == "static_graph" for k in call.keywords)
                hint = (
                    "remove it if every parameter takes part in every forward"
                    if static
                    else "remove it if every parameter takes part in every forward, or pass "
                    "`static_graph=True` instead if the same parameters go unused in every "
                    "iteration"
                )
                fixes = []
                edits = text_edits.remove_argument(ctx, call, kw)
                if edits:
                    fixes.append(
                        Fix(
                            title=f"Remove {_FLAG}=True (only if no parameter goes unused)",
                            edits=tuple(edits),
                            safe=False,
                            preferred=False,
                        )
                    )
                yield ctx.finding(
                    self,
                    kw,
                    f"`{_FLAG}=True` makes DDP traverse the autograd graph after every forward "
                    f"and delays gradient all-reduce (often 15-30 % slower steps); {hint}",
                    fixes=fixes,
                )
            for kw in call.keywords:
                if (
                    kw.arg is not None
                    and isinstance(kw.value, ast.Constant)
                    and isinstance(kw.value.value, str)
                    and (kw.arg, kw.value.value) in _FINDS_UNUSED
                    and not _trains_networks_apart(ctx, call)
                ):
                    yield ctx.finding(
                        self,
                        kw.value,
                        f'`{kw.arg}="{kw.value.value}"` makes DDP traverse the autograd '
                        "graph after every forward and delays gradient all-reduce (often "
                        f'15-30 % slower steps); use `{kw.arg}="ddp"` if every parameter takes '
                        "part in every forward",
                    )


def _trains_networks_apart(ctx: ChunkContext, call: ast.Call) -> bool:
    """The function that sets the flag builds one optimizer per sub-network, in a loop over
    the networks (``for unet in unets: Adam(unet.parameters())``): the networks are trained
    apart, one per step, so the others' parameters really go unused in that step's forward
    and the flag is needed (F37)."""
    fn = ctx.enclosing_function(call)
    for other in ctx.calls():
        if not other.args or ctx.enclosing_function(other) is not fn:
            continue
        qual = ctx.call_qualname(other)
        if qual is None or not known_names.is_optimizer_class(qual):
            continue
        params = {  # `unet.parameters()`: the networks whose parameters it optimizes
            n.func.value.id
            for n in ast.walk(other.args[0])
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("parameters", "named_parameters")
            and isinstance(n.func.value, ast.Name)
        }
        for loop in ctx.enclosing_loops(other):
            if isinstance(loop, ast.For | ast.AsyncFor) and params & {
                n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)
            }:
                return True
    return False


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

FindUnusedParameters.cases = (
    Valid(
        _HEAD
        + """\
def wrap(model, local_rank):
    return DDP(model, device_ids=[local_rank])
""",
        note="no flag",
    ),
    Valid(
        _HEAD
        + """\
def wrap(model, local_rank, args):
    return DDP(model, device_ids=[local_rank], find_unused_parameters=args.find_unused)
""",
        note="a configurable value is the user's decision",
    ),
    Valid(
        _HEAD
        + """\
def wrap(model, local_rank):
    return DDP(model, device_ids=[local_rank], find_unused_parameters=False)
""",
        note="explicitly off",
    ),
    Invalid(
        _HEAD
        + """\
def wrap(model, local_rank):
    return DDP(model, device_ids=[local_rank], «find_unused_parameters=True»)
""",
        fixed=_HEAD
        + """\
def wrap(model, local_rank):
    return DDP(model, device_ids=[local_rank])
""",
        note="last argument on one line",
    ),
    Invalid(
        _HEAD
        + """\
def wrap(model, local_rank):
    model = DDP(
        model,
        device_ids=[local_rank],
        «find_unused_parameters=True»,  # the aux head is unused at eval
        broadcast_buffers=False,
    )
    return model
""",
        fixed=_HEAD
        + """\
def wrap(model, local_rank):
    model = DDP(
        model,
        device_ids=[local_rank],
        # the aux head is unused at eval
        broadcast_buffers=False,
    )
    return model
""",
        note="one argument per line: the line goes, the comment stays",
    ),
    Invalid(
        _HEAD
        + """\
def wrap(model):
    return DDP(model, «find_unused_parameters=True», static_graph=True)
""",
        fixed=_HEAD
        + """\
def wrap(model):
    return DDP(model, static_graph=True)
""",
        note="with static_graph already: only removal is suggested",
    ),
    Invalid(
        _HEAD
        + """\
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs

ddp_kwargs = DistributedDataParallelKwargs(«find_unused_parameters=True»)
accelerator = Accelerator(kwargs_handlers=[ddp_kwargs])
""",
        fixed=_HEAD
        + """\
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs

ddp_kwargs = DistributedDataParallelKwargs()
accelerator = Accelerator(kwargs_handlers=[ddp_kwargs])
""",
        note="accelerate's kwargs handler",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs

class CascadeTrainer:
    def __init__(self, cascade, lr=1e-4):
        handler = DistributedDataParallelKwargs(find_unused_parameters=True)
        self.accelerator = Accelerator(kwargs_handlers=[handler])
        self.optimizers = []
        for stage in cascade.stages:
            self.optimizers.append(torch.optim.Adam(stage.parameters(), lr=lr))
""",
        note="F37: one optimizer per sub-network, trained one per step: the flag is needed",
    ),
    Invalid(
        _HEAD
        + """\
def setup(model, heads, local_rank):
    for head in heads:
        head.requires_grad_(True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = DDP(model, device_ids=[local_rank], «find_unused_parameters=True»)
    return model, optimizer
""",
        fixed=_HEAD
        + """\
def setup(model, heads, local_rank):
    for head in heads:
        head.requires_grad_(True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = DDP(model, device_ids=[local_rank])
    return model, optimizer
""",
        note="F37: one optimizer for the whole model, built outside the loop: still reported",
    ),
    Invalid(
        _HEAD
        + """\
import lightning as L

trainer = L.Trainer(devices=8, strategy=«"ddp_find_unused_parameters_true"»)
""",
        note="Lightning's strategy string: no fix",
    ),
)
