"""Sharing equal strings, tuples and facts between the project index's summaries (see
:class:`Sharer`); the index's cache decoder builds summaries into the same memo."""

from __future__ import annotations

import dataclasses
import operator
import sys
import types
import typing
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
        special = _SPECIAL.get(kind)
        if special is not None:
            return special(self, obj, self.memo)
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

    def _strings(self, obj: tuple[str, ...], memo: dict[object, object]) -> tuple[str, ...]:
        """A tuple of strings shared (as :meth:`_share` shares a tuple)."""
        hit = memo.get(obj)
        if hit is not None:
            return cast(tuple[str, ...], hit)
        items = tuple(map(_intern, obj))
        if all(map(_is, items, obj)):
            items = obj
        return cast(tuple[str, ...], self._keep(memo, items, items))

    def _flat(self, obj: tuple[object, ...], memo: dict[object, object]) -> object:
        """A tuple of strings, numbers and None shared (as :meth:`_share` shares a tuple)."""
        hit = memo.get(obj)
        if hit is not None:
            return hit
        items = tuple([_intern(x) if x.__class__ is str else x for x in obj])
        if all(map(_is, items, obj)):
            items = obj
        return self._keep(memo, items, items)

    def _flats(self, obj: tuple[tuple[object, ...], ...], memo: dict[object, object]) -> object:
        """A tuple of such tuples shared (as :meth:`_share` shares a tuple)."""
        hit = memo.get(obj)
        if hit is not None:
            return hit
        flat = self._flat
        items = tuple([flat(x, memo) for x in obj])
        if all(map(_is, items, obj)):
            items = obj
        return self._keep(memo, items, items)

    def _string_set(self, obj: frozenset[str], memo: dict[object, object]) -> frozenset[str]:
        """A frozenset of strings shared (as :meth:`_share_other` shares a frozenset)."""
        hit = memo.get(obj)
        if hit is not None:
            return cast(frozenset[str], hit)
        items = frozenset(map(_intern, obj))
        return cast(frozenset[str], self._keep(memo, items, items))


_intern = sys.intern
_is = operator.is_


def _special(kind: type) -> Callable[[Sharer, Any, dict[object, object]], object]:
    """What :meth:`Sharer._share_other` does to a ``kind`` (one of :data:`_FIELDS`), written
    out field by field from its annotations (as the codec's encoders are): a string interned,
    an ``int`` or ``bool`` kept, a tuple or frozenset of strings shared by one call, any other
    field by :meth:`Sharer._share` (a file's own tuples of facts: each item). The walk of a
    cold index's summaries (2,040 files) called ``_share`` and ``_share_other`` for every
    field of every fact, most of them a string or a number."""
    fields = _FIELDS[kind]
    hints = typing.get_type_hints(kind)
    unique = kind in _UNIQUE
    per_file = _PER_FILE.get(kind, _NONE)
    lines = [f"def share_{kind.__name__}(sh, v, memo):"]
    if not unique:
        # An equal object seen before is returned whole, without walking it.
        lines += ["    hit = memo.get(v)", "    if hit is not None:", "        return hit"]
    lines.append("    d = v.__dict__")
    same: list[str] = []
    values: list[str] = []
    for i, name in enumerate(fields):
        tp = hints[name]
        old = f"d[{name!r}]"
        if tp is int or tp is bool:
            values.append(old)
            continue
        lines.append(f"    o{i} = {old}")
        if tp is str:
            new = f"intern(o{i})"
        elif tp == str | None:
            new = f"o{i} if o{i} is None else intern(o{i})"
        elif tp == tuple[str, ...]:
            new = f"sh._strings(o{i}, memo)"
        elif tp == frozenset[str]:
            new = f"sh._string_set(o{i}, memo)"
        elif _flat_tuple(tp):
            new = f"sh._flat(o{i}, memo)"
        elif (
            typing.get_origin(tp) is tuple
            and tp.__args__[1:] == (...,)
            and _flat_tuple(tp.__args__[0])
        ):
            new = f"sh._flats(o{i}, memo)"
        elif dataclasses.is_dataclass(tp) and tp not in _FIELDS:
            # (A gate summary: kept as it is, see Sharer._share_other.)
            values.append(old)
            continue
        elif name in per_file:
            new = f"sh._items(o{i})"
        else:
            new = f"sh._share(o{i})"
        lines.append(f"    n{i} = {new}")
        same.append(f"n{i} is o{i}")
        values.append(f"n{i}")
    lines += [
        f"    if {' and '.join(same) or 'True'}:",
        "        obj = v",
        "    else:",
        "        obj = new(kind)",
        "        obj.__dict__.update({"
        + ", ".join(f"{n!r}: {x}" for n, x in zip(fields, values, strict=True))
        + "})",
    ]
    lines.append("    return obj" if unique else "    return sh._keep(memo, obj, obj)")
    scope: dict[str, Any] = {"intern": _intern, "new": object.__new__, "kind": kind}
    exec(compile("\n".join(lines) + "\n", f"<sharer of {kind.__qualname__}>", "exec"), scope)
    return scope[f"share_{kind.__name__}"]  # type: ignore[no-any-return]


def _plain(tp: Any) -> bool:
    """``str``, ``int``, ``bool``, ``None`` or a union of them."""
    if tp in _PLAIN:
        return True
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and all(
        a in _PLAIN for a in typing.get_args(tp)
    )


def _flat_tuple(tp: Any) -> bool:
    """A tuple (fixed or ``...``) of :func:`_plain` values."""
    if typing.get_origin(tp) is not tuple:
        return False
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        args = args[:1]
    return all(_plain(a) for a in args)


_PLAIN = (str, int, bool, type(None))
_SPECIAL = {kind: _special(kind) for kind in _FIELDS}


def _build(kind: type, fields: tuple[str, ...], values: list[object]) -> object:
    """``kind(*values)`` without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field), as the cache's decoder and pickle build them: none of
    the summary's dataclasses has a ``__post_init__`` (the codec refuses one)."""
    obj: Any = object.__new__(kind)
    obj.__dict__.update(zip(fields, values, strict=True))
    return obj
