"""Devices, ranks and process-group set-up: helpers shared by DDP302-DDP304 and DDP503-DDP506.

Pure helpers over ``ast`` and a :class:`ChunkContext`; no rule state. The questions:

- which expression holds this process's *local* rank (its GPU index) or its *global* rank where
  a statement runs, so a fix can use it (:func:`local_rank_text`, :func:`global_rank_text`);
- is the launch known to run one process only (:func:`single_process`);
- which statements do CUDA work (:func:`cuda_work`), which call is ``torch.cuda.set_device``.
"""

from __future__ import annotations

import ast
import re
import weakref
from dataclasses import dataclass

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _patterns as patterns

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
SET_DEVICE = frozenset(
    {"torch.cuda.set_device", "torch.accelerator.set_device_index", "torch.cuda.device"}
)
# torch.cuda functions that do not create a CUDA context on the current device.
_CUDA_QUERIES = frozenset(
    {
        "is_available",
        "device_count",
        "set_device",
        "get_device_name",
        "get_device_capability",
        "is_bf16_supported",
        "get_arch_list",
    }
)
# Names that hold the local rank (the GPU index of this process on its node).
LOCAL_NAMES = frozenset(
    {
        "local_rank",
        "ddp_local_rank",
        "LOCAL_RANK",
        "local_process_index",
        "gpu",
        "gpu_id",
        "local_gpu",
    }
)
# Names that hold the global rank.
_GPU_NAMES = frozenset({"gpu", "gpu_id", "local_gpu"})
GLOBAL_NAMES = frozenset({"rank", "global_rank", "ddp_rank", "world_rank", "RANK", "rank_id"})
_HOLDERS = ("args", "self", "cfg", "config", "opt", "opts")
LOCAL_ENV = 'int(os.environ["LOCAL_RANK"])'
GLOBAL_ENV = 'int(os.environ.get("RANK", 0))'
_CUDA_INDEX = re.compile(r"^cuda:(\d+)$")


@dataclass(frozen=True)
class RankText:
    text: str  # what to write: "local_rank", "args.gpu", 'int(os.environ["LOCAL_RANK"])'
    imports: tuple[str, ...] = ()
    from_code: bool = True  # False: the environment fallback, not a name the code uses


def single_process(ctx: ChunkContext) -> bool:
    """The launch configuration next to the script says one process (per node and in all)."""
    launch = ctx.env.launch
    if launch is None:
        return False
    if launch.world_size == 1:
        return True
    return launch.nproc_per_node == 1 and (launch.num_nodes in (None, 1))


def one_gpu_per_node(ctx: ChunkContext) -> bool:
    """One process per node (the launch says so, or preflight found one GPU / one local
    process): GPU 0 is then every process's own GPU."""
    launch = ctx.env.launch
    if launch is not None and launch.nproc_per_node == 1:
        return True
    machine = ctx.env.machine
    if machine is not None and (machine.local_world_size == 1 or machine.gpu_count == 1):
        return True
    return single_process(ctx)


def procs_note(ctx: ChunkContext) -> str:
    """``" (8 processes per node, from run.sh)"`` when the launch or preflight says."""
    n, src = ctx.env.procs_per_node()
    if not n or n <= 1:
        return ""
    return f" ({n} processes per node, from {src})"


def uses_spawn(ctx: ChunkContext) -> bool:
    """The file imports ``torch.multiprocessing`` (``mp.spawn`` workers get the rank as an
    argument; ``LOCAL_RANK`` is not in their environment)."""
    return any(q.startswith("torch.multiprocessing") for q in ctx.facts.aliases.values())


def _params(ctx: ChunkContext, at: ast.AST) -> list[str]:
    out: list[str] = []
    for a in ctx.ancestors(at):
        if isinstance(a, FUNCS):
            out.extend(x.arg for x in (*a.args.posonlyargs, *a.args.args, *a.args.kwonlyargs))
    return out


class _RootIndex:
    """One walk of a scope: the statements binding each name, and ``holder.attr`` nodes.
    Rules ask for the rank at every finding, and a long function can hold hundreds."""

    def __init__(self, ctx: ChunkContext, root: ast.AST) -> None:
        self.root = root
        self.stores: dict[str, list[ast.stmt]] = {}
        self.attrs: list[ast.Attribute] = []
        for node in patterns.walk_scope(root):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.stores.setdefault(node.id, []).append(ctx.statement(node))
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in _HOLDERS
            ):
                self.attrs.append(node)


_INDEXES: weakref.WeakKeyDictionary[ChunkContext, dict[int, _RootIndex]] = (
    weakref.WeakKeyDictionary()
)


def _index(ctx: ChunkContext, root: ast.AST) -> _RootIndex:
    per_ctx = _INDEXES.setdefault(ctx, {})
    found = per_ctx.get(id(root))
    if found is None or found.root is not root:
        found = per_ctx[id(root)] = _RootIndex(ctx, root)
    return found


def _bound_before(
    ctx: ChunkContext, name: str, root: ast.AST, stmt: ast.stmt, rank_value: bool = False
) -> bool:
    """``name`` is assigned (or a loop/with target) before ``stmt`` on every path to it; with
    ``rank_value``, only by an assignment whose value comes from a rank."""
    owners = _index(ctx, root).stores.get(name)
    if not owners:
        return False
    around = {id(a) for a in ctx.ancestors(stmt)}
    for owner in owners:
        if owner is stmt or id(owner) in around:
            continue  # `local_rank = f(local_rank)` or a loop header holding stmt
        if rank_value and not (
            isinstance(owner, (ast.Assign, ast.AnnAssign))
            and owner.value is not None
            and ctx.ranks.mentions_rank(owner.value)
        ):
            continue
        if patterns.dominates(ctx, owner, stmt):
            return True
    return False


def _rank_text(ctx: ChunkContext, stmt: ast.stmt, names: frozenset[str], local: bool) -> str | None:
    root = patterns.scope_root(ctx, stmt)
    params = _params(ctx, stmt)
    inside = {id(n) for n in tree_walk.bfs(stmt)}
    # Plain names: a parameter, or bound before the statement.
    for name in sorted(names, key=lambda n: (n not in params, n)):
        if name in params:
            return name
    for name in sorted(names):
        # `gpu = torch.cuda.is_available()` is a flag: GPU-named locals must come from a rank.
        if _bound_before(ctx, name, root, stmt, rank_value=name in _GPU_NAMES):
            return name
    # Attribute paths the scope already reads (`args.gpu`, `self.local_rank`) whose holder is
    # available at the statement.
    for node in _index(ctx, root).attrs:
        if node.attr in names and id(node) not in inside:
            assert isinstance(node.value, ast.Name)
            holder = node.value.id
            if holder == "self" or holder in params or _bound_before(ctx, holder, root, stmt):
                if isinstance(node.ctx, ast.Store) and not patterns.dominates(
                    ctx, ctx.statement(node), stmt
                ):
                    continue
                return f"{holder}.{node.attr}"
    # Names the module facts know hold a rank in this scope (`local_rank = int(os.environ[...])`).
    for path in ctx.names_of_kind(fact_model.RANK, stmt):
        if ("local" in path.lower()) != local:
            continue
        if path.startswith("self.") and "self" in params and ctx.scope(stmt)[1] is not None:
            return path
        if "." not in path and (path in params or _bound_before(ctx, path, root, stmt)):
            return path
    return None


def local_rank_text(ctx: ChunkContext, stmt: ast.stmt) -> RankText | None:
    """The local rank where ``stmt`` runs, or the ``LOCAL_RANK`` fallback (None in files that
    start their workers with ``mp.spawn``: no ``LOCAL_RANK`` there)."""
    found = _rank_text(ctx, stmt, LOCAL_NAMES, True)
    if found is not None:
        return RankText(found)
    if uses_spawn(ctx):
        return None
    return RankText(LOCAL_ENV, ("import os",), from_code=False)


def global_rank_text(ctx: ChunkContext, stmt: ast.stmt) -> RankText:
    found = _rank_text(ctx, stmt, GLOBAL_NAMES, False)
    if found is not None:
        return RankText(found)
    return RankText(GLOBAL_ENV, ("import os",), from_code=False)


def cuda_index(expr: ast.AST | None) -> int | None:
    """``"cuda:N"`` as a string constant: N."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        m = _CUDA_INDEX.match(expr.value.strip())
        if m:
            return int(m.group(1))
    return None


def int_const(expr: ast.AST | None) -> int | None:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    return None


def is_set_device(ctx: ChunkContext, call: ast.Call) -> bool:
    return ctx.call_qualname(call) in SET_DEVICE


def cuda_work(ctx: ChunkContext, call: ast.Call) -> bool:
    """A call that touches the current CUDA device: ``.cuda()``, ``.to(...)``, ``torch.cuda.*``
    (other than queries), a collective, a DDP wrap."""
    qual = ctx.call_qualname(call) or ""
    if qual.startswith("torch.cuda."):
        return qual.rsplit(".", 1)[-1] not in _CUDA_QUERIES
    if qual in known_names.COLLECTIVES or qual == known_names.DDP:
        return True
    dotted = known_names.dotted(call.func)
    if dotted is not None and fact_model.is_collective_call(
        dotted, ctx.facts.aliases, ctx.ranks.frameworks
    ):
        return True
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("cuda", "to"):
        return qual == "" or not qual.startswith(("os.", "np.", "numpy."))
    return False


def guarded(ctx: ChunkContext, node: ast.AST) -> bool:
    """Under any rank condition (rank 0 only, or a subset chosen on purpose)."""
    return guards.is_guarded(ctx, node)


def arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(call.args) > index and not any(
        isinstance(a, ast.Starred) for a in call.args[: index + 1]
    ):
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


# Conditions that choose between a distributed and a single-process set-up.
_DIST_WORD = re.compile(
    r"distributed|ddp|is_initialized|multi_?gpu|is_dist|use_dist|multiprocessing", re.IGNORECASE
)
_COUNT_WORD = re.compile(
    r"world_size|n_?gpus?|num_gpus|nprocs|num_processes|device_count", re.IGNORECASE
)


def _distributed_truth(test: ast.AST) -> bool | None:
    """True: the test holds in distributed runs; False: in single-process runs; None: no such
    test (or one we cannot read, reported as None)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _distributed_truth(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Call):
        test = test.func
    if isinstance(test, (ast.Name, ast.Attribute)):
        name = test.id if isinstance(test, ast.Name) else test.attr
        return True if _DIST_WORD.search(name) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        name = known_names.dotted(left.func if isinstance(left, ast.Call) else left) or ""
        value = int_const(right)
        if isinstance(right, ast.UnaryOp) and isinstance(right.op, ast.USub):
            magnitude = int_const(right.operand)
            value = -magnitude if magnitude is not None else None
        if value is None:
            return None
        if _COUNT_WORD.search(name):
            if isinstance(op, ast.Gt) and value == 1 or isinstance(op, ast.GtE) and value == 2:
                return True
            if isinstance(op, ast.NotEq) and value == 1:
                return True
            if (
                isinstance(op, (ast.Eq, ast.LtE))
                and value == 1
                or isinstance(op, ast.Lt)
                and value == 2
            ):
                return False
        if "local_rank" in name.lower() and value == -1:
            if isinstance(op, ast.Eq):
                return False
            if isinstance(op, ast.NotEq):
                return True
    return None


def single_process_branch(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` runs on the single-process side of ``if args.distributed: ... else: ...``,
    ``if world_size == 1:``, ``if args.local_rank == -1:`` (or an ``or`` of such tests), and
    what DDP501/DDP502 take for one (``guards.single_process_branch``: the ``else:`` of ``if
    cfg.enable_fsdp:``, past ``if dist.get_world_size() != 1: raise ...``)."""
    if guards.single_process_branch(ctx, node):
        return True
    child: ast.AST = node
    for a in ctx.ancestors(node):
        if isinstance(a, (*FUNCS, ast.Lambda, ast.ClassDef)):
            return False
        if isinstance(a, (ast.If, ast.IfExp)) and child is not a.test:
            in_body = (child in a.body) if isinstance(a.body, list) else (child is a.body)
            tests = a.test.values if isinstance(a.test, ast.BoolOp) else [a.test]
            truths = [_distributed_truth(t) for t in tests]
            if isinstance(a.test, ast.BoolOp) and isinstance(a.test.op, ast.Or):
                # `if local_rank == -1 or no_cuda:` is true in single-process runs.
                if in_body and False in truths:
                    return True
            elif len(truths) == 1 and truths[0] is not None:
                if truths[0] is (not in_body):
                    return True
        child = a
    return False
