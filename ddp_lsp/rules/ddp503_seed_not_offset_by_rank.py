"""DDP503 seed-not-offset-by-rank.

## What it does
Finds random number generators seeded with the same value on every rank of a DDP job:
`torch.manual_seed(42)`, `torch.cuda.manual_seed_all(args.seed)`, `random.seed(seed)`,
`np.random.seed(cfg.seed)`, or a seeding helper of the same file (`set_seed(args.seed)`),
with a seed that does not involve the rank.

## Why is this bad?
Every rank then draws the same random numbers: the same dropout masks, the same random crops,
flips and mixup coefficients for its (different) batch. The ranks' noise is perfectly
correlated, which wastes most of the regularisation that data augmentation and dropout are
there for. `torch.manual_seed(seed + rank)` keeps runs reproducible and the ranks distinct.
DDP broadcasts rank 0's parameters when it wraps the model, so the initial weights are the same
on every rank anyway; the seed does not have to be.

## Example
```python
torch.manual_seed(args.seed)
model = DDP(build_model().cuda(), device_ids=[local_rank])
```

## Use instead
```python
torch.manual_seed(args.seed + rank)
model = DDP(build_model().cuda(), device_ids=[local_rank])
```

## Fix
Adds the global rank the code already has in scope (`rank`, `global_rank`, `ddp_rank`,
`args.rank`, `self.rank`): `torch.manual_seed(args.seed + rank)`. Otherwise it adds
`int(os.environ.get("RANK", 0))` (marked unsafe, with `import os`). No fix for a per-step reseed in an FSDP
training loop (the offset is the data-parallel rank).

## Known false positives
Off by default: it runs where `select` names `DDP503` (`select = ["DDP", "DDP503"]`). Whether
a shared seed costs anything depends on what draws random numbers on every rank after it
(dropout, random augmentation in the loader's workers, noise or sampling in the training
step), which this rule does not see: on the triage corpus two in three findings were of
programs with nothing random per rank (llm.c: no dropout, data sharded by rank, sampling on
rank 0 only; HiFi-GAN: only the CUDA generator seeded, nothing random on the GPU).
Information only: a shared seed is sometimes intended. Not reported: seeds that already add
something (`seed + rank`, `args.seed + get_rank()`, nanoGPT's `1337 + seed_offset`), seeds under
a rank condition, a seed that is a parameter of the function seeding with it (in
`def set_seed(seed): torch.manual_seed(seed)` the caller decides, and `set_seed(args.seed)`
is reported where it is called; but a helper that also takes a rank, `def seed_all(seed,
rank)`, must offset by it, and its calls are not reported: it is reported in any distributed
module, DDP wrap or not, since its caller hands it the rank to offset by), files without a `DistributedDataParallel` wrap (FSDP with
`sync_module_states=False` and hand-written data parallelism need identical initial weights),
a generator that is seeded again later in the same function with the rank (the first seed is
for the initial weights; NumPy's or Python's seed does not reseed torch's), a seed followed in the same function by a dataset split or shuffle that must
be the same on every rank (`random_split`, `train_test_split`, `randperm`, `random.shuffle`;
in module-level script code, such a function imported by name and used anywhere in the file),
`torch.Generator().manual_seed(...)` (a `DistributedSampler`'s generator must be the same on
every rank; but a generator handed to a loader as `generator=` in a helper given the rank,
`g.manual_seed(C + seed)` in `def create_dataloader(..., rank=-1, seed=0)`, seeds the
workers' augmentations and is reported), `transformers.set_seed` and Lightning's `seed_everything`.

Frameworks: the seeding calls are the `seeds` entries of the framework tables (and yours in
`[tool.ddp-lsp]`). accelerate's `set_seed(seed)` is reported in a function that prepares a
model (`accelerator.prepare`, a `wraps-model` entry: accelerate broadcasts the wrapped model
like DDP) unless it passes `device_specific=True` (the entry's `keyword`); the fix passes it.
In a file with such a wrap but no DDP one, only a framework's own seeder with a per-rank
option is reported, and not in a module that shards its model (FSDP, `fully_shard`, tensor
parallelism: nothing broadcasts the initial weights, so the ranks need the same seed), except
a reseed inside the training loop (a loop that runs a backward) of a module that shards with
FSDP or `fully_shard`: it comes after the weights are made, and FSDP is data parallel, so
every rank would draw the same batch; reported without a fix (the offset is the data-parallel
rank, which tensor parallelism keeps apart from the global one). A tensor-parallel-only
module reseeding per step is silent (the ranks of a group need the same input).

Distributed code only: in a project, a function that no distributed entry point reaches on
every rank and that does nothing distributed itself (an export tool, a tokenizer, a plotting
script, a helper called on rank 0 only) is single-process code, and this rule is silent there.

Test code (with the project view, which knows the module's path): a module under a `tests`,
`test` or `gpu_tests` folder, or named `test_*.py`, `*_test.py`, `conftest.py` or
`*test_utils.py`. A distributed test feeds every rank the data and seeds it means to compare,
so this rule is silent there (F16 in docs/accuracy.md).

## References
- https://pytorch.org/docs/stable/notes/randomness.html
- https://huggingface.co/docs/accelerate/package_reference/utilities#accelerate.utils.set_seed
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import triggers as rule_triggers
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _data as data_rules
from ddp_lsp.rules import _device as device_rules
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _patterns as patterns

# Seeding calls that give every rank the same seed: the framework tables' `seeds` entries
# (torch / random / numpy; accelerate's set_seed unless `device_specific=True`).
SEEDERS = framework_tables.BUILTIN.calls(framework_tables.Meaning.SEEDS)
# Calls after which the same seed on every rank is required (the ranks must agree on a split).
_SPLITS = frozenset(
    {
        "random_split",
        "train_test_split",
        "randperm",
        "permutation",
        "shuffle",
        "sample",
        "choice",
        "split_dataset",
    }
)
_SEED_HELPER = re.compile(r"seed", re.IGNORECASE)
_ATOMS = (ast.Name, ast.Attribute, ast.Constant, ast.Call, ast.Subscript)


class SeedNotOffsetByRank(Rule):
    meta = RuleMeta(
        id="DDP503",
        name="seed-not-offset-by-rank",
        severity=Severity.INFORMATION,
        summary="The same random seed on every rank: identical dropout and augmentation.",
        fix=FixAvailability.SOMETIMES,
        distributed_only=True,
        # On real code most same-seed findings change nothing (docs/accuracy.md F34: no
        # dropout, no random augmentation or sampling per rank): 0.67 on the triage corpus.
        default_on=False,
    )

    def triggers(self, ctx: ChunkContext) -> frozenset[str]:
        # A finding is at a seeding call of the tables, or at a helper named for seeding
        # (`_seed_helper`: any name holding "seed"), core/triggers.py.
        words = rule_triggers.words(ctx)
        # One search of all the words first (`seed` holds no line break): most chunks name no
        # seeding helper, and a search per word cost more than the rule on those chunks.
        named = (
            frozenset(w for w in words if _SEED_HELPER.search(w))
            if _SEED_HELPER.search("\n".join(words))
            else frozenset()
        )
        return named | rule_triggers.framework_words(
            ctx.ranks.frameworks, framework_tables.Meaning.SEEDS
        )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        if device_rules.single_process(ctx) or data_rules.in_test_module(ctx):
            return
        calls = ctx.calls()
        wraps = _wraps_ddp(ctx)
        # A framework that wraps the model (`accelerator.prepare`) broadcasts it like DDP does;
        # its own seeder says how to seed per rank (`set_seed(seed, device_specific=True)`).
        # Not where the module shards its model (FSDP2, tensor parallelism: the ranks need the
        # same initial weights, nothing broadcasts them).
        prepares = [
            c
            for c in calls
            if patterns.framework_call(ctx, c, framework_tables.Meaning.WRAPS_MODEL)
        ]
        # A seeding helper handed the rank (`def random_seed(seed, rank)`) means the caller wants
        # a seed per rank, whatever the module wraps: seeding with the seed alone drops it.
        ranked = {id(c) for c in calls if _rank_helper(ctx, c)}
        # A reseed inside the training loop of an FSDP module comes after the model is built:
        # no initial weights depend on it, and FSDP is data parallel, so every rank draws the
        # same batch and dropout there (tensor-parallel-only modules want that: not these).
        stepped = {id(c) for c in calls if _fsdp_step_seed(ctx, c)}
        if not wraps and (not prepares or _shards(ctx)) and not ranked and not stepped:
            return
        for call in calls:
            api = patterns.framework_call(ctx, call, framework_tables.Meaning.SEEDS)
            if id(call) in stepped:
                if not _same_on_every_rank(ctx, call.args[0], patterns.scope_root(ctx, call)):
                    continue
                if device_rules.guarded(ctx, call) or _reseeded_with_rank(
                    ctx, call, patterns.scope_root(ctx, call)
                ):
                    continue
                label = chunktext.segment(ctx.chunk, call.func)
                yield ctx.finding(
                    self,
                    call,
                    f"`{label}({chunktext.segment(ctx.chunk, call.args[0])})` reseeds every rank "
                    "alike in the training loop of a sharded (data-parallel) model: every rank "
                    "draws the same batch and dropout each step; offset it by the data-parallel "
                    "rank",
                )
                continue
            if (
                not wraps
                and id(call) not in ranked
                and (
                    api is None
                    or ctx.ranks.frameworks.keyword(api) is None
                    or not any(
                        patterns.scope_root(ctx, p) is patterns.scope_root(ctx, call)
                        for p in prepares
                    )
                )
            ):
                continue
            if api is not None:
                keyword = ctx.ranks.frameworks.keyword(api)
                if len(call.args) != 1:
                    continue
                if keyword is not None:
                    if _passed_true(call, keyword):
                        continue  # `set_seed(seed, device_specific=True)`: per rank already
                elif call.keywords:
                    continue
            elif id(call) not in ranked and not _seed_helper(ctx, call):
                continue
            seed = call.args[0]
            root = patterns.scope_root(ctx, call)
            if id(call) not in ranked and (
                not _same_on_every_rank(ctx, seed, root) or _caller_decides(ctx, seed, root)
            ):
                continue
            if device_rules.guarded(ctx, call) or guards.spawns_processes(ctx, root):
                continue
            if _reseeded_with_rank(ctx, call, root) or _split_follows(ctx, call, root):
                continue
            keyword = ctx.ranks.frameworks.keyword(api) if api is not None else None
            if keyword is not None:
                yield self._keyword_finding(ctx, call, seed, keyword)
                continue
            stmt = ctx.statement(call)
            rank = device_rules.global_rank_text(ctx, stmt)
            seed_text = chunktext.segment(ctx.chunk, seed)
            if not isinstance(seed, _ATOMS) or "\n" in seed_text:
                seed_text = f"({seed_text})"
            new = f"{seed_text} + {rank.text}"
            label = chunktext.segment(ctx.chunk, call.func)
            fix = Fix(
                title=f"Offset the seed by the rank: {label}({new})",
                edits=(text_edits.replace_node(ctx, seed, new),),
                safe=rank.from_code,
                preferred=True,
                imports=rank.imports,
            )
            yield ctx.finding(
                self,
                call,
                f"`{label}({chunktext.segment(ctx.chunk, seed)})` seeds every rank alike: identical dropout "
                f"masks and augmentations on all ranks; use `{label}({new})`",
                fixes=[fix] if "\n" not in chunktext.segment(ctx.chunk, seed) else [],
            )

    def _keyword_finding(
        self, ctx: ChunkContext, call: ast.Call, seed: ast.expr, keyword: str
    ) -> Finding:
        """A framework seeder that seeds per rank when ``keyword`` is true (accelerate's
        ``set_seed(seed, device_specific=True)``): the fix passes it."""
        label = chunktext.segment(ctx.chunk, call.func)
        given = next((kw for kw in call.keywords if kw.arg == keyword), None)
        if given is not None:
            edit = text_edits.replace_node(ctx, given.value, "True")
        else:
            edit = text_edits.replace_node(
                ctx, seed, f"{chunktext.segment(ctx.chunk, seed)}, {keyword}=True"
            )
        fix = Fix(
            title=f"Seed each rank differently: {label}(..., {keyword}=True)",
            edits=(edit,),
            safe=True,
            preferred=True,
        )
        return ctx.finding(
            self,
            call,
            f"`{label}({chunktext.segment(ctx.chunk, seed)})` seeds every rank alike: identical dropout masks and "
            f"augmentations on all ranks; pass `{keyword}=True` to offset the seed per process",
            fixes=[fix] if "\n" not in chunktext.segment(ctx.chunk, seed) else [],
        )


def _shards(ctx: ChunkContext) -> bool:
    """The module imports FSDP, ``fully_shard`` or a tensor-parallel set-up (the framework
    tables' `shards-model` and `makes-dtensors` entries)."""
    model = ctx.ranks.frameworks
    names = model.functions(framework_tables.Meaning.SHARDS_MODEL) | model.functions(
        framework_tables.Meaning.MAKES_DTENSORS
    )
    quals = model.calls(framework_tables.Meaning.SHARDS_MODEL)
    return any(q in quals or q.rsplit(".", 1)[-1] in names for q in ctx.facts.aliases.values())


def _passed_true(call: ast.Call, keyword: str) -> bool:
    """``keyword=`` is passed and not a literal false (a variable counts as true: the author
    thought about it)."""
    for kw in call.keywords:
        if kw.arg is None:
            return True  # `**kwargs` may hold it
        if kw.arg == keyword:
            return not (isinstance(kw.value, ast.Constant) and not kw.value.value)
    return False


def _seed_helper(ctx: ChunkContext, call: ast.Call) -> bool:
    """``set_seed(args.seed)``: a function of this file named for seeding, seed first, that
    takes no rank of its own (``random_seed(seed, rank)`` offsets by it: the helper's body is
    checked instead)."""
    if not isinstance(call.func, ast.Name) or call.func.id not in ctx.facts.func_props:
        return False
    if not call.args or not _SEED_HELPER.search(call.func.id):
        return False
    params = ctx.facts.func_params.get(call.func.id, ())
    if any(_RANK_PARAM.search(p) for p in params[1:]):
        return False
    return not params or "seed" in params[0].lower()


_RANK_PARAM = re.compile(r"rank", re.IGNORECASE)


def _fsdp_step_seed(ctx: ChunkContext, call: ast.Call) -> bool:
    """A seeding call (one argument) inside a loop that runs a backward, in a module that
    shards its model with FSDP / ``fully_shard`` (the tables' `shards-model` calls)."""
    if len(call.args) != 1 or call.keywords or ctx.call_qualname(call) not in SEEDERS:
        return False
    quals = ctx.ranks.frameworks.calls(framework_tables.Meaning.SHARDS_MODEL)
    if not any(q in quals for q in ctx.facts.aliases.values()):
        return False
    loops = ctx.enclosing_loops(call)
    return bool(loops) and any(
        patterns.backward_of(n) is not None for n in patterns.walk_scope(loops[0])
    )


def _rank_helper(ctx: ChunkContext, call: ast.Call) -> bool:
    """A seeding call inside a function that takes both the seed and a rank as parameters
    (``def random_seed(seed=42, rank=0): torch.manual_seed(seed)``), seeding with the seed
    (or constants plus parameters, ``6148914691236517205 + seed``): the rank it was handed is
    not in the seed. The seeder may be a loader's generator (``g = torch.Generator();
    g.manual_seed(seed); DataLoader(..., generator=g)``)."""
    if len(call.args) != 1 or call.keywords:
        return False
    fn = ctx.enclosing_function(call)
    if fn is None:
        return False
    if not _loader_generator(ctx, call) and not (
        ctx.call_qualname(call) in SEEDERS and _SEED_HELPER.search(fn.name)
    ):
        # Only a function named for seeding: a sampler given the seed and the rank seeds alike
        # on purpose (`random.seed(seed)` in a distributed batch sampler's `__init__`, then
        # every rank shuffles the same way and takes its own slice).
        return False
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    used: set[str] = set()
    for n in ast.walk(call.args[0]):
        if isinstance(n, ast.Name):
            used.add(n.id)
        elif not isinstance(n, ast.BinOp | ast.Add | ast.Constant | ast.Load):
            return False  # a call, an attribute: not only the helper's own inputs
    if not used or not used <= params or any(_RANK_PARAM.search(u) for u in used):
        return False
    return any(_RANK_PARAM.search(p) for p in params - used)


def _loader_generator(ctx: ChunkContext, call: ast.Call) -> bool:
    """``g.manual_seed(...)`` where ``g = torch.Generator()`` is handed to a loader as
    ``generator=g`` (it seeds the workers, whose augmentations should differ per rank); not a
    sampler's generator (``RandomSampler(..., generator=g)``: the ranks must agree on it)."""
    f = call.func
    if not (
        isinstance(f, ast.Attribute) and f.attr == "manual_seed" and isinstance(f.value, ast.Name)
    ):
        return False
    name = f.value.id
    root = patterns.scope_root(ctx, call)
    value = guards.assigned_value(ctx, name, root, call)
    if not (isinstance(value, ast.Call) and ctx.call_qualname(value) == "torch.Generator"):
        return False
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Call):
            callee = known_names.dotted(node.func) or ""
            for kw in node.keywords:
                if (
                    kw.arg == "generator"
                    and isinstance(kw.value, ast.Name)
                    and kw.value.id == name
                    and not callee.endswith("Sampler")
                ):
                    return True
    return False


def _caller_decides(ctx: ChunkContext, seed: ast.AST, root: ast.AST) -> bool:
    """A parameter never reassigned (``def set_seed(seed): torch.manual_seed(seed)``): the
    caller chooses the value, and its call is checked instead."""
    if not isinstance(seed, ast.Name) or not isinstance(
        root, (ast.FunctionDef, ast.AsyncFunctionDef)
    ):
        return False
    args = root.args
    params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    if any(_RANK_PARAM.search(p) for p in params - {seed.id}):
        # `def random_seed(seed, rank): torch.manual_seed(seed)`: the helper is given the rank
        # to offset by and does not; the caller cannot fix that.
        return False
    return seed.id in params and guards.assigned_value(ctx, seed.id, root, seed) is None


def _wraps_ddp(ctx: ChunkContext) -> bool:
    """DDP broadcasts rank 0's parameters at wrap time, so distinct seeds are safe. An
    import of DDP that the module never uses (an FSDP script that imports both) wraps nothing."""
    if any(
        q == known_names.DDP and (name in ctx.facts.names_used or "." in name)
        for name, q in ctx.facts.aliases.items()
    ):
        return True
    return fact_model.DDP in ctx.facts.kind_set


def _same_on_every_rank(ctx: ChunkContext, seed: ast.AST, root: ast.AST, depth: int = 0) -> bool:
    """A constant, or a name / attribute (``seed``, ``args.seed``) whose value is not derived
    from the rank. Anything computed (``seed + offset``, ``f(x)``) is taken as deliberate."""
    if isinstance(seed, ast.Constant):
        return isinstance(seed.value, int)
    if isinstance(seed, ast.BinOp):
        return all(isinstance(side, ast.Constant) for side in (seed.left, seed.right))
    if (
        isinstance(seed, ast.Call)
        and known_names.dotted(seed.func) == "int"
        and len(seed.args) == 1
    ):
        return _same_on_every_rank(ctx, seed.args[0], root, depth)
    if isinstance(seed, (ast.Name, ast.Attribute)):
        if ctx.ranks.mentions_rank(seed) or "rank" in (known_names.dotted(seed) or "").lower():
            return False
        if "offset" in (known_names.dotted(seed) or "").lower():
            return False
        if isinstance(seed, ast.Name):
            value = guards.assigned_value(ctx, seed.id, root, seed)
            if value is not None:
                if depth >= 2:
                    return False
                return _same_on_every_rank(ctx, value, root, depth + 1)
        return True
    return False


def _family(qual: str | None) -> str:
    """The generator a seeding call seeds: torch's, NumPy's, Python's (``*``: all, a helper)."""
    head = (qual or "").split(".", 1)[0]
    return head if head in ("torch", "numpy", "random") else "*"


def _same_generator(a: str, b: str) -> bool:
    return a == b or "*" in (a, b)


def _reseeded_with_rank(ctx: ChunkContext, call: ast.Call, root: ast.AST) -> bool:
    """The same generator is seeded again later with the rank (``np.random.seed(seed + rank)``
    does not reseed torch's)."""
    mine = _family(ctx.call_qualname(call))
    for node in patterns.walk_scope(root):
        if (
            isinstance(node, ast.Call)
            and node is not call
            and patterns.before(call, node)
            and ctx.call_qualname(node) in SEEDERS
            and node.args
            and not _same_on_every_rank(ctx, node.args[0], root)
            and _same_generator(mine, _family(ctx.call_qualname(node)))
        ):
            return True
    return False


def _split_follows(ctx: ChunkContext, call: ast.Call, root: ast.AST) -> bool:
    if root is ctx.module_node:
        # Script code runs on across chunks: a split imported by name and used anywhere.
        for name, qual in ctx.facts.aliases.items():
            if qual.rsplit(".", 1)[-1] in _SPLITS and name in ctx.facts.names_used:
                return True
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Call) and patterns.before(call, node):
            name = known_names.dotted(node.func) or ""
            if name.rsplit(".", 1)[-1] in _SPLITS:
                return True
    return False


_HEAD = """\
import os
import random

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

SeedNotOffsetByRank.cases = (
    Valid(
        _HEAD
        + """\
def main(args, model):
    rank = dist.get_rank()
    torch.manual_seed(args.seed + rank)
    np.random.seed(args.seed + dist.get_rank())
    seed = args.seed + rank
    random.seed(seed)
    return DDP(model)
""",
        note="seeds already offset by the rank",
    ),
    Valid(
        """\
import os
import numpy as np
import torch
from torch.distributed import init_process_group

ddp = int(os.environ.get("RANK", -1)) != -1
torch.manual_seed(1337 + seed_offset)
model = torch.nn.parallel.DistributedDataParallel(model)
""",
        note="nanoGPT: 1337 + seed_offset (the offset is the rank, set elsewhere)",
    ),
    Valid(
        _HEAD
        + """\
def main(args, model_fn):
    torch.manual_seed(args.seed)
    model = model_fn()
    torch.manual_seed(args.seed + dist.get_rank())
    return DDP(model)
""",
        note="same seed for the initial weights, then reseeded with the rank",
    ),
    Valid(
        _HEAD
        + """\
from torch.utils.data import DistributedSampler

def loaders(args, dataset, model):
    g = torch.Generator()
    g.manual_seed(args.seed)
    sampler = DistributedSampler(dataset, seed=args.seed)
    return DDP(model), sampler, g
""",
        note="a torch.Generator / DistributedSampler seed must be the same on every rank",
    ),
    Valid(
        _HEAD
        + """\
from torch.utils.data import random_split

def data(dataset, model):
    torch.manual_seed(0)
    train_ds, val_ds = random_split(dataset, [0.9, 0.1])
    return DDP(model), train_ds, val_ds
""",
        note="the split must be identical on every rank",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator
from accelerate.utils import set_seed
from transformers import set_seed as hf_set_seed

def main(args, model):
    set_seed(args.seed, device_specific=True)
    hf_set_seed(args.seed)
    return DDP(model)
""",
        note="accelerate / transformers set_seed",
    ),
    Valid(
        _HEAD
        + """\
from sklearn.model_selection import train_test_split

torch.manual_seed(0)
np.random.seed(0)


def split(data):
    return train_test_split(data, test_size=0.1)
""",
        note="script code with a dataset split elsewhere in the file",
    ),
    Valid(
        """\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def main(model):
    torch.manual_seed(0)
    return FSDP(model)
""",
        note="no DDP wrap: identical initial weights may be required",
    ),
    Valid(
        """\
import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP

def fsdp_main(args):
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    model = FSDP(build_model().to(local_rank))
    train(model, args)

if __name__ == "__main__":
    args = argparse.ArgumentParser().parse_args()
    torch.manual_seed(args.seed)
    fsdp_main(args)
""",
        note="an FSDP script that imports DDP and never uses it: no DDP wrap",
    ),
    Valid(
        _HEAD
        + """\
def main(args, model):
    if dist.get_rank() == 0:
        torch.manual_seed(0)
        print(torch.randn(3))
    return DDP(model)
""",
        note="under a rank condition",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, model, rank):
    «torch.manual_seed(args.seed)»
    «np.random.seed(args.seed)»
    return DDP(model)
""",
        fixed=_HEAD
        + """\
def main(args, model, rank):
    torch.manual_seed(args.seed + rank)
    np.random.seed(args.seed)
    return DDP(model)
""",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, model):
    args.rank = int(os.environ["RANK"])
    seed = 42
    # reproducible runs
    «random.seed(seed)»
    «torch.cuda.manual_seed_all(seed)»
    return DDP(model)
""",
        fixed=_HEAD
        + """\
def main(args, model):
    args.rank = int(os.environ["RANK"])
    seed = 42
    # reproducible runs
    random.seed(seed + args.rank)
    torch.cuda.manual_seed_all(seed)
    return DDP(model)
""",
        note="args.rank in scope",
    ),
    Valid(
        _HEAD
        + """\
def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

def main(args, model, rank):
    set_seed(args.seed + rank)
    return DDP(model)
""",
        note="a seeding helper: its parameter is decided by the caller, who offsets it",
    ),
    Invalid(
        _HEAD
        + """\
def set_seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)

def main(args, model):
    rank = int(os.environ["RANK"])
    «set_seed(args.seed)»
    return DDP(model)
""",
        fixed=_HEAD
        + """\
def set_seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)

def main(args, model):
    rank = int(os.environ["RANK"])
    set_seed(args.seed + rank)
    return DDP(model)
""",
        note="a same-file seeding helper called with the same seed on every rank",
    ),
    Invalid(
        """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

def main(model):
    «torch.manual_seed(42)»
    return DDP(model)
""",
        fixed="""\
import os

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

def main(model):
    torch.manual_seed(42 + int(os.environ.get("RANK", 0)))
    return DDP(model)
""",
        note="no rank in scope: RANK from the environment",
    ),
    Invalid(
        """\
from accelerate.utils import set_seed

def main(accelerator, args, build):
    «set_seed(args.seed)»
    net, opt = accelerator.prepare(build(), None)
    return net, opt
""",
        fixed="""\
from accelerate.utils import set_seed

def main(accelerator, args, build):
    set_seed(args.seed, device_specific=True)
    net, opt = accelerator.prepare(build(), None)
    return net, opt
""",
        note="accelerate's set_seed without device_specific=True (the table's keyword)",
    ),
    Invalid(
        """\
from accelerate.utils import set_seed as seed_all

def main(accelerator, cfg, net):
    «seed_all(cfg.seed, device_specific=False)»
    return accelerator.prepare(net)
""",
        fixed="""\
from accelerate.utils import set_seed as seed_all

def main(accelerator, cfg, net):
    seed_all(cfg.seed, device_specific=True)
    return accelerator.prepare(net)
""",
        note="device_specific=False spelled out",
    ),
    Valid(
        """\
from accelerate.utils import set_seed

def main(accelerator, args, build, per_rank):
    set_seed(args.seed, device_specific=per_rank)
    return accelerator.prepare(build())
""",
        note="device_specific passed as a variable: the author decided",
    ),
    Valid(
        """\
from accelerate.utils import set_seed

def make_split(args, dataset):
    set_seed(args.seed)
    return dataset.shuffle()

def main(accelerator, args, build):
    return accelerator.prepare(build())
""",
        note="set_seed in a function that prepares no model",
    ),
    Valid(
        """\
import torch
from accelerate.utils import set_seed
from torch.distributed.fsdp import fully_shard

def main(accelerator, args, build):
    set_seed(args.seed)
    net = build()
    fully_shard(net)
    return accelerator.prepare(net)
""",
        note="FSDP2: the ranks need the same initial weights (nothing broadcasts them)",
    ),
    Valid(
        """\
import torch
import deepspeed

def main(args, build):
    torch.manual_seed(args.seed)
    engine, _, _, _ = deepspeed.initialize(args=args, model=build())
    return engine
""",
        note="a plain torch seed beside a framework wrap: only the framework's own seeder, which "
        "has a per-rank option, is reported where no DDP wrap is",
    ),
    Valid(
        """\
from accelerate import Accelerator
from accelerate.utils import FullyShardedDataParallelPlugin, set_seed

def main(args, build):
    set_seed(args.seed)
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    accelerator = Accelerator(fsdp_plugin=plugin)
    return accelerator.prepare(build())
""",
        note="accelerate with its FSDP plugin: the ranks need the same initial weights",
    ),
    Invalid(
        _HEAD
        + """\
def seed_all(seed=0, rank=0):
    «torch.manual_seed(seed)»
    np.random.seed(seed + rank)
    random.seed(seed + rank)


def main(args, model):
    seed_all(args.seed, 0)
    model = DDP(model)
    seed_all(args.seed, args.rank)
""",
        fixed=_HEAD
        + """\
def seed_all(seed=0, rank=0):
    torch.manual_seed(seed + rank)
    np.random.seed(seed + rank)
    random.seed(seed + rank)


def main(args, model):
    seed_all(args.seed, 0)
    model = DDP(model)
    seed_all(args.seed, args.rank)
""",
        note="a seeding helper given the rank that forgets it for torch (NumPy's seed does not "
        "reseed torch's); its callers pass the rank and are not reported",
    ),
    Invalid(
        """\
import random

import numpy as np
import torch
import torch.distributed as dist


def random_seed(seed=42, rank=0):
    «torch.manual_seed(seed)»
    np.random.seed(seed + rank)
    random.seed(seed + rank)
""",
        fixed="""\
import random

import numpy as np
import torch
import torch.distributed as dist


def random_seed(seed=42, rank=0):
    torch.manual_seed(seed + rank)
    np.random.seed(seed + rank)
    random.seed(seed + rank)
""",
        note="a utility module's seeding helper given the rank, without any DDP wrap in the "
        "module (the wrap is in the training script that calls it)",
    ),
    Valid(
        """\
import torch
import torch.distributed as dist


def init_weights(seed=0, rank=0):
    torch.manual_seed(seed + rank)
""",
        note="no DDP wrap and a helper that offsets by its rank",
    ),
    Invalid(
        """\
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import parallelize_module

mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))
model = parallelize_module(build_model(), mesh["tp"], plan)
model = fully_shard(model, mesh=mesh["dp"])
optimizer = torch.optim.AdamW(model.parameters())
for i in range(steps):
    «torch.manual_seed(i)»
    batch = torch.randint(32000, (8, 256), device="cuda")
    model(batch).sum().backward()
    optimizer.step()
""",
        note="FSDP shards the data too: a per-step reseed must differ per data-parallel rank "
        "(no fix: the offset is the data-parallel rank, not the global one)",
    ),
    Valid(
        """\
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import parallelize_module

mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))
dp_rank = mesh["dp"].get_local_rank()
model = fully_shard(parallelize_module(build_model(), mesh["tp"], plan), mesh=mesh["dp"])
optimizer = torch.optim.AdamW(model.parameters())
for i in range(steps):
    torch.manual_seed(i + dp_rank)
    batch = torch.randint(32000, (8, 256), device="cuda")
    model(batch).sum().backward()
    optimizer.step()
""",
        note="the per-step seed offset by the data-parallel rank",
    ),
    Valid(
        """\
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

mesh = init_device_mesh("cuda", (4,))
model = parallelize_module(build_model(), mesh, plan)
optimizer = torch.optim.AdamW(model.parameters())
for i in range(steps):
    torch.manual_seed(i)
    batch = torch.randint(32000, (8, 256), device="cuda")
    model(batch).sum().backward()
    optimizer.step()
""",
        note="tensor parallelism only: the ranks of a group need the same input",
    ),
    Invalid(
        """\
import torch
from torch.utils.data import DataLoader, distributed


def create_dataloader(dataset, batch_size, rank=-1, workers=8, seed=0):
    sampler = None if rank == -1 else distributed.DistributedSampler(dataset, shuffle=True)
    generator = torch.Generator()
    «generator.manual_seed(6148914691236517205 + seed)»
    return DataLoader(dataset, batch_size, sampler=sampler, num_workers=workers, generator=generator)
""",
        fixed="""\
import torch
from torch.utils.data import DataLoader, distributed


def create_dataloader(dataset, batch_size, rank=-1, workers=8, seed=0):
    sampler = None if rank == -1 else distributed.DistributedSampler(dataset, shuffle=True)
    generator = torch.Generator()
    generator.manual_seed((6148914691236517205 + seed) + rank)
    return DataLoader(dataset, batch_size, sampler=sampler, num_workers=workers, generator=generator)
""",
        note="a loader's generator seeds its workers' augmentations; the helper is handed the rank",
    ),
    Valid(
        """\
import torch
from torch.utils.data import DataLoader, RandomSampler


def create_dataloader(dataset, batch_size, rank=-1, seed=0):
    generator = torch.Generator()
    generator.manual_seed(seed)
    sampler = RandomSampler(dataset, generator=generator)
    return DataLoader(dataset, batch_size, sampler=sampler)
""",
        note="a sampler's generator: the ranks must agree on the order it draws",
    ),
    Valid(
        """\
import random

import torch
import torch.distributed as dist


class DistributedBucketSampler(torch.utils.data.BatchSampler):
    def __init__(self, data_source, batch_size, num_replicas, rank, seed=0):
        random.seed(seed)
        self.batches = list(range(0, len(data_source), batch_size))
        self.rank, self.num_replicas = rank, num_replicas

    def __iter__(self):
        random.shuffle(self.batches)
        return iter(self.batches[self.rank :: self.num_replicas])
""",
        note="a sampler given the seed and the rank: every rank must shuffle alike",
    ),
)
