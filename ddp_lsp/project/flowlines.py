"""Lines moved under the stored project state (:mod:`ddp_lsp.project.flowstate`): an edit that
adds or removes lines updates the stored computation with those lines moved, rather than
computing the project from scratch.

An edit that adds or removes lines in a file (a call added at the top of a function body)
moves every line below it that the stored computation cites: kind seeds, call sites, own
properties, and through them the provenance of kinds, callee properties and `distributed` in
every module that inherited them. The update is not refused for that. For a changed module, `_shift` pairs the lines of its old and new summaries by what sits there
(the same function, call site, binding or property: keys matched even where other facts
changed) and keeps a strictly increasing part of those pairs, f. The stored computation on
the old summary is then, line for line, the computation on the old summary with its lines
moved by f (`_relabelled`, lines f does not pair moved strictly between their neighbours'
images, to values no line has): lines enter the computation only as provenance, and ties
between provenances are broken by (path, line), an order a strictly increasing map keeps
(as summary.line_map). `_update` then compares that summary with the new one exactly as
when nothing moved. The stored texts are not rewritten: each is read through the map of
every moved file (`_Lines`), and the texts an update rewrites cite keys (the inverse map,
`_Keys`), so a map composed over many runs stays valid for every text stored in them.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, cast

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
from ddp_lsp.project.summary import ModuleSummary

# path -> its lines as read (_Lines, _Shifted: key -> line, a float for a line that is no
# line) or as written (_Keys: line -> key).
Maps = Mapping[str, Any]

# Above this many moved files the stored maps are dropped by computing from scratch (each text
# read is moved through all of them).
MAX_MOVED_FILES = 64


def _keyed_lines(s: ModuleSummary) -> dict[tuple[object, ...], int]:
    """Each line a provenance can cite in ``s``, by what sits there (its n-th occurrence)."""
    out: dict[tuple[object, ...], int] = {}
    seen: dict[tuple[object, ...], int] = {}

    def put(key: tuple[object, ...], line: int) -> None:
        n = seen[key] = seen.get(key, -1) + 1
        out[(*key, n)] = line

    for fi in s.facts.functions:
        if fi.qualname != fact_model.MODULE:
            put(("def", fi.qualname), fi.line + 1)
    sites = (*s.facts.call_sites, *s.dotted_sites)
    if len(sites) == len(s.site_lines):
        for cs, line in zip(sites, s.site_lines, strict=True):
            put(("call", cs), line)
    for scope, path, line in s.binding_lines:
        put(("bind", scope, path), line)
    for q, prop, line in s.prop_lines:
        put(("prop", q, prop), line)
    return out


def _shift(a: ModuleSummary, b: ModuleSummary) -> dict[int, int] | None:
    """A strictly increasing map from lines ``a`` cites to lines of ``b``, paired by what
    sits on them (the top level at 1, and every function, call site, binding and property
    present in both); None when it moves nothing (every paired line stays)."""
    old, new = _keyed_lines(a), _keyed_lines(b)
    targets: dict[int, set[int]] = {1: {1}}
    for key, line in old.items():
        to = new.get(key)
        if to is not None:
            targets.setdefault(line, set()).add(to)
    pairs = sorted((x, next(iter(ys))) for x, ys in targets.items() if len(ys) == 1)
    # The longest part of the pairs, in old order, whose new lines increase strictly.
    tails: list[int] = []  # index of the pair ending the best chain of each length
    before: list[int] = [-1] * len(pairs)
    for i, (_, y) in enumerate(pairs):
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if pairs[tails[mid]][1] < y:
                lo = mid + 1
            else:
                hi = mid
        before[i] = tails[lo - 1] if lo else -1
        if lo == len(tails):
            tails.append(i)
        else:
            tails[lo] = i
    kept: dict[int, int] = {}
    i = tails[-1] if tails else -1
    while i >= 0:
        kept[pairs[i][0]] = pairs[i][1]
        i = before[i]
    if all(x == y for x, y in kept.items()):
        return None
    return dict(sorted(kept.items()))


class _Shifted(Mapping[int, float]):
    """A :func:`_shift` map extended to every line: a line it does not pair goes strictly
    between the images of its paired neighbours, to a value that is no line (x.5 or so), so
    the extension is strictly increasing and anything citing such a line differs from
    everything the new summary cites."""

    def __init__(self, pairs: Mapping[int, int]) -> None:
        self.pairs = pairs
        self.xs = sorted(pairs)

    def __getitem__(self, x: int) -> float:
        got = self.pairs.get(x)
        if got is not None:
            return got
        xs = self.xs
        i = bisect.bisect_left(xs, x)
        if i == 0:  # (1 is always paired unless a conflict dropped it)
            a = xs[0]
            return self.pairs[a] - 0.5 * (a - x) / (a - x + 1)
        a = xs[i - 1]
        width = (xs[i] - a) if i < len(xs) else (x - a + 1)
        return self.pairs[a] + 0.5 * (x - a) / width

    def __iter__(self) -> Iterator[int]:
        return iter(self.xs)

    def __len__(self) -> int:
        return len(self.xs)


def _relabelled(s: ModuleSummary, f: Mapping[int, float]) -> ModuleSummary:
    """``s`` with every line it cites moved by ``f`` (under another digest: not the summary
    the index knows by that one)."""

    def line(x: int) -> int:
        return cast(int, f[x])

    functions = tuple(
        fi
        if fi.qualname == fact_model.MODULE
        else dataclasses.replace(fi, line=line(fi.line + 1) - 1)
        for fi in s.facts.functions
    )
    return dataclasses.replace(
        s,
        digest=s.digest + "@moved",
        facts=dataclasses.replace(s.facts, functions=functions),
        site_lines=tuple(line(x) for x in s.site_lines),
        binding_lines=tuple((sc, p, line(x)) for sc, p, x in s.binding_lines),
        prop_lines=tuple((q, p, line(x)) for q, p, x in s.prop_lines),
    )


class LineGone(ValueError):
    """A stored text cites a line its file no longer has: the update computes from scratch.
    (Not a KeyError: the stored tables are read through ``Mapping.get`` and ``in``, which
    would take it for an entry that is not there.)"""


class _Lines(Mapping[int, float]):
    """How a file's keys read now: through its stored map (a key it lacks, or a line gone,
    raises LineGone), then through this run's shift of the file."""

    def __init__(self, stored: Mapping[int, int] | None, shift: Mapping[int, float] | None):
        self.stored = stored
        self.shift = shift

    def __getitem__(self, key: int) -> float:
        line: float = key
        if self.stored is not None:
            line = self.stored.get(key, 0)
            if not line:
                raise LineGone(key)
        return line if self.shift is None else self.shift[cast(int, line)]

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError("a map of lines is only read")

    def __len__(self) -> int:
        raise NotImplementedError("a map of lines is only read")


class _Keys:
    """The inverse of a file's map after an update (key -> line now): the key to store for a
    line; a line no key reads yet gets a new negative key (never used before in this map)."""

    def __init__(self, lines: dict[int, int]) -> None:
        self.lines = lines  # key -> line (0: gone), extended here
        self.by_line = {line: key for key, line in lines.items() if line}
        self.next = min(0, *lines) - 1 if lines else -1

    def __getitem__(self, line: float) -> int:
        key = self.by_line.get(cast(int, line))
        if key is None:
            if type(line) is not int or line < 1:
                raise LineGone(line)  # (a line only a relabelled summary has)
            key = self.by_line[line] = self.next
            self.lines[key] = line
            self.next -= 1
        return key


def _at(p: Provenance, maps: Maps) -> Provenance:
    lines = maps.get(p.path)
    return p if lines is None else Provenance(p.path, lines[p.line], p.message)


def _kind_at(k: ParamKind, maps: Maps) -> ParamKind:
    return ParamKind(k.kind, _at(k.origin, maps), tuple(_at(v, maps) for v in k.via), k.mixed)


def _facts_moved(f: ModuleProjectFacts, maps: Maps) -> ModuleProjectFacts:
    """``f`` with every provenance in a file of ``maps`` read through its map."""
    if not maps:
        return f
    return ModuleProjectFacts(
        f.module,
        f.path,
        {key: _kind_at(k, maps) for key, k in f.extra_kinds.items()},
        {
            name: CalleeProps(
                cp.target, cp.props, {p: _at(o, maps) for p, o in cp.origins.items()}, cp.gating
            )
            for name, cp in f.callee_props.items()
        },
        None if f.distributed is None else _at(f.distributed, maps),
        f.only_called_guarded,
        f.root,
        f.single_process,
        f.silenced,
    )


def _moved_after(
    stored: Mapping[str, dict[int, int]], shifts: Mapping[str, Mapping[int, int]]
) -> dict[str, dict[int, int]]:
    """Each file's map of keys to lines after this run's shifts (see _Moved): a key whose
    line the shift does not pair is gone (0). Of the keys gone, only the lowest negative one
    is kept (new keys are taken below it); a positive key is never given again."""
    out = {path: dict(lines) for path, lines in stored.items()}
    for path, shift in shifts.items():
        before = stored.get(path)
        if before is None:
            out[path] = dict(shift)  # keyed by the lines of the summary the texts read
            continue
        lines = {k: shift.get(line, 0) if line else 0 for k, line in before.items()}
        low = min(lines, default=0)
        out[path] = {k: v for k, v in lines.items() if v or (k == low and k < 0)}
    return out


def moved(facts: ModuleProjectFacts, path: str, lines: Mapping[int, int]) -> ModuleProjectFacts:
    """``facts`` with every provenance in ``path`` at its line after ``lines``
    (:func:`~ddp_lsp.project.summary.line_map`); the same object when none is there. A line
    the map does not know raises KeyError (the facts were not computed from that file).
    (Here, not in flow.py, which it is also imported from: a snapshot's facts are read
    through it without importing the computation.)"""

    def at(p: Provenance) -> Provenance:
        return p if p.path != path else Provenance(p.path, lines[p.line], p.message)

    def kind(k: ParamKind) -> ParamKind:
        return ParamKind(k.kind, at(k.origin), tuple(at(v) for v in k.via), k.mixed)

    def cites(k: ParamKind) -> bool:
        return k.origin.path == path or any(v.path == path for v in k.via)

    touched = (
        any(cites(k) for k in facts.extra_kinds.values())
        or any(o.path == path for cp in facts.callee_props.values() for o in cp.origins.values())
        or (facts.distributed is not None and facts.distributed.path == path)
    )
    if not touched:
        return facts
    return ModuleProjectFacts(
        facts.module,
        facts.path,
        {key: kind(k) for key, k in facts.extra_kinds.items()},
        {
            name: CalleeProps(
                cp.target, cp.props, {p: at(o) for p, o in cp.origins.items()}, cp.gating
            )
            for name, cp in facts.callee_props.items()
        },
        None if facts.distributed is None else at(facts.distributed),
        facts.only_called_guarded,
        facts.root,
        facts.single_process,
        facts.silenced,
    )
