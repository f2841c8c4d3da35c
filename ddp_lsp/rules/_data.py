"""Helpers shared by the data-loading rules (DDP401-DDP406).

What a ``DataLoader(...)`` call says (its sampler, shuffle, workers; positional or keyword), how
to add, replace or remove one of its keyword arguments without breaking commas or losing
comments, and the project-independent signals the rules use to stay quiet: frameworks that
install a ``DistributedSampler`` themselves (Accelerate, Lightning, Ray Train), datasets that
are iterable or already sharded per rank, and loaders that evaluate rather than train.

Pure helpers over ``ast`` and a :class:`ChunkContext`; no rule state.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext, spelling
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.facts import path_of
from ddp_lsp.core.rule import LOOPS, ChunkContext
from ddp_lsp.core.types import Pos, Span
from ddp_lsp.rules import _patterns as patterns

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
#            pin_memory, drop_last, ...): positions of the parameters the rules read.
LOADER_POS = {
    "dataset": 0,
    "batch_size": 1,
    "shuffle": 2,
    "sampler": 3,
    "batch_sampler": 4,
    "num_workers": 5,
    "collate_fn": 6,
    "pin_memory": 7,
}
SAMPLER_POS = {"dataset": 0, "num_replicas": 1, "rank": 2, "shuffle": 3, "seed": 4}

# Frameworks that replace or wrap the loader's sampler with a distributed one (and call
# set_epoch): their users must not add a DistributedSampler by hand (the framework tables'
# `installs-sampler` modules).
_SAMPLER_FRAMEWORKS = framework_tables.BUILTIN.modules(framework_tables.Meaning.INSTALLS_SAMPLER)
# Methods that take a loader and shard it (accelerator.prepare, fabric.setup_dataloaders,
# ray.train.torch.prepare_data_loader, Lightning's trainer.fit/validate/test/predict), and
# Lightning's DataModule / LightningModule hooks, whose returned loaders it shards: the
# tables' `installs-sampler` names.
_INSTALLERS = framework_tables.BUILTIN.functions(framework_tables.Meaning.INSTALLS_SAMPLER)
LIGHTNING_HOOKS = frozenset(n for n in _INSTALLERS if n.endswith("_dataloader"))
_PREPARE_METHODS = _INSTALLERS - LIGHTNING_HOOKS
# Names of evaluation data: val_loader, valid_ds, eval_dataset, test_set, dev_loader...
_EVAL_NAME = re.compile(
    r"(^|_|\.)(val|valid|validation|eval|evaluation|evaluate|validate|test|testing|dev|"
    r"holdout|calib|calibration|inference|infer|predict)"
    r"(_|$|\d|s$|set|loader|ds|data|dl|iter|split)",
    re.IGNORECASE,
)
# Conditions that choose between a distributed and a single-process set-up.
_DIST_TEST = re.compile(
    r"distributed|ddp|world_size|is_initialized|multi_?gpu|n_?gpus|num_gpus|nprocs|is_dist|use_dist",
    re.IGNORECASE,
)
_EVAL_SPLITS = frozenset({"val", "valid", "validation", "test", "dev", "eval", "evaluation"})
# Keyword arguments that say a dataset is split per rank already.
_SHARD_WORDS = ("world_size", "num_replicas", "num_shards", "shard", "num_processes", "nproc")
# Iterable-style datasets and dataset libraries that stream (no __getitem__ to sample from).
_ITERABLE_QUALS = frozenset(
    {
        "torch.utils.data.IterableDataset",
        "torch.utils.data.ChainDataset",
        "torch.utils.data.dataset.IterableDataset",
        "torch.utils.data.IterDataPipe",
        "torch.utils.data.datapipes.iter.IterableWrapper",
        "datasets.distributed.split_dataset_by_node",
    }
)
_ITERABLE_PREFIXES = (
    "webdataset.",
    "wds.",
    "torchdata.",
    "streaming.",
    "mosaicml.streaming.",
    "ffcv.",
    "nvidia.dali.",
    "torch.utils.data.datapipes.",
)
# Map-style datasets the analysis can vouch for.
_MAP_QUALS = frozenset(
    {
        "torch.utils.data.TensorDataset",
        "torch.utils.data.Subset",
        "torch.utils.data.ConcatDataset",
        "torch.utils.data.dataset.TensorDataset",
        "torch.utils.data.dataset.Subset",
        "torch.utils.data.random_split",
    }
)
_MAP_PREFIXES = ("torchvision.datasets.",)


# -- arguments ------------------------------------------------------------------------------------


def has_star(call: ast.Call) -> bool:
    """``*args`` or ``**kwargs`` in the call: any argument may hide there."""
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        kw.arg is None for kw in call.keywords
    )


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def arg(call: ast.Call, name: str, positions: dict[str, int] = LOADER_POS) -> ast.expr | None:
    """The value passed for parameter ``name``, by keyword or position."""
    kw = keyword(call, name)
    if kw is not None:
        return kw.value
    pos = positions.get(name)
    if (
        pos is not None
        and pos < len(call.args)
        and not any(isinstance(a, ast.Starred) for a in call.args[: pos + 1])
    ):
        return call.args[pos]
    return None


def is_const(expr: ast.AST | None, value: object) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is value


def is_none(expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def int_value(expr: ast.AST | None) -> int | None:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    return None


# -- calls and names -----------------------------------------------------------------------------


def dataloader_calls(ctx: ChunkContext) -> list[ast.Call]:
    return ctx.calls_to(known_names.DATALOADER)


#: Project or library samplers named as distributed ones (`DistributedBucketSampler`,
#: `SmartDistributedSampler`, `InfiniteDistributedSampler`): they shard per rank and, like
#: DistributedSampler (which they usually subclass), reshuffle through `set_epoch`.
_DIST_SAMPLER_NAME = re.compile(r"^\w*Distributed\w*Sampler$")


def is_sampler_call(ctx: ChunkContext, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    qual = ctx.call_qualname(node)
    if qual == known_names.DISTRIBUTED_SAMPLER:
        return True
    name = qual or known_names.dotted(node.func) or ""
    return bool(_DIST_SAMPLER_NAME.match(name.rsplit(".", 1)[-1]))


def assigned_path(ctx: ChunkContext, node: ast.AST) -> str | None:
    """``loader`` in ``loader = <node>`` (also ``self.loader``, annotated or conditional)."""
    cur = node
    parent = ctx.parent(cur)
    while isinstance(parent, ast.IfExp):
        cur, parent = parent, ctx.parent(parent)
    if isinstance(parent, ast.Assign) and parent.value is cur and len(parent.targets) == 1:
        return path_of(parent.targets[0])
    if isinstance(parent, ast.AnnAssign) and parent.value is cur:
        return path_of(parent.target)
    return None


def dotted_path(expr: ast.AST) -> str | None:
    return known_names.dotted(expr)


def in_test_module(ctx: ChunkContext) -> bool:
    """The module is test code (known with the project view, which gives its path). A test
    feeds every rank the data and the seeds it means to compare (identical data is how a
    distributed test checks that the ranks agree), so how a training run splits its data
    across ranks is not the question there."""
    return ctx.facts.is_test_module()


def uses_sampler_framework(ctx: ChunkContext) -> bool:
    """The module imports a framework that installs distributed samplers itself."""
    # Asked by several rules for every chunk, of the same imports: once per set of them.
    return _imports_sampler_framework(frozenset(ctx.facts.aliases.values()))


@functools.lru_cache(maxsize=16)
def _imports_sampler_framework(quals: frozenset[str]) -> bool:
    return any(q == f or q.startswith(f + ".") for q in quals for f in _SAMPLER_FRAMEWORKS)


def function_name(ctx: ChunkContext, node: ast.AST) -> str:
    fn = ctx.enclosing_function(node)
    return fn.name if fn is not None else ""


def is_eval_name(name: str | None) -> bool:
    """``val_loader``, ``dataset_test``, ``evaluate``; never a name that also says train
    (``train_and_evaluate``, ``trainval_set``)."""
    if not name or "train" in name.lower():
        return False
    return _EVAL_NAME.search(name) is not None


def scope_assignments(root: ast.AST, path: str) -> list[tuple[ast.stmt, ast.expr]]:
    """``(statement, value)`` for every ``path = value`` in ``root``'s own frame."""
    out: list[tuple[ast.stmt, ast.expr]] = []
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Assign) and node.value is not None:
            for t in node.targets:
                if path_of(t) == path:
                    out.append((node, node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            if path_of(node.target) == path:
                out.append((node, node.value))
    out.sort(key=lambda sv: patterns.order(sv[0]))
    return out


def values_of(root: ast.AST, expr: ast.AST, depth: int = 0) -> list[ast.expr]:
    """What ``expr`` may hold: itself, or the values assigned to it in this frame (following
    ``a = b`` chains and both branches of ``x if c else y``)."""
    if isinstance(expr, ast.IfExp):
        return values_of(root, expr.body, depth) + values_of(root, expr.orelse, depth)
    path = path_of(expr)
    if path is None or depth > 3:
        return [expr]  # type: ignore[list-item]
    assigned = scope_assignments(root, path)
    if not assigned:
        return [expr]  # type: ignore[list-item]
    out: list[ast.expr] = []
    for _, value in assigned:
        out.extend(values_of(root, value, depth + 1))
    return out


# -- datasets ------------------------------------------------------------------------------------


def _local_class_methods(ctx: ChunkContext, cls: str) -> set[str]:
    prefix = cls + "."
    return {q[len(prefix) :] for q in ctx.facts.func_params if q.startswith(prefix)}


def dataset_kind(ctx: ChunkContext, root: ast.AST, dataset: ast.expr) -> str | None:
    """``"iterable"``, ``"sharded"``, ``"eval"``, ``"map"`` or None (unknown) for the dataset
    a loader reads, from how it was built in this frame."""
    kinds: set[str | None] = set()
    for value in values_of(root, dataset):
        kinds.add(_value_kind(ctx, root, value))
    for k in ("iterable", "sharded", "eval"):
        if k in kinds:
            return k
    if kinds == {"map"}:
        return "map"
    return None


def _value_kind(ctx: ChunkContext, root: ast.AST, value: ast.expr) -> str | None:
    if ctx.ranks.mentions_rank(value) or _mentions_shard(value):
        return "sharded"
    if not isinstance(value, ast.Call):
        if isinstance(value, ast.Subscript):
            # load_dataset(...)["validation"]
            key = value.slice
            if isinstance(key, ast.Constant) and str(key.value).lower() in _EVAL_SPLITS:
                return "eval"
            return _value_kind(ctx, root, value.value)
        return None
    # dataset.shard(...), dataset.with_format(...).shard(...), wds pipelines.
    for node in tree_walk.bfs(value):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("shard", "split_by_node", "shard_by_rank"):
                return "sharded"
    qual = ctx.call_qualname(value) or ""
    if qual in _ITERABLE_QUALS or qual.startswith(_ITERABLE_PREFIXES):
        return "iterable"
    for kw in value.keywords:
        if kw.arg == "streaming" and not is_const(kw.value, False):
            return "iterable"
        if kw.arg == "train" and is_const(kw.value, False):
            return "eval"
        if kw.arg == "split" and isinstance(kw.value, ast.Constant):
            if str(kw.value.value).lower().split("[")[0] in _EVAL_SPLITS:
                return "eval"
        if kw.arg in ("is_train", "training", "train_mode") and is_const(kw.value, False):
            return "eval"
        if kw.arg in ("mode", "stage") and isinstance(kw.value, ast.Constant):
            if str(kw.value.value).lower() in _EVAL_SPLITS | {"eval", "test"}:
                return "eval"
    name = known_names.dotted(value.func)
    if name is not None and "." not in name:
        methods = _local_class_methods(ctx, name)
        if "__iter__" in methods and "__getitem__" not in methods:
            return "iterable"
        if "__getitem__" in methods:
            return "map"
    if qual in _MAP_QUALS or qual.startswith(_MAP_PREFIXES):
        return "map"
    if qual in ("datasets.load_dataset", "datasets.load_from_disk"):
        return "map"
    return None


def _mentions_shard(value: ast.AST) -> bool:
    for node in tree_walk.bfs(value):
        if (
            isinstance(node, ast.keyword)
            and node.arg
            and any(w in node.arg.lower() for w in _SHARD_WORDS)
        ):
            return True
        if isinstance(node, ast.Name) and node.id.lower() in ("world_size", "num_replicas"):
            return True
        if isinstance(node, ast.Attribute) and node.attr.lower() in ("world_size", "num_replicas"):
            return True
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name in ("get_world_size", "split_dataset_by_node"):
                return True
    return False


# -- loaders in use --------------------------------------------------------------------------------


def _strip_wrappers(expr: ast.AST) -> ast.AST:
    """``loader`` in ``enumerate(loader)``, ``tqdm(loader, ...)``, ``zip(loader, other)``."""
    while isinstance(expr, ast.Call) and expr.args:
        expr = expr.args[0]
    return expr


def loops_over(ctx: ChunkContext, root: ast.AST, path: str) -> list[ast.For | ast.AsyncFor]:
    """``for`` loops in ``root``'s frame whose iterable is the loader ``path``."""
    heads = ctx.memo(("loop heads", id(root)), lambda: _loop_heads(root))
    return [node for node, names in heads if path in names]


def _loop_heads(root: ast.AST) -> list[tuple[ast.For | ast.AsyncFor, frozenset[str]]]:
    """The ``for`` loops of ``root``'s frame in source order, each with the names its iterable
    may be (itself, unwrapped, the arguments of a call): asked for several loaders."""
    out: list[tuple[ast.For | ast.AsyncFor, frozenset[str]]] = []
    for node in patterns.walk_scope(root):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            it = node.iter
            cands = [it, _strip_wrappers(it)]
            if isinstance(it, ast.Call):
                cands.extend(it.args)
            names = frozenset(n for n in map(known_names.dotted, cands) if n is not None)
            out.append((node, names))
    out.sort(key=lambda e: patterns.order(e[0]))
    return out


def calls_receiving(ctx: ChunkContext, root: ast.AST, path: str) -> list[ast.Call]:
    """Calls in ``root``'s frame with ``path`` (or an expression starting with it) as an
    argument, also inside a list or tuple argument (``train(..., [train_loader, eval_loader])``)."""
    given = ctx.memo(("calls given", id(root)), lambda: _calls_given(root))
    prefix = path + "."
    return [call for call, names in given if any(n == path or n.startswith(prefix) for n in names)]


def _calls_given(root: ast.AST) -> list[tuple[ast.Call, tuple[str, ...]]]:
    """The calls of ``root``'s frame that take a named value (the frame's walk order), each
    with the names of its arguments (and of a list or tuple argument's items)."""
    out: list[tuple[ast.Call, tuple[str, ...]]] = []
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Call):
            given: list[ast.expr] = []
            for a in [*node.args, *(kw.value for kw in node.keywords)]:
                a = a.value if isinstance(a, ast.Starred) else a
                given.extend(a.elts if isinstance(a, ast.List | ast.Tuple) else [a])
            names = tuple(n for n in map(known_names.dotted, given) if n is not None)
            if names:
                out.append((node, names))
    return out


def handed_to_framework(ctx: ChunkContext, root: ast.AST, call: ast.Call, path: str | None) -> bool:
    """The loader goes to ``accelerator.prepare``, ``fabric.setup_dataloaders``, Ray Train's
    ``prepare_data_loader`` or a Lightning ``trainer.fit``, which install the sampler."""
    node: ast.AST | None = ctx.parent(call)
    while node is not None and not isinstance(node, ast.stmt):
        if isinstance(node, ast.Call) and _is_prepare(node):
            return True
        node = ctx.parent(node)
    if path is None:
        return False
    return any(_is_prepare(c) for c in calls_receiving(ctx, root, path))


def _is_prepare(call: ast.Call) -> bool:
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
    return name in _PREPARE_METHODS


def is_training_loop(loop: ast.AST) -> bool:
    """The loop body runs a backward pass or an optimizer step."""
    for node in tree_walk.bfs(loop):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("backward",):
                return True
            if node.func.attr == "step" and "optim" in (known_names.dotted(node.func.value) or ""):
                return True
    return False


def epoch_loop_of(ctx: ChunkContext, inner: ast.AST) -> ast.For | ast.AsyncFor | ast.While | None:
    """The innermost loop around ``inner`` (in the same function)."""
    loops = ctx.enclosing_loops(inner)
    return loops[0] if loops else None


def is_loop(node: ast.AST) -> bool:
    return isinstance(node, LOOPS)


def walk(root: ast.AST) -> Iterator[ast.AST]:
    return patterns.walk_scope(root)


def kind_is(ctx: ChunkContext, expr: ast.AST, kind: str, at: ast.AST | None = None) -> bool:
    return ctx.kind(expr, at) == kind


SAMPLER = fact_model.SAMPLER
LOADER = fact_model.LOADER


# -- spelling -------------------------------------------------------------------------------------


def sampler_spelling(ctx: ChunkContext) -> tuple[str, tuple[str, ...]]:
    """How to write ``DistributedSampler`` here, and the import it needs."""
    for name, target in sorted(ctx.facts.aliases.items()):
        if target == known_names.DISTRIBUTED_SAMPLER:
            return name, ()
    clash = "DistributedSampler" in ctx.facts.aliases or any(
        q == "DistributedSampler" or q.startswith("DistributedSampler.")
        for q in ctx.facts.func_params
    )
    if not clash:
        return "DistributedSampler", (
            "from torch.utils.data.distributed import DistributedSampler",
        )
    return spelling.spell(ctx.facts, known_names.DISTRIBUTED_SAMPLER)


# -- resolving num_workers -------------------------------------------------------------------------


def resolve_int(ctx: ChunkContext, root: ast.AST, expr: ast.AST | None) -> tuple[int, str] | None:
    """An int value for ``expr`` and how it was found: a literal, a local ``name = 8``, or the
    ``default=`` of the matching ``parser.add_argument`` in this chunk."""
    if expr is None:
        return None
    value = int_value(expr)
    if value is not None:
        return value, ""
    if isinstance(expr, ast.Name):
        assigned = scope_assignments(root, expr.id)
        if len(assigned) == 1:
            v = int_value(assigned[0][1])
            if v is not None:
                return v, f"`{expr.id} = {v}`"
        return None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        found = argparse_default(ctx, expr.attr)
        if found is not None:
            return found, f"the `--{expr.attr.replace('_', '-')}` default"
    return None


def argparse_default(ctx: ChunkContext, dest: str) -> int | None:
    """The int ``default=`` of ``add_argument`` whose destination is ``dest``, when exactly one
    such call in this chunk says so."""
    found: list[int] = []
    for call in ctx.calls():
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        dests = set()
        d = keyword(call, "dest")
        if d is not None and isinstance(d.value, ast.Constant) and isinstance(d.value.value, str):
            dests.add(d.value.value)
        else:
            longs = [
                a.value
                for a in call.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            named = (
                [s for s in longs if s.startswith("--")]
                or [s for s in longs if not s.startswith("-")]
                or longs
            )
            if named:
                dests.add(named[0].lstrip("-").replace("-", "_"))
        if dest in dests:
            default = keyword(call, "default")
            v = int_value(default.value) if default is not None else None
            if v is None:
                return None
            found.append(v)
    return found[0] if len(found) == 1 else None


def callee_span(ctx: ChunkContext, func: ast.expr) -> Span:
    """The span of a callee's last name: ``DataLoader`` in ``torch.utils.data.DataLoader``."""
    sp = chunktext.span(ctx.chunk, func)
    if isinstance(func, ast.Attribute) and sp.end.col >= len(func.attr):
        return Span(Pos(sp.end.line, sp.end.col - len(func.attr)), sp.end)
    return sp


# -- CUDA evidence ---------------------------------------------------------------------------------


def assignment_index(root: ast.AST) -> dict[str, list[ast.expr]]:
    """Every ``path = value`` of ``root``'s own frame, by path (one walk, reused)."""
    index: dict[str, list[ast.expr]] = {}
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                p = path_of(t)
                if p is not None:
                    index.setdefault(p, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            p = path_of(node.target)
            if p is not None:
                index.setdefault(p, []).append(node.value)
    return index


def is_cuda_device(
    ctx: ChunkContext, index: dict[str, list[ast.expr]], expr: ast.AST, depth: int = 0
) -> bool:
    """``"cuda"``, ``"cuda:0"``, ``f"cuda:{rank}"``, ``torch.device("cuda", i)``, a local
    rank, or a name assigned one of those in this frame."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str) and expr.value.startswith("cuda")
    if isinstance(expr, ast.JoinedStr):
        first = expr.values[0] if expr.values else None
        return isinstance(first, ast.Constant) and str(first.value).startswith("cuda")
    if isinstance(expr, ast.IfExp):
        return is_cuda_device(ctx, index, expr.body, depth) or is_cuda_device(
            ctx, index, expr.orelse, depth
        )
    if isinstance(expr, ast.Call):
        if (known_names.dotted(expr.func) or "").endswith("device") and expr.args:
            return is_cuda_device(ctx, index, expr.args[0], depth)
        return False
    if ctx.ranks.is_rank_expr(expr):
        return True  # .to(local_rank): an int device is a CUDA device
    path = path_of(expr)
    if path is not None and depth < 3:
        return any(is_cuda_device(ctx, index, v, depth + 1) for v in index.get(path, ()))
    return False


def moves_to_cuda(ctx: ChunkContext, root: ast.AST, regions: list[ast.For | ast.AsyncFor]) -> bool:
    """One of ``regions`` copies tensors to a CUDA device: ``.cuda()``, ``.to(<cuda device>)``,
    any copy with ``non_blocking=True``, or ``.to(device)`` in a frame that uses CUDA."""
    index = assignment_index(root)
    gpu_frame: bool | None = None
    for region in regions:
        for node in tree_walk.bfs(region):
            if not isinstance(node, ast.Call):
                continue
            if any(kw.arg == "non_blocking" and is_const(kw.value, True) for kw in node.keywords):
                return True
            if not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr == "cuda":
                return True
            if node.func.attr != "to":
                continue
            dev_kw = keyword(node, "device")
            dev = node.args[0] if node.args else (dev_kw.value if dev_kw is not None else None)
            if dev is None:
                continue
            if is_cuda_device(ctx, index, dev):
                return True
            if path_of(dev) is not None:
                if gpu_frame is None:
                    gpu_frame = uses_cuda(ctx, root, index)
                if gpu_frame:
                    return True
    return False


def uses_cuda(
    ctx: ChunkContext, root: ast.AST, index: dict[str, list[ast.expr]] | None = None
) -> bool:
    """The frame puts work on a GPU: ``.cuda()``, ``torch.cuda.set_device``, a CUDA device,
    ``device_ids=``, the NCCL backend."""
    if index is None:
        index = assignment_index(root)
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Call):
            name = known_names.dotted(node.func) or ""
            if name.endswith(".cuda") or name.endswith("cuda.set_device"):
                return True
            if name.endswith(".to") and node.args and is_cuda_device(ctx, index, node.args[0]):
                return True
            if any(kw.arg == "device_ids" for kw in node.keywords):
                return True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("cuda") or node.value == "nccl":
                return True
    return False


def in_mode_branch(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` sits in a branch chosen by distributed-ness (``if args.distributed: ... else:``,
    ``if world_size > 1``), or in an ``if``/``else`` whose other branch builds a
    ``DistributedSampler``: the single-process side of a set-up that has a distributed one."""
    child: ast.AST = node
    for a in ctx.ancestors(node):
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        if isinstance(a, (ast.If, ast.IfExp)) and child is not a.test:
            if _DIST_TEST.search(ast.unparse(a.test)):
                return True
            in_body = (child in a.body) if isinstance(a.body, list) else (child is a.body)
            other = a.orelse if in_body else a.body
            others = other if isinstance(other, list) else [other]
            for o in others:
                for n in tree_walk.bfs(o):
                    if is_sampler_call(ctx, n):
                        return True
        child = a
    return False


_NO_GRAD = ("no_grad", "inference_mode")


def under_no_grad(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` runs inside ``with torch.no_grad()`` / ``torch.inference_mode()`` or in a
    function decorated with either: evaluation, not training."""
    for a in ctx.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                expr = item.context_expr
                name = known_names.dotted(expr.func if isinstance(expr, ast.Call) else expr) or ""
                if name.rsplit(".", 1)[-1] in _NO_GRAD:
                    return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in a.decorator_list:
                name = known_names.dotted(d.func if isinstance(d, ast.Call) else d) or ""
                if name.rsplit(".", 1)[-1] in _NO_GRAD:
                    return True
            return False
    return False


def on_gpu(ctx: ChunkContext, index: dict[str, list[ast.expr]], expr: ast.AST) -> bool:
    """``expr`` is a CUDA device, a DDP/FSDP-wrapped model, or a value this frame moved to a
    GPU (``model = model.cuda(rank)``, ``model = DDP(model.to(device))``)."""
    if is_cuda_device(ctx, index, expr):
        return True
    if ctx.kind(expr) in (fact_model.DDP, fact_model.FSDP):
        return True
    path = path_of(expr)
    if path is None:
        return False
    for value in index.get(path, ()):
        if not isinstance(value, ast.Call):
            continue
        if ctx.call_qualname(value) in (known_names.DDP, known_names.FSDP):
            return True
        fn = value.func
        if isinstance(fn, ast.Attribute) and fn.attr == "cuda":
            return True
        if isinstance(fn, ast.Attribute) and fn.attr == "to" and value.args:
            if is_cuda_device(ctx, index, value.args[0]):
                return True
    return False
