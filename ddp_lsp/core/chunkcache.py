"""What the engine keeps on a parsed chunk between analyses, typed.

A :class:`~ddp_lsp.core.document.ParsedChunk` is shared while its text is equal (see
:mod:`ddp_lsp.core.document`); its :class:`ChunkCache` holds what the engine derived from it:

- ``results``: the rules' findings per :class:`AnalysisKey` (rank model, environment, rules),
  each a :class:`ChunkResult` with the module-fact entries the rules read (red-green
  invalidation, see :mod:`ddp_lsp.core.engine`); at most :data:`KEYS_PER_CHUNK` keys;
- ``placed``: the findings of one result moved to the document line the chunk starts at
  (:class:`Placed`), reused while the chunk stays there.

The rules' shared traversal (:class:`~ddp_lsp.core.rule.Index`) is not kept here: each
:class:`~ddp_lsp.core.rule.ChunkContext` builds its own (see docs/performance.md, "Memory").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddp_lsp.core.facts import Entry, ModuleFacts
from ddp_lsp.core.types import Finding, InternalError

# Two analysis keys per chunk: the editor's settings and one other (a CLI run, a code action
# with other settings) without evicting each other; a third clears the chunk's results.
KEYS_PER_CHUNK = 2


class AnalysisKey:
    """The findings-cache key of an analysis, hashed once (every chunk looks it up)."""

    __slots__ = ("parts", "hash")

    def __init__(self, parts: tuple[object, ...]) -> None:
        self.parts = parts
        self.hash = hash(parts)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnalysisKey) and (
            self is other or (self.hash == other.hash and self.parts == other.parts)
        )


class ChunkResult:
    """One chunk's findings under one analysis key, with the fact entries its rules read and
    the module facts they were last checked against (``facts`` moves forward when a newer
    module facts changed none of ``reads``)."""

    __slots__ = ("facts", "reads", "found", "errors")

    def __init__(
        self,
        facts: ModuleFacts,
        reads: frozenset[Entry],
        found: tuple[Finding, ...],
        errors: tuple[InternalError, ...],
    ) -> None:
        self.facts = facts
        self.reads = reads
        self.found = found
        self.errors = errors


@dataclass(frozen=True, eq=False)
class Placed:
    """A result's findings and internal errors moved to the chunk's start line."""

    start: int
    result: ChunkResult
    findings: tuple[Finding, ...]
    errors: tuple[InternalError, ...]


@dataclass(eq=False)
class ChunkCache:
    results: dict[AnalysisKey, ChunkResult] = field(default_factory=dict)
    placed: Placed | None = None

    def result(self, key: AnalysisKey) -> ChunkResult | None:
        return self.results.get(key)

    def store(self, key: AnalysisKey, result: ChunkResult) -> None:
        if key not in self.results and len(self.results) >= KEYS_PER_CHUNK:
            self.results.clear()
        self.results[key] = result


@dataclass(eq=False)
class FinishedFindings:
    """What the engine's last analysis of a document made of each finding it kept (settings
    applied, suppressed or not, line endings of its fixes): ``done`` maps a finding's id to
    (the finding, the finished one or None when suppressed or disabled), valid for
    ``settings`` and ``newline``."""

    settings: object | None = None
    newline: str = "\n"
    done: dict[int, tuple[Finding, Finding | None]] = field(default_factory=dict)
