"""The first parse's shortcuts (issue 15, branch `first`), each against what it replaced."""

from __future__ import annotations

import ast
import warnings

import pytest

from ddp_lsp.core import document, gates, names
from ddp_lsp.core.document import Document, parse_chunk, quiet_parses
from ddp_lsp.core.ranks import RankModel

# -- gates._mode_attr: one regular-expression search for the words ------------------------------


def _not_a_mode_as_defined(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in gates._NOT_MODES)


@pytest.mark.parametrize(
    "name",
    [
        "fsdp",
        "use_fsdp",
        "distributed",
        "is_master",
        "RANK",
        "local_rank",
        "Main",
        "world_size",
        "gpu",
        "zero_stage",
        "should_log",
        "pipe",
        "first_stage",
        "leader",
        "",
        "x",
        "amp",
        "deepspeed",
        "global_step",
        "last_epoch",
        "a.b",
        "mASTer_node",
    ],
)
def test_not_mode_word_as_defined(name: str) -> None:
    assert (gates._NOT_MODE_WORD.search(name.lower()) is not None) == _not_a_mode_as_defined(name)


def test_mode_attr_uses_the_words() -> None:
    params = {"args"}
    fsdp = ast.parse("args.fsdp", mode="eval").body
    rank = ast.parse("args.local_rank", mode="eval").body
    assert gates._mode_attr(fsdp, params)
    assert not gates._mode_attr(rank, params)


# -- names.dotted: kept on the node, looked up with a default (no KeyError raised) --------------


def test_dotted_kept_and_none_kept() -> None:
    spelled = ast.parse("a.b.c", mode="eval").body
    unspelled = ast.parse("f().b", mode="eval").body
    assert names.dotted(spelled) == "a.b.c"
    assert spelled.__dict__[names._DOTTED] == "a.b.c"
    assert names.dotted(spelled) == "a.b.c"
    assert names.dotted(unspelled) is None
    assert names._DOTTED in unspelled.__dict__  # the None answer is kept too
    assert names.dotted(unspelled) is None
    spelled.__dict__[names._DOTTED] = "kept"
    assert names.dotted(spelled) == "kept"  # the kept answer, not a new one


# -- gates.gate_facts: the sites keyed by their fields ------------------------------------------


def test_gate_sites_once_each_in_order() -> None:
    src = (
        "def f(a, b=None, *, c=0):\n"
        "    g(a, 1)\n"
        "    h(b)\n"
        "    g(a, 1)\n"
        "    if a is None:\n"
        "        g(a, 1)\n"
        "    h(b)\n"
        "    k(*a)\n"
    )
    facts = Document(src).chunks()[0][1].facts
    (info,) = facts.functions
    tree = ast.parse(src).body[0]
    assert isinstance(tree, ast.FunctionDef)
    assert info.gates == gates.site_facts(tree, names.dotted)
    # g(a, 1) twice and h(b) twice in the same context: once each (in site_facts's order).
    assert sorted(s.callee for s in info.gates.sites) == ["g", "g", "h", "k"]
    for s in info.gates.sites:
        assert list(vars(s)) == [f.name for f in gates.Site.__dataclass_fields__.values()]


# -- document.quiet_parses: warnings ignored once around many parses ----------------------------

_WARNS = 'x = "\\d"\n'  # an invalid escape: a SyntaxWarning (DeprecationWarning before 3.12)


def test_parse_chunk_ignores_warnings_alone_and_in_quiet_parses() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_chunk(_WARNS, None, RankModel())
        with quiet_parses():
            assert document._quiet
            parse_chunk(_WARNS, None, RankModel())
        assert not document._quiet
        Document(_WARNS * 3)


def test_quiet_parses_restores_on_error() -> None:
    with pytest.raises(ZeroDivisionError), quiet_parses():
        1 / 0  # noqa: B018
    assert not document._quiet
    with quiet_parses():
        with quiet_parses():
            pass
        assert document._quiet  # the outer one still holds
    assert not document._quiet
