"""Parameters that switch a helper's collectives off: the summaries behind "arguments bound at
a guarded call" of the rank-uniformity analysis (:mod:`ddp_lsp.core.uniformity`).

A helper that reaches a collective only under a test of one of its parameters is not a
collective when a call binds that parameter to a value the test rejects::

    def save_blob(path, obj, synchronize=True):
        if synchronize:
            dist.barrier()              # off when synchronize is False/None/0
        torch.save(obj, path)

    @contextmanager
    def zero_first(local_rank):
        if local_rank not in (-1, 0):
            dist.barrier()              # off when local_rank is -1 or 0
        yield
        if local_rank == 0:
            dist.barrier()              # off when local_rank is -1, None or False
                                        # together: off when local_rank == -1 (single process)

    if rank == 0:
        save_blob("train.pt", state, synchronize=False)   # no collective: not a hang
        with zero_first(-1): ...                          # single process: no barrier

Three steps, each pure:

1. :func:`site_facts` (the chunk facts, per function, syntactic): each call site of the
   function's own frame with the parameter values under which an enclosing ``if`` / ``while``
   / conditional expression skips it, the caller parameters it passes on, what it binds
   (literal tokens by position or keyword, :attr:`Token.OTHER` for other expressions, and
   whether it unpacks arguments), and the parameters' literal defaults. Stored as the typed
   :class:`GateFacts` of :attr:`~ddp_lsp.core.factkinds.FunctionInfo.gates`, so they travel
   with the facts and the project index (whose JSON codec checks every field's type).
2. :func:`resolve` (the module facts, after the transitive properties): a function that
   reaches a collective is *off* for ``param=value`` when every call site of its frame that
   reaches one is skipped for it, directly or through a callee that is off for the value
   passed on (:attr:`Gating.off`). A call site whose own literals or left defaults switch its
   callee off (``make_loader(path)`` with ``rank=-1`` by default) makes no collective at all;
   a function whose every such site is off is off whatever its arguments
   (:attr:`Gating.always`: a validation helper that builds its own loader that way). A site
   under a mode switch of the function's arguments (``if args.fsdp:``), or one binding such a
   switch to a parameter that switches the callee off, reaches a collective only in that
   mode; a function whose every collective site is off or so is mode-gated
   (:attr:`Gating.mode`), and a call of it is not taken as a collective. Iterated through
   same-file helpers by the module facts (:attr:`ModuleFacts.func_gates`), and through
   helpers of other files by the project index (``ddp_lsp/project/flow.py`` runs the same
   resolution over every module's functions; :attr:`CalleeProps.gating` carries the result).
3. :func:`switched_off` (the path analysis, per call): the call binds a literal (or the
   parameter's default) that switches the callee off; :func:`falsy_bindings` lists the
   expressions whose falsity does (a path that decided ``u`` false drops the call).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Final, TypeVar

from ddp_lsp.core.walk import LEAVES, children, walk

K = TypeVar("K", bound=Hashable)

COLLECTIVE_PROP = "collective"  # ddp_lsp.core.facts.COLLECTIVE (facts imports this module)


class Token:
    """What the summaries know of a value: one of the literals a parameter is tried with
    (:data:`TRIED`), or what a call binds that is not one."""

    MINUS_ONE: Final = "-1"
    ZERO: Final = "0"
    NONE: Final = "None"
    FALSE: Final = "False"
    MODE: Final = "m"  # a mode test of the caller's arguments (see :func:`_mode_test`)
    OTHER: Final = "?"  # any other expression


# The values a parameter is tried with, by token.
TRIED: dict[str, object] = {
    Token.MINUS_ONE: -1,
    Token.ZERO: 0,
    Token.NONE: None,
    Token.FALSE: False,
}
_FALSY = (Token.NONE, Token.FALSE)
_OTHER, _MODE = Token.OTHER, Token.MODE
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_SCOPE_CLASSES = frozenset(_SCOPES)

# A (parameter, token) pair: "the function's parameter ``p`` bound to the value ``token``".
Gate = tuple[str, str]
# Where a call puts an argument: its position (0-based, as written) or its keyword.
Slot = int | str


@dataclass(frozen=True)
class Site:
    """One call in a function's own frame (syntactic, see :func:`site_facts`)."""

    callee: str  # the callee as spelled (``dist.barrier``, ``self.sync``, ``zero_first``)
    # The values of the function's parameters for which an enclosing test skips the call.
    skipped: frozenset[tuple[str, str]]
    # Under a mode test of the function's arguments (``if args.fsdp:``): reached in that mode only.
    moded: bool
    passed: tuple[tuple[Slot, str], ...]  # (slot, parameter of the function passed there whole)
    bound: tuple[tuple[Slot, str], ...]  # (slot, :class:`Token` of the argument written there)
    unpacked: bool  # ``*args`` / ``**kwargs``: the defaults it leaves are unknown


@dataclass(frozen=True)
class GateFacts:
    """The syntactic gate summary of a function (:attr:`FunctionInfo.gates`): the literal
    defaults of its parameters and its call sites. Empty for a function that calls nothing."""

    defaults: tuple[tuple[str, str], ...] = ()  # (parameter, token of its literal default)
    sites: tuple[Site, ...] = ()


NO_GATES = GateFacts()


@dataclass(frozen=True)
class Gating:
    """What a call of a function reads (resolved by :func:`resolve`): the values of its
    parameters that switch its collectives off. Only functions with some such value have one."""

    params: tuple[str, ...]  # its parameters, ``self`` included (a method's calls skip it)
    defaults: tuple[tuple[str, str], ...]  # (parameter, token of its literal default)
    off: frozenset[tuple[str, str]]  # (parameter, token): bound to it, no collective runs
    # Every call site that reaches a collective binds values that switch its callee off: no
    # call of the function makes a collective, whatever its arguments.
    always: bool = False
    # Every collective sits under a mode test of its arguments (``if args.fsdp:``): whether a
    # call communicates depends on a mode of the run the call site does not show, so a call of
    # it is not taken as a collective (precision first: a mode-gated helper called on rank 0
    # only in that mode is missed).
    mode: bool = False

    @cached_property
    def default_of(self) -> dict[str, str]:
        return dict(self.defaults)

    def with_off(self, off: Iterable[tuple[str, str]], always: bool, mode: bool) -> Gating:
        return Gating(
            self.params,
            self.defaults,
            self.off | frozenset(off),
            self.always or always,
            self.mode or mode,
        )


def gate_params(params: Iterable[str]) -> tuple[str, ...]:
    """The parameters a gate names, from :attr:`FunctionInfo.params` (``*args`` left out)."""
    return tuple(p for p in params if not p.startswith("*"))


# -- 1. sites ------------------------------------------------------------------------------------


def _token(e: ast.AST | None) -> str | None:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        inner = e.operand
        if isinstance(inner, ast.Constant) and inner.value == 1 and type(inner.value) is int:
            return Token.MINUS_ONE
        return None
    if isinstance(e, ast.Constant):
        v = e.value
        if v is None:
            return Token.NONE
        if v is False:
            return Token.FALSE
        if type(v) is int and v == 0:
            return Token.ZERO
    return None


def _evaluate(test: ast.AST, name: str, value: object) -> bool | None:
    """``test`` with ``name`` bound to ``value``: True, False, or None (depends on more)."""
    if isinstance(test, ast.Name):
        return bool(value) if test.id == name else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _evaluate(test.operand, name, value)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        parts = [_evaluate(v, name, value) for v in test.values]
        if isinstance(test.op, ast.And):
            if False in parts:
                return False
            return True if all(p is True for p in parts) else None
        if True in parts:
            return True
        return False if all(p is False for p in parts) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if not (isinstance(left, ast.Name) and left.id == name):
            return None
        consts = _constants(right)
        if consts is None:
            return None
        try:
            if isinstance(op, (ast.In, ast.NotIn)):
                found = any(value == c and type(value) is type(c) for c in consts)
                return found if isinstance(op, ast.In) else not found
            if len(consts) != 1:
                return None
            c = consts[0]
            if isinstance(op, ast.Is):
                return value is c
            if isinstance(op, ast.IsNot):
                return value is not c
            if value is None or c is None:
                if isinstance(op, ast.Eq):
                    return value is c
                if isinstance(op, ast.NotEq):
                    return value is not c
                return None
            ops: dict[type, Callable[[object, object], bool]] = {
                ast.Eq: lambda a, b: a == b,
                ast.NotEq: lambda a, b: a != b,
                ast.Lt: lambda a, b: a < b,  # type: ignore[operator]
                ast.LtE: lambda a, b: a <= b,  # type: ignore[operator]
                ast.Gt: lambda a, b: a > b,  # type: ignore[operator]
                ast.GtE: lambda a, b: a >= b,  # type: ignore[operator]
            }
            fn = ops.get(type(op))
            return None if fn is None else bool(fn(value, c))
        except TypeError:
            return None
    return None


def _constants(e: ast.AST) -> list[object] | None:
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        out: list[object] = []
        for elt in e.elts:
            one = _constants(elt)
            if one is None:
                return None
            out.extend(one)
        return out
    tok = _token(e)
    if tok is not None:
        return [TRIED[tok]]
    if isinstance(e, ast.Constant) and isinstance(e.value, (int, bool, str)):
        return [e.value]
    return None


def _skips(
    test: ast.AST, params: Iterable[str], names: set[str]
) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(param, token) for which ``test`` surely is false (its true branch is skipped), and
    those for which it surely is true (its false branch is skipped); ``names``: the names
    ``test`` reads. Each (param, token) is evaluated once for both branches."""
    when_false: set[tuple[str, str]] = set()
    when_true: set[tuple[str, str]] = set()
    for p in params:
        if p not in names:
            continue
        for tok, value in TRIED.items():
            got = _evaluate(test, p, value)
            if got is False:
                when_false.add((p, tok))
            elif got is True:
                when_true.add((p, tok))
    return when_false, when_true


def _bound_token(e: ast.expr, params: set[str], modes: set[str]) -> str:
    """The :class:`Token` of an argument: a literal's, :data:`Token.MODE` for a mode test
    (:func:`_mode_test`), else :data:`Token.OTHER`. A name, a constant and an attribute (most
    arguments) are answered by class, as :func:`_token` and :func:`_mode_test` would."""
    cls = e.__class__
    if cls is ast.Name:
        return Token.MODE if e.id in modes else Token.OTHER  # type: ignore[attr-defined]
    if cls is ast.Constant:
        return _token(e) or Token.OTHER  # (no constant is a mode test)
    if cls is _Attribute:
        return Token.MODE if _mode_attr(e, params) else Token.OTHER
    return _token(e) or (Token.MODE if _mode_test(e, params, modes) else Token.OTHER)


def _literals(call: ast.Call) -> tuple[tuple[tuple[Slot, str], ...], bool]:
    """What a call binds in a function without parameters: no argument is a mode test (each
    would be one of the parameters, or of a local assigned from one), so each is a literal's
    token or :data:`Token.OTHER`."""
    out: list[tuple[Slot, str]] = []
    unpacked = False
    other = Token.OTHER
    for i, a in enumerate(call.args):
        cls = a.__class__
        if cls is ast.Starred:
            unpacked = True
            break
        out.append((i, other if cls is ast.Name or cls is _Attribute else _token(a) or other))
    for kw in call.keywords:
        if kw.arg is None:
            unpacked = True
        else:
            v = kw.value
            cls = v.__class__
            out.append(
                (kw.arg, other if cls is ast.Name or cls is _Attribute else _token(v) or other)
            )
    return tuple(out), unpacked


_Attribute = ast.Attribute


# Attribute names that say whether the run is distributed, or which rank this is: a test of
# one of them is not a mode of the run (``if args.distributed: dist.barrier()`` is on in every
# distributed run, so a rank-0 call of it hangs).
_NOT_MODES = tuple(
    "rank master main local world dist ddp gpu device "
    "node zero global leader primary first last stage should".split()
)


# Any of them in a name (one search, not a generator over the words).
_NOT_MODE_WORD = re.compile("|".join(map(re.escape, _NOT_MODES)))


def _of_param(e: ast.AST, params: set[str]) -> bool:
    """``args`` or ``self.cfg``: a parameter, or an attribute path from one."""
    while isinstance(e, ast.Attribute):
        e = e.value
    return isinstance(e, ast.Name) and e.id in params


def _mode_attr(e: ast.AST, params: set[str]) -> bool:
    """``args.fsdp`` / ``self.cfg.is_pipe_parallel`` / ``getattr(args, "fsdp", False)``: a
    configuration switch read from an argument."""
    name = None
    if isinstance(e, ast.Attribute) and _of_param(e.value, params):
        name = e.attr
    elif (
        isinstance(e, ast.Call)
        and isinstance(e.func, ast.Name)
        and e.func.id == "getattr"
        and len(e.args) >= 2
        and _of_param(e.args[0], params)
        and isinstance(e.args[1], ast.Constant)
        and isinstance(e.args[1].value, str)
    ):
        name = e.args[1].value
    if name is None:
        return False
    return _NOT_MODE_WORD.search(name.lower()) is None


def _mode_test(e: ast.AST, params: set[str], modes: set[str]) -> bool:
    """A test true only in one mode of the run, decided by the function's arguments
    (``args.fsdp``, ``getattr(cfg, "fsdp_eval", False) and args.distributed``, a local
    assigned one): the same on every rank, and false in the run modes that do not use it."""
    if isinstance(e, ast.Name):
        return e.id in modes
    if isinstance(e, ast.BoolOp):
        parts = [_mode_test(v, params, modes) for v in e.values]
        return any(parts) if isinstance(e.op, ast.And) else all(parts)
    return _mode_attr(e, params)


_STMT_LISTS = frozenset({"body", "handlers", "orelse", "finalbody", "cases"})
# The statements that bind names, by class (see _mode_locals).
_BINDERS: dict[type, int] = {ast.Assign: 1, ast.With: 3, ast.AsyncWith: 3, ast.ExceptHandler: 4}
_BINDERS.update(dict.fromkeys((ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor), 2))
_STMT_FIELDS: dict[type, tuple[str, ...]] = {}


def _bind_local(
    values: dict[str, list[ast.expr | None]], t: ast.AST, value: ast.expr | None
) -> None:
    """Record ``value`` as bound to the names of the target ``t`` (unpacked: None). A
    module-level function, not a closure over ``values``: a nested function that calls itself
    is a reference cycle (function, cell, function), which kept each frame's ``values``, and
    the expressions in it, alive until the cyclic collector ran (1.4 million objects for a
    cold index of 2,040 files, freed by one 3.7 s collection)."""
    if isinstance(t, ast.Name):
        values.setdefault(t.id, []).append(value)
    elif isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            _bind_local(values, e, None)
    elif isinstance(t, ast.Starred):
        _bind_local(values, t.value, None)


def _mode_locals(f: ast.FunctionDef | ast.AsyncFunctionDef, params: set[str]) -> set[str]:
    """Locals assigned exactly once in ``f``'s frame, from a mode test of its arguments
    (``use_fsdp_eval = getattr(args, "fsdp", False) and args.distributed``). Statements only
    (a walrus in an expression is not seen): the cheap walk keeps the facts fast."""
    values: dict[str, list[ast.expr | None]] = {}
    bind = _bind_local
    stack: list[ast.AST] = list(f.body)
    binders = _BINDERS
    while stack:
        n = stack.pop()
        cls = n.__class__
        if cls in _SCOPE_CLASSES:
            continue
        kind = binders.get(cls)
        if kind is None:
            pass  # (most statements)
        elif kind == 1:  # Assign
            value = n.value  # type: ignore[attr-defined]
            for t in n.targets:  # type: ignore[attr-defined]
                if t.__class__ is ast.Name:
                    values.setdefault(t.id, []).append(value)
                else:
                    bind(values, t, value)
        elif kind == 2:  # AugAssign, AnnAssign, For, AsyncFor
            bind(values, n.target, None)  # type: ignore[attr-defined]
        elif kind == 3:  # With, AsyncWith
            for item in n.items:  # type: ignore[attr-defined]
                if item.optional_vars is not None:
                    bind(values, item.optional_vars, None)
        elif n.name:  # type: ignore[attr-defined]  # ExceptHandler
            values.setdefault(n.name, []).append(None)  # type: ignore[attr-defined]
        # The statement lists of ``n`` in field order: its children that are statements,
        # handlers or cases, without building the list of every child.
        fields = _STMT_FIELDS.get(cls)
        if fields is None:
            fields = _STMT_FIELDS[cls] = tuple(f for f in cls._fields if f in _STMT_LISTS)
        for name in fields:
            stack.extend(getattr(n, name))
    out: set[str] = set()
    for name, vals in values.items():
        v = vals[0]
        if name not in params and len(vals) == 1 and v is not None and _mode_test(v, params, out):
            out.add(name)
    return out


# The context of a call site: the (parameter, token) pairs for which an enclosing test skips it,
# and whether it sits under a mode test of the function's arguments.
Ctx = tuple[frozenset[Gate], bool]
NO_CTX: Ctx = (frozenset(), False)


def branch_ctx(test: ast.expr, ctx: Ctx, pset: set[str], modes: set[str]) -> tuple[Ctx, Ctx]:
    """The contexts of the branch an ``if`` / ``while`` / conditional expression testing
    ``test`` takes when it is true, and of its other branch (a ``while``'s ``else`` keeps
    ``ctx``: the caller's choice), inside a context ``ctx`` of a function with parameters
    ``pset`` and mode locals ``modes``."""
    gates, moded = ctx
    on = off = gates
    on_moded = off_moded = moded
    if pset:
        names = {n.id for n in walk(test) if isinstance(n, ast.Name)}
        if not names.isdisjoint(pset):
            when_false, when_true = _skips(test, pset, names)
            on = gates | when_false
            off = gates | when_true
    if _mode_test(test, pset, modes):
        on_moded = True
    elif (
        isinstance(test, ast.UnaryOp)
        and isinstance(test.op, ast.Not)
        and _mode_test(test.operand, pset, modes)
    ):
        off_moded = True
    return (on, on_moded), (off, off_moded)


def frame_params(f: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[set[str], set[str]]:
    """The parameters of ``f`` (``self`` included, ``*args`` left out) and its mode locals
    (:func:`_mode_locals`; without parameters none, and the walk is skipped)."""
    args = f.args
    pset = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    return pset, (_mode_locals(f, pset) if pset else set())


def gate_facts(
    f: ast.FunctionDef | ast.AsyncFunctionDef,
    calls: Iterable[tuple[ast.Call, str, Ctx]],
    pset: set[str],
    modes: set[str],
) -> GateFacts:
    """The gate summary of ``f`` from the calls of its own frame whose callee is spelled
    (``names.dotted``), each with that spelling and its context, in :func:`site_facts`'s walk
    order (see :func:`frame_params` for ``pset`` and ``modes``)."""
    # Each site once, in walk order, by its fields (a tuple hashes in C); a Site built for each
    # new one without the frozen __init__ (as the index's decoder builds it).
    keys: dict[tuple[object, ...], None] = {}
    other, mode_tok = _OTHER, _MODE
    Name, Starred = ast.Name, ast.Starred
    for node, name, ctx in calls:
        # The parameters passed on whole (each positional argument, then each keyword) and
        # what each argument binds, by slot: ``(0, "-1")`` (the first positional, a literal),
        # ``("fsdp", Token.MODE)`` (a mode test, see _mode_test), ``("rank", Token.OTHER)``;
        # whether it unpacks arguments (the defaults it leaves are then unknown, and no
        # position after a ``*args`` is known). In one pass over the arguments.
        if pset:
            passed: list[tuple[Slot, str]] = []
            bound_list: list[tuple[Slot, str]] = []
            unpacked = False
            for i, x in enumerate(node.args):
                cls = x.__class__
                if cls is Name:
                    if x.id in pset:  # type: ignore[attr-defined]
                        passed.append((i, x.id))  # type: ignore[attr-defined]
                    if not unpacked:
                        bound_list.append((i, mode_tok if x.id in modes else other))  # type: ignore[attr-defined]
                elif cls is Starred:
                    unpacked = True
                elif not unpacked:
                    bound_list.append((i, _bound_token(x, pset, modes)))
            for kw in node.keywords:
                arg = kw.arg
                if arg is None:
                    unpacked = True
                    continue
                v = kw.value
                if v.__class__ is Name and v.id in pset:
                    passed.append((arg, v.id))
                bound_list.append((arg, _bound_token(v, pset, modes)))
            keys[name, ctx[0], ctx[1], tuple(passed), tuple(bound_list), unpacked] = None
        else:
            bound, unpacked = _literals(node)
            keys[name, ctx[0], ctx[1], (), bound, unpacked] = None
    sites: list[Site] = []
    site_new = object.__new__
    for key in keys:
        site = site_new(Site)
        kept = site.__dict__  # (its fields in order, in one unpacking: the cheapest way)
        (
            kept["callee"],
            kept["skipped"],
            kept["moded"],
            kept["passed"],
            kept["bound"],
            kept["unpacked"],
        ) = key
        sites.append(site)
    if not sites:
        return NO_GATES  # calls nothing: no summary needed
    args = f.args
    defaults: list[tuple[str, str]] = []
    positional = [*args.posonlyargs, *args.args]
    for a, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True):
        tok = _token(d)
        if tok is not None:
            defaults.append((a.arg, tok))
    for a, kd in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        tok = _token(kd)
        if tok is not None:
            defaults.append((a.arg, tok))
    return GateFacts(tuple(defaults), tuple(sites))


def site_facts(
    f: ast.FunctionDef | ast.AsyncFunctionDef, dotted: Callable[[ast.AST], str | None]
) -> GateFacts:
    """The gate summary of ``f``: when it calls anything, each call site (the parameter values
    that skip it, the parameters it passes on, the arguments it binds) and the literal defaults
    of its parameters. A function without parameters records its sites too: the literals its
    calls bind can switch a callee's collective off. (The definition: the extractor gathers
    the same on its own walk, factextract._Extractor, with no second walk of every node.)"""
    pset, modes = frame_params(f)
    calls: list[tuple[ast.Call, str, Ctx]] = []
    # Depth first over the function's own frame, each node with the (param, value) pairs for
    # which an enclosing test skips it, and whether it sits under a mode test: the current
    # pair ``ctx``, set by a marker (a plain tuple) pushed below each group of nodes that
    # has its own (the subtrees above a marker are walked before it is popped, and each
    # group leaves ``ctx`` as its parent had it): no tuple per node.
    ctx: Ctx = NO_CTX
    stack: list[object] = list(f.body)
    push = stack.append
    pop = stack.pop
    while stack:
        node = pop()
        cls = node.__class__
        if cls is tuple:
            ctx = node  # type: ignore[assignment]
            continue
        if cls is _Attribute:
            # An attribute's one child is its value: down the chain (`self.model.module`) to
            # the first node that is not an attribute, the next one the walk would visit.
            node = node.value  # type: ignore[attr-defined]
            while node.__class__ is _Attribute:
                node = node.value
            if node.__class__ not in LEAVES:
                push(node)
            continue
        if cls in _SCOPE_CLASSES:
            continue
        if cls is ast.If or cls is ast.While or cls is ast.IfExp:
            assert isinstance(node, (ast.If, ast.While, ast.IfExp))
            push(node.test)
            push(ctx)  # the test, and what follows the group, as before
            on, off = branch_ctx(node.test, ctx, pset, modes)
            body = node.body if isinstance(node.body, list) else [node.body]
            orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
            stack.extend(body)
            push(on)
            if orelse:
                stack.extend(orelse)
                push(ctx if cls is ast.While else off)
            continue
        if cls is ast.Call:
            name = dotted(node.func)  # type: ignore[attr-defined]
            if name is not None:
                calls.append((node, name, ctx))  # type: ignore[arg-type]
        for child in children(node):  # type: ignore[arg-type]
            if child.__class__ not in LEAVES:  # nothing under them, never a site
                push(child)
    return gate_facts(f, calls, pset, modes)


# -- 2. resolution -------------------------------------------------------------------------------


def _turns_off(got: str | None, off: str) -> bool:
    """A bound token ``got`` is the value ``off`` that switches the callee off (``None``,
    ``False`` and ``0`` are one for a test of truth)."""
    return got == off or (off in _FALSY and got in (*_FALSY, Token.ZERO))


def _token_at(binds: Mapping[Slot, str], p: str, cparams: tuple[str, ...]) -> str | None:
    """The token a call binds to the callee's parameter ``p``: by keyword, else by position
    (a method called through its instance skips ``self``)."""
    tok = binds.get(p)
    if tok is None and p in cparams:
        i = cparams.index(p) - (1 if cparams[0] in ("self", "cls") else 0)
        tok = binds.get(i) if i >= 0 else None
    return tok


def _site_mode(site: Site, callee: Gating) -> bool:
    """The call reaches a collective only in a mode of the run: the callee is mode-gated, or
    it is off for a false parameter the call binds to a mode test (``use_fsdp_eval=...``)."""
    if callee.mode:
        return True
    falsy = {p for p, t in callee.off if t in _FALSY}
    if not falsy:
        return False
    binds = dict(site.bound)
    return any(_token_at(binds, p, callee.params) == Token.MODE for p in falsy)


def _site_off(site: Site, callee: Gating) -> bool:
    """The literals a call site binds (see :func:`gate_facts`), or the defaults it leaves,
    switch the callee off: ``make_loader(path)`` whose ``rank`` defaults to -1."""
    if callee.always:
        return True
    binds = dict(site.bound)
    defaults = callee.default_of
    for p, t in callee.off:
        tok = _token_at(binds, p, callee.params)
        if tok is not None:
            if _turns_off(tok, t):
                return True
            continue
        if site.unpacked:
            continue
        if defaults.get(p) == t:
            return True
    return False


def resolve(
    func_props: Mapping[K, Collection[str]],
    callee_gating: Callable[[K, str], Gating | None],
    reaches: Callable[[K, str], bool],
    gates_of: Callable[[K], tuple[GateFacts, tuple[str, ...]]],
    gating: dict[K, Gating],
) -> None:
    """Resolve which parameter values switch the collectives of the functions of
    ``func_props`` off (see the module docstring), into ``gating`` (updated in place: a
    function's entry only grows; one it already holds, from an earlier resolution, is kept).

    ``func_props``: the functions' properties (only :data:`COLLECTIVE_PROP` is read);
    ``callee_gating(caller, name)``: the :class:`Gating` of what ``name`` calls from ``caller``
    (a function of ``gating`` as resolved so far, or another file's), None when it has none;
    ``reaches(caller, name)``: that call reaches a collective; ``gates_of(q)``: ``q``'s
    :class:`GateFacts` and its parameters (:func:`gate_params`)."""
    # Only functions that reach a collective and call something can be switched off (most
    # functions of a big module do not: skipping them keeps the per-keystroke merge cheap).
    # Their sites and parameters, and whether a call reaches a collective, do not change
    # between rounds (only off values are added).
    todo: list[tuple[K, tuple[Site, ...], tuple[str, ...], GateFacts]] = []
    for q, ps in func_props.items():
        if COLLECTIVE_PROP in ps:
            facts, params = gates_of(q)
            if facts.sites:
                todo.append((q, facts.sites, params, facts))
    reaches_memo: dict[tuple[K, str], bool] = {}
    for _ in range(4):  # helpers of helpers: a few rounds reach a fixed point in practice
        changed = False
        for q, sites, params, facts in todo:
            found: set[Gate] | None = None
            reached = moded = False
            for site in sites:
                callee = site.callee
                hit = reaches_memo.get((q, callee))
                if hit is None:
                    hit = reaches_memo[(q, callee)] = reaches(q, callee)
                if not hit:
                    continue
                reached = True
                cg = callee_gating(q, callee)
                if cg is not None and _site_off(site, cg):
                    continue  # this call makes no collective, whatever q's arguments
                if site.moded or (cg is not None and _site_mode(site, cg)):
                    moded = True
                    continue  # a collective only in a mode of the run
                off = set(site.skipped)
                if cg is not None and cg.off:
                    cparams = cg.params
                    for key, mine in site.passed:
                        target = (
                            cparams[key] if isinstance(key, int) and key < len(cparams) else key
                        )
                        off |= {(mine, t) for p, t in cg.off if p == target}
                found = off if found is None else found & off
                if not found:
                    break
            always = mode = False
            new: frozenset[Gate] = frozenset()
            if reached and found is None:
                if moded:
                    mode = True
                else:
                    always = True
            else:
                new = frozenset((p, t) for p, t in (found or ()) if p in params)
            if not (new or always or mode):
                continue
            old = gating.get(q)
            if old is None:
                old = Gating(params, facts.defaults, frozenset())
            if new <= old.off and (old.always or not always) and (old.mode or not mode):
                continue
            gating[q] = old.with_off(new, always, mode)
            changed = True
        if not changed:
            break


# -- 3. call sites -------------------------------------------------------------------------------


def _bound(call: ast.Call, param: str, params: tuple[str, ...]) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    if param in params:
        i = params.index(param)
        if params and params[0] in ("self", "cls"):
            i -= 1  # a method called through its instance
        if 0 <= i < len(call.args) and not any(
            isinstance(a, ast.Starred) for a in call.args[: i + 1]
        ):
            return call.args[i]
    return None


def switched_off(call: ast.Call, gating: Gating | None) -> bool:
    """The call binds a value (a literal, or the default it leaves) that switches the
    callee's collectives off (``gating``: the callee's, see :meth:`FactsView.callee_gating`)."""
    if gating is None:
        return False
    if gating.always or gating.mode:
        return True
    defaults = gating.default_of
    unpacked = any(isinstance(a, ast.Starred) for a in call.args) or any(
        kw.arg is None for kw in call.keywords
    )
    for p, t in gating.off:
        arg = _bound(call, p, gating.params)
        if arg is None:
            if not unpacked and defaults.get(p) == t:
                return True
            continue
        if _turns_off(_token(arg), t):
            return True
    return False


def falsy_bindings(call: ast.Call, gating: Gating | None) -> list[ast.expr]:
    """Arguments whose falsity switches the callee off (``f(load_on_all_ranks=u)``)."""
    if gating is None:
        return []
    out = []
    for p, t in gating.off:
        if t in _FALSY:
            arg = _bound(call, p, gating.params)
            if arg is not None and _token(arg) is None:
                out.append(arg)
    return out
