"""A typed JSON codec for the index cache's frozen dataclasses: plain data in, plain data out.

The project index keeps its summaries on disk (:class:`~ddp_lsp.project.index.SummaryCache`).
Whoever can write to that directory must not be able to run code in the next ``ddp-lsp
check``, so the entries are JSON, never pickle, and every value is checked against the
dataclass's annotations as it is rebuilt: a field of the wrong type, a list of the wrong
length or an unknown shape raises :class:`SchemaError` and the entry is a miss.

A dataclass is written as the list of its field values in declaration order (no field names:
a third smaller and faster to read), tuples and frozensets as lists; :func:`fingerprint` names
the whole shape, so an entry written by a version whose dataclasses differ is never decoded.
The supported annotations are exactly what the summaries use: ``str``, ``int``, ``bool``,
``None``, unions of them, ``tuple[X, ...]``, ``tuple[X, Y]``, ``frozenset[X]`` and frozen
dataclasses of those.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import types
import typing
from collections.abc import Callable
from typing import Any

Encode = Callable[[Any], Any]
Decode2 = Callable[[Any, dict[Any, Any]], Any]  # (JSON value, sharing memo) -> value


class SchemaError(ValueError):
    """The JSON value does not have the shape the annotations say. (A non-string where a
    string belongs raises ``TypeError`` from ``sys.intern`` instead: callers catch both.)"""


def _fail(expected: str, value: Any) -> typing.NoReturn:
    raise SchemaError(f"expected {expected}, got {type(value).__name__}")


def _same(v: Any) -> Any:
    return v


class Codec:
    """Encoder and decoder of one dataclass (and everything it holds), built once."""

    def __init__(self, cls: type) -> None:
        self._enc: dict[Any, Encode] = {}
        self._dec: dict[Any, Decode2] = {}
        self._names: dict[Any, str] = {}
        # Encoders that map one item encoder over a tuple or frozenset (``list(map(item, v))``),
        # by their id: a dataclass's encoder writes the map out instead of calling them.
        self._mapped: dict[int, Encode] = {}
        self.encode: Encode = self._encoder(cls)
        self._decode: Decode2 = self._decoder(cls)
        self.fingerprint = hashlib.blake2b(self._name(cls).encode(), digest_size=8).hexdigest()

    # -- the shape's name --------------------------------------------------------------------

    def _name(self, tp: Any) -> str:
        if tp in self._names:
            return self._names[tp]
        if _is_dataclass(tp):
            self._names[tp] = tp.__qualname__  # a recursive reference names the class only
            hints = typing.get_type_hints(tp)
            fields = ",".join(f"{f.name}:{self._name(hints[f.name])}" for f in _fields(tp))
            name = f"{tp.__qualname__}({fields})"
        else:
            origin = typing.get_origin(tp)
            args = typing.get_args(tp)
            if origin is None:
                name = "None" if tp is type(None) else tp.__name__
            else:
                label = "union" if _is_union(origin) else origin.__name__
                name = (
                    f"{label}[{','.join('...' if a is Ellipsis else self._name(a) for a in args)}]"
                )
        self._names[tp] = name
        return name

    # -- encoding ---------------------------------------------------------------------------

    def _encoder(self, tp: Any) -> Encode:
        hit = self._enc.get(tp)
        if hit is not None:
            return hit
        if _is_dataclass(tp):
            hints = typing.get_type_hints(tp)
            out: Encode = _dataclass_encoder(
                tp, [(f.name, self._encoder(hints[f.name])) for f in _fields(tp)], self._mapped
            )
        else:
            origin = typing.get_origin(tp)
            args = typing.get_args(tp)
            if origin is None or _is_union(origin):
                out = _same if _plain(tp) else _unsupported(tp)
            elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
                item = self._encoder(args[0])
                # (`map` of the item's encoder: a tuple of pairs of strings is `list` mapped,
                # in C, rather than a call of a Python function per pair.)
                out = list if item is _same else self._map(item)
            elif origin is tuple:
                items = [self._encoder(a) for a in args]
                if all(e is _same for e in items):
                    # (`(scope, path, line)`: plain values, the list of them.)
                    out = list
                else:
                    out = lambda v: [e(x) for e, x in zip(items, v, strict=True)]  # noqa: E731
            elif origin is frozenset:
                item = self._encoder(args[0])
                # Sorted: one summary, one file, whatever the process's hash seed.
                out = sorted if args[0] is str else self._map(item)
            else:
                out = _unsupported(tp)
        self._enc[tp] = out
        return out

    def _map(self, item: Encode) -> Encode:
        out: Encode = lambda v: list(map(item, v))  # noqa: E731
        self._mapped[id(out)] = item
        return out

    # -- decoding ---------------------------------------------------------------------------

    def decode(self, value: Any, memo: dict[Any, Any] | None = None) -> Any:
        """The dataclass ``value`` encodes; :class:`SchemaError` if it does not. With ``memo``
        (a :class:`~ddp_lsp.project.index.SummaryCache`'s sharer), equal tuples, frozensets
        and dataclasses are shared with everything decoded or stored before, and strings are
        interned, as they are built: no second pass over the summary."""
        return self._decode(value, {} if memo is None else memo)

    def _decoder(self, tp: Any) -> Decode2:
        hit = self._dec.get(tp)
        if hit is not None:
            return hit
        if _is_dataclass(tp):
            hints = typing.get_type_hints(tp)
            names = [f.name for f in _fields(tp)]
            decs = [self._decoder(hints[n]) for n in names]
            n = len(decs)
            cls = tp
            label = tp.__name__
            new = object.__new__
            if hasattr(tp, "__post_init__") or hasattr(tp, "__slots__"):
                raise TypeError(
                    f"the index cache builds {label} without __init__: no __post_init__"
                )

            def dec_dc(v: Any, memo: dict[Any, Any]) -> Any:
                if type(v) is not list or len(v) != n:
                    _fail(f"{label} ({n} fields)", v)
                # As pickle builds it: the frozen __init__ (one object.__setattr__ per field)
                # costs more than the rest of decoding (checked above: nothing else to run).
                obj: Any = new(cls)
                obj.__dict__.update(
                    zip(names, [d(x, memo) for d, x in zip(decs, v, strict=True)], strict=True)
                )
                return memo.setdefault(obj, obj)

            out: Decode2 = dec_dc
        else:
            origin = typing.get_origin(tp)
            args = typing.get_args(tp)
            if origin is None or _is_union(origin):
                out = _plain_decoder(tp)
            elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
                out = _seq_decoder(tuple, self._decoder(args[0]), args[0])
            elif origin is tuple:
                items = [self._decoder(a) for a in args]
                k = len(items)

                def dec_fixed(v: Any, memo: dict[Any, Any]) -> Any:
                    if type(v) is not list or len(v) != k:
                        _fail(f"a list of {k}", v)
                    t = tuple([d(x, memo) for d, x in zip(items, v, strict=True)])
                    return memo.setdefault(t, t)

                out = dec_fixed
            elif origin is frozenset:
                out = _seq_decoder(frozenset, self._decoder(args[0]), args[0])
            else:
                out = _unsupported(tp)
        self._dec[tp] = out
        return out


def _dataclass_encoder(
    tp: type, fields: list[tuple[str, Encode]], mapped: dict[int, Encode]
) -> Encode:
    """``[e(v.f) for each field f and its encoder e]``, written out field by field (as
    ``walk.children`` is): a cold index encodes every summary it writes, and the generic
    loop (a ``getattr`` and a call per field, most of them the identity) was most of it.
    ``mapped``: encoders that map an item encoder over their value (by id), written out as
    ``list(map(item, v.f))`` (a gate site's three tuples of pairs: a call each, per site,
    was a third of encoding a summary)."""
    scope: dict[str, Any] = {}
    parts = []
    for i, (name, enc) in enumerate(fields):
        if not name.isidentifier():
            raise TypeError(f"the index cache cannot store field {name!r} of {tp!r}")
        if enc is _same:
            parts.append(f"v.{name}")
        elif enc is list or enc is sorted:
            parts.append(f"{enc.__name__}(v.{name})")
        elif id(enc) in mapped:
            item = mapped[id(enc)]
            if item is list or item is sorted:
                parts.append(f"list(map({item.__name__}, v.{name}))")
            else:
                scope[f"e{i}"] = item
                parts.append(f"list(map(e{i}, v.{name}))")
        else:
            scope[f"e{i}"] = enc
            parts.append(f"e{i}(v.{name})")
    code = f"def enc_{tp.__name__}(v):\n    return [{', '.join(parts)}]\n"
    exec(compile(code, f"<encoder of {tp.__qualname__}>", "exec"), scope)
    return scope[f"enc_{tp.__name__}"]  # type: ignore[no-any-return]


def _is_dataclass(tp: Any) -> typing.TypeGuard[type]:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _fields(tp: Any) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(tp)


def _is_union(origin: Any) -> bool:
    return origin is typing.Union or origin is types.UnionType


_PLAIN = (str, int, bool, type(None))


def _plain(tp: Any) -> bool:
    if tp in _PLAIN:
        return True
    origin = typing.get_origin(tp)
    return (
        origin is not None and _is_union(origin) and all(a in _PLAIN for a in typing.get_args(tp))
    )


def _unsupported(tp: Any) -> Any:
    raise TypeError(f"the index cache cannot store {tp!r}")


def _plain_decoder(tp: Any) -> Decode2:
    """``str``, ``int``, ``bool``, ``None`` and unions of them. ``bool`` is not an ``int``
    here (JSON keeps them apart, and so do the summaries). Strings are interned:
    ``sys.intern`` also rejects anything that is not a ``str`` (a TypeError, a miss)."""
    if not _plain(tp):
        _unsupported(tp)
    allowed = frozenset(typing.get_args(tp) if typing.get_origin(tp) is not None else (tp,))
    label = " | ".join(sorted(t.__name__ for t in allowed))
    intern = sys.intern
    if allowed == {str}:
        return lambda v, memo: intern(v)
    if allowed == {str, type(None)}:
        return lambda v, memo: None if v is None else intern(v)

    def dec_plain(v: Any, memo: dict[Any, Any]) -> Any:
        kind = type(v)
        if kind not in allowed:
            _fail(label, v)
        return intern(v) if kind is str else v

    return dec_plain


def _seq_decoder(make: Callable[[Any], Any], item: Decode2, item_tp: Any) -> Decode2:
    if item_tp is str:
        intern = sys.intern  # in C, and a TypeError for anything but a str

        def dec_strs(v: Any, memo: dict[Any, Any]) -> Any:
            if type(v) is not list:
                _fail("a list", v)
            t = make(map(intern, v))
            return memo.setdefault(t, t)

        return dec_strs

    def dec_seq(v: Any, memo: dict[Any, Any]) -> Any:
        if type(v) is not list:
            _fail("a list", v)
        t = make([item(x, memo) for x in v])
        return memo.setdefault(t, t)

    return dec_seq
