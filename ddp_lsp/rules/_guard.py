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
"""

from __future__ import annotations

import ast
import re
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ddp_lsp.core import edits as E
from ddp_lsp.core import facts as K
from ddp_lsp.core import frameworks as FW
from ddp_lsp.core import names as N
from ddp_lsp.core import uniformity as U
from ddp_lsp.core import walk as W
from ddp_lsp.core.crossfile import Provenance
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.core.types import Fix
from ddp_lsp.rules import _patterns as P

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
_WRAPPER_MAIN = dict(FW.BUILTIN.method_pairs(FW.Meaning.RANK_ZERO))


# -- one index per scope, per analysis --------------------------------------------------------


class _ScopeIndex:
    """What the helpers below ask of a scope, computed in one walk: assignments by name, name
    nodes by name, loop variables, launcher calls. Rules call them once per finding, and a
    long training function can hold hundreds of findings."""

    def __init__(self, ctx: ChunkContext, root: ast.AST) -> None:
        self.root = root
        self.nodes: list[ast.AST] = list(P.walk_scope(root))
        self.assigns: dict[str, list[tuple[ast.AST, ast.expr]]] = {}
        self.names: dict[str, list[ast.Name]] = {}
        self.loop_vars: set[str] = set()
        self.spawns = False
        for node in self.nodes:
            if isinstance(node, ast.Name):
                self.names.setdefault(node.id, []).append(node)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.assigns.setdefault(t.id, []).append((node, node.value))
            elif isinstance(node, ast.AnnAssign):
                if isinstance(node.target, ast.Name) and node.value is not None:
                    self.assigns.setdefault(node.target.id, []).append((node, node.value))
            elif isinstance(node, ast.NamedExpr):
                self.assigns.setdefault(node.target.id, []).append((node, node.value))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                self.loop_vars.update(n.id for n in W.bfs(node.target) if isinstance(n, ast.Name))
            elif isinstance(node, ast.Call) and not self.spawns:
                self.spawns = ctx.call_qualname(node) in SPAWNERS
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


def assigned_value(ctx: ChunkContext, name: str, root: ast.AST, before: ast.AST) -> ast.expr | None:
    """The value of the last ``name = value`` in ``root``'s own frame before ``before``."""
    found: ast.expr | None = None
    for node, value in _index(ctx, root).assigns.get(name, ()):
        if P.before(node, before) and (found is None or P.before(found, value)):
            found = value
    return found


def is_guarded(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` runs on rank 0 only, or on a rank subset chosen on purpose (the uniformity
    analysis: a rank-dependent branch, early exit, decorator or guarded callers)."""
    return not U.uniformity(ctx).ranks_of(node).is_all


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
    name = P.last_name(e) or ""
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
    root = P.scope_root(ctx, stmt)
    for node in W.bfs(expr):
        if not isinstance(node, ast.Name):
            continue
        name = node.id
        if name == "self":
            if not _in_method(ctx, stmt):
                return False
            continue
        if name in params or name in ctx.facts.aliases or name in ctx.facts.func_props:
            continue
        if P.dominates(ctx, evidence, stmt):
            continue
        if not any(P.dominates(ctx, n, stmt) for n in _index(ctx, root).names.get(name, ())):
            return False
    return True


def _pure_zero_test(ctx: ChunkContext, test: ast.AST) -> bool:
    """A test that says "rank 0" and nothing else (so it can be reused as is)."""
    found = U.condition_ranks(ctx.ranks, test)
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
                or (P.last_name(s) or "").lower() == "world_size"
                for s in sides
            )
        if ctx.ranks.is_predicate(e) or ctx.ranks.is_rank_expr(e):
            return True
        return isinstance(e, ast.Call) and P.last_name(e) in U.SINGLE_PROCESS_CALLS

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
            if any(isinstance(n, ast.Name) and n.id in loop_vars for n in W.bfs(node.test)):
                continue
            if node.test.lineno == node.test.end_lineno:
                yield 0, node, node.test, ctx.segment(node.test)
            continue
        if not isinstance(node, (ast.Name, ast.Attribute)):
            continue
        prop = _WRAPPER_MAIN.get(P.last_name(node) or "")
        if prop is not None and _root_name(node) in (P.last_name(node), "self"):
            # `accelerator.backward(loss)` shows an Accelerator in scope: use its own flag.
            yield 1, node, node, f"{ctx.segment(node)}.{prop}"
            continue
        parent = ctx.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            continue  # only whole dotted paths
        if ctx.ranks.is_predicate(node) and not _is_local(node):
            if isinstance(parent, ast.Call) and parent.func is node:
                if parent.args or parent.keywords:
                    continue
                yield 1, node, parent, ctx.segment(parent)
            elif _root_name(node) not in ctx.facts.aliases and (
                not isinstance(node, ast.Name) or node.id not in ctx.facts.func_props
            ):
                # A flag or property (`master_process`, `accelerator.is_main_process`); a
                # function named like one but not called here would always be true.
                yield 1, node, node, ctx.segment(node)
        elif ctx.ranks.is_rank_expr(node) and not _is_local(node):
            if isinstance(parent, ast.Call) and parent.func is node:
                continue
            pref = 2 if isinstance(node, ast.Name) else 3
            yield pref, node, node, f"{ctx.segment(node)} == 0"


def rank_condition(ctx: ChunkContext, stmt: ast.stmt) -> Condition:
    """The rank-0 test to guard ``stmt`` with, reusing what the code in scope already uses."""
    root = P.scope_root(ctx, stmt)
    inside = {id(n) for n in W.bfs(stmt)}
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
    for path in ctx.names_of_kind(K.RANK, stmt):
        if "local" in path.lower():
            continue
        if path in params or (path.startswith("self.") and _in_method(ctx, stmt)):
            return Condition(f"{path} == 0")
    # A rank-0 predicate function of this module (``def is_main_process(): ...``).
    for qual, props in sorted(ctx.facts.func_props.items()):
        if (
            K.RANK_PREDICATE in props
            and "." not in qual
            and not ctx.facts.func_params.get(qual)
            and "local" not in qual.lower()
        ):
            return Condition(f"{qual}()")
    text, imports = ctx.spell("torch.distributed.get_rank")
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
        return any(visit(c, loop) for c in W.children(node))

    return any(visit(c, False) for c in W.children(stmt)) or isinstance(
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
        for c in W.children(node):
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
    inside = {id(n) for s in stmts for n in W.bfs(s)}
    by_name = _index(ctx, P.scope_root(ctx, stmts[0])).names
    return any(
        isinstance(node.ctx, ast.Load) and id(node) not in inside
        for name in bound
        for node in by_name.get(name, ())
    )


def ends_own_line(ctx: ChunkContext, stmt: ast.stmt) -> bool:
    """Nothing but a comment follows ``stmt`` on its last line (no ``; other``)."""
    end_line = stmt.end_lineno or stmt.lineno
    text = ctx.line(end_line).rstrip("\r\n")
    col = ctx.pos(end_line, stmt.end_col_offset or 0).col
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
    if not P.starts_own_line(ctx, first) or not ends_own_line(ctx, last):
        return None
    if _changes_more(ctx, stmts):
        return None
    return Fix(
        title=title,
        edits=tuple(E.wrap_block(ctx, stmts, f"if {cond.text}:")),
        safe=cond.from_code,
        preferred=True,
        imports=cond.imports,
    )


# -- the statements a rank-0 guard is for -------------------------------------------------------

_CKPT_TEXT = re.compile(
    r"ckpt|checkpoint|weights|state_dict|\.pth?\b|\.bin\b|\.safetensors|\.tar\b", re.IGNORECASE
)
_CKPT_NAME = re.compile(r"ckpt|checkpoint|weights|state_dict", re.IGNORECASE)
_STREAM_NAME = re.compile(
    r"stream|buf|buffer|bytes_io|fileobj|file_obj|fobj|writer|transform_to|^fh$|^fp$", re.IGNORECASE
)
_STREAM_TYPE = re.compile(r"IO\b|IOBase|BytesIO|BinaryIO|BufferedWriter")
_RANK_WORD = re.compile(r"rank", re.IGNORECASE)
_RANK_NAME = re.compile(r"(^|_)(rank|ranks)(_|$)", re.IGNORECASE)


@dataclass(frozen=True)
class Write:
    label: str  # "torch.save", "model.save_pretrained", "open"
    dest: ast.expr | None  # the path (or directory) written
    stmt: ast.stmt | None  # the statement to guard when not the call's own statement
    fixable: bool = True
    source: Provenance | None = None  # a helper in another file that performs the write


def _arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(call.args) > index:
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


def _with_of(ctx: ChunkContext, call: ast.Call) -> ast.With | ast.AsyncWith | None:
    parent = ctx.parent(call)
    if isinstance(parent, ast.withitem) and parent.context_expr is call:
        holder = ctx.parent(parent)
        if isinstance(holder, (ast.With, ast.AsyncWith)):
            return holder
    return None


def _open_handle(ctx: ChunkContext, name: str, at: ast.AST) -> ast.Call | None:
    """The ``open(...)`` call of an enclosing ``with open(...) as name``."""
    for a in ctx.ancestors(at):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                v = item.optional_vars
                if isinstance(v, ast.Name) and v.id == name and _is_open(ctx, item.context_expr):
                    assert isinstance(item.context_expr, ast.Call)
                    return item.context_expr
        if isinstance(a, FUNCS):
            break
    return None


def _other_open_handle(ctx: ChunkContext, name: str, at: ast.AST) -> ast.expr | None:
    """The path of an enclosing ``with <fs>.open(path, ...) as name`` (a file-system
    wrapper's open: iopath's ``path_manager.open``, fsspec's ``fs.open``)."""
    for a in ctx.ancestors(at):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                v, e = item.optional_vars, item.context_expr
                if (
                    isinstance(v, ast.Name)
                    and v.id == name
                    and isinstance(e, ast.Call)
                    and isinstance(e.func, ast.Attribute)
                    and e.func.attr == "open"
                    and e.args
                ):
                    return e.args[0]
        if isinstance(a, FUNCS):
            break
    return None


def _is_open(ctx: ChunkContext, e: ast.AST) -> bool:
    if not isinstance(e, ast.Call):
        return False
    if isinstance(e.func, ast.Name) and e.func.id == "open":
        return "open" not in ctx.facts.aliases
    return ctx.call_qualname(e) in ("io.open", "builtins.open")


def _write_mode(call: ast.Call) -> bool:
    mode = _arg(call, 1, "mode")
    return (
        isinstance(mode, ast.Constant)
        and isinstance(mode.value, str)
        and any(c in mode.value for c in "wax")
    )


def _is_buffer(ctx: ChunkContext, dest: ast.expr, root: ast.AST) -> bool:
    """``io.BytesIO()`` (inline or through a variable), a stream parameter (``stream:
    io.IOBase``) or a variable named like one: not a checkpoint path."""
    if _STREAM_NAME.search(P.last_name(dest) or ""):
        return True
    value: ast.AST | None = dest
    if isinstance(dest, ast.Name):
        value = assigned_value(ctx, dest.id, root, dest)
        fn = ctx.enclosing_function(dest)
        if fn is not None:
            for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs):
                if a.arg == dest.id and a.annotation is not None:
                    if _STREAM_TYPE.search(ast.unparse(a.annotation)):
                        return True
    return isinstance(value, ast.Call) and P.last_name(value) in ("BytesIO", "StringIO")


def _checkpointish(ctx: ChunkContext, path: ast.expr, root: ast.AST, depth: int = 0) -> bool:
    for node in W.bfs(path):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _CKPT_TEXT.search(node.value):
                return True
        elif isinstance(node, ast.Name):
            if _CKPT_NAME.search(node.id):
                return True
            if depth < 2:
                value = assigned_value(ctx, node.id, root, node)
                if value is not None and _checkpointish(ctx, value, root, depth + 1):
                    return True
        elif isinstance(node, ast.Attribute) and _CKPT_NAME.search(node.attr):
            return True
    return False


def per_rank_path(ctx: ChunkContext, path: ast.expr, root: ast.AST, depth: int = 0) -> bool:
    """The path names the rank (``f"ckpt_rank{rank}.pt"``): one file per rank, on purpose."""
    if ctx.ranks.mentions_rank(path):
        return True
    has_value = not isinstance(path, ast.Constant)
    for node in W.bfs(path):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if has_value and _RANK_WORD.search(node.value):
                return True
        elif isinstance(node, ast.Name):
            if _RANK_NAME.search(node.id):
                return True
            if depth < 2:
                value = assigned_value(ctx, node.id, root, node)
                if value is not None and per_rank_path(ctx, value, root, depth + 1):
                    return True
        elif isinstance(node, ast.Attribute) and _RANK_NAME.search(node.attr):
            return True
        elif isinstance(node, ast.Call) and _RANK_WORD.search(P.last_name(node) or ""):
            return True  # `f"{name}.{rankstr()}.pth"`: a function of the rank
        elif isinstance(node, ast.Call) and P.framework_call(ctx, node, FW.Meaning.SAVES_PER_RANK):
            return True  # a helper the tables (or the user) say names the file per rank
    return False


def collective_in(ctx: ChunkContext, stmt: ast.stmt) -> str | None:
    """A call in ``stmt`` that every rank must make (so the statement cannot be guarded)."""
    for node in [stmt, *P.walk_scope(stmt)]:
        if not isinstance(node, ast.Call):
            continue
        qual = ctx.call_qualname(node) or ""
        dotted = N.dotted(node.func)
        if qual in N.COLLECTIVES or qual.startswith("torch.distributed.checkpoint"):
            return ctx.segment(node.func)
        if dotted is not None and K.is_collective_call(
            dotted, ctx.facts.aliases, ctx.ranks.frameworks
        ):
            return ctx.segment(node.func)
        if K.COLLECTIVE in ctx.callee_props(node):
            return ctx.segment(node.func)
        if isinstance(node.func, ast.Attribute):
            if node.func.attr in ctx.ranks.frameworks.functions(FW.Meaning.GATHERS_STATE):
                return ctx.segment(node.func)
            if node.func.attr == "state_dict" and ctx.kind(node.func.value, node) == K.FSDP:
                return ctx.segment(node.func)
    return None


def checkpoint_write(ctx: ChunkContext, call: ast.Call) -> Write | None:
    """The checkpoint write ``call`` performs, or None (reads, buffers, other calls)."""
    qual = ctx.call_qualname(call)
    root = P.scope_root(ctx, call)
    if qual == N.TORCH_SAVE:
        dest = _arg(call, 1, "f")
        if dest is None and call.args and isinstance(call.args[0], ast.Starred):
            return Write("torch.save", call.args[0], None)  # `torch.save(*args, **kwargs)`
        if dest is None or _is_buffer(ctx, dest, root):
            return None
        if isinstance(dest, ast.Name):
            if _open_handle(ctx, dest.id, call) is not None:
                return None  # the `with open(...)` is the write (reported there)
            opened = _other_open_handle(ctx, dest.id, call)
            if opened is not None:  # `with path_manager.open(path, "wb") as f`: the path counts
                return Write("torch.save", opened, None)
            value = assigned_value(ctx, dest.id, root, dest)
            if _is_open(ctx, value) if value is not None else False:
                assert isinstance(value, ast.Call)
                # The file was opened (and truncated) on every rank already.
                return Write("torch.save", value.args[0] if value.args else None, None, False)
        return Write("torch.save", dest, None)
    writer = P.framework_call(ctx, call, FW.Meaning.WRITES_CHECKPOINT)
    if writer is not None:  # safetensors' save_file, mmengine's save_checkpoint, yours
        keyword = ctx.ranks.frameworks.keyword(writer) or "f"
        return Write(ctx.segment(call.func), _arg(call, 1, keyword), None)
    if isinstance(call.func, ast.Attribute) and call.func.attr == "save_pretrained":
        if any(kw.arg == "is_main_process" for kw in call.keywords):
            return None
        label = ctx.segment(call.func)
        if "\n" in label:
            label = "save_pretrained"
        return Write(label, _arg(call, 0, "save_directory"), None)
    if _is_open(ctx, call) and _write_mode(call):
        path = _arg(call, 0, "file")
        if path is None:
            return None
        with_stmt = _with_of(ctx, call)
        saved_into = with_stmt is not None and _saves_into(ctx, with_stmt)
        if not saved_into and not _checkpointish(ctx, path, root):
            return None
        mode = _arg(call, 1, "mode")
        label = f"open(..., {ctx.segment(mode)})" if mode is not None else "open"
        return Write(label, path, with_stmt, with_stmt is not None)
    return _helper_write(ctx, call, root)


# A function so named that saves to the path its caller passes is a save helper: DDP501 reports
# its unguarded calls, not its own save (see ddp501's _pass_through_helper).
SAVE_HELPER_NAME = re.compile(r"save|checkpoint|ckpt|export|dump|serial", re.IGNORECASE)


def _helper_write(ctx: ChunkContext, call: ast.Call, root: ast.AST) -> Write | None:
    """A helper that saves to the path its caller passes, on every rank
    (``utils.save_checkpoint(state, path)``): its own save is not reported (the caller
    decides the rank), so this call is where the decision is missing."""
    props = ctx.callee_props(call)
    if K.SAVES_CALLER_PATH not in props or K.GUARDS_ITSELF in props:
        return None
    name = N.dotted(call.func) or ""
    if not SAVE_HELPER_NAME.search(name.rpartition(".")[2]):
        return None  # not a save helper by name: its own save is reported where it is
    source = ctx.callee_source(call, K.SAVES_CALLER_PATH)  # None: a helper of this file
    # Which argument is the path is not known: any that names the rank makes the files per
    # rank, except what is clearly the saved object (a state dict, a dict of them).
    args = [
        a
        for a in (*call.args, *(kw.value for kw in call.keywords))
        if not isinstance(a, (ast.Dict, ast.List))
        and not (isinstance(a, ast.Call) and P.method_call(a, "state_dict") is not None)
    ]
    if any(per_rank_path(ctx, a, root) for a in args):
        return None
    label = ctx.segment(call.func)
    return Write(label if "\n" not in label else "the helper", None, None, source=source)


def _saves_into(ctx: ChunkContext, with_stmt: ast.With | ast.AsyncWith) -> bool:
    handles = {
        item.optional_vars.id
        for item in with_stmt.items
        if isinstance(item.optional_vars, ast.Name) and _is_open(ctx, item.context_expr)
    }
    for node in P.walk_scope(with_stmt):
        if isinstance(node, ast.Call) and ctx.call_qualname(node) == N.TORCH_SAVE:
            dest = _arg(node, 1, "f")
            if isinstance(dest, ast.Name) and dest.id in handles:
                return True
    return False


_LOGGER_NAME = re.compile(r"^_*(logger|log|logging|lgr)$", re.IGNORECASE)

# Names that identify the process in a message (the rank itself is checked through RankModel).
_PROCESS_TAGS = frozenset(
    {"gpu", "gpu_id", "device_id", "device", "local_device", "cuda_device", "pid"}
)

_TAG_TEXT = re.compile(r"rank|gpu|device", re.IGNORECASE)


def names_in(e: ast.AST) -> Iterator[str]:
    for n in W.bfs(e):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr


def log_call(ctx: ChunkContext, call: ast.Call) -> str | None:
    """``print``, ``logging.info`` or ``<logger>.info``; None for anything else."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "print" and "print" not in ctx.facts.aliases:
        for kw in call.keywords:
            if kw.arg == "file":
                target = ctx.segment(kw.value)
                if target not in ("sys.stdout", "sys.stderr"):
                    return None
        return "print"
    if not isinstance(func, ast.Attribute) or func.attr != "info":
        return None
    qual = ctx.call_qualname(call)
    if qual == "logging.info":
        return "logging.info"
    receiver = func.value
    if isinstance(receiver, ast.Call):
        if ctx.call_qualname(receiver) == "logging.getLogger":
            return ctx.segment(func)
        return None
    name = P.last_name(receiver)
    if name is None or not _LOGGER_NAME.match(name):
        return None
    if "logging" not in ctx.facts.aliases.values():
        return None  # not a standard-library logger made in this file: its setup is unknown
    rqual = ctx.qualname(receiver)
    if rqual is not None and not rqual.startswith("logging"):
        return None  # a logger object imported from a library (accelerate, lightning...)
    label = ctx.segment(func)
    return label if "\n" not in label else "logger.info"


def names_process(ctx: ChunkContext, call: ast.Call) -> bool:
    """The message says which rank or GPU it comes from: per-rank on purpose."""
    for arg in [*call.args, *(kw.value for kw in call.keywords)]:
        if ctx.ranks.mentions_rank(arg):
            return True
        for n in W.bfs(arg):
            if (
                isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and _TAG_TEXT.search(n.value)
            ):
                return True
        if any(name in _PROCESS_TAGS for name in names_in(arg)):
            return True
    return False


def _is_log_stmt(ctx: ChunkContext, s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and log_call(ctx, s.value) is not None
        and not names_process(ctx, s.value)
    )


def _is_write_stmt(ctx: ChunkContext, s: ast.stmt) -> bool:
    """A statement that is one checkpoint write every rank makes to the same file."""
    call: ast.expr | None = None
    if isinstance(s, ast.Expr):
        call = s.value
    elif isinstance(s, (ast.With, ast.AsyncWith)):
        call = next((i.context_expr for i in s.items if _is_open(ctx, i.context_expr)), None)
    if not isinstance(call, ast.Call):
        return False
    write = checkpoint_write(ctx, call)
    if write is None or not write.fixable or (write.stmt or s) is not s:
        return False
    root = P.scope_root(ctx, s)
    if write.dest is not None and per_rank_path(ctx, write.dest, root):
        return False
    return collective_in(ctx, s) is None


def _block_of(ctx: ChunkContext, stmt: ast.stmt) -> tuple[list[ast.stmt], int]:
    """``ctx.block_of`` with each block's positions computed once."""
    parent = ctx.parent(stmt)
    blocks = _memo(ctx).setdefault("blocks", {})
    key = id(parent) if parent is not None else 0
    known = blocks.get(key)
    if known is None or known[0] is not parent:
        positions: dict[int, tuple[list[ast.stmt], int]] = {}
        seqs = (
            [ctx.body]
            if parent is None
            else [
                getattr(parent, name)
                for name in ("body", "orelse", "finalbody")
                if isinstance(getattr(parent, name, None), list)
            ]
        )
        for seq in seqs:
            for i, s in enumerate(seq):
                positions[id(s)] = (seq, i)
        known = blocks[key] = (parent, positions)
    return known[1].get(id(stmt)) or ctx.block_of(stmt)


def rank0_run(ctx: ChunkContext, stmt: ast.stmt) -> list[ast.stmt]:
    """``stmt`` and the statements right next to it in its block that belong under the same
    guard: logging and checkpoint writes (``print("saving"); torch.save(...)``), so that
    DDP501's and DDP502's fixes produce one ``if`` block, not one per line. Per-rank writes
    and rank-tagged messages stay outside."""
    memo = _memo(ctx)
    member = memo.setdefault("member", {})

    def is_member(s: ast.stmt) -> bool:
        known = member.get(id(s))
        if known is None:
            known = member[id(s)] = _is_log_stmt(ctx, s) or _is_write_stmt(ctx, s)
        return bool(known)

    if not is_member(stmt):
        return [stmt]
    block, idx = _block_of(ctx, stmt)
    lo = hi = idx
    while lo > 0 and is_member(block[lo - 1]):
        lo -= 1
    while hi + 1 < len(block) and is_member(block[hi + 1]):
        hi += 1
    return block[lo : hi + 1]


def guard_run_fix(ctx: ChunkContext, stmt: ast.stmt, cond: Condition, title: str) -> Fix | None:
    """:func:`guard_fix` for ``stmt``'s run, or for ``stmt`` alone where the run cannot be.

    Every statement of a run gets the same edits, computed once."""
    run = rank0_run(ctx, stmt)
    fixes = _memo(ctx).setdefault("run_fix", {})
    key = (id(run[0]), id(run[-1]), cond)
    if key not in fixes:
        fixes[key] = guard_fix(ctx, run, cond, title)
    fix = fixes[key]
    if fix is None and len(run) > 1:
        return guard_fix(ctx, [stmt], cond, title)
    return None if fix is None else replace(fix, title=title)


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
_WORLD_NAMES = frozenset({"world_size", "num_processes", "n_gpu", "ngpus", "num_gpus"})


def _distributed_test(test: ast.AST) -> bool | None:
    """True when ``test`` holds exactly in a distributed run (``cfg.enable_fsdp``,
    ``dist.is_initialized()``, ``world_size > 1``), False when exactly in a single-process run
    (``not args.distributed``, ``world_size == 1``), None when it says neither."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _distributed_test(test.operand)
        return None if inner is None else not inner
    if isinstance(test, (ast.Name, ast.Attribute)):
        return True if _DIST_FLAG.match(P.last_name(test) or "") else None
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        return True if P.last_name(test) in _DIST_FLAG_CALLS else None
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and (P.last_name(test.left) or "").lower() in _WORLD_NAMES
        and not isinstance(test.left, ast.Call)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == 1
    ):
        op = test.ops[0]
        if isinstance(op, (ast.Gt, ast.NotEq)):
            return True
        if isinstance(op, (ast.Eq, ast.LtE)):
            return False
    return None


def single_process_branch(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` is on the single-process side of a uniform "is this run distributed?" branch:
    the ``else:`` of ``if cfg.enable_fsdp:`` / ``if dist.is_initialized():``, the body of
    ``if not args.distributed:`` or ``if world_size == 1:``. Every rank takes the same side,
    and no rank of a distributed run takes that one."""
    child: ast.AST = node
    for a in ctx.ancestors(node):
        if isinstance(a, _NEW_SCOPE):
            return False
        if isinstance(a, ast.If) and child is not a.test:
            distributed = _distributed_test(a.test)
            if distributed is not None and _ENGINE_FLAG.search(ast.unparse(a.test)):
                if K.DDP in ctx.facts.kind_set:
                    distributed = None
            if distributed is not None:
                in_else = any(child is s for s in a.orelse)
                if in_else == distributed:
                    return True
        child = a
    return False
