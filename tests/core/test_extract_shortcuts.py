"""The extractor's shortcuts give what their definitions give.

The project index extracts the facts of every function of every file on a cold start, so a
few of the extractor's steps take shortcuts; the definitions they were written from are kept
here, and each shortcut is compared with its definition on crafted cases (each branch of the
definition) and on every function of the rules' own cases and of the project fixtures:

- ``rankfuncs.is_rank_predicate`` decides a function that returns something neither a rank-0 test, a
  first-rank test nor ``True`` without walking its ``if`` statements, and walks statements
  only (``_single_process_returns``);
- ``gates.site_facts`` in a function without parameters writes each argument's token without
  asking whether it is a mode test (``_literals``: it cannot be), and walks attribute chains
  without a call per link.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ddp_lsp.core import factextract, gates, rankfuncs
from ddp_lsp.core import names as known_names
from ddp_lsp.core.rankcond import condition_ranks
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.uniformity import single_process_test
from ddp_lsp.core.walk import LEAVES, children, walk
from tests.casekit import unmark

FIXTURES = Path(__file__).parent.parent / "project" / "fixtures"


# -- the definitions --------------------------------------------------------------------------


def rank_predicate_definition(f: ast.FunctionDef | ast.AsyncFunctionDef, ranks: RankModel) -> bool:
    zero = rankfuncs.zero_only
    returns = rankfuncs._returns(f.body)
    if not returns:
        return False
    if all(zero(condition_ranks(ranks, r.value)) for r in returns if r.value is not None):
        return True
    single = single_process_returns_definition(f.body, ranks)
    tests = [r.value for r in returns if r.value is not None and id(r) not in single]
    return bool(tests) and all(
        zero(condition_ranks(ranks, v)) or rankfuncs._first_of_groups(v, ranks) for v in tests
    )


def single_process_returns_definition(body: list[ast.stmt], ranks: RankModel) -> set[int]:
    out: set[int] = set()
    for node in walk(ast.Module(body=body, type_ignores=[])):
        if not isinstance(node, ast.If):
            continue
        negated = ast.UnaryOp(ast.Not(), node.test)
        for side, test in ((node.body, node.test), (node.orelse, negated)):
            if not single_process_test(ranks, test):
                continue
            for s in side:
                if (
                    isinstance(s, ast.Return)
                    and isinstance(s.value, ast.Constant)
                    and s.value.value is True
                ):
                    out.add(id(s))
    return out


def _bindings_definition(
    call: ast.Call, params: set[str], modes: set[str]
) -> tuple[tuple[tuple[gates.Slot, str], ...], bool]:
    """What a call binds, by slot, and whether it unpacks arguments: each argument's literal
    token, else ``Token.MODE`` for a mode test, else ``Token.OTHER`` (none after ``*args``)."""

    def tok(e: ast.expr) -> str:
        return gates._token(e) or (
            gates.Token.MODE if gates._mode_test(e, params, modes) else gates.Token.OTHER
        )

    out: list[tuple[gates.Slot, str]] = []
    unpacked = False
    for i, a in enumerate(call.args):
        if isinstance(a, ast.Starred):
            unpacked = True
            break
        out.append((i, tok(a)))
    for kw in call.keywords:
        if kw.arg is None:
            unpacked = True
        else:
            out.append((kw.arg, tok(kw.value)))
    return tuple(out), unpacked


def site_facts_definition(
    f: ast.FunctionDef | ast.AsyncFunctionDef, dotted: Callable[[ast.AST], str | None]
) -> gates.GateFacts:
    """``gates.site_facts`` as written before the shortcuts: every node's children through
    ``children``, every call's arguments through ``_bindings``."""
    args = f.args
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    pset = set(params)
    sites: dict[gates.Site, None] = {}
    modes = gates._mode_locals(f, pset) if pset else set()
    none: frozenset[gates.Gate] = frozenset()
    ctx: tuple[frozenset[gates.Gate], bool] = (none, False)
    stack: list[object] = list(f.body)
    while stack:
        node = stack.pop()
        cls = node.__class__
        if cls is tuple:
            ctx = node  # type: ignore[assignment]
            continue
        if cls in gates._SCOPE_CLASSES:
            continue
        if cls is ast.If or cls is ast.While or cls is ast.IfExp:
            assert isinstance(node, (ast.If, ast.While, ast.IfExp))
            gates_, moded = ctx
            test = node.test
            stack.append(test)
            stack.append(ctx)
            on = off = gates_
            on_moded = off_moded = moded
            if pset:
                names = {n.id for n in walk(test) if isinstance(n, ast.Name)}
                if not names.isdisjoint(pset):
                    when_false, when_true = gates._skips(test, pset, names)
                    on = gates_ | when_false
                    off = gates_ | when_true
            if gates._mode_test(test, pset, modes):
                on_moded = True
            elif (
                isinstance(test, ast.UnaryOp)
                and isinstance(test.op, ast.Not)
                and gates._mode_test(test.operand, pset, modes)
            ):
                off_moded = True
            body = node.body if isinstance(node.body, list) else [node.body]
            orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
            stack.extend(body)
            stack.append((on, on_moded))
            if orelse:
                stack.extend(orelse)
                stack.append(ctx if cls is ast.While else (off, off_moded))
            continue
        if cls is ast.Call:
            assert isinstance(node, ast.Call)
            name = dotted(node.func)
            if name is not None:
                passed: list[tuple[gates.Slot, str]] = [
                    (i, a.id)
                    for i, a in enumerate(node.args)
                    if isinstance(a, ast.Name) and a.id in pset
                ]
                passed += [
                    (kw.arg, kw.value.id)
                    for kw in node.keywords
                    if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in pset
                ]
                bound, unpacked = _bindings_definition(node, pset, modes)
                site = gates.Site(name, ctx[0], ctx[1], tuple(passed), bound, unpacked)
                sites[site] = None
        for child in children(node):  # type: ignore[arg-type]
            if child.__class__ not in LEAVES:
                stack.append(child)
    if not sites:
        return gates.NO_GATES
    defaults: list[tuple[str, str]] = []
    positional = [*args.posonlyargs, *args.args]
    for a, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True):
        tok = gates._token(d)
        if tok is not None:
            defaults.append((a.arg, tok))
    for a, kd in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        tok = gates._token(kd)
        if tok is not None:
            defaults.append((a.arg, tok))
    return gates.GateFacts(tuple(defaults), tuple(sites))


# -- the cases --------------------------------------------------------------------------------

CRAFTED = """
import torch.distributed as dist

def only_zero():
    return dist.get_rank() == 0

def zero_or_single():
    if not dist.is_initialized():
        return True
    return dist.get_rank() == 0

def zero_or_single_else():
    if dist.is_initialized():
        return dist.get_rank() == 0
    else:
        return True

def first_of_groups(num_gpus):
    if dist.is_initialized():
        return dist.get_rank() % num_gpus == 0
    else:
        return True

def first_of_groups_after(num_gpus):
    if dist.is_initialized():
        return dist.get_rank() % num_gpus == 0
    return True

def true_but_not_single():
    if dist.get_rank() == 0:
        return True
    return dist.get_rank() == 0

def only_true():
    return True

def something_else(x):
    if not dist.is_initialized():
        return True
    return x

def nested_single():
    def inner():
        if not dist.is_initialized():
            return True
        return dist.get_rank() == 0
    for _ in range(2):
        try:
            if not dist.is_initialized():
                return True
        except RuntimeError:
            return dist.get_rank() == 0
    return dist.get_rank() == 0

def with_lambda_and_attrs(model, cfg, *args, flag=None, **kw):
    pick = lambda: dist.all_reduce(model.weight.grad.data)
    if cfg.trainer.fsdp.enabled and flag:
        dist.barrier(group=cfg.groups.main.handle)
    elif not cfg.sync:
        model.module.sync(cfg.a.b, -1, False, None, 0, *args)
    x = model.a.b.c(flag, k=cfg.x.y, **kw) if flag is None else model.q().r.s(0)
    return pick, x

def without_params():
    obj.attr.chain.call(a.b, c, -1, None, False, 0, key=d.e, other=f(), more=-1)
    g(*rest, k=1)
    h(**opts)
    while obj.running.flag:
        obj.step.now(x.y if cond.z else w.v)

async def async_one(rank=-1, use_fsdp=False):
    mode = getattr(rank, "fsdp", False) and use_fsdp
    if rank != -1:
        await dist.barrier()
    launch(mode, use_fsdp=mode)

def frames_and_orders(rank, args, sync=True, group=None):
    @wraps(dist.barrier(group))
    def inner(flag=dist.get_rank()):
        if flag:
            dist.barrier()
        return lambda: dist.all_reduce(flag)
    class Local(Base.of(dist.new_group())):
        x = dist.broadcast(rank)
        def method(self):
            dist.barrier(self)
    while sync:
        dist.all_reduce(g(h(rank), k(args.fsdp)), group=group if group else make(rank))
    else:
        after(rank if sync else -1, [f(a) for a in it(rank)])
    with ctx(rank) as c, other(args.x):
        for i in rng(rank):
            dist.barrier() if rank == 0 else dist.broadcast(i, lambda q=f(rank): q())
    try:
        dist.barrier(sync)
    except err(rank) as e:
        handle(e)
    else:
        first(rank)
    finally:
        last(rank)
    match pick(rank):
        case 0 if guard(rank):
            dist.barrier()
        case _:
            dist.barrier(rank)
    if not args.fsdp:
        dist.barrier(args)
    elif sync:
        dist.all_reduce(sync)
    dist.barrier(group)
    dist.barrier(group)
    return inner, Local, (lambda: dist.barrier())()
"""


def _sources() -> Iterator[tuple[str, str]]:
    yield "crafted", CRAFTED
    for rule in all_rules():
        for i, case in enumerate(rule.cases):
            yield f"{rule.meta.id}-{i}", unmark(case.code).code
    for path in sorted(FIXTURES.rglob("*.py")):
        yield str(path.relative_to(FIXTURES)), path.read_text()


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    out = []
    for name, text in _sources():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((f"{name}:{node.name}:{node.lineno}", node))
    return out


FUNCTIONS = _functions()
RANKS = RankModel()
PREDICATES = RANKS.with_extra(predicates=frozenset({"is_main_process", "is_master"}))


def test_the_cases_cover_each_branch() -> None:
    crafted = {n.split(":")[1]: f for n, f in FUNCTIONS if n.startswith("crafted:")}
    got = {q: rankfuncs.is_rank_predicate(f, RANKS) for q, f in crafted.items()}
    assert got["only_zero"] and got["zero_or_single"] and got["zero_or_single_else"]
    assert got["first_of_groups"] and got["nested_single"]
    assert not got["true_but_not_single"] and not got["only_true"]
    assert not got["first_of_groups_after"]
    assert not got["something_else"] and not got["without_params"]
    assert len(FUNCTIONS) > 500  # the rules' cases and the fixtures are in


@pytest.mark.parametrize("ranks", [RANKS, PREDICATES], ids=["default", "predicates"])
def test_rank_predicates_as_defined(ranks: RankModel) -> None:
    differ = [
        name
        for name, f in FUNCTIONS
        if rankfuncs.is_rank_predicate(f, ranks) != rank_predicate_definition(f, ranks)
    ]
    assert differ == []
    differ = [
        name
        for name, f in FUNCTIONS
        if rankfuncs._single_process_returns(f.body, ranks)
        != single_process_returns_definition(f.body, ranks)
    ]
    assert differ == []


def test_gate_sites_as_defined() -> None:
    differ = []
    for name, f in FUNCTIONS:
        got = gates.site_facts(f, known_names.dotted)
        want = site_facts_definition(f, known_names.dotted)
        # Equal, and in the same order (the summaries keep the sites as a tuple).
        if got != want or [s.__dict__ for s in got.sites] != [s.__dict__ for s in want.sites]:
            differ.append(name)
    assert differ == []


def test_extractor_gates_as_defined() -> None:
    """The extractor gathers each function's gate summary on its own walk (no second walk of
    the function): the same as ``gates.site_facts``, in the same order, for every function
    (nested ones too: their own frames, decorators, classes and lambdas left out)."""
    differ = []
    for name, f in FUNCTIONS:
        x = factextract._Extractor(RANKS)
        factextract.extract(ast.Module(body=[f], type_ignores=[]), None, RANKS, x)
        got = x.functions[-1 if x.functions[-1].qualname != "<module>" else -2].gates
        assert x.functions[-1 if x.functions[-1].qualname != "<module>" else -2].line == (
            f.lineno - 1
        )
        want = gates.site_facts(f, known_names.dotted)
        if got != want or [s.__dict__ for s in got.sites] != [s.__dict__ for s in want.sites]:
            differ.append(name)
    assert differ == []
    crafted = next(f for n, f in FUNCTIONS if n.startswith("crafted:frames_and_orders:"))
    sites = gates.site_facts(crafted, known_names.dotted).sites
    assert len(sites) >= 20 and any(s.moded for s in sites)  # the case covers what it says
    assert not {"wraps", "Base.of", "dist.broadcast"} & {s.callee for s in sites[-4:]}


def test_simple_statements_hold_only_expressions() -> None:
    """``_Extractor.stmt`` walks a simple statement's children as expressions and looks for
    nothing else in it: each of its node fields must be an expression (or a list of them)."""
    import re

    for cls in factextract._SIMPLE_STMTS:
        signature = (cls.__doc__ or "").partition("(")[2]
        fields = re.findall(r"(\w+)([*?]?) (\w+)", signature)
        assert {name for _, _, name in fields} == set(cls._fields), cls.__name__
        for typ, _, name in fields:
            assert typ in ("expr", "identifier", "string", "int"), (cls.__name__, name, typ)
    # And the general path's statements are not among them.
    for cls in (ast.For, ast.If, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef, ast.AugAssign):
        assert cls not in factextract._SIMPLE_STMTS


def test_conditions_without_texts_decide_the_same() -> None:
    """``condition_ranks(..., texts=False)`` (the extractor's) gives what the extractor reads
    of the full answer: None or not, the subset, and whether it has an ``unless``."""
    crafted = [
        "rank == 0 and step % 10 == 0",
        "not (rank == 0 and save)",
        "rank == 0 or debug",
        "not (rank == 0 or debug) and not (rank == 0 or verbose)",
        "not (rank == 0 and a) and not (rank == 0 and a)",
        "(rank == 0 or a) and (rank == 0 or b)",
        "rank % 2 == 0 and x",
        "local_rank == 0 and (rank == 0 or a)",
        "is_main if local else is_local_main",
        "0 < rank < 3",
    ]
    tests: list[ast.AST] = [ast.parse(c, mode="eval").body for c in crafted]
    for _, f in FUNCTIONS:
        tests += [n for n in walk(f) if isinstance(n, (ast.expr))]
    for test in tests:
        for model in (RANKS, PREDICATES):
            full = condition_ranks(model, test)
            bare = condition_ranks(model, test, texts=False)
            assert (full is None) == (bare is None), ast.unparse(test)
            if full is not None and bare is not None:
                assert full.subset is bare.subset, ast.unparse(test)
                assert bool(full.unless) == bool(bare.unless), ast.unparse(test)
                assert bool(full.when) == bool(bare.when), ast.unparse(test)
