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

1. :func:`site_props` (the module facts, per function, syntactic): each call site of the
   function's own frame with the parameter values under which an enclosing ``if`` / ``while``
   / conditional expression skips it, the caller parameters it passes on, what it binds
   (literals by position or keyword, ``?`` for other expressions, ``*`` for unpacking), and
   the parameters' literal defaults. Stored as function properties (``gate-site:...``,
   ``gate-default:...``) so they travel with the facts and the project index.
2. :func:`resolve` (the module facts, after the transitive properties): a function that
   reaches a collective is *off* for ``param=value`` when every call site of its frame that
   reaches one is skipped for it, directly or through a callee that is off for the value
   passed on (``gate-off:param=value``, ``gate-params:a,b,c``). A call site whose own
   literals or left defaults switch its callee off (``make_loader(path)`` with ``rank=-1``
   by default) makes no collective at all; a function whose every such site is off is off
   whatever its arguments (``gate-off:*=*``: a validation helper that builds its own loader
   that way). A site under a mode switch of the function's arguments (``if args.fsdp:``),
   or one binding such a switch to a parameter that switches the callee off, reaches a
   collective only in that mode; a function whose every collective site is off or so is
   mode-gated (``gate-off:*=mode``), and a call of it is not taken as a collective. Iterated through same-file
   helpers by the module facts, and through helpers of other files by the project index
   (``ddp_lsp/project/flow.py`` runs the same resolution over every module's functions).
3. :func:`switched_off` (the path analysis, per call): the call binds a literal (or the
   parameter's default) that switches the callee off; :func:`falsy_bindings` lists the
   expressions whose falsity does (a path that decided ``u`` false drops the call).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TypeVar

from ddp_lsp.core.walk import children

K = TypeVar("K", bound=Hashable)

COLLECTIVE_PROP = "collective"  # ddp_lsp.core.facts.COLLECTIVE (facts imports this module)
SITE = "gate-site:"
DEFAULT = "gate-default:"
OFF = "gate-off:"
PARAMS = "gate-params:"
PREFIX = "gate-"  # every gate property starts with it (SITE, DEFAULT, OFF, PARAMS)
# ``gate-off:*=*``: every call site of the function that reaches a collective binds values
# that switch its callee off, so no call of it makes a collective.
ALWAYS = ("*", "*")
# ``gate-off:*=mode``: every collective of the function sits under a mode test of its
# arguments (``if args.fsdp:``; see :func:`_mode_test`). Whether a call of it communicates
# depends on a mode of the run the call site does not show, so a call of it is not taken
# as a collective (precision first: a mode-gated helper called on rank 0 only in that mode
# is missed). A site under such a test carries the gate ``*=mode``.
MODE = ("*", "mode")
# The values a parameter is tried with, by token.
_TRY: dict[str, object] = {"-1": -1, "0": 0, "None": None, "False": False}
_FALSY = ("None", "False")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


# -- 1. sites ------------------------------------------------------------------------------------


def _token(e: ast.AST | None) -> str | None:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        inner = e.operand
        if isinstance(inner, ast.Constant) and inner.value == 1 and type(inner.value) is int:
            return "-1"
        return None
    if isinstance(e, ast.Constant):
        v = e.value
        if v is None:
            return "None"
        if v is False:
            return "False"
        if type(v) is int and v == 0:
            return "0"
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
        return [_TRY[tok]]
    if isinstance(e, ast.Constant) and isinstance(e.value, (int, bool, str)):
        return [e.value]
    return None


def _skips(test: ast.AST, params: Iterable[str], want: bool) -> set[tuple[str, str]]:
    """(param, token) for which ``test`` surely is not ``want`` (the site is skipped)."""
    out: set[tuple[str, str]] = set()
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    for p in params:
        if p not in names:
            continue
        for tok, value in _TRY.items():
            got = _evaluate(test, p, value)
            if got is not None and got is not want:
                out.add((p, tok))
    return out


def _bindings(call: ast.Call, params: set[str], modes: set[str]) -> str:
    """What a call binds: ``0=-1`` (first positional, a literal), ``fsdp=m`` (a mode test of
    an argument, see :func:`_mode_test`), ``rank=?`` (any other expression), and ``*`` when
    it unpacks arguments (then the defaults it leaves are unknown)."""

    def tok(e: ast.expr) -> str:
        return _token(e) or ("m" if _mode_test(e, params, modes) else "?")

    out = []
    for i, a in enumerate(call.args):
        if isinstance(a, ast.Starred):
            out.append("*")
            break
        out.append(f"{i}={tok(a)}")
    for kw in call.keywords:
        if kw.arg is None:
            out.append("*")
        else:
            out.append(f"{kw.arg}={tok(kw.value)}")
    return ",".join(out)


# Attribute names that say whether the run is distributed, or which rank this is: a test of
# one of them is not a mode of the run (``if args.distributed: dist.barrier()`` is on in every
# distributed run, so a rank-0 call of it hangs).
_NOT_MODES = (
    "rank",
    "master",
    "main",
    "local",
    "world",
    "dist",
    "ddp",
    "gpu",
    "device",
    "node",
    "zero",
    "global",
    "leader",
    "primary",
    "first",
    "last",
    "stage",
    "should",
)


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
    low = name.lower()
    return not any(w in low for w in _NOT_MODES)


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


def _mode_locals(f: ast.FunctionDef | ast.AsyncFunctionDef, params: set[str]) -> set[str]:
    """Locals assigned exactly once in ``f``'s frame, from a mode test of its arguments
    (``use_fsdp_eval = getattr(args, "fsdp", False) and args.distributed``). Statements only
    (a walrus in an expression is not seen): the cheap walk keeps the facts fast."""
    values: dict[str, list[ast.expr | None]] = {}

    def bind(t: ast.AST, value: ast.expr | None) -> None:
        if isinstance(t, ast.Name):
            values.setdefault(t.id, []).append(value)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                bind(e, None)
        elif isinstance(t, ast.Starred):
            bind(t.value, None)

    stack: list[ast.AST] = list(f.body)
    while stack:
        n = stack.pop()
        if isinstance(n, _SCOPES):
            continue
        if isinstance(n, ast.Assign):
            for t in n.targets:
                bind(t, n.value)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
            bind(n.target, None)
        elif isinstance(n, (ast.For, ast.AsyncFor)):
            bind(n.target, None)
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            for item in n.items:
                if item.optional_vars is not None:
                    bind(item.optional_vars, None)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            values.setdefault(n.name, []).append(None)
        stack.extend(
            c
            for c in ast.iter_child_nodes(n)
            if isinstance(c, (ast.stmt, ast.ExceptHandler, ast.match_case))
        )
    out: set[str] = set()
    for name, vals in values.items():
        v = vals[0]
        if name not in params and len(vals) == 1 and v is not None and _mode_test(v, params, out):
            out.add(name)
    return out


def site_props(
    f: ast.FunctionDef | ast.AsyncFunctionDef, dotted: Callable[[ast.AST], str | None]
) -> set[str]:
    """The ``gate-*`` properties of ``f``: the literal defaults of its parameters, and, when it
    calls anything, each call site (the parameter values that skip it, the parameters it passes
    on, the arguments it binds) and its parameter list. A function without parameters records
    its sites too: the literals its calls bind can switch a callee's collective off."""
    args = f.args
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    out: set[str] = set()
    positional = [*args.posonlyargs, *args.args]
    for a, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True):
        tok = _token(d)
        if tok is not None:
            out.add(f"{DEFAULT}{a.arg}={tok}")
    for a, kd in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        tok = _token(kd)
        if tok is not None:
            out.add(f"{DEFAULT}{a.arg}={tok}")
    pset = set(params)
    sites: list[str] = []
    modes = _mode_locals(f, pset)
    none: frozenset[tuple[str, str]] = frozenset()
    # Depth first over the function's own frame (the sites are a set: order does not matter),
    # each node with the (param, value) pairs for which an enclosing test skips it.
    stack: list[tuple[ast.AST, frozenset[tuple[str, str]]]] = [(s, none) for s in f.body]
    while stack:
        node, gates = stack.pop()
        if isinstance(node, _SCOPES):
            continue
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            test = node.test
            stack.append((test, gates))
            on = off = gates
            if any(isinstance(n, ast.Name) and n.id in pset for n in ast.walk(test)):
                on = gates | _skips(test, pset, True)
                off = gates | _skips(test, pset, False)
            if _mode_test(test, pset, modes):
                on = on | {MODE}
            elif (
                isinstance(test, ast.UnaryOp)
                and isinstance(test.op, ast.Not)
                and _mode_test(test.operand, pset, modes)
            ):
                off = off | {MODE}
            body = node.body if isinstance(node.body, list) else [node.body]
            orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
            for s in body:
                stack.append((s, on))
            for s in orelse:
                stack.append((s, off if not isinstance(node, ast.While) else gates))
            continue
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if name is not None:
                passed = [
                    f"{i}>{a.id}"
                    for i, a in enumerate(node.args)
                    if isinstance(a, ast.Name) and a.id in pset
                ] + [
                    f"{kw.arg}>{kw.value.id}"
                    for kw in node.keywords
                    if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in pset
                ]
                g = ",".join(sorted(f"{p}={t}" for p, t in gates))
                sites.append(f"{SITE}{name}|{g}|{','.join(passed)}|{_bindings(node, pset, modes)}")
        for child in children(node):
            stack.append((child, gates))

    if not sites:
        return out  # calls nothing: no summary needed
    out.update(sites)
    out.add(PARAMS + ",".join(params))
    return out


# -- 2. resolution -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def _parse_site(prop: str) -> tuple[str, frozenset[tuple[str, str]], Mapping[str, str], str]:
    """(callee, gates, passed, bound) of a ``gate-site:`` property (cached: every merge
    resolves the same sites again; the mapping returned is shared, never to be changed)."""
    callee, gates, passed, bound = prop[len(SITE) :].split("|")
    g = frozenset(tuple(x.split("=", 1)) for x in gates.split(",") if x)
    p = dict(x.split(">", 1) for x in passed.split(",") if x)
    return callee, g, p, bound  # type: ignore[return-value]


def off_values(props: Iterable[str]) -> set[tuple[str, str]]:
    return {tuple(p[len(OFF) :].split("=", 1)) for p in props if p.startswith(OFF)}  # type: ignore[misc]


def _turns_off(got: str, off: str) -> bool:
    """A bound token ``got`` is the value ``off`` that switches the callee off (``None``,
    ``False`` and ``0`` are one for a test of truth)."""
    return got == off or (off in _FALSY and got in _FALSY + ("0",))


def _callee_summary(
    cprops: Iterable[str],
) -> tuple[set[tuple[str, str]], list[str], dict[str, str]]:
    """What a call site's resolution reads of its callee: its ``gate-off`` values, its
    parameters and their literal defaults."""
    cprops = list(cprops)
    return off_values(cprops), params_of(cprops) or [], defaults_of(cprops)


def _site_mode(bound: str, coff: set[tuple[str, str]], cparams: list[str]) -> bool:
    """The call reaches a collective only in a mode of the run: the callee is mode-gated, or
    it is off for a false parameter the call binds to a mode test (``use_fsdp_eval=...``)."""
    if MODE in coff:
        return True
    falsy = {p for p, t in coff if t in _FALSY}
    if not falsy:
        return False
    binds = dict(x.split("=", 1) for x in bound.split(",") if x and x != "*")
    for p in falsy:
        tok = binds.get(p)
        if tok is None and p in cparams:
            i = cparams.index(p) - (1 if cparams[0] in ("self", "cls") else 0)
            tok = binds.get(str(i)) if i >= 0 else None
        if tok == "m":
            return True
    return False


def _site_off(
    bound: str, coff: set[tuple[str, str]], cparams: list[str], defaults: Mapping[str, str]
) -> bool:
    """The literals a call site binds (see :func:`_bindings`), or the defaults it leaves,
    switch the callee off: ``make_loader(path)`` whose ``rank`` defaults to -1."""
    if ALWAYS in coff:
        return True
    if not coff:
        return False
    items = [x for x in bound.split(",") if x]
    unpacked = "*" in items
    binds = dict(x.split("=", 1) for x in items if x != "*")
    for p, t in coff:
        tok = binds.get(p)
        if tok is None and p in cparams:
            i = cparams.index(p) - (1 if cparams[0] in ("self", "cls") else 0)
            tok = binds.get(str(i)) if i >= 0 else None
        if tok is not None:
            if _turns_off(tok, t):
                return True
            continue
        if unpacked:
            continue
        if defaults.get(p) == t:
            return True
    return False


def params_of(props: Iterable[str]) -> list[str] | None:
    for p in props:
        if p.startswith(PARAMS):
            return p[len(PARAMS) :].split(",")
    return None


def defaults_of(props: Iterable[str]) -> dict[str, str]:
    return dict(p[len(DEFAULT) :].split("=", 1) for p in props if p.startswith(DEFAULT))


Site = tuple[str, frozenset[tuple[str, str]], Mapping[str, str], str]


def parsed_sites(props: Iterable[str]) -> tuple[tuple[Site, ...], list[str]]:
    """The parsed ``gate-site:`` properties among ``props`` and the ``gate-params:`` list."""
    return tuple(_parse_site(p) for p in props if p.startswith(SITE)), params_of(props) or []


def resolve(
    func_props: Mapping[K, set[str]],
    callee_props: Callable[[K, str], frozenset[str] | set[str] | None],
    reaches: Callable[[K, str], bool],
    sites_of: Callable[[K], tuple[tuple[Site, ...], list[str]]] | None = None,
) -> None:
    """Add ``gate-off:`` properties to the functions of ``func_props`` (see the docstring).

    ``callee_props(caller, name)``: the properties of what ``name`` calls from ``caller`` (a
    function of this module or another file's); ``reaches(caller, name)``: that call reaches
    a collective; ``sites_of(q)``: :func:`parsed_sites` of ``func_props[q]``, when the caller
    keeps it between resolutions (the module facts do, per function, between keystrokes)."""
    if sites_of is None:
        sites_of = lambda q: parsed_sites(func_props[q])  # noqa: E731
    # Only functions that reach a collective and call something can be switched off (most
    # functions of a big module do not: skipping them keeps the per-keystroke merge cheap).
    # Their sites and parameters, whether a call reaches a collective and each callee's
    # summary do not change between rounds (only gate-off properties are added).
    sites: dict[K, tuple[Site, ...]] = {}
    own_params: dict[K, list[str]] = {}
    for q, ps in func_props.items():
        if COLLECTIVE_PROP in ps:
            found_sites, found_params = sites_of(q)
            if found_sites:
                sites[q] = found_sites
                own_params[q] = found_params
    todo = list(sites)
    reaches_memo: dict[tuple[K, str], bool] = {}
    # Each callee's summary (_callee_summary), by the identity of its properties: dropped when
    # this resolution adds to a function's properties (the only change they see here).
    summaries: dict[int, tuple[object, tuple[set[tuple[str, str]], list[str], dict[str, str]]]] = {}
    for _ in range(4):  # helpers of helpers: a few rounds reach a fixed point in practice
        changed = False
        for q in todo:
            props = func_props[q]
            params = own_params[q]
            found: set[tuple[str, str]] | None = None
            reached = moded = False
            for callee, gates, passed, bound in sites[q]:
                hit = reaches_memo.get((q, callee))
                if hit is None:
                    hit = reaches_memo[(q, callee)] = reaches(q, callee)
                if not hit:
                    continue
                reached = True
                cprops = callee_props(q, callee) or ()
                summary = summaries.get(id(cprops))
                if summary is None or summary[0] is not cprops:
                    summary = summaries[id(cprops)] = (cprops, _callee_summary(cprops))
                coff, cparams, defaults = summary[1]
                if _site_off(bound, coff, cparams, defaults):
                    continue  # this call makes no collective, whatever q's arguments
                if MODE in gates or _site_mode(bound, coff, cparams):
                    moded = True
                    continue  # a collective only in a mode of the run
                off = set(gates)
                if coff:
                    for key, mine in passed.items():
                        target = (
                            cparams[int(key)] if key.isdigit() and int(key) < len(cparams) else key
                        )
                        off |= {(mine, t) for p, t in coff if p == target}
                found = off if found is None else found & off
                if not found:
                    break
            if reached and found is None:
                mark = MODE if moded else ALWAYS
                new = {f"{OFF}{mark[0]}={mark[1]}"}
            else:
                new = {f"{OFF}{p}={t}" for p, t in (found or ()) if p in params}
            if not new <= props:
                props |= new
                summaries.pop(id(props), None)
                changed = True
        if not changed:
            break


# -- 3. call sites -------------------------------------------------------------------------------


def _bound(call: ast.Call, param: str, params: list[str]) -> ast.expr | None:
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


def switched_off(call: ast.Call, props: Iterable[str]) -> bool:
    """The call binds a value (a literal, or the default it leaves) that switches the
    callee's collectives off."""
    props = list(props)
    off = off_values(props)
    if not off:
        return False
    if ALWAYS in off or MODE in off:
        return True
    params = params_of(props) or []
    defaults = defaults_of(props)
    unpacked = any(isinstance(a, ast.Starred) for a in call.args) or any(
        kw.arg is None for kw in call.keywords
    )
    for p, t in off:
        arg = _bound(call, p, params)
        if arg is None:
            if not unpacked and defaults.get(p) == t:
                return True
            continue
        tok = _token(arg)
        if tok == t or (t in _FALSY and tok in _FALSY + ("0",)):
            return True
    return False


def falsy_bindings(call: ast.Call, props: Iterable[str]) -> list[ast.expr]:
    """Arguments whose falsity switches the callee off (``f(load_on_all_ranks=u)``)."""
    props = list(props)
    params = params_of(props) or []
    out = []
    for p, t in off_values(props):
        if t in _FALSY:
            arg = _bound(call, p, params)
            if arg is not None and _token(arg) is None:
                out.append(arg)
    return out


def summary_props(props: Mapping[str, object] | Iterable[str]) -> frozenset[str]:
    """The ``gate-*`` properties among ``props``."""
    return frozenset(p for p in props if isinstance(p, str) and p.startswith(PREFIX))
