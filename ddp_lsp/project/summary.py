"""One file's summary for the project index: what the other files need to know about it.

A :class:`ModuleSummary` is the core's raw :class:`~ddp_lsp.core.facts.ChunkFacts` of the whole
file (the same ``facts.extract`` the per-file analysis runs on chunks, here on one whole-file
``ast`` parse), plus what the core does not record but the project needs: the module's dotted
name, the bases of its classes (for ``self.`` methods inherited from another module) and the
lines of the assignments that bind a kind (provenance: "wrapped in DistributedDataParallel at
main.py:212"). :mod:`ddp_lsp.project.index` keys, caches and serves them.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.core.factpieces import ModuleFeed
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.walk import walk
from ddp_lsp.project.wholeparse import (
    PIECES_MIN_CHARS,
    RESTART,
    Unparsable,
    bodies,
    changed_lines,
    parse_or_none,
)


@dataclass(frozen=True)
class ModuleSummary:
    """What the project needs to know about one file."""

    path: str  # relative to the project root, POSIX separators
    module: str  # dotted module name ("utils.dist", "trainer" for trainer/__init__.py)
    is_package: bool  # an __init__.py: its relative imports start at the package itself
    digest: str
    lines: int
    facts: fact_model.ChunkFacts
    bases: tuple[tuple[str, tuple[str, ...]], ...] = ()  # top-level class -> base spellings
    # Calls through a module attribute (`engine.train_one_epoch(model)`), which the core does
    # not record as call sites (in one file they reach no local function).
    dotted_sites: tuple[fact_model.CallSite, ...] = ()
    # 1-based line of each call site, facts.call_sites then dotted_sites (provenance).
    site_lines: tuple[int, ...] = ()
    # (scope, path) -> 1-based line of the first assignment that binds a kind there.
    binding_lines: tuple[tuple[str, str, int], ...] = ()
    # (function, property, 1-based line of the call that gives it): where a message's "performs
    # a collective at utils.py:18" points, rather than the function's `def` line.
    prop_lines: tuple[tuple[str, str, int], ...] = ()
    syntax_error: bool = False
    # (scope, spelling) of each name handed to a call as a value, not called there:
    # `mp.spawn(run, args=(cfg, train))` in `main` gives ("main", "run") and ("main", "train"),
    # `launch(main_worker, ...)` at the top level ("<module>", "main_worker"). Whoever
    # receives a function runs it: the project follows these edges to find distributed code.
    handed: tuple[tuple[str, str], ...] = ()


def same_for_project(a: ModuleSummary, b: ModuleSummary) -> bool:
    """Whether the project reads the same from both summaries: equal in every field but the
    content key and the line count, which no cross-file fact depends on (a comment, a
    changed constant or an edit the facts do not see, with no line moved). Every project
    fact is a function of what the summaries say, so nothing computed from ``a`` changes
    when ``b`` replaces it (salsa's early cutoff: an input that changed to an equal value
    invalidates nothing downstream)."""
    if a is b:
        return True
    return dataclasses.replace(a, digest="", lines=0) == dataclasses.replace(b, digest="", lines=0)


def _without_lines(s: ModuleSummary) -> ModuleSummary:
    return dataclasses.replace(
        s,
        digest="",
        lines=0,
        facts=dataclasses.replace(
            s.facts, functions=tuple(dataclasses.replace(fi, line=0) for fi in s.facts.functions)
        ),
        site_lines=(0,) * len(s.site_lines),
        binding_lines=tuple((scope, path, 0) for scope, path, _ in s.binding_lines),
        prop_lines=tuple((q, prop, 0) for q, prop, _ in s.prop_lines),
    )


def line_map(a: ModuleSummary, b: ModuleSummary) -> dict[int, int] | None:
    """How the lines the project cites of ``a`` moved in ``b``, when that is all that changed
    (a comment or a blank line added or removed, a docstring grown): each line of a fact of
    ``a`` as a provenance cites it (1-based) -> its line in ``b``; None when anything else
    differs, or the lines did not move in order.

    The cross-file facts of the project with ``b`` are then those with ``a``, each provenance
    in this file moved by the map (``flow.moved``): lines enter the computation only as
    provenance, and ties between provenances are broken by (path, line), an order a strictly
    increasing map keeps, so every choice the computation made stays the same."""
    if a.path != b.path or _without_lines(a) != _without_lines(b):
        return None
    pairs: list[tuple[int, int]] = [(1, 1)]  # a module's top level is cited at line 1
    pairs += [
        (x.line + 1, y.line + 1)
        for x, y in zip(a.facts.functions, b.facts.functions, strict=True)
        if x.qualname != fact_model.MODULE
    ]
    pairs += zip(a.site_lines, b.site_lines, strict=True)
    pairs += [(x[2], y[2]) for x, y in zip(a.binding_lines, b.binding_lines, strict=True)]
    pairs += [(x[2], y[2]) for x, y in zip(a.prop_lines, b.prop_lines, strict=True)]
    lines: dict[int, int] = {}
    for old, new in pairs:
        if lines.setdefault(old, new) != new:
            return None
    order = sorted(lines)
    if any(lines[x] >= lines[y] for x, y in zip(order, order[1:], strict=False)):
        return None
    return lines


def module_name(rel: str) -> tuple[str, bool]:
    """Dotted name of a file relative to the root; ``src/`` layouts drop the ``src``."""
    parts = rel.split("/")
    if len(parts) > 1 and parts[0] == "src":
        parts = parts[1:]
    last = parts[-1]
    stem = last[:-3] if last.endswith(".py") else last
    if stem == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join([*parts[:-1], stem]), False


def summarise(
    rel: str, text: str, digest: str, ranks: RankModel, module_rel: str | None = None
) -> ModuleSummary:
    """Parse one file and summarise it (no cache). ``module_rel``: the path its module name
    comes from, when that is not ``rel`` (a project nested in the indexed folder)."""
    return summarise_with_facts(rel, text, digest, ranks, module_rel)[0]


def summarise_with_facts(
    rel: str,
    text: str,
    digest: str,
    ranks: RankModel,
    module_rel: str | None = None,
    previous: bytes | None = None,
    min_chars: int = PIECES_MIN_CHARS,
) -> tuple[ModuleSummary, fact_model.ModuleFacts | None]:
    """:func:`summarise`, and the file's own module facts (``facts.merge`` of its facts, which
    the summary needs and the project's computation reads again: the index keeps them; None
    for a file that does not parse). A text of ``min_chars`` characters or more is summarised
    top-level piece by piece (:func:`_summarise_pieces`): the same summary. ``previous``: the
    file's text before (UTF-8), if known (an edit): where the edited lines do not parse, the
    text is found not to parse before any piece is walked (``wholeparse.bodies``)."""
    module, is_package = module_name(rel if module_rel is None else module_rel)
    lines = text.count("\n") + 1
    if len(text) >= min_chars:
        # A large file in pieces: the peak memory of one piece's tree, not the file's.
        changed = None
        if previous is not None:
            changed = changed_lines(previous.decode("utf-8", errors="replace"), text)
        found = _summarise_pieces(text, ranks, min_chars, changed)
        if found is None:
            return _unparsable(rel, module, is_package, digest, lines), None
        x, bases, bindings, props = found
        merged = fact_model.merge([x.facts])
        binding_lines = bindings.lines(x.facts, merged)
        prop_lines = props.lines(merged)
    else:
        tree = parse_or_none(text)
        if tree is None:
            return _unparsable(rel, module, is_package, digest, lines), None
        x = fact_model.extract_module(tree, ranks)
        merged = fact_model.merge([x.facts])  # the file's own facts: which lines provenance needs
        bases = _bases(tree.body)
        # The module's statements, walked once for both below, and only if one of them asks.
        top = functools.cache(functools.partial(_statements, tree.body))
        binding_lines = _binding_lines(tree, x.facts, merged, top)
        prop_lines = _prop_lines(tree, merged, top)
    return ModuleSummary(
        rel,
        module,
        is_package,
        digest,
        lines,
        x.facts,
        bases=bases,
        dotted_sites=x.dotted_sites,
        site_lines=x.site_lines,
        binding_lines=binding_lines,
        prop_lines=prop_lines,
        handed=x.handed,  # gathered on the extractor's walk (tests/project/test_summary_walks.py)
    ), merged


def _bases(body: list[ast.stmt]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each top-level class's name and the bases it spells."""
    return tuple(
        (s.name, tuple(d for d in (known_names.dotted(b) for b in s.bases) if d))
        for s in body
        if isinstance(s, ast.ClassDef)
    )


def _summarise_pieces(
    text: str, ranks: RankModel, min_chars: int, changed: tuple[int, int] | None = None
) -> (
    tuple[fact_model.ModuleExtract, tuple[tuple[str, tuple[str, ...]], ...], _Bindings, _Props]
    | None
):
    """What :func:`summarise_with_facts` reads of the whole tree, from the body of
    ``parse_or_none(text)`` in parts (``wholeparse.bodies``), each part's tree dropped before
    the next is parsed; None where the text does not parse.

    The lines of bindings and properties are chosen with the facts of the whole module (the
    aliases, the kinds, the properties a helper defined further down gives): each part keeps
    what the choice needs of its statements (:class:`_Bindings`, :class:`_Props`), which is
    far less than its tree, and the choice is made once the module's facts are known. A
    20,000-line module's tree is 49 MB; one piece's, a few hundred KB."""
    feed = ModuleFeed(ranks)
    bases: list[tuple[str, tuple[str, ...]]] = []
    bindings, props = _Bindings(), _Props()
    try:
        for part in bodies(text, min_chars, changed):
            if part is RESTART:
                feed, bases, bindings, props = ModuleFeed(ranks), [], _Bindings(), _Props()
                continue
            feed.feed(part)
            bases += _bases(part)
            statements = _statements(part)
            bindings.add(statements)
            props.add(part, statements)
            del part, statements  # before the next part is parsed
    except Unparsable:
        return None
    return feed.finish(), tuple(bases), bindings, props


class _Bindings:
    """:func:`_binding_lines`'s walk, one part of the module at a time: each assignment of a
    call to a path, with its callees (:func:`_chain`), kept until the module's facts say which
    of them give a kind."""

    def __init__(self) -> None:
        # (path, callees) -> the first line that assigns them
        self._first: dict[tuple[str, tuple[str | None, ...]], int] = {}

    def add(self, statements: list[ast.stmt]) -> None:
        first = self._first
        for node in statements:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                if not isinstance(node.value, ast.Call):
                    continue  # gives no kind (_gives_kind)
                chain = tuple(_chain(node.value))
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    p = fact_model.path_of(t)
                    if p is not None and first.setdefault((p, chain), node.lineno) > node.lineno:
                        first[p, chain] = node.lineno

    def lines(
        self, cf: fact_model.ChunkFacts, merged: fact_model.ModuleFacts
    ) -> tuple[tuple[str, str, int], ...]:
        """:func:`_binding_lines` of the whole module."""
        wanted, project_classes = _wanted_bindings(cf, merged)
        if not wanted:
            return ()
        first: dict[str, int] = {}
        for (p, chain), line in self._first.items():
            if p in wanted and any(_kind_name(n, merged.aliases, project_classes) for n in chain):
                if p not in first or line < first[p]:
                    first[p] = line
        keys = {(b.scope, b.path) for b in cf.bindings} | set(merged.kinds)
        return tuple(sorted((s, p, first[p]) for (s, p) in keys if p in first))


class _Props:
    """:func:`_prop_lines`'s walk, one part of the module at a time: every function
    :func:`_functions` yields (all of them: which are wanted is known only from the whole
    module's facts; the wanted ones come in the same order), with the first line of each
    callee its calls spell, kept until the module's facts say which calls give a property."""

    def __init__(self) -> None:
        self._functions: list[tuple[str, dict[str, int]]] = []

    def add(self, body: list[ast.stmt], statements: list[ast.stmt]) -> None:
        callees: dict[int, dict[str, int]] = {}  # by id of the `def`, while the part lives
        for qual, fn in _functions(body, "", None, None, statements):
            first = callees.get(id(fn))
            if first is None:
                first = callees[id(fn)] = _first_lines(fn)
            self._functions.append((qual, first))

    def lines(self, merged: fact_model.ModuleFacts) -> tuple[tuple[str, str, int], ...]:
        """:func:`_prop_lines` of the whole module."""
        wanted = _wanted_props(merged)
        out: list[tuple[str, str, int]] = []
        for qual, first in self._functions:
            props = wanted.get(qual)
            if not props:
                continue
            cls = qual.rpartition(".")[0] or None
            for prop in props:
                # _first_call: the first call, by (line, column), whose callee gives it.
                lines = [ln for n, ln in first.items() if _cites(n, prop, merged, qual, cls)]
                if lines:
                    out.append((qual, prop, min(lines)))
        return tuple(out)


def _first_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, int]:
    """Each callee spelled by a call under ``fn`` -> the first line of such a call."""
    first: dict[str, int] = {}
    for n in walk(fn):
        if n.__class__ is ast.Call:
            name = known_names.dotted(n.func)
            if name is not None and first.setdefault(name, n.lineno) > n.lineno:
                first[name] = n.lineno
    return first


def _unparsable(rel: str, module: str, is_package: bool, digest: str, lines: int) -> ModuleSummary:
    # A file being edited: nothing is known of it until it parses again.
    return ModuleSummary(
        rel, module, is_package, digest, lines, fact_model.EMPTY_FACTS, syntax_error=True
    )


def _binding_lines(
    tree: ast.Module,
    cf: fact_model.ChunkFacts,
    merged: fact_model.ModuleFacts,
    top: Callable[[], list[ast.stmt]] | None = None,
) -> tuple[tuple[str, str, int], ...]:
    # Only files that bind a kind, or build an instance of a class of their own project, pay
    # for this walk; the line is where a message's "at main.py:212" points: the assignment
    # that gives the kind (`model = DDP(model)`), not the first one (`model = Net()`).
    wanted, project_classes = _wanted_bindings(cf, merged)
    if not wanted:
        return ()
    first: dict[str, int] = {}
    for node in _statements(tree.body) if top is None else top():
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                p = fact_model.path_of(t)
                if p in wanted and _gives_kind(node.value, merged.aliases, project_classes):
                    if p not in first or node.lineno < first[p]:
                        first[p] = node.lineno
    keys = {(b.scope, b.path) for b in cf.bindings} | set(merged.kinds)
    return tuple(sorted((s, p, first[p]) for (s, p) in keys if p in first))


def _wanted_bindings(
    cf: fact_model.ChunkFacts, merged: fact_model.ModuleFacts
) -> tuple[set[str], set[str]]:
    """The paths whose binding lines are cited, and the project's classes built here."""
    wanted = {p for (_, p) in merged.kinds}
    # `loss_scaler = NativeScaler()`: the project may know the class (a GradScaler wrapper).
    project_classes = {
        b.source[0]
        for b in cf.bindings
        if b.source
        and not fact_model.is_marker(b.source[0])
        and _project_class(b.source[0], merged.aliases)
    }
    wanted |= {b.path for b in cf.bindings if b.source and b.source[0] in project_classes}
    return wanted, project_classes


_CITED_PROPS = (fact_model.COLLECTIVE, fact_model.INITS_PG, fact_model.SAVES_CALLER_PATH)


def _prop_lines(
    tree: ast.Module,
    merged: fact_model.ModuleFacts,
    top: Callable[[], list[ast.stmt]] | None = None,
) -> tuple[tuple[str, str, int], ...]:
    # Only functions that have a property other files cite pay for this walk (a few a project).
    wanted = _wanted_props(merged)
    if not wanted:
        return ()
    # A function's body yields only qualnames under its own ("f.inner"): walked again only
    # when one of those is wanted (it was, for every function, the walk's most costly part).
    prefixes = {q[:i] for q in wanted for i, c in enumerate(q) if c == "."}
    out: list[tuple[str, str, int]] = []
    statements = _statements(tree.body) if top is None else top()
    for qual, fn in _functions(tree.body, "", None, prefixes, statements):
        props = wanted.get(qual)
        if not props:
            continue
        for prop in props:
            line = _first_call(fn, prop, merged, qual)
            if line is not None:
                out.append((qual, prop, line))
    return tuple(out)


def _wanted_props(merged: fact_model.ModuleFacts) -> dict[str, list[str]]:
    """The functions whose properties are cited -> those properties."""
    return {
        q: [p for p in _CITED_PROPS if p in props]
        for q, props in merged.func_props.items()
        if q != fact_model.MODULE and any(p in props for p in _CITED_PROPS)
    }


def _functions(
    body: list[ast.stmt],
    scope: str,
    cls: str | None,
    prefixes: set[str] | None = None,
    statements: list[ast.stmt] | None = None,
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Functions with the qualnames the core's extractor gives them (``C.m``, ``outer.inner``).
    ``prefixes``: when given, the functions under a function whose qualname is not in it are
    left out (only the qualnames under those prefixes are wanted). ``statements``:
    ``_statements(body)``, when the caller has it."""
    for s in _statements(body) if statements is None else statements:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qual = f"{cls}.{s.name}" if cls else f"{scope}.{s.name}" if scope else s.name
            yield qual, s
            if prefixes is None or qual in prefixes:
                yield from _functions(s.body, qual, None, prefixes)
        elif isinstance(s, ast.ClassDef) and not scope:
            yield from _functions(s.body, "", s.name, prefixes)


def _first_call(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, prop: str, facts: fact_model.ModuleFacts, qual: str
) -> int | None:
    cls = qual.rpartition(".")[0] or None
    from ddp_lsp.core.walk import bfs  # ast.walk's order (ties in position: outer call first)

    calls = sorted(
        (n for n in bfs(fn) if n.__class__ is ast.Call),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for c in calls:
        name = known_names.dotted(c.func)
        if name is not None and _cites(name, prop, facts, qual, cls):
            return c.lineno
    return None


def _cites(name: str, prop: str, facts: fact_model.ModuleFacts, qual: str, cls: str | None) -> bool:
    """Whether a call of ``name`` in the function ``qual`` (of class ``cls``) gives it
    ``prop``."""
    if prop == fact_model.COLLECTIVE and fact_model.is_collective_call(name, facts.aliases):
        return True
    if (
        prop == fact_model.INITS_PG
        and known_names.resolve(name, facts.aliases) == known_names.INIT_PROCESS_GROUP
    ):
        return True
    if (
        prop == fact_model.SAVES_CALLER_PATH
        and known_names.resolve(name, facts.aliases) == known_names.TORCH_SAVE
    ):
        return True
    return name != qual and prop in facts.callee_props(name, cls)  # a helper of this file


def _project_class(spelled: str, aliases: Mapping[str, str]) -> bool:
    last = spelled.rpartition(".")[2]
    if not last[:1].isupper():
        return False
    qual = aliases.get(spelled.partition(".")[0])
    # None: a class of this file, whose kind is the core's business.
    return qual is not None and known_names.may_be_project_module(qual)


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    # Statements only: assignments never sit inside expressions (walrus aside, which binds no
    # kind the core records), and skipping expressions makes this walk a fraction of ast.walk.
    # (A list, in the order of the stack below; each class's statement lists looked up once.)
    out: list[ast.stmt] = []
    stack = list(reversed(body))
    pop, push, extend = stack.pop, out.append, stack.extend
    shapes = _SHAPES
    while stack:
        s = pop()
        push(s)
        cls = s.__class__
        shape = shapes.get(cls)
        if shape is None:
            shape = shapes[cls] = _shape(cls)
        if shape is _LEAF:
            continue
        lists, handlers, cases = shape
        for name in lists:
            sub = getattr(s, name)
            if sub.__class__ is list and sub and isinstance(sub[0], ast.stmt):
                extend(reversed(sub))
        if handlers:
            for h in s.handlers:  # type: ignore[attr-defined]
                extend(reversed(h.body))
        if cases:
            for case in s.cases:  # type: ignore[attr-defined]
                extend(reversed(case.body))
    return out


_Shape = tuple[tuple[str, ...], bool, bool]
_LEAF: _Shape = ((), False, False)
_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    """Which of a statement class's fields hold statement lists: ``body``, ``orelse`` and
    ``finalbody`` (in that order), ``handlers``, ``cases``."""
    fields = set(getattr(cls, "_fields", ()))
    shape = (
        tuple(n for n in ("body", "orelse", "finalbody") if n in fields),
        "handlers" in fields,
        "cases" in fields,
    )
    return _LEAF if shape == _LEAF else shape


def _gives_kind(value: ast.AST, aliases: Mapping[str, str], classes: set[str]) -> bool:
    return any(_kind_name(name, aliases, classes) for name in _chain(value))


def _chain(value: ast.AST) -> Iterator[str | None]:
    """The callees of ``value`` and of the first argument of each, while it is a call
    (``DDP(model.to(device))``: ``DDP``, ``model.to``); None for one that is not spelled."""
    node = value
    while isinstance(node, ast.Call):
        yield known_names.dotted(node.func)
        if not node.args:
            return
        node = node.args[0]


def _kind_name(name: str | None, aliases: Mapping[str, str], classes: set[str]) -> bool:
    if name in classes:
        return True
    qual = known_names.resolve(name, aliases) if name else None
    return qual is not None and fact_model.kind_of_qualname(qual) is not None
