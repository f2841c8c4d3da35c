"""The cache codec writes what its definition says, and reads back what it wrote.

The encoder is generated per dataclass and per annotation for speed (``codec._encoder``: a
tuple of plain values is ``list``, a tuple of items ``list(map(item, v))``); ``plain`` below
is the definition it is compared with: a dataclass is the list of its fields' values in
declaration order, a tuple a list of its items, a frozenset of strings its sorted list, any
other frozenset the list of its items in iteration order.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

from ddp_lsp.core.ranks import RankModel
from ddp_lsp.project.codec import Codec
from ddp_lsp.project.summary import ModuleSummary, summarise

from .helpers import FIXTURES

TEXT = (Path(__file__).parent.parent / "core" / "test_extract_shortcuts.py").read_text()


def plain(value: Any, tp: Any) -> Any:
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return [plain(getattr(value, f.name), hints[f.name]) for f in dataclasses.fields(tp)]
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return [plain(x, args[0]) for x in value]
    if origin is tuple:
        return [plain(x, a) for x, a in zip(value, args, strict=True)]
    if origin is frozenset:
        if args[0] is str:
            return sorted(value)
        return [plain(x, args[0]) for x in value]
    return value


def _summaries() -> list[ModuleSummary]:
    out = []
    ranks = RankModel()
    for path in sorted(FIXTURES.rglob("*.py")):
        out.append(summarise(path.name, path.read_text(), "k", ranks))
    # Gate sites with skipped values and bound tokens, bindings, dotted calls.
    crafted = TEXT.partition('CRAFTED = """')[2].partition('"""')[0]
    out.append(summarise("crafted.py", crafted, "k", ranks))
    return out


def test_the_encoder_writes_its_definition_and_reads_back() -> None:
    codec = Codec(ModuleSummary)
    summaries = _summaries()
    assert any(fi.gates.sites for s in summaries for fi in s.facts.functions)
    assert any(s.binding_lines for s in summaries) and any(s.dotted_sites for s in summaries)
    for s in summaries:
        encoded = codec.encode(s)
        assert encoded == plain(s, ModuleSummary)
        assert codec.decode(json.loads(json.dumps(encoded))) == s
