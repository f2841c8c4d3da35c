"""The per-chunk extractor: one chunk's raw :class:`ChunkFacts`, computed from its text alone
(:func:`extract`), and a whole file's for the project index (:func:`extract_module`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import gates as gate_facts
from ddp_lsp.core import names as known_names
from ddp_lsp.core.factcalls import (
    _IN_PLACE_SHARDERS,
    _SYNC_SKIPPERS,
    _last,
    _path,
    _user_collective,
)
from ddp_lsp.core.factkinds import (
    _CHECKPOINT_WRITERS,
    COLLECTIVE,
    GUARDS_ITSELF,
    HOST_SYNC,
    MAKES_DIST_SAMPLER,
    MODULE,
    NO_SYNC,
    RANK_PREDICATE,
    SETS_EPOCH,
    SILENCES_LOGGING,
    SILENCES_PRINT,
    UNSCALES,
    Binding,
    CallSite,
    ChunkFacts,
    FunctionInfo,
    SavesThrough,
    SourceMarker,
)
from ddp_lsp.core.rankfuncs import guards_itself, is_rank_predicate, nonzero_only, zero_only
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.uniformity import condition_ranks
from ddp_lsp.core.walk import _CHILDREN, children, walk

# The last names of the framework tables' barriers (`dist.barrier`, `accelerator.wait_for_everyone`,
# `comm.synchronize`, mpi4py's `Barrier`), however they are spelled here.
_BARRIER_NAMES = frozenset(
    name.rsplit(".", 1)[-1]
    for lookup in (
        framework_tables.BUILTIN.calls,
        framework_tables.BUILTIN.methods,
        framework_tables.BUILTIN.functions,
    )
    for name in lookup(framework_tables.Meaning.BARRIER)
)


def _barrier_ifs(body: list[ast.stmt]) -> int:
    n = 0
    for stmt in body:
        if isinstance(stmt, ast.If) and any(
            isinstance(node, ast.Call)
            and (
                node.func.attr
                if isinstance(node.func, ast.Attribute)
                else getattr(node.func, "id", "")
            )
            in _BARRIER_NAMES
            for node in walk(stmt)
        ):
            n += 1
    return n


def extract(
    tree: ast.Module,
    member_of: str | None,
    ranks: RankModel,
    extractor: _Extractor | None = None,
) -> ChunkFacts:
    """Raw facts of one chunk (``member_of``: the class its methods belong to)."""
    x = extractor if extractor is not None else _Extractor(ranks)
    if member_of is not None:
        x.class_stack.append(member_of)
    # Top-level code is summarised like a function named "<module>" (merged across chunks), so
    # `if __name__ == "__main__": main(); dist.destroy_process_group()` is visible to rules.
    x._calls.append(set())
    x._props.append(set())
    x.block(tree.body, scope="", guarded=False)
    return finish(x, _barrier_ifs(tree.body) if member_of is None else 0)


def finish(x: _Extractor, barrier_ifs: int) -> ChunkFacts:
    """Close the top-level ``<module>`` frame ``extract`` opened and give the facts gathered
    (also the end of a module fed in pieces: core/factpieces.py)."""
    top_calls, top_props = x._calls.pop(), x._props.pop()
    if top_calls or top_props:
        x.functions.append(
            FunctionInfo(MODULE, None, (), frozenset(top_calls), frozenset(top_props), 0)
        )
    return ChunkFacts(
        imports=tuple(x.imports),
        env_markers=x.env_markers,
        bindings=tuple(x.bindings),
        functions=tuple(x.functions),
        call_sites=tuple(x.call_sites),
        loads=frozenset(x.loads),
        barrier_ifs=barrier_ifs,
    )


@dataclass(frozen=True)
class ModuleExtract:
    """A whole file's facts as the project index needs them (see :func:`extract_module`)."""

    facts: ChunkFacts
    # Calls through a module attribute (`engine.train_one_epoch(model)`, `du.save_on_master()`),
    # which a chunk does not record as call sites (in one file they reach no local function).
    dotted_sites: tuple[CallSite, ...]
    # 1-based line of each call site: facts.call_sites, then dotted_sites.
    site_lines: tuple[int, ...]
    # (scope, spelling) of each name handed to a call as a value (``ModuleSummary.handed``),
    # gathered on the extractor's own walk rather than a second walk of every node.
    handed: tuple[tuple[str, str], ...] = ()


def extract_module(tree: ast.Module, ranks: RankModel) -> ModuleExtract:
    """Raw facts of a whole module parsed at once, with the call sites the project needs."""
    x = _Extractor(ranks, project=True)
    cf = extract(tree, None, ranks, x)
    return ModuleExtract(
        cf, tuple(x.dotted_sites), (*x.site_lines, *x.dotted_lines), tuple(sorted(x.handed or ()))
    )


# The attribute each of the tables' grad-sync skippers ends with (`accelerator.accumulate`:
# "accumulate"): only an attribute of such a name can be one.
_SYNC_SKIP_ATTRS = frozenset(name.rsplit(".", 1)[-1] for name in _SYNC_SKIPPERS)

_NO_SYNC_ATTRS = ("no_sync", "require_backward_grad_sync")
# Statements whose children are all expressions (`walk.children`: no operator, no statement
# list): the extractor walks those children and nothing else.
_SIMPLE_STMTS = frozenset(
    {
        ast.Expr,
        ast.Assign,
        ast.AnnAssign,
        ast.Return,
        ast.Delete,
        ast.Raise,
        ast.Assert,
        ast.Pass,
        ast.Break,
        ast.Continue,
        ast.Global,
        ast.Nonlocal,
    }
)
# Argument classes `dotted` never spells (only a Name/Attribute chain is spelled).
_UNSPELLED = frozenset({ast.Constant, ast.Call, ast.BinOp, ast.Subscript, ast.JoinedStr})


def _spelled(e: ast.expr) -> str | None:
    """The spelling of an argument handed to a call (a starred one's value): ``dotted``."""
    return known_names.dotted(e.value if isinstance(e, ast.Starred) else e)


_Attribute = ast.Attribute
_RANK_ENV_VARS = known_names.RANK_ENV_VARS
_READ_BACKS = ("item", "tolist")
_MARKER: type = tuple  # the class of gates.Ctx, the context markers of a walk

# The last names of the checkpoint writers: a call of one is a save through a parameter when
# the merge resolves it to a writer (SavesThrough).
_SAVERS = frozenset(q.rsplit(".", 1)[-1] for q in _CHECKPOINT_WRITERS)


# Calls that set which log records are emitted: a level or filter chosen per rank silences the
# other ranks' INFO logging.
_LEVEL_SETTERS = frozenset({"basicConfig", "setLevel", "addFilter", "set_verbosity", "disable"})


def _compares_rank(f: ast.FunctionDef | ast.AsyncFunctionDef, ranks: RankModel) -> bool:
    """The function compares a rank (``getattr(record, "global_rank", 0) == 0``)."""
    return any(isinstance(n, ast.Compare) and ranks.mentions_rank(n) for n in walk(f))


def _is_builtin_print(t: ast.expr) -> bool:
    """``builtins.print = ...`` / ``__builtin__.print = ...``."""
    return (
        isinstance(t, ast.Attribute)
        and t.attr == "print"
        and isinstance(t.value, ast.Name)
        and t.value.id in ("builtins", "__builtin__", "__builtins__")
    )


class _Extractor:
    def __init__(self, ranks: RankModel, project: bool = False) -> None:
        self.ranks = ranks
        # Whole-module extraction for the project index: also dotted call sites, and lines.
        self.project = project
        self.dotted_sites: list[CallSite] = []
        self.site_lines: list[int] = []
        self.dotted_lines: list[int] = []
        self._imported: dict[str, str] | None = None
        self._imported_n = 0
        self._project_heads: dict[str, bool] = {}  # the answer by head, while imports stand
        self.imports: list[tuple[str, str]] = []
        self.env_markers = False
        self.bindings: list[Binding] = []
        self.functions: list[FunctionInfo] = []
        self.call_sites: list[CallSite] = []
        self.loads: set[str] = set()
        self.class_stack: list[str] = []
        self._calls: list[set[str]] = []  # per open function
        self._props: list[set[str]] = []
        self._params: list[frozenset[str]] = []
        self._rank_branches = 0  # depth of `if <rank condition>:` branches around the statement
        self._ifs = 0  # depth of `if` branches around the statement, in its own function
        self._assigned: list[set[str]] = [set()]  # paths assigned so far, per open function
        # Parameters rebound to the same path under another type (`out = Path(out)`).
        self._wrapped: list[set[str]] = [set()]
        self._loop_names: list[set[str]] = []  # names bound by `for` targets, per open function
        # The names handed to calls (project only; tests/project/test_summary_walks.py defines them: the scopes
        # these are: the qualname of the enclosing function, MODULE at the top level, a
        # method named by its class only when its `def` is directly in a top-level class's
        # body). None: not gathered (a chunk's extraction, or a class's bases and decorators,
        # which that walk never visits).
        self.handed: set[tuple[str, str]] | None = set() if project else None
        self._hscope = MODULE
        self._hclass: dict[int, str] = {}  # id of a `def` directly in such a body -> class
        # Per open function: a function nested in it compares a rank (a logging filter).
        self._nested_rank_test: list[bool] = []
        # The calls of the open function's own frame for its gate summary (gates.gate_facts),
        # each with its context (gates.Ctx), gathered on this walk (no second walk of the
        # function): None outside a function's frame (the module, a class body or the
        # decorators of a `def` nested in it, a lambda). Each expression's calls are stored
        # in the reverse of the order this walk meets them; reversed whole, the list is in
        # gates.site_facts' walk order (its depth-first walk pops a node's children last
        # first: the reverse of a post-order walk, which this walk is with each expression's
        # part reversed).
        self._sites: list[tuple[ast.Call, str, gate_facts.Ctx]] | None = None
        self._gctx: gate_facts.Ctx = gate_facts.NO_CTX
        self._pset: set[str] = set()
        self._modes: set[str] = set()

    def _maybe_project_call(self, name: str) -> bool:
        """``engine.train_one_epoch`` / ``du.save_on_master``: a call through an imported
        name that may be a project module (not the standard library or a known framework:
        their call sites are most of a file's and can never reach project code)."""
        if self._imported is None or self._imported_n != len(self.imports):
            self._imported = {}
            for bound, target in self.imports:
                self._imported.setdefault(bound, target)
            self._imported_n = len(self.imports)
            self._project_heads = {}
        head = name.partition(".")[0]
        known = self._project_heads.get(head)
        if known is None:
            qual = self._imported.get(head)
            known = self._project_heads[head] = qual is not None and (
                known_names.may_be_project_module(qual)
            )
        return known

    # -- statements ----------------------------------------------------------------------------

    def block(self, body: list[ast.stmt], scope: str, guarded: bool) -> bool:
        """Walk ``body``; whether the statements after it are guarded (as ``guarded`` or by
        an early exit in it: a module's body fed in pieces carries it to the next)."""
        for stmt in body:
            self.stmt(stmt, scope, guarded)
            # `if not is_main_process(): return` guards the rest of the block.
            if (
                not guarded
                and stmt.__class__ is ast.If
                and stmt.body
                and isinstance(stmt.body[-1], (ast.Return, ast.Continue, ast.Raise))
                and nonzero_only(condition_ranks(self.ranks, stmt.test, texts=False))
            ):
                guarded = True
        return guarded

    def stmt(self, s: ast.stmt, scope: str, guarded: bool) -> None:
        cls = s.__class__
        if cls in _SIMPLE_STMTS:
            # A statement whose children are all expressions and that holds no statement
            # (most of them): what the general path below does for it, without asking.
            if cls is ast.Assign or cls is ast.AnnAssign:
                self._assignment(s, scope)  # type: ignore[arg-type]
            elif cls is ast.Expr:
                self._sharded(s, scope)  # type: ignore[arg-type]
            for child in children(s):
                if child.__class__ is ast.Name:  # (`x = ...`: what expr does for it, inline)
                    if isinstance(child.ctx, ast.Load):
                        self.loads.add(child.id)
                else:
                    self.expr(child, scope, guarded)
            return
        # (By class: the statements below were told apart by a chain of isinstance calls.)
        if cls is ast.If:
            self._if(s, scope, guarded)  # type: ignore[arg-type]
            return
        if cls is ast.FunctionDef or cls is ast.AsyncFunctionDef:
            self.function(s, scope)  # type: ignore[arg-type]
            return
        if (cls is ast.For or cls is ast.AsyncFor) and self._loop_names:
            target = s.target  # type: ignore[attr-defined]
            self._loop_names[-1].update(n.id for n in walk(target) if isinstance(n, ast.Name))
        elif isinstance(s, ast.ClassDef):
            # A class in a function is not in its frame (gates.site_facts skips it).
            handed, self.handed = self.handed, None
            sites, self._sites = self._sites, None
            for d in s.decorator_list:
                self.expr(d, scope, guarded)
            for b in s.bases:
                self.expr(b, scope, guarded)
            self.handed = handed
            if handed is not None and self._hscope == MODULE:
                for m in s.body:
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self._hclass[id(m)] = s.name
            self.class_stack.append(s.name)
            self.block(s.body, scope, guarded)
            self.class_stack.pop()
            self._sites = sites
            return
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            self.imports.extend(known_names.import_bindings(s))
            return
        self._compound(s, scope, guarded)

    def _if(self, s: ast.If, scope: str, guarded: bool) -> None:
        pol = condition_ranks(self.ranks, s.test, texts=False)
        self.expr(s.test, scope, guarded)
        outer = self._gctx
        if self._sites is not None:
            on, off = gate_facts.branch_ctx(s.test, outer, self._pset, self._modes)
        else:
            on = off = outer
        self._rank_branches += pol is not None
        self._ifs += 1
        mark = len(self.bindings)
        self._gctx = on
        self.block(s.body, scope, guarded or zero_only(pol))
        self._drop_if_raises(s.body, scope, mark)
        mark = len(self.bindings)
        self._gctx = off
        self.block(s.orelse, scope, guarded or nonzero_only(pol))
        self._gctx = outer
        self._drop_if_raises(s.orelse, scope, mark)
        self._ifs -= 1
        self._rank_branches -= pol is not None

    def _compound(self, s: ast.stmt, scope: str, guarded: bool) -> None:
        """A statement neither simple nor one of those above: its expressions, then its
        blocks (``for``, ``while``, ``with``, ``try``, ``match``, ``x += ...``)."""
        for child in children(s):
            if isinstance(child, (ast.stmt, ast.ExceptHandler)):
                continue
            if isinstance(child, ast.expr):
                self.expr(child, scope, guarded)
            else:  # withitem, match_case, arguments, keyword...
                for sub in children(child):
                    if isinstance(sub, ast.expr):
                        self.expr(sub, scope, guarded)
                if isinstance(child, ast.match_case):
                    self.block(child.body, scope, guarded)
        # Source order: the try body before its handlers, so that for
        # `try: from torch.amp import X / except ImportError: from torch.cuda.amp import X`
        # the first (preferred) import is the one the module's aliases keep.
        body = getattr(s, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            if s.__class__ is ast.While and self._sites is not None:
                outer = self._gctx  # its `else` runs in the outer context
                self._gctx = gate_facts.branch_ctx(s.test, outer, self._pset, self._modes)[0]
                self.block(body, scope, guarded)
                self._gctx = outer
            else:
                self.block(body, scope, guarded)
        for handler in getattr(s, "handlers", ()):
            if handler.type is not None:
                self.expr(handler.type, scope, guarded)
            mark = len(self.bindings)
            self.block(handler.body, scope, guarded)
            self._drop_if_raises(handler.body, scope, mark)
        for name in ("orelse", "finalbody"):
            tail = getattr(s, name, None)
            if isinstance(tail, list) and tail and isinstance(tail[0], ast.stmt):
                self.block(tail, scope, guarded)

    def _assignment(self, s: ast.Assign | ast.AnnAssign, scope: str) -> None:
        value = s.value
        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
        if any(_is_builtin_print(t) for t in targets):
            self._prop(SILENCES_PRINT)
        if value is not None:
            for t in targets:
                self.bind(t, value, scope)
        if isinstance(s, ast.AnnAssign):
            self.annotation(s.target, s.annotation, scope)

    def _sharded(self, s: ast.Expr, scope: str) -> None:
        if isinstance(s.value, ast.Call) and s.value.args:
            # `fully_shard(model)` shards the module in place: an FSDP module from here on.
            callee = known_names.dotted(s.value.func) or ""
            if callee.rsplit(".", 1)[-1] in _IN_PLACE_SHARDERS:
                self.bind(s.value.args[0], s.value, scope)

    def _drop_if_raises(self, body: list[ast.stmt], scope: str, mark: int) -> None:
        """A branch that ends in ``raise`` leaves by the exception: the local names it bound
        (``model = DDP(model)`` before ``raise ValueError(...)``) never reach the code after
        it, so they give no kind to the merged facts. Attributes (``self.model``) stay: the
        object outlives the exception."""
        if body and isinstance(body[-1], ast.Raise) and len(self.bindings) > mark:
            kept = [b for b in self.bindings[mark:] if b.scope != scope]
            del self.bindings[mark:]
            self.bindings.extend(kept)

    def function(self, f: ast.FunctionDef | ast.AsyncFunctionDef, scope: str) -> None:
        cls = self.class_stack[-1] if self.class_stack and not scope else None
        if cls is not None:
            qual = f"{cls}.{f.name}"
        elif scope:
            qual = f"{scope}.{f.name}"
        else:
            qual = f.name
        sites, self._sites = self._sites, None  # not in the enclosing frame (gates.site_facts)
        for d in f.decorator_list:
            self.expr(d, scope, False)
        params = [a.arg for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)]
        if f.args.vararg is not None:  # `*args` forwarded whole (`torch.save(*args, **kwargs)`)
            params.append(f"*{f.args.vararg.arg}")
        for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs):
            if a.annotation is not None:
                src = known_names.dotted(a.annotation)
                if src:
                    self.bindings.append(Binding(qual, a.arg, (src,)))
            if a.arg in self.ranks.names:
                self.bindings.append(Binding(qual, a.arg, (SourceMarker.RANK,)))
        self._calls.append(set())
        self._props.append(set())
        self._params.append(frozenset(params))
        saved_classes, saved_ifs = self.class_stack, self._ifs
        self.class_stack = [cls] if cls else []
        self._ifs = 0
        self._assigned.append(set())
        self._wrapped.append(set())
        self._loop_names.append(set())
        self._nested_rank_test.append(False)
        outer_frame = self._gctx, self._pset, self._modes
        frame: list[tuple[ast.Call, str, gate_facts.Ctx]] = []
        self._sites = frame
        self._gctx = gate_facts.NO_CTX
        self._pset, self._modes = gate_facts.frame_params(f)
        body_guarded = guards_itself(f.body, self.ranks)
        outer = self._hscope
        if self.handed is not None:
            hcls = self._hclass.get(id(f))
            if hcls is not None:
                self._hscope = f"{hcls}.{f.name}"
            elif outer != MODULE:
                self._hscope = f"{outer}.{f.name}"
            else:
                self._hscope = f.name
        self.block(f.body, qual, body_guarded)
        self._hscope = outer
        # The parameters that switch its collectives off.
        gates = gate_facts.gate_facts(f, reversed(frame), self._pset, self._modes)
        self._sites = sites
        self._gctx, self._pset, self._modes = outer_frame
        self._loop_names.pop()
        nested_rank_test = self._nested_rank_test.pop()
        self._assigned.pop()
        self._wrapped.pop()
        self.class_stack, self._ifs = saved_classes, saved_ifs
        calls = self._calls.pop()
        props = self._props.pop()
        self._params.pop()
        if self.ranks.frameworks is not framework_tables.BUILTIN and _user_collective(
            self.ranks, calls
        ):
            props.add(COLLECTIVE)
        if body_guarded:
            props.add(GUARDS_ITSELF)
        if is_rank_predicate(f, self.ranks):
            props.add(RANK_PREDICATE)
        if nested_rank_test and any(c.rsplit(".", 1)[-1] == "addFilter" for c in calls):
            # `def rank0_filter(record): return record.global_rank == 0` ...
            # `handler.addFilter(rank0_filter)`: INFO records of the other ranks are dropped.
            props.add(SILENCES_LOGGING)
        if scope and cls is None and self._nested_rank_test and _compares_rank(f, self.ranks):
            self._nested_rank_test[-1] = True
        self.functions.append(
            FunctionInfo(
                qual,
                cls,
                tuple(params),
                frozenset(calls),
                frozenset(props),
                f.lineno - 1,
                gates,
            )
        )

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e: ast.AST, scope: str, guarded: bool) -> None:
        # `walk` written out (the same order): names and constants, half of the nodes, hold
        # no node, so their children are never asked for.
        # (The classes it asks for at every node as locals; the list's own methods called as
        # methods, which the interpreter specialises: as bound methods in locals they cost more.)
        stack: list[ast.AST] = [e]
        Name, Constant, Load, Call = ast.Name, ast.Constant, ast.Load, ast.Call
        IfExp, Lambda = ast.IfExp, ast.Lambda
        loads = self.loads
        kids = _CHILDREN
        sites = self._sites
        if sites is not None:
            mark = len(sites)
            ctx = self._gctx
        while stack:
            node = stack.pop()
            cls = node.__class__
            if cls is Name:
                if node.ctx.__class__ is Load:  # type: ignore[attr-defined]
                    loads.add(node.id)  # type: ignore[attr-defined]
                continue
            if cls is Constant:
                if node.value.__class__ is str and node.value in _RANK_ENV_VARS:  # type: ignore[attr-defined]
                    self.env_markers = True
                continue
            if cls is _Attribute:  # (as below, its one child pushed without `children`)
                stack.append(node.value)  # type: ignore[attr-defined]
                attr = node.attr  # type: ignore[attr-defined]
                if attr in _NO_SYNC_ATTRS:
                    self._prop(NO_SYNC)
                elif attr in _SYNC_SKIP_ATTRS and f"{_last(node.value)}.{attr}" in _SYNC_SKIPPERS:  # type: ignore[attr-defined]
                    self._prop(NO_SYNC)
                continue
            if sites is not None:
                if cls is _MARKER:  # a context marker (below)
                    ctx = node  # type: ignore[assignment]
                    continue
                if cls is IfExp:
                    # As gates.site_facts: each branch in its context, the same nodes in the
                    # same order, a marker below each group restoring the context.
                    on, off = gate_facts.branch_ctx(node.test, ctx, self._pset, self._modes)  # type: ignore[attr-defined]
                    marked: list[Any] = stack
                    marked += (node.test, ctx, node.body, on, node.orelse, off)  # type: ignore[attr-defined]
                    continue
                elif cls is Lambda:
                    # Not in the frame: walked outside it (the same order: all of it first).
                    self._sites = None
                    for child in reversed(children(node)):
                        self.expr(child, scope, guarded)
                    self._sites = sites
                    continue
            fn = kids.get(cls)  # (`children` without its own call)
            stack.extend(children(node) if fn is None else fn(node))
            if cls is Call:  # (an attribute never gets here: see above)
                call: ast.Call = node  # type: ignore[assignment]
                if self.handed is not None:
                    self._hand(call)
                if (
                    self._ifs == 0
                    and self._loop_names
                    and call.func.__class__ is _Attribute
                    and call.func.attr in _READ_BACKS  # (what _reads_back asks first)
                    and _reads_back(call)
                ):
                    root = call.func.value
                    while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                        root = root.func if isinstance(root, ast.Call) else root.value
                    if isinstance(root, ast.Name) and (
                        root.id in self._params[-1] or root.id in self._loop_names[-1]
                    ):
                        self._prop(HOST_SYNC)
                name = self.call(call, scope, guarded)
                if sites is not None and name is not None:
                    sites.append((call, name, ctx))
        if sites is not None and len(sites) - mark > 1:
            part = sites[mark:]
            part.reverse()
            sites[mark:] = part

    def _hand(self, call: ast.Call) -> None:
        # What tests/project/test_summary_walks.py's handed_names tests, item by item.
        # (Only a name, an attribute chain or a starred one is spelled: `dotted` gives None
        # for anything else, which is most arguments, constants and calls; asked by class.)
        scope = self._hscope
        handed = self.handed
        assert handed is not None
        values = call.args
        if call.keywords:
            values = [*values, *[kw.value for kw in call.keywords]]
        for v in values:
            cls = v.__class__
            if cls is ast.Name:
                handed.add((scope, v.id))  # type: ignore[attr-defined]
            elif cls is ast.Tuple or cls is ast.List:
                for e in v.elts:  # type: ignore[attr-defined]
                    spelled = _spelled(e)
                    if spelled:
                        handed.add((scope, spelled))
            elif cls is _Attribute or cls is ast.Starred or cls not in _UNSPELLED:
                spelled = _spelled(v)
                if spelled:
                    handed.add((scope, spelled))

    def _prop(self, prop: str) -> None:
        if self._props:
            self._props[-1].add(prop)

    def call(self, c: ast.Call, scope: str, guarded: bool) -> str | None:
        """Record the call ``c``; its callee's spelling (``known_names.dotted``), if any."""
        func = c.func
        if func.__class__ is _Attribute:
            last = func.attr  # (the spelling's last part, when it has one)
            if last in _LEVEL_SETTERS and (  # `logging.getLogger().setLevel(...)` too
                self._rank_branches
                or any(
                    self.ranks.mentions_rank(a) for a in (*c.args, *(k.value for k in c.keywords))
                )
            ):
                self._prop(SILENCES_LOGGING)
            name = known_names.dotted(func)
            if name is None:
                return None
        elif func.__class__ is ast.Name:
            name = last = func.id
        else:
            return None  # (`dotted` spells a name or an attribute chain only)
        if last == "unscale_":
            self._prop(UNSCALES)
        elif last == "set_epoch":
            self._prop(SETS_EPOCH)
        elif last.endswith("DistributedSampler") and not any(
            k.arg == "shuffle" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in c.keywords
        ):
            self._prop(MAKES_DIST_SAMPLER)
        elif last == "init_process_group" or name.startswith("torch.distributed."):
            # `import torch` then `torch.distributed.barrier()`: distributed code too
            self.env_markers = True
        elif last in _SAVERS and not guarded and self._params:
            dest = c.args[1] if len(c.args) > 1 else None
            for kw in c.keywords:
                if kw.arg in ("f", "filename"):
                    dest = kw.value
            forwarded = (  # `torch.save(*args, **kwargs)`: the caller's arguments, path too
                dest is None
                and c.args
                and isinstance(c.args[0], ast.Starred)
                and isinstance(c.args[0].value, ast.Name)
                and f"*{c.args[0].value.id}" in self._params[-1]
            )
            # A path built under a parameter with constant names (`os.path.join(out_dir,
            # "model.pt")`, `Path(save_dir) / WEIGHTS`) is the caller's path too.
            root = (
                None if dest is None or isinstance(dest, ast.Name) else known_names.path_root(dest)
            )
            under = (
                root is not None
                and root in self._params[-1]
                and (root not in self._assigned[-1] or root in self._wrapped[-1])
            )
            if forwarded or under or isinstance(dest, ast.Name) and dest.id in self._params[-1]:
                # Raw: the spelling is resolved in merge (`torch.save`, not `self.save`).
                self._prop(SavesThrough(name).encode())
        callee = name
        if name.startswith("self.") and name.count(".") == 1 and self.class_stack:
            callee = f"{self.class_stack[-1]}.{last}"
        if self._calls:
            self._calls[-1].add(callee)
        local = "." not in name or callee != name
        if local or (self.project and self._maybe_project_call(name)):
            # Every argument, "" for one that is not a name (`train(nn.Linear(2, 2))`): a
            # caller passing something of no known kind makes a parameter's kind "mixed".
            args: list[tuple[int | str, str]] = []
            for i, a in enumerate(c.args):
                if isinstance(a, ast.Starred):
                    break  # positions after *args are unknown
                args.append((i, _path(a) or ""))
            for kw in c.keywords:
                if kw.arg:
                    args.append((kw.arg, _path(kw.value) or ""))
            site = CallSite(scope, callee, tuple(args), guarded)
            if local:
                self.call_sites.append(site)
                if self.project:
                    self.site_lines.append(c.lineno)
            else:
                self.dotted_sites.append(site)
                self.dotted_lines.append(c.lineno)
        return name

    def bind(self, target: ast.AST, value: ast.AST, scope: str) -> None:
        path = _path(target)
        if path is None:
            return
        b_scope = scope
        if path.startswith("self.") and self.class_stack:
            b_scope = self.class_stack[-1]
        if self.ranks.is_rank_expr(value):
            self.bindings.append(Binding(b_scope, path, (SourceMarker.RANK,)))
            return
        earlier = path in self._assigned[-1] or path in (self._params[-1] if self._params else ())
        if self._params and path in self._params[-1]:
            if known_names.path_wrapper_of(value) == path and path not in self._assigned[-1]:
                self._wrapped[-1].add(path)
            else:
                self._wrapped[-1].discard(path)
        self._assigned[-1].add(path)
        if ("." in path or not scope) and isinstance(
            value, (ast.Compare, ast.BoolOp, ast.Call, ast.IfExp)
        ):
            # `self.is_master = rank == 0`, `args.save_logs = args.logs and is_master(args)`,
            # `self.saver = Saver() if is_master else None`: a rank-0 flag (or an object only
            # rank 0 holds) other chunks of the module test (the uniformity analysis).
            test: ast.expr = value
            if isinstance(value, ast.IfExp):
                none = [
                    isinstance(v, ast.Constant) and v.value is None
                    for v in (value.body, value.orelse)
                ]
                if none == [False, True]:
                    test = value.test
                elif any(none):
                    test = ast.Constant(None)
                # else `self.is_local_main if local_fs else self.is_main`: a uniform choice
                # between two rank tests (core/rankcond.py), the value itself.
            flag = condition_ranks(self.ranks, test, texts=False)
            if zero_only(flag):
                self.bindings.append(Binding(b_scope, path, (SourceMarker.RANK0_FLAG,)))
        chain = _call_chain(value)
        if chain:
            self.bindings.append(
                Binding(b_scope, path, chain, self._ifs > 0 and earlier, self._ifs > 0)
            )
        elif (
            isinstance(value, ast.Attribute)
            and value.attr == "module"
            and _path(value.value) is not None
        ):
            # `model_without_ddp = model.module`: the plain model inside the wrapper. A name
            # bound so is never given the wrapper's kind through `model_without_ddp = model`.
            self.bindings.append(
                Binding(b_scope, path, (SourceMarker.UNWRAP, _path(value.value) or ""))
            )
        elif isinstance(value, (ast.Name, ast.Attribute)):
            src = _path(value)
            if src:
                # The source is looked up where the assignment runs (a method's parameter
                # for `self.gpu_id = gpu_id`), the target where it is stored.
                self.bindings.append(Binding(b_scope, path, (SourceMarker.ALIAS, src, scope)))

    def annotation(self, target: ast.AST, ann: ast.AST, scope: str) -> None:
        path = _path(target)
        src = known_names.dotted(ann)
        if path and src:
            b_scope = (
                self.class_stack[-1] if path.startswith("self.") and self.class_stack else scope
            )
            self.bindings.append(Binding(b_scope, path, (src,)))


def _reads_back(call: ast.Call) -> bool:
    """``x.item()`` / ``x.tolist()``: a tensor's value copied to the host."""
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr in _READ_BACKS
        and not call.args
        and not call.keywords
    )


def _call_chain(value: ast.AST) -> tuple[str, ...]:
    chain: list[str] = []
    node = value
    while isinstance(node, ast.Call):
        name = known_names.dotted(node.func)
        if name is None:
            break
        chain.append(name)
        if not node.args:
            break
        node = node.args[0]
    return tuple(chain)
