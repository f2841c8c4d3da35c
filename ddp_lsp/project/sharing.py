"""Sharing equal strings, tuples and facts between the project index's summaries (see
:class:`Sharer`); the index's cache decoder builds summaries into the same memo."""

from __future__ import annotations

import dataclasses
import operator
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ddp_lsp.core import facts as fact_model
from ddp_lsp.project.summary import ModuleSummary

_T = TypeVar("_T")


# The frozen dataclasses a summary is made of, with their fields in constructor order.
_FIELDS: dict[Any, tuple[str, ...]] = {
    t: tuple(f.name for f in dataclasses.fields(t))
    for t in (
        ModuleSummary,
        fact_model.ChunkFacts,
        fact_model.FunctionInfo,
        fact_model.CallSite,
        fact_model.Binding,
    )
}


# A file's own summary and facts: never equal to another file's (the path differs), so never
# looked up to share (see Sharer).
_UNIQUE = frozenset({ModuleSummary, fact_model.ChunkFacts})
# Their fields that hold a tuple of the file's facts (every binding, function or call site of
# the file), as unlikely to equal another file's as the file itself: the items are shared,
# the tuple is neither looked up nor kept (each lookup hashed every fact in it, gate sites
# and all, through the dataclasses' hash written in Python; and again to keep it).
_NONE: frozenset[str] = frozenset()
_PER_FILE = {
    ModuleSummary: frozenset({"dotted_sites"}),
    fact_model.ChunkFacts: frozenset({"bindings", "functions", "call_sites"}),
}


class Sharer:
    """Shares equal strings, tuples and facts between summaries.

    Files of one project spell the same names (``torch.distributed.all_reduce``, ``model``,
    ``optimizer``) and make the same calls; without sharing, each summary holds its own copies,
    which is most of the index's memory.
    """

    def __init__(self) -> None:
        # Also filled by the cache's decoder, which builds summaries shared as it reads them.
        self.memo: dict[object, object] = {}
        # How a shared value is kept: added to the memo, or only looked up in it (see peek).
        self._keep: Callable[..., object] = dict.setdefault

    def peek(self) -> Sharer:
        """A sharer that shares with what this one's memo holds and adds nothing to it: for
        the summaries of an editor's unsaved text, whose new facts (every function below the
        edited line moved) would otherwise stay in the memo, 1-2 MB a version of a
        20,000-line file, while the version itself is dropped at the next update
        (docs/performance.md, "Peak RSS while typing")."""
        peek = Sharer()
        peek.memo = self.memo
        peek._keep = dict.get
        return peek

    def __call__(self, obj: _T) -> _T:
        return cast(_T, self._share(obj))

    def _share(self, obj: object) -> object:
        # The common cases first, without a call per item: strings (interned) and tuples.
        kind = obj.__class__
        if kind is str:
            return _intern(cast(str, obj))
        if kind is tuple:
            memo = self.memo
            hit = memo.get(obj)
            if hit is not None:
                return hit
            share = self._share
            items = [_intern(x) if x.__class__ is str else share(x) for x in obj]  # type: ignore[attr-defined]
            if not all(map(_is, items, obj)):  # type: ignore[call-overload]
                obj = tuple(items)
            # (Else every item is already the shared one: the tuple itself is kept, no copy
            # built and the original freed.)
            return self._keep(memo, obj, obj)
        if kind is int or kind is bool or obj is None:
            return obj
        return self._share_other(obj, kind)

    def _share_other(self, obj: object, kind: type) -> object:
        if isinstance(obj, str):
            return sys.intern(obj)
        fields = _FIELDS.get(kind)
        if kind in _UNIQUE and fields is not None:
            # One per file: looking one up hashed the whole summary (twice, with its facts),
            # for a hit no two files' summaries give. Its parts are shared as below.
            return self._rebuilt(obj, kind, fields, _PER_FILE[kind])
        if kind is frozenset or fields is not None:
            # An equal object seen before is returned whole, without walking it: most facts of
            # a file repeat facts of others, and hashing them runs in C.
            hit = self.memo.get(obj)
            if hit is not None:
                return hit
        if isinstance(obj, tuple):
            obj = tuple(self._share(x) for x in obj)
        elif isinstance(obj, frozenset):
            obj = frozenset(self._share(x) for x in obj)
        elif fields is not None:
            obj = self._rebuilt(obj, kind, fields)
        else:
            return obj
        return self._keep(self.memo, obj, obj)

    def _rebuilt(
        self, obj: object, kind: type, fields: tuple[str, ...], per_file: frozenset[str] = _NONE
    ) -> object:
        """``obj`` with its fields shared: ``obj`` itself when each field already is the
        shared value (identifiers come interned from the parser, facts from the memo), else
        a copy built with them. ``per_file``: fields whose tuple is not shared, only its items
        (see _PER_FILE)."""
        old = list(map(obj.__dict__.__getitem__, fields))
        share = self._share
        values = [
            share(v) if name not in per_file else self._items(v)
            for name, v in zip(fields, old, strict=True)
        ]
        if all(map(_is, values, old)):
            return obj
        return _build(kind, fields, values)

    def _items(self, obj: tuple[object, ...]) -> tuple[object, ...]:
        """``obj`` with each item shared (``obj`` itself when each already is)."""
        share = self._share_other
        items = [share(x, x.__class__) for x in obj]
        return obj if all(map(_is, items, obj)) else tuple(items)


_intern = sys.intern
_is = operator.is_


def _build(kind: type, fields: tuple[str, ...], values: list[object]) -> object:
    """``kind(*values)`` without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field), as the cache's decoder and pickle build them: none of
    the summary's dataclasses has a ``__post_init__`` (the codec refuses one)."""
    obj: Any = object.__new__(kind)
    obj.__dict__.update(zip(fields, values, strict=True))
    return obj
