"""The sharer's walks written out per dataclass (``sharing._special``) share what the generic
walk shares: equal summaries, the same memo, the same objects kept whole or copied."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddp_lsp.core.ranks import RankModel
from ddp_lsp.project import sharing
from ddp_lsp.project.summary import ModuleSummary, summarise

from .helpers import FIXTURES

TEXT = (Path(__file__).parent.parent / "core" / "test_extract_shortcuts.py").read_text()


def _summaries() -> list[ModuleSummary]:
    ranks = RankModel()
    out = [summarise(p.name, p.read_text(), "k", ranks) for p in sorted(FIXTURES.rglob("*.py"))]
    # Gate sites with skipped values and bound tokens, bindings, dotted calls.
    crafted = TEXT.partition('CRAFTED = """')[2].partition('"""')[0]
    out.append(summarise("crafted.py", crafted, "k", ranks))
    # The same file under another name: its facts are all found in the memo.
    out.append(summarise("again.py", crafted, "k2", ranks))
    return out


def _shape(value: object, seen: dict[int, int]) -> object:
    """``value``'s structure with each object numbered by first appearance: two structures are
    equal when the same parts are one object in both."""
    number = seen.setdefault(id(value), len(seen))
    if isinstance(value, (list, tuple, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, frozenset) else value
        return (number, [_shape(x, seen) for x in items])
    if hasattr(value, "__dataclass_fields__"):
        return (number, [_shape(v, seen) for v in vars(value).values()])
    if isinstance(value, str):
        return (number, value)
    return value


def _share(summaries: list[ModuleSummary]) -> tuple[list[ModuleSummary], sharing.Sharer]:
    sharer = sharing.Sharer()
    return [sharer(s) for s in summaries], sharer


def test_every_kind_of_a_summary_has_its_walk_written_out() -> None:
    assert sharing._SPECIAL.keys() == sharing._FIELDS.keys()


def test_the_written_out_walks_share_as_the_generic_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    summaries = _summaries()
    assert any(fi.gates.sites for s in summaries for fi in s.facts.functions)
    assert any(s.binding_lines for s in summaries) and any(s.dotted_sites for s in summaries)
    fast, fast_sharer = _share(summaries)
    monkeypatch.setattr(sharing, "_SPECIAL", {})
    generic, generic_sharer = _share(summaries)
    assert fast == generic == summaries
    assert fast_sharer.memo.keys() == generic_sharer.memo.keys()
    assert len(fast_sharer.memo) == len(generic_sharer.memo)
    # (With the summaries shared: what is kept whole is the object it was given.)
    assert _shape((summaries, fast), {}) == _shape((summaries, generic), {})
    # Each string interned, and the copy of a file shares its facts with the first.
    assert all(f.qualname is sys.intern(f.qualname) for s in fast for f in s.facts.functions)
    assert fast[-1].facts.functions[0] is fast[-2].facts.functions[0]


def test_a_peeking_sharer_adds_nothing_through_the_written_out_walks() -> None:
    summaries = _summaries()
    sharer = sharing.Sharer()
    sharer(summaries[0])
    before = dict(sharer.memo)
    peek = sharer.peek()
    for s in summaries[1:]:
        assert peek(s) == s
    assert sharer.memo == before
