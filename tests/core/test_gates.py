"""The gate summaries (core/gates.py): typed records from the extractor, resolved through the
module merge, read by the path analysis; no property strings to parse anywhere."""

from __future__ import annotations

import ast
import textwrap

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import gates
from ddp_lsp.core.document import Document
from ddp_lsp.core.gates import NO_GATES, GateFacts, Gating, Site, Token
from ddp_lsp.core.names import dotted
from ddp_lsp.core.settings import Settings


def _function(src: str) -> ast.FunctionDef:
    node = ast.parse(textwrap.dedent(src)).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def test_site_facts_are_typed_records() -> None:
    f = _function(
        """\
        def save_blob(path, cfg, synchronize=True, rank=-1, *args, fsdp_mode=None, **kw):
            if synchronize:
                dist.barrier()
            if cfg.fsdp:
                dist.all_reduce(path)
            helper(path, rank, 0, *args, key=None, other=obj.x)
        """
    )
    got = gates.site_facts(f, dotted)
    assert got.defaults == (("rank", Token.MINUS_ONE), ("fsdp_mode", Token.NONE))
    by_callee = {s.callee: s for s in got.sites}
    assert by_callee["dist.barrier"] == Site(
        "dist.barrier",
        frozenset(
            {("synchronize", Token.NONE), ("synchronize", Token.FALSE), ("synchronize", Token.ZERO)}
        ),
        False,
        (),
        (),
        False,
    )
    # `if cfg.fsdp:` tests a mode of the run read from a parameter.
    assert by_callee["dist.all_reduce"].moded
    assert by_callee["dist.all_reduce"].passed == ((0, "path"),)
    helper = by_callee["helper"]
    assert helper.passed == ((0, "path"), (1, "rank"))
    assert helper.bound == (
        (0, Token.OTHER),
        (1, Token.OTHER),
        (2, Token.ZERO),
        ("key", Token.NONE),
        ("other", Token.OTHER),
    )
    assert helper.unpacked  # `*args`: the defaults it leaves are unknown


def test_a_function_that_calls_nothing_has_no_summary() -> None:
    assert gates.site_facts(_function("def f(rank=-1):\n    return rank\n"), dotted) is NO_GATES


ZERO_FIRST = """\
import contextlib
import torch.distributed as dist


@contextlib.contextmanager
def zero_first(local_rank):
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()


def make_loader(path, rank=-1):
    with zero_first(rank):
        return path


def build_val(path):
    return make_loader(path)


def sync(model, args):
    if args.fsdp:
        dist.barrier()
"""


def _merged(src: str) -> fact_model.ModuleFacts:
    return Document(src, Settings().rank_model).module_facts()


def test_resolution_gives_each_gated_function_its_gating() -> None:
    facts = _merged(ZERO_FIRST)
    zero_first = facts.func_gates["zero_first"]
    assert zero_first.params == ("local_rank",)
    assert zero_first.off == {("local_rank", Token.MINUS_ONE)}
    assert not zero_first.always and not zero_first.mode
    # Passed on through `make_loader`'s own parameter, whose default switches it off.
    loader = facts.func_gates["make_loader"]
    assert loader.off == {("rank", Token.MINUS_ONE)} and loader.default_of == {"rank": "-1"}
    # Every collective site of `build_val` leaves that default: off whatever its arguments.
    assert facts.func_gates["build_val"].always
    assert facts.func_gates["sync"].mode
    # The merge keeps no gate strings among the properties.
    assert all(":" not in p for ps in facts.func_props.values() for p in ps)
    assert facts.callee_gating("zero_first", None) == zero_first
    assert facts.callee_gating("print", None) is None


def test_switched_off_reads_the_callee_gating() -> None:
    gating = Gating(
        ("self", "path", "rank"),
        (("rank", Token.MINUS_ONE),),
        frozenset({("rank", Token.MINUS_ONE)}),
    )

    def call(src: str) -> ast.Call:
        node = ast.parse(src).body[0]
        assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
        return node.value

    assert gates.switched_off(call("obj.load(p)"), gating)  # the default -1 is left
    assert gates.switched_off(call("obj.load(p, -1)"), gating)  # `self` skipped by position
    assert not gates.switched_off(call("obj.load(p, 0)"), gating)
    assert not gates.switched_off(call("obj.load(p, *rest)"), gating)  # unknown what it binds
    assert not gates.switched_off(call("obj.load(p)"), None)
    falsy = Gating(("flag",), (), frozenset({("flag", Token.FALSE)}))
    [arg] = gates.falsy_bindings(call("f(flag=u)"), falsy)
    assert isinstance(arg, ast.Name) and arg.id == "u"
    assert gates.switched_off(call("f(flag=0)"), falsy)  # 0, None and False are one for a test


def test_gate_facts_travel_in_the_function_facts() -> None:
    [fi] = [
        fi
        for fi in fact_model.extract(ast.parse(ZERO_FIRST), None, Settings().rank_model).functions
        if fi.qualname == "make_loader"
    ]
    assert isinstance(fi.gates, GateFacts)
    assert [s.callee for s in fi.gates.sites] == ["zero_first"]
    assert not any(p.startswith("gate") for p in fi.props)
