"""The Rule base class and the context a rule sees for one chunk.

A rule module defines one ``Rule`` subclass with ``meta`` (a :class:`RuleMeta`), a docstring
with the fixed headings (What it does / Why is this bad? / Example / Use instead / Fix /
Known false positives / References), ``check(ctx)`` yielding findings, and its own ``CASES``.

Rules see a chunk's ``ast`` tree and the module's :class:`ModuleFacts` through
:class:`ChunkContext`: the tree (one traversal shared by all rules, :meth:`ChunkContext.nodes`,
:meth:`ChunkContext.parent`, built once per parse), the facts (kinds, qualified names, helper
properties, where other files' facts came from) and the findings it makes. The helpers a rule
calls are free functions of their own modules: positions and source text in
:mod:`ddp_lsp.core.chunktext` (``chunktext.segment(ctx.chunk, node)``), how to spell a name in
a fix in :mod:`ddp_lsp.core.spelling`, text edits in :mod:`ddp_lsp.core.edits`. Positions
rules report are relative to the chunk (the engine moves them).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

from ddp_lsp.core import chunktext
from ddp_lsp.core.crossfile import MAIN_BLOCK, ParamKind, Provenance
from ddp_lsp.core.env import Environment
from ddp_lsp.core.facts import MODULE, ModuleFacts, path_of
from ddp_lsp.core.gates import Gating
from ddp_lsp.core.names import dotted
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.types import Finding, Fix, Pos, Related, RuleMeta, Span
from ddp_lsp.core.walk import LEAVES, children

if TYPE_CHECKING:
    from ddp_lsp.core.document import ParsedChunk
    from ddp_lsp.core.settings import Settings

T = TypeVar("T", bound=ast.AST)
U = TypeVar("U")
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_MODULE_SCOPE: tuple[str, str | None] = ("", None)


@dataclass(frozen=True)
class Valid:
    """A snippet the rule must stay silent on (a trap from RULES.md, or real-world idiom)."""

    code: str
    note: str = ""
    distributed: bool = True
    env: Environment | None = None  # where the code runs (preflight facts, launch config)


@dataclass(frozen=True)
class Invalid:
    """A snippet with the findings marked ``«like this»`` and the text after the preferred fix.

    ``fixed`` is None when the rule offers no fix for it; ``fix_title`` selects another fix.
    """

    code: str
    fixed: str | None = None
    note: str = ""
    fix_title: str | None = None
    distributed: bool = True
    env: Environment | None = None


class Index:
    """One shared traversal of a chunk: nodes by type and each node's parent."""

    def __init__(self, body: Sequence[ast.stmt]) -> None:
        self.body = body
        self.by_type: dict[type, list[ast.AST]] = {}
        self.parents: dict[int, ast.AST] = {}
        by_type = self.by_type
        parents = self.parents
        stack: list[ast.AST] = list(reversed(body))
        while stack:
            node = stack.pop()
            cls = node.__class__
            by_type.setdefault(cls, []).append(node)
            if cls in LEAVES:
                continue  # names, constants, operators: no node under them
            kids = children(node)
            for kid in kids:
                parents[id(kid)] = node
            kids.reverse()
            stack.extend(kids)


class ChunkContext:
    """What a rule can ask about the chunk it is checking."""

    def __init__(
        self,
        chunk: ParsedChunk,
        facts: ModuleFacts,
        settings: Settings,
        ranks: RankModel,
        env: Environment | None = None,
    ) -> None:
        self.chunk = chunk
        self.facts = facts
        self.settings = settings
        self.ranks = ranks
        # Where the code runs (preflight machine facts, launch config), when a front end knows.
        self.env: Environment = env or Environment()
        self.body: list[ast.stmt] = chunk.body
        self.member_of = chunk.member_of
        # Per context, not kept with the chunk: 12 MB at 20,000 lines kept for 0.1 s of CPU
        # over all 1,445 chunks, and a chunk's rules run again only when its text or what
        # they read changed (docs/performance.md, "Memory").
        self._index = Index(chunk.body)
        # The chunk's module-level code as one node: the same object every time it is asked
        # for, so rules can compare scopes by identity.
        self.module_node = ast.Module(body=self.body, type_ignores=[])
        self._memo: dict[object, object] = {}
        self._qualnames: dict[int, str | None] = {}
        self._scopes: dict[int, tuple[str, str | None]] = {}
        self._calls_by_qualname: dict[str | None, list[ast.Call]] | None = None

    # -- traversal -----------------------------------------------------------------------------

    def nodes(self, *types: type[T]) -> list[T]:
        """Every node of these types in the chunk, in source order per type."""
        if len(types) == 1:
            return list(self._index.by_type.get(types[0], ()))  # type: ignore[arg-type]
        out: list[ast.AST] = []
        for t in types:
            out.extend(self._index.by_type.get(t, ()))
        out.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
        return out  # type: ignore[return-value]

    def calls(self) -> list[ast.Call]:
        return self.nodes(ast.Call)

    def calls_to(self, qualname: str) -> list[ast.Call]:
        """The chunk's calls of ``qualname`` (as :meth:`call_qualname` resolves them), in the
        order of :meth:`calls`. Every call is resolved once for the table (most rules resolve
        every call anyway), so a rule looking for one function does not ask each call."""
        table = self._calls_by_qualname
        if table is None:
            table = self._calls_by_qualname = {}
            for call in self._index.by_type.get(ast.Call, ()):
                assert isinstance(call, ast.Call)
                table.setdefault(self.call_qualname(call), []).append(call)
        return list(table.get(qualname, ()))

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self._index.parents.get(id(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parents = self._index.parents
        p = parents.get(id(node))
        while p is not None:
            yield p
            p = parents.get(id(p))

    def enclosing_function(self, node: ast.AST) -> FunctionNode | None:
        # Asked by most rules for most calls: the parent chain walked here, not through the
        # `ancestors` generator.
        parents = self._index.parents
        p = parents.get(id(node))
        while p is not None:
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return p
            p = parents.get(id(p))
        return None

    def enclosing_loops(self, node: ast.AST) -> list[ast.For | ast.AsyncFor | ast.While]:
        """Loops around ``node`` inside its function, innermost first."""
        out: list[ast.For | ast.AsyncFor | ast.While] = []
        for a in self.ancestors(node):
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                break
            if isinstance(a, LOOPS):
                out.append(a)
        return out

    def statement(self, node: ast.AST) -> ast.stmt:
        """The smallest statement containing ``node``."""
        cur: ast.AST = node
        while not isinstance(cur, ast.stmt):
            p = self.parent(cur)
            if p is None:
                break
            cur = p
        assert isinstance(cur, ast.stmt)
        return cur

    def block_of(self, stmt: ast.stmt) -> tuple[list[ast.stmt], int]:
        """The statement list holding ``stmt`` and its index there."""
        parent = self.parent(stmt)
        lists: list[list[ast.stmt]] = []
        if parent is None:
            lists.append(self.body)
        else:
            for name in ("body", "orelse", "finalbody", "handlers"):
                seq = getattr(parent, name, None)
                if isinstance(seq, list):
                    lists.append(seq)
        for seq in lists:
            for i, s in enumerate(seq):
                if s is stmt:
                    return seq, i
        return [stmt], 0

    def scope(self, node: ast.AST) -> tuple[str, str | None]:
        """(function qualname as in the facts, class name) for the code at ``node``."""
        # Asked for most calls by several rules (kinds, callee properties): the answer is
        # that of the innermost def or class around ``node``, computed once per such node.
        parents = self._index.parents
        a = parents.get(id(node))
        while a is not None and not isinstance(a, _SCOPE_NODES):
            a = parents.get(id(a))
        if a is None:
            return _MODULE_SCOPE
        key = id(a)
        found = self._scopes.get(key)
        if found is None:
            found = self._scopes[key] = self._scope_from(a)
        return found

    def _scope_from(self, a: ast.AST | None) -> tuple[str, str | None]:
        """The :meth:`scope` of the code directly in ``a`` (a def or class)."""
        names: list[str] = []
        cls: str | None = None
        parents = self._index.parents
        while a is not None:
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.append(a.name)
            elif isinstance(a, ast.ClassDef):
                cls = a.name
                names.append(a.name)
                break
            a = parents.get(id(a))
        if cls is None and self.member_of is not None and names:
            cls = self.member_of
            names.append(cls)
        names.reverse()
        return ".".join(names), cls

    # -- facts ---------------------------------------------------------------------------------

    def qualname(self, expr: ast.AST) -> str | None:
        return self.facts.qualname(expr)

    def call_qualname(self, call: ast.Call) -> str | None:
        # Asked for the same calls by many rules: resolve each once per analysis.
        key = id(call)
        try:
            return self._qualnames[key]
        except KeyError:
            value = self._qualnames[key] = self.facts.qualname(call.func)
            return value

    def kind(self, expr: ast.AST, at: ast.AST | None = None) -> str | None:
        """What ``expr`` (``model``, ``self.scaler``) holds where it is used."""
        path = path_of(expr)
        if path is None:
            return None
        scope, cls = self.scope(at if at is not None else expr)
        return self.facts.kind(path, scope, cls)

    def names_of_kind(self, kind: str, at: ast.AST) -> list[str]:
        scope, cls = self.scope(at)
        return self.facts.names_of_kind(kind, scope, cls)

    def callee_props(self, call: ast.Call, at: ast.AST | None = None) -> frozenset[str]:
        """Properties of the same-file function a call reaches (``helper()``, ``self.m()``)."""
        # Several rules ask for every call of the chunk (DDP103's events, DDP302, DDP501,
        # DDP506): resolve each (call, at) once per analysis. The facts view recorded the
        # entries read on the first lookup, and the chunk's tree does not change meanwhile.
        key = ("callee_props", id(call), id(at) if at is not None else None)
        memo = self._memo
        found = memo.get(key)
        if found is None:
            name = dotted(call.func)
            if name is None:
                found = frozenset()
            elif not name.startswith("self."):
                # The class matters only for `self.m()` (facts key it `C.m`): no scope walk.
                found = self.facts.callee_props(name, None)
            else:
                _, cls = self.scope(at if at is not None else call)
                found = self.facts.callee_props(name, cls)
            memo[key] = found
        return found  # type: ignore[return-value]

    def callee_gating(self, call: ast.Call, at: ast.AST | None = None) -> Gating | None:
        """The parameter values that switch off the collectives of the function a call reaches
        (:mod:`ddp_lsp.core.gates`); None when none do."""
        from ddp_lsp.core.names import dotted

        name = dotted(call.func)
        if name is None:
            return None
        if not name.startswith("self."):
            return self.facts.callee_gating(name, None)
        _, cls = self.scope(at if at is not None else call)
        return self.facts.callee_gating(name, cls)

    # -- facts from other files of the project ---------------------------------------------------

    def kind_source(self, expr: ast.AST | str, at: ast.AST | None = None) -> ParamKind | None:
        """Where ``expr``'s kind (``expr``: a node, or a path such as ``"self.sampler"``) came
        from, when another file gave it (``main.py`` passes a DDP model to this function);
        None when the module knows it from its own code (and always without a project)."""
        path = expr if isinstance(expr, str) else path_of(expr)
        if path is None:
            return None
        where = at if at is not None else expr
        assert isinstance(where, ast.AST), "a path needs `at`"
        scope, cls = self.scope(where)
        return self.facts.kind_origin(path, scope, cls)

    def callee_source(
        self, call: ast.Call, prop: str, at: ast.AST | None = None
    ) -> Provenance | None:
        """Where the function ``call`` reaches has ``prop``, when it is defined in another file."""
        name = dotted(call.func)
        if name is None:
            return None
        _, cls = self.scope(at if at is not None else call)
        return self.facts.callee_origin(name, cls, prop)

    def cite(self, *sources: ParamKind | Provenance | None) -> tuple[str, tuple[Related, ...]]:
        """A message suffix and related locations for facts from other files:
        ``" (model is wrapped in DistributedDataParallel at main.py:12)"``, with the wrap and
        each call that carried it as related locations. ``("", ())`` when there is none."""
        texts: list[str] = []
        related: list[Related] = []
        for src in sources:
            # A source exists only with a project; read it only then (not "is there a project").
            project = None if src is None else self.facts.project
            if src is None or project is None:
                continue
            if isinstance(src, ParamKind):
                text = str(src.origin)
                if src.mixed:
                    text += "; some callers pass one that is not"
                places = (src.origin, *src.via)
            else:
                text = str(src)
                places = (src,)
            if text not in texts:
                texts.append(text)
            for p in places:
                at = Pos(max(p.line - 1, 0), 0)
                related.append(Related(Span(at, at), p.message, project.absolute(p.path)))
        if not texts:
            return "", ()
        return f" ({'; '.join(texts)})", tuple(related)

    def runs_only_on_rank0(self, node: ast.AST) -> bool:
        """``node`` runs on rank 0 only (global or local): under a rank-0 guard, after an
        ``if rank != 0: return``, in a rank-zero decorated function or one only called under a
        guard (the uniformity analysis, :mod:`ddp_lsp.core.uniformity`)."""
        from ddp_lsp.core.uniformity import uniformity

        return uniformity(self).ranks_of(node).zero

    def memo(self, key: object, compute: Callable[[], U]) -> U:
        """A per-analysis cache for rules (keyed by anything hashable, e.g. (rule id, id(node)))."""
        if key in self._memo:
            return self._memo[key]  # type: ignore[return-value]
        value = compute()
        self._memo[key] = value
        return value

    def release(self) -> None:
        """Forget what the rules memoised: the engine calls it when the chunk's rules are done.
        The chunk's uniformity analysis (memoised here) refers back to this context, and the
        pair, with the traversal and the facts view it holds, would otherwise wait for a cycle
        collection; the server freezes its heap after each analysis, so they waited for good
        (17 MB after a 20,000-line file's first analysis: docs/performance.md, "Memory")."""
        self._memo.clear()
        self._qualnames.clear()
        self._scopes.clear()
        self._calls_by_qualname = None

    def single_process_scopes(self) -> frozenset[str]:
        """The functions of this module the project finds single-process (not distributed
        code: project/reach.py); empty when analysed alone or when the project says nothing."""
        return self.facts.single_process_functions()

    def in_single_process(self, span: Span) -> bool:
        """The code at ``span`` (chunk lines) is in a function the project finds
        single-process; the innermost function holding its first line decides."""
        scopes = self.single_process_scopes()
        if not scopes:
            return False

        def table() -> list[tuple[int, int, str]]:
            out = []
            fns: list[FunctionNode] = self.nodes(ast.FunctionDef, ast.AsyncFunctionDef)
            for fn in fns:
                first = fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno
                qual = self.scope(fn.body[0])[0]
                last = fn.end_lineno or fn.lineno
                out.append(
                    (
                        chunktext.rel_line(self.chunk, first),
                        chunktext.rel_line(self.chunk, last),
                        qual,
                    )
                )
            return out

        def main_blocks() -> list[tuple[int, int]]:
            return [
                (
                    chunktext.rel_line(self.chunk, s.lineno),
                    chunktext.rel_line(self.chunk, s.end_lineno or s.lineno),
                )
                for s in self.body
                if isinstance(s, ast.If) and _is_main_guard(s.test)
            ]

        line = span.start.line
        best: tuple[int, int, str] | None = None
        for entry in self.memo(("single-process table",), table):
            if entry[0] <= line <= entry[1] and (best is None or entry[0] >= best[0]):
                best = entry
        if best is not None:
            return best[2] in scopes
        if any(a <= line <= b for a, b in self.memo(("main blocks",), main_blocks)):
            return MAIN_BLOCK in scopes
        return MODULE in scopes

    # -- findings ------------------------------------------------------------------------------

    def finding(
        self,
        rule: Rule,
        where: ast.AST | Span,
        message: str,
        fixes: Sequence[Fix] = (),
        related: Sequence[Related] = (),
        cite: Sequence[ParamKind | Provenance | None] = (),
    ) -> Finding:
        """``cite``: facts the finding rests on that other files gave (``kind_source``,
        ``callee_source``); the message says where they came from, related locations point
        there."""
        span = where if isinstance(where, Span) else chunktext.span(self.chunk, where)
        if cite:
            suffix, elsewhere = self.cite(*cite)
            message += suffix
            related = (*related, *elsewhere)
        return Finding(
            rule_id=rule.meta.id,
            span=span,
            message=message,
            severity=rule.meta.severity,
            fixes=tuple(fixes),
            related=tuple(related),
            tags=rule.meta.tags,
            name=rule.meta.name,
        )


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
    ):
        return False
    sides = (test.left, test.comparators[0])
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and any(
        isinstance(x, ast.Constant) and x.value == "__main__" for x in sides
    )


class Rule:
    """Base class of every rule: ``meta``, a docstring with the fixed headings, ``check``."""

    meta: ClassVar[RuleMeta]
    cases: ClassVar[Sequence[Valid | Invalid]] = ()

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        raise NotImplementedError

    def triggers(self, ctx: ChunkContext) -> frozenset[str] | None:
        """Words one of which a chunk must contain for ``check`` to find anything there; the
        engine skips the chunk otherwise (:mod:`ddp_lsp.core.triggers`). None: always run."""
        return None
