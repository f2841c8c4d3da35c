"""Rank discipline helpers shared by DDP501 and DDP502.

Three questions, answered from the chunk and the module facts only:

- :func:`is_guarded`: does this code already run on rank 0 only (or on a rank subset the
  author chose on purpose)? The core's uniformity analysis (:mod:`ddp_lsp.core.uniformity`)
  answers: any rank condition (``rank % ngpus_per_node == 0`` in the ImageNet example is
  deliberate), flags computed from the rank (``should_save = rank == 0 and ...``), Hugging
  Face's ``args.should_save`` / ``is_world_process_zero()``, rank-zero decorators
  (``@rank_zero_only``, ``@master_only``, ``@accelerator.on_main_process``), short-circuits
  (``is_main and torch.save(...)``) and earlier rank-dependent exits.
- :func:`rank_condition`: which rank-0 test does the code in scope already use? An existing
  guard of the same function is reused verbatim, then a rank-0 predicate in scope
  (``is_main_process()``, ``master_process``, ``accelerator.is_main_process``), then a global
  rank variable (``rank``, ``args.rank``, ``self.rank``) as ``<rank> == 0``, and only then
  ``dist.get_rank() == 0`` with the import it needs.
- :func:`guard_fix`: the edit that wraps statements in ``if <condition>:``, or None where that
  cannot be done without changing more than intended.

The statements a rank-0 guard is for live next to this module: checkpoint writes in
:mod:`ddp_lsp.rules._writes`, logging in :mod:`ddp_lsp.rules._logcalls`, and the fix that
guards a run of them together in :mod:`ddp_lsp.rules._guardrun`.
"""

from __future__ import annotations

import ast
import re
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ddp_lsp.core import chunktext, spelling
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frames as scope_frames
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import uniformity as rank_uniformity
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.core.types import Fix
from ddp_lsp.rules import _patterns as patterns

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NEW_SCOPE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

# Launchers: code after them runs in the parent process, once, not on every rank.
SPAWNERS = frozenset(
    {
        "torch.multiprocessing.spawn",
        "torch.multiprocessing.start_processes",
        "torch.multiprocessing.spawn.spawn",
        "torch.distributed.elastic.multiprocessing.start_processes",
        "torch.distributed.launcher.api.elastic_launch",
        "torch.distributed.launcher.elastic_launch",
    }
)
# Framework objects whose own attribute says "rank 0" (accelerate, Lightning Fabric).
_WRAPPER_MAIN = dict(framework_tables.BUILTIN.method_pairs(framework_tables.Meaning.RANK_ZERO))


# -- one index per scope, per analysis --------------------------------------------------------


class _ScopeIndex:
    """What the helpers below ask of a scope: its assignments, name nodes and loop variables
    (the frame the uniformity analysis reads too, :mod:`ddp_lsp.core.frames`), whether it
    launches workers, and the rank-variable candidates. Rules call them once per finding, and
    a long training function can hold hundreds of findings."""

    def __init__(self, ctx: ChunkContext, root: ast.AST) -> None:
        frame = scope_frames.frame(ctx, root)
        self.root = root
        self.nodes: list[ast.AST] = frame.nodes
        self.assigns: dict[str, list[tuple[ast.AST, ast.expr]]] = frame.assigns
        self.names: dict[str, list[ast.Name]] = frame.names
        self.loop_vars: set[str] = frame.loop_vars
        self.spawns = any(
            isinstance(node, ast.Call) and ctx.call_qualname(node) in SPAWNERS
            for node in self.nodes
        )
        self.candidates: list[tuple[int, ast.AST, ast.AST, str]] | None = None


# Indexes live as long as the ChunkContext they were built for (one chunk, one analysis).
_INDEXES: weakref.WeakKeyDictionary[ChunkContext, dict[int, _ScopeIndex]] = (
    weakref.WeakKeyDictionary()
)


_MEMOS: weakref.WeakKeyDictionary[ChunkContext, dict[str, dict[Any, Any]]] = (
    weakref.WeakKeyDictionary()
)


def _memo(ctx: ChunkContext) -> dict[str, dict[Any, Any]]:
    memo = _MEMOS.get(ctx)
    if memo is None:
        memo = _MEMOS[ctx] = {}
    return memo


def _index(ctx: ChunkContext, root: ast.AST) -> _ScopeIndex:
    per_ctx = _INDEXES.get(ctx)
    if per_ctx is None:
        per_ctx = _INDEXES[ctx] = {}
    found = per_ctx.get(id(root))
    if found is None or found.root is not root:
        found = per_ctx[id(root)] = _ScopeIndex(ctx, root)
    return found


# -- is this code guarded? -----------------------------------------------------------------------


def assigned_value(
    ctx: ChunkContext, name: str, root: ast.AST, before: ast.AST, live: bool = False
) -> ast.expr | None:
    """The value of the last ``name = value`` in ``root``'s own frame before ``before``
    (:meth:`ddp_lsp.core.frames.Frame.value_before`, without syncs); ``live``: not one that
    never runs (after a ``raise``/``return``/``break``/``continue`` of its block:
    ``raise NotImplementedError(...)`` then ``backend = "gloo"``)."""
    skip = (lambda value: _dead(ctx, value)) if live else None
    return scope_frames.frame(ctx, root).value_before(name, before, skip=skip)


_LEAVES = (ast.Raise, ast.Return, ast.Break, ast.Continue)


def _dead(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node``'s statement follows a statement that leaves its block."""
    stmt = ctx.statement(node)
    parent = ctx.parent(stmt)
    if parent is None:
        return False
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            earlier = block[: [id(s) for s in block].index(id(stmt))]
            return any(isinstance(s, _LEAVES) for s in earlier)
    return False


def is_guarded(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` runs on rank 0 only, or on a rank subset chosen on purpose (the uniformity
    analysis: a rank-dependent branch, early exit, decorator or guarded callers)."""
    return not rank_uniformity.uniformity(ctx).ranks_of(node).is_all


def spawns_processes(ctx: ChunkContext, root: ast.AST) -> bool:
    """``root``'s frame launches the workers itself (``mp.spawn``): it is the parent process."""
    return _index(ctx, root).spawns


def in_lambda(ctx: ChunkContext, node: ast.AST) -> bool:
    for a in ctx.ancestors(node):
        if isinstance(a, ast.Lambda):
            return True
        if isinstance(a, ast.stmt):
            return False
    return False


# -- which rank-0 condition does the code already use? --------------------------------------------


@dataclass(frozen=True)
class Condition:
    text: str  # "rank == 0", "is_main_process()", "dist.get_rank() == 0"
    imports: tuple[str, ...] = ()
    from_code: bool = True  # False: the fallback, not a name the code itself uses


def _is_local(e: ast.AST) -> bool:
    name = patterns.last_name(e) or ""
    if isinstance(e, ast.Subscript):
        key = e.slice
        name = str(key.value) if isinstance(key, ast.Constant) else ""
    return "local" in name.lower()


def _root_name(e: ast.AST) -> str | None:
    while isinstance(e, (ast.Attribute, ast.Call, ast.Subscript)):
        e = e.func if isinstance(e, ast.Call) else e.value
    return e.id if isinstance(e, ast.Name) else None


def _params(ctx: ChunkContext, stmt: ast.stmt) -> set[str]:
    out: set[str] = set()
    for a in ctx.ancestors(stmt):
        if isinstance(a, FUNCS):
            args = a.args
            out.update(x.arg for x in (*args.posonlyargs, *args.args, *args.kwonlyargs))
            if args.vararg:
                out.add(args.vararg.arg)
            if args.kwarg:
                out.add(args.kwarg.arg)
    return out


def _in_method(ctx: ChunkContext, stmt: ast.stmt) -> bool:
    fn = ctx.enclosing_function(stmt)
    if fn is None:
        return False
    args = [*fn.args.posonlyargs, *fn.args.args]
    return bool(args) and args[0].arg == "self" and ctx.scope(stmt)[1] is not None


def _visible(ctx: ChunkContext, expr: ast.AST, stmt: ast.stmt, evidence: ast.AST) -> bool:
    """Every name ``expr`` reads is bound wherever ``stmt`` runs: a parameter, an import, a
    function of the module, or a name bound or read on every path to ``stmt`` before it."""
    params = _params(ctx, stmt)
    root = patterns.scope_root(ctx, stmt)
    for node in tree_walk.bfs(expr):
        if not isinstance(node, ast.Name):
            continue
        name = node.id
        if name == "self":
            if not _in_method(ctx, stmt):
                return False
            continue
        if name in params or name in ctx.facts.aliases or name in ctx.facts.func_props:
            continue
        if patterns.dominates(ctx, evidence, stmt):
            continue
        if not any(patterns.dominates(ctx, n, stmt) for n in _index(ctx, root).names.get(name, ())):
            return False
    return True


def _pure_zero_test(ctx: ChunkContext, test: ast.AST) -> bool:
    """A test that says "rank 0" and nothing else (so it can be reused as is)."""
    found = rank_uniformity.condition_ranks(ctx.ranks, test)
    if found is None or not found.zero or found.unless:
        return False

    def pure(e: ast.AST) -> bool:
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return pure(e.operand)
        if isinstance(e, ast.BoolOp):
            return all(pure(v) for v in e.values)
        if isinstance(e, ast.Compare):
            sides = [e.left, *e.comparators]
            return all(
                ctx.ranks.is_rank_expr(s)
                or ctx.ranks.is_predicate(s)
                or isinstance(s, (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.UnaryOp))
                or (patterns.last_name(s) or "").lower() == "world_size"
                for s in sides
            )
        if ctx.ranks.is_predicate(e) or ctx.ranks.is_rank_expr(e):
            return True
        return (
            isinstance(e, ast.Call)
            and patterns.last_name(e) in rank_uniformity.SINGLE_PROCESS_CALLS
        )

    return pure(test)


def _candidates(ctx: ChunkContext, root: ast.AST) -> list[tuple[int, ast.AST, ast.AST, str]]:
    index = _index(ctx, root)
    if index.candidates is None:
        index.candidates = list(_find_candidates(ctx, index))
    return index.candidates


def _find_candidates(
    ctx: ChunkContext, index: _ScopeIndex
) -> Iterator[tuple[int, ast.AST, ast.AST, str]]:
    """(preference, evidence node, expression, condition text) found in ``root``'s frame.

    Preference: 0 an existing rank-0 guard, 1 a rank-0 predicate, 2 a rank variable by name,
    3 an attribute rank (``args.rank``). Loop variables named like a rank are not the rank."""
    root = index.root
    loop_vars = index.loop_vars
    if isinstance(root, FUNCS):
        for a in (*root.args.posonlyargs, *root.args.args, *root.args.kwonlyargs):
            if a.arg in loop_vars or "local" in a.arg.lower():
                continue
            if a.arg in ctx.ranks.predicates:
                yield 1, a, ast.Name(a.arg, ast.Load()), a.arg
            elif a.arg in ctx.ranks.names:
                yield 2, a, ast.Name(a.arg, ast.Load()), f"{a.arg} == 0"
    for node in index.nodes:
        if _root_name(node) in loop_vars:
            continue
        if isinstance(node, ast.If) and _pure_zero_test(ctx, node.test):
            if any(isinstance(n, ast.Name) and n.id in loop_vars for n in tree_walk.bfs(node.test)):
                continue
            if node.test.lineno == node.test.end_lineno:
                yield 0, node, node.test, chunktext.segment(ctx.chunk, node.test)
            continue
        if not isinstance(node, (ast.Name, ast.Attribute)):
            continue
        prop = _WRAPPER_MAIN.get(patterns.last_name(node) or "")
        if prop is not None and _root_name(node) in (patterns.last_name(node), "self"):
            # `accelerator.backward(loss)` shows an Accelerator in scope: use its own flag.
            yield 1, node, node, f"{chunktext.segment(ctx.chunk, node)}.{prop}"
            continue
        parent = ctx.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            continue  # only whole dotted paths
        if ctx.ranks.is_predicate(node) and not _is_local(node):
            if isinstance(parent, ast.Call) and parent.func is node:
                if parent.args or parent.keywords:
                    continue
                yield 1, node, parent, chunktext.segment(ctx.chunk, parent)
            elif _root_name(node) not in ctx.facts.aliases and (
                not isinstance(node, ast.Name) or node.id not in ctx.facts.func_props
            ):
                # A flag or property (`master_process`, `accelerator.is_main_process`); a
                # function named like one but not called here would always be true.
                yield 1, node, node, chunktext.segment(ctx.chunk, node)
        elif ctx.ranks.is_rank_expr(node) and not _is_local(node):
            if isinstance(parent, ast.Call) and parent.func is node:
                continue
            pref = 2 if isinstance(node, ast.Name) else 3
            yield pref, node, node, f"{chunktext.segment(ctx.chunk, node)} == 0"


def rank_condition(ctx: ChunkContext, stmt: ast.stmt) -> Condition:
    """The rank-0 test to guard ``stmt`` with, reusing what the code in scope already uses."""
    root = patterns.scope_root(ctx, stmt)
    inside = {id(n) for n in tree_walk.bfs(stmt)}
    best: tuple[tuple[int, int, int], str] | None = None
    for pref, evidence, expr, text in _candidates(ctx, root):
        if id(evidence) in inside or "\n" in text:
            continue
        if not _visible(ctx, expr, stmt, evidence):
            continue
        # Nearest preceding use first, then the first following one.
        line = getattr(evidence, "lineno", 0)
        distance = (0, -line, 0) if line <= stmt.lineno else (1, line, 0)
        key = (pref, distance[0], distance[1])
        if best is None or key < best[0]:
            best = (key, text)
    if best is not None:
        return Condition(best[1])
    # Rank parameters and attributes the module facts know (``def train(rank)``, ``self.rank``).
    params = _params(ctx, stmt)
    for path in ctx.names_of_kind(fact_model.RANK, stmt):
        if "local" in path.lower():
            continue
        if path in params or (path.startswith("self.") and _in_method(ctx, stmt)):
            return Condition(f"{path} == 0")
    # A rank-0 predicate function of this module (``def is_main_process(): ...``), the first
    # by name. Each is among the module's rank predicates: asking for those alone keeps this
    # chunk's findings independent of every other function's properties (core/factview.py).
    for qual in sorted(ctx.facts.rank_predicates):
        props = ctx.facts.func_props.get(qual)
        if (
            props is not None
            and fact_model.RANK_PREDICATE in props
            and "." not in qual
            and not ctx.facts.func_params.get(qual)
            and "local" not in qual.lower()
        ):
            return Condition(f"{qual}()")
    text, imports = spelling.spell(ctx.facts, "torch.distributed.get_rank")
    return Condition(f"{text}() == 0", imports, from_code=False)


# -- the fix ------------------------------------------------------------------------------------


def _jumps_out(stmt: ast.stmt) -> bool:
    """``stmt`` contains a return/yield, or a break/continue of a loop outside it."""

    def visit(node: ast.AST, in_loop: bool) -> bool:
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
            return True
        if isinstance(node, (ast.Break, ast.Continue)) and not in_loop:
            return True
        if isinstance(node, _NEW_SCOPE):
            return False
        loop = in_loop or isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        return any(visit(c, loop) for c in tree_walk.children(node))

    return any(visit(c, False) for c in tree_walk.children(stmt)) or isinstance(
        stmt, (ast.Return, ast.Break, ast.Continue)
    )


def _bound_names(stmt: ast.stmt) -> tuple[set[str], bool]:
    """Names ``stmt`` binds, and whether it also stores into attributes or subscripts."""
    names: set[str] = set()
    other = False

    def visit(node: ast.AST) -> None:
        nonlocal other
        if isinstance(node, (*_NEW_SCOPE,)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            return
        if isinstance(node, _COMPREHENSIONS):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            other = True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".", 1)[0])
        for c in tree_walk.children(node):
            visit(c)

    visit(stmt)
    return names, other


def _changes_more(ctx: ChunkContext, stmts: Sequence[ast.stmt]) -> bool:
    """Guarding ``stmts`` would change what the other ranks see afterwards."""
    bound: set[str] = set()
    for s in stmts:
        if _jumps_out(s):
            return True
        names, other = _bound_names(s)
        if other:
            return True
        bound |= names
    if not bound:
        return False
    inside = {id(n) for s in stmts for n in tree_walk.bfs(s)}
    by_name = _index(ctx, patterns.scope_root(ctx, stmts[0])).names
    return any(
        isinstance(node.ctx, ast.Load) and id(node) not in inside
        for name in bound
        for node in by_name.get(name, ())
    )


def ends_own_line(ctx: ChunkContext, stmt: ast.stmt) -> bool:
    """Nothing but a comment follows ``stmt`` on its last line (no ``; other``)."""
    end_line = stmt.end_lineno or stmt.lineno
    text = chunktext.line(ctx.chunk, end_line).rstrip("\r\n")
    col = chunktext.pos(ctx.chunk, end_line, stmt.end_col_offset or 0).col
    tail = text[col:].strip()
    return not tail or tail.startswith("#")


def guard_fix(
    ctx: ChunkContext, stmts: Sequence[ast.stmt], cond: Condition, title: str
) -> Fix | None:
    """Wrap the consecutive statements ``stmts`` (one block) in ``if <cond>:``.

    None when they do not sit on lines of their own (``if x: stmt``, ``a; stmt``), when they
    leave the block (return, break) or bind names used elsewhere: guarding those would change
    what the other ranks do next, not only what they write.
    """
    first, last = stmts[0], stmts[-1]
    if not patterns.starts_own_line(ctx, first) or not ends_own_line(ctx, last):
        return None
    if _changes_more(ctx, stmts):
        return None
    return Fix(
        title=title,
        edits=tuple(text_edits.wrap_block(ctx, stmts, f"if {cond.text}:")),
        safe=cond.from_code,
        preferred=True,
        imports=cond.imports,
    )


# -- code that one process runs, or that every rank runs on purpose ----------------------------

# A flag that says "this run is distributed": every rank takes the same side of a branch on it,
# and the single-process side is taken by no rank of a distributed run.
_DIST_FLAG = re.compile(
    r"^(is_|use_|enable_|using_|with_)?"
    r"(fsdp|ddp|distributed|deepspeed|multi_?gpu|multiprocessing_distributed|dist_training)$",
    re.IGNORECASE,
)
# A flag for one engine: its other side may still be distributed (`if use_fsdp: FSDP(m)
# else: DDP(m)`), so it counts only in a module that wraps no model in DDP.
_ENGINE_FLAG = re.compile(r"fsdp|deepspeed", re.IGNORECASE)
_DIST_FLAG_CALLS = frozenset({"is_initialized", "is_dist_avail_and_initialized", "is_distributed"})
_SHARDED_WRAPPERS = frozenset({"FSDP", "FullyShardedDataParallel"})
_WORLD_NAMES = frozenset({"world_size", "num_processes", "n_gpu", "ngpus", "num_gpus"})


def _distributed_test(test: ast.AST) -> bool | None:
    """True when ``test`` holds exactly in a distributed run (``cfg.enable_fsdp``,
    ``dist.is_initialized()``, ``world_size > 1``), False when exactly in a single-process run
    (``not args.distributed``, ``world_size == 1``), None when it says neither."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _distributed_test(test.operand)
        return None if inner is None else not inner
    if isinstance(test, (ast.Name, ast.Attribute)):
        return True if _DIST_FLAG.match(patterns.last_name(test) or "") else None
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        return True if patterns.last_name(test) in _DIST_FLAG_CALLS else None
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and (
            (patterns.last_name(test.left) or "").lower() in _WORLD_NAMES
            and not isinstance(test.left, ast.Call)
            or _world_size_call(test.left)
        )
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == 1
    ):
        op = test.ops[0]
        if isinstance(op, (ast.Gt, ast.NotEq)):
            return True
        if isinstance(op, (ast.Eq, ast.LtE)):
            return False
    return None


def _sharded_type_test(test: ast.AST) -> bool:
    """``isinstance(model, FSDP)``: true exactly in a distributed run of a project that shards
    its model, like an FSDP flag (an engine test: only in a module that wraps no model in DDP,
    where a model that is not FSDP is one process's)."""
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "isinstance"
        and len(test.args) == 2
        and patterns.last_name(test.args[1]) in _SHARDED_WRAPPERS
    )


def _world_size_call(expr: ast.AST) -> bool:
    """``dist.get_world_size()`` / ``get_world_size()`` without a group: the job's size."""
    return (
        isinstance(expr, ast.Call)
        and not expr.args
        and not expr.keywords
        and patterns.last_name(expr) == "get_world_size"
    )


_EXIT_CALLS = frozenset({"exit", "quit", "_exit", "abort"})


def _leaves(body: Sequence[ast.stmt]) -> bool:
    """A block that ends by leaving the function or the program (``raise``, ``return``,
    ``sys.exit(...)``)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Raise, ast.Return)):
        return True
    return (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and patterns.last_name(last.value) in _EXIT_CALLS
    )


# Keywords that size one dimension of a parallel layout (nanotron's `ParallelismArgs(dp=1,
# pp=1, tp=1)`, Megatron-style `tensor_parallel_size=1`): all 1 is a world of one process.
_PARALLEL_SIZES = re.compile(
    r"^(dp|tp|pp|cp|ep|dp_shard|dp_replicate|world_size|nprocs|nproc_per_node|num_processes|"
    r"(data|tensor|pipeline|context|expert|sequence)_parallel_size)$"
)
# Backends of a process group that one process runs on its own (torch's fake process group for
# tracing and compiling).
_ONE_PROCESS_BACKENDS = frozenset({"fake"})


def one_process_setup(ctx: ChunkContext, call: ast.Call) -> bool:
    """``call`` starts a world of one process: ``init_process_group("fake", ...)`` or
    ``..._process_group(..., world_size=1)``, or a parallel layout whose every size is the
    constant 1 (``ParallelismArgs(dp=1, pp=1, tp=1)``, at least two sizes)."""
    qual = ctx.call_qualname(call) or ""
    if qual.endswith("init_process_group"):
        backend = call.args[0] if call.args else None
        for kw in call.keywords:
            if kw.arg == "backend":
                backend = kw.value
        if isinstance(backend, ast.Constant) and backend.value in _ONE_PROCESS_BACKENDS:
            return True
    sizes = [kw.value for kw in call.keywords if kw.arg and _PARALLEL_SIZES.match(kw.arg)]
    if not sizes or not all(isinstance(v, ast.Constant) and v.value == 1 for v in sizes):
        return False
    return len(sizes) >= 2 or any(kw.arg == "world_size" for kw in call.keywords)


def world_of_one(ctx: ChunkContext, node: ast.AST) -> bool:
    """The function around ``node`` (or the module's top level) sets up a world of one
    process itself (:func:`one_process_setup`): a conversion script run as
    ``torchrun --nproc-per-node 1``, a precompile step on a fake process group."""
    root = patterns.scope_root(ctx, node)
    return ctx.memo(
        ("world_of_one", id(root)),
        lambda: any(
            isinstance(n, ast.Call) and one_process_setup(ctx, n) for n in patterns.walk_scope(root)
        ),
    )


def single_process_check(stmt: ast.stmt) -> bool:
    """``stmt`` leaves unless the run is single-process: ``if dist.get_world_size() != 1:
    raise ...`` (or ``return``, ``sys.exit``), ``if args.distributed: return``, ``assert
    world_size == 1``."""
    if isinstance(stmt, ast.Assert):
        return _distributed_test(stmt.test) is False
    return (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and _distributed_test(stmt.test) is True
        and _leaves(stmt.body)
    )


def after_single_process_check(ctx: ChunkContext, node: ast.AST) -> bool:
    """An earlier statement of the function lets only a single-process run get to ``node``:
    ``if dist.get_world_size() != 1: raise ...`` (or ``return``, ``sys.exit``), ``if
    args.distributed: return``, ``assert world_size == 1``. A helper that refuses to run in a
    distributed job is single-process code past its check."""
    stmt: ast.AST = ctx.statement(node)
    while isinstance(stmt, ast.stmt):
        block, i = ctx.block_of(stmt)
        if any(single_process_check(prior) for prior in block[:i]):
            return True
        up = ctx.parent(stmt)
        while up is not None and not isinstance(up, ast.stmt):
            up = ctx.parent(up)  # an except handler, a match case
        if up is None or isinstance(up, _NEW_SCOPE):
            return False
        stmt = up
    return False


def single_process_branch(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` is on the single-process side of a uniform "is this run distributed?" branch:
    the ``else:`` of ``if cfg.enable_fsdp:`` / ``if dist.is_initialized():`` / ``if
    isinstance(model, FSDP):`` (an engine test, as the FSDP flag), the body of
    ``if not args.distributed:`` or ``if world_size == 1:``, after a check that leaves unless
    the run is single-process (:func:`after_single_process_check`), or in a function that sets
    up a world of one process itself (:func:`world_of_one`). Every rank takes the same
    side, and no rank of a distributed run takes that one."""
    if after_single_process_check(ctx, node) or world_of_one(ctx, node):
        return True
    child: ast.AST = node
    for a in ctx.ancestors(node):
        if isinstance(a, _NEW_SCOPE):
            return False
        if isinstance(a, ast.If) and child is not a.test:
            distributed = _distributed_test(a.test)
            engine = distributed is not None and bool(_ENGINE_FLAG.search(ast.unparse(a.test)))
            if distributed is None and _sharded_type_test(a.test):
                distributed = engine = True
            if engine:
                if fact_model.DDP in ctx.facts.kind_set:
                    distributed = None
            if distributed is not None:
                in_else = any(child is s for s in a.orelse)
                if in_else == distributed:
                    return True
        child = a
    return False
