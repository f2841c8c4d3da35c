"""The incremental document: text -> chunks -> cached parses and facts.

``Document.apply_edit`` replaces a range of text (0-based line, code-point column) and re-splits
only around it (see :mod:`ddp_lsp.core.chunks`); chunks whose text did not change keep their
parse, their facts and their cached findings. Parsing uses Python's ``ast`` (about ten times
faster than libcst here and with exact positions for free); a chunk that ``ast`` rejects is
checked with libcst, whose grammar follows newer Pythons, so code valid in a newer Python than
the one running the server is skipped instead of reported as a syntax error.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

from ddp_lsp.core import chunks as chunking
from ddp_lsp.core.chunkcache import AnalysisKey, ChunkCache, FinishedFindings
from ddp_lsp.core.crossfile import ModuleProjectFacts
from ddp_lsp.core.factmerge import merge_input
from ddp_lsp.core.facts import EMPTY_FACTS, ChunkFacts, MergeCache, ModuleFacts, extract, merge
from ddp_lsp.core.newsyntax import NEWER_MARKERS, newer_grammar_rejects
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.repair import MEMBER_PREFIX, Repair, _statement_at, repair, set_aside
from ddp_lsp.core.types import Pos

_LINE_SPLIT = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")

# Parsed chunks an edit replaced, kept by text for a later edit that brings the text back: an
# undo, a character typed and deleted again, a half-typed line deleted (the parse, its facts
# and the rules' cached results come back with it). Per document, the newest RECENT_CHUNKS,
# and the newest RECENT_CHUNKS of those that had stood through SETTLED_EDITS edits or more
# (what a function was before a statement was typed into it key by key, which replaces it
# once per key).
RECENT_CHUNKS = 8
SETTLED_EDITS = 8


# New objects (allocations less deallocations) past which leaving a paused collector moves
# them to the oldest generation (a 1,500-line module builds about 100,000; a function re-parsed
# after a keystroke a few thousand).
_PROMOTE_AT = 50_000
# How many times ``gc_paused`` moved a large young generation to the oldest one (which also
# unfreezes a frozen heap): a server that freezes its heap between keystrokes reads it to know
# that the objects left unfrozen are no longer just the last edit's (ddp_lsp/lsp/heap.py).
promotions = 0


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building trees: ast nodes hold no cycles, and with millions
    of them alive each full collection costs more than the parse (measured: 2x on 120k lines)."""
    global promotions
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_count()[0] > _PROMOTE_AT:
                # The young generation now holds every node built meanwhile (a million at
                # 20,000 lines): the next allocation would start a collection scanning them
                # all (0.15 s, twice per first analysis). Freezing and unfreezing moves them
                # to the oldest generation unscanned, as surviving two collections would;
                # their cycles (none in ast trees) wait for the next full collection. Only
                # after building a large tree: a keystroke's re-parse stays below the mark, so
                # the heap the server freezes after each analysis stays frozen then (unfreezing
                # hands it back to the collector until the server's next freeze, a few
                # milliseconds later). `gc.get_freeze_count()` would tell, but it walks the
                # whole frozen heap (0.3 s at 20,000 lines).
                promotions += 1
                gc.freeze()
                gc.unfreeze()
            gc.enable()


# Inside ``quiet_parses``: warnings are ignored already, ``parse_chunk`` does not set that up
# again for each chunk (a document of 1,450 chunks: 1 % of its first parse).
_quiet = False


@contextlib.contextmanager
def quiet_parses() -> Iterator[None]:
    """Ignore warnings (the parser's SyntaxWarning for ``"\\d"`` and friends) over many
    ``parse_chunk`` calls, set up once."""
    global _quiet
    was = _quiet
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _quiet = True
        try:
            yield
        finally:
            _quiet = was


def split_lines(text: str) -> list[str]:
    """Lines with their endings, on ``\\n``, ``\\r\\n`` and ``\\r`` only (as Python and LSP do).

    There is always a last element: ``""`` when the text ends with a line break.
    """
    if "\r" not in text:  # (most text: a split on "\n" is a fifth of the regular expression's)
        parts = text.split("\n")
        last = parts.pop()
        parts = [line + "\n" for line in parts]
        parts.append(last)
        return parts
    parts = _LINE_SPLIT.split(text)
    return parts if parts else [""]


@dataclass(frozen=True)
class SyntaxProblem:
    line: int  # chunk-relative, 0-based
    col: int  # code points
    message: str


@dataclass(eq=False)
class ParsedChunk:
    """One chunk's parse and everything derived from it alone; shared while its text is equal."""

    text: str
    member_of: str | None
    tree: ast.Module | None
    body: list[ast.stmt]
    line_base: int  # add to (ast lineno - 1) to get the chunk-relative line
    problem: SyntaxProblem | None
    newer_syntax: bool  # ast rejected it but a newer grammar accepts it: not analysed
    facts: ChunkFacts
    # The chunk's lines; of a repaired chunk, the repaired ones (what ``tree`` was parsed from,
    # what the rules read: the half-typed line is the ``pass`` or the closed bracket there).
    lines: list[str]
    # Chunk-relative lines a repair changed to make the chunk parse (see ``repair``): the rules
    # run on the repaired tree, and their findings touching these lines are dropped.
    repaired: frozenset[int] = frozenset()
    # What the engine derived from the chunk (findings per analysis key, findings moved to
    # the chunk's line): see core/chunkcache.py.
    cache: ChunkCache = field(default_factory=ChunkCache)


# Repaired chunks by what they were repaired to: (repaired lines, member_of, lines changed).
RepairMemo = dict[tuple[tuple[str, ...], str | None, frozenset[int]], ParsedChunk]
REPAIRED_CHUNKS = 8


def parse_chunk(
    text: str, member_of: str | None, ranks: RankModel, memo: RepairMemo | None = None
) -> ParsedChunk:
    """``memo``: repaired chunks of earlier texts (a document's, parsed with ``ranks``); a text
    repaired to the same lines as one of them shares its tree, facts and the rules' cached
    results (all functions of the repaired lines), e.g. every key of `if dist.get_rank() == 0`
    typed before its ':' is set aside as the same `pass`."""
    lines = split_lines(text)
    src = MEMBER_PREFIX + text if member_of is not None else text
    line_base = -1 if member_of is not None else 0
    try:
        if _quiet:
            tree = ast.parse(src)  # (warnings already ignored: see quiet_parses)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SyntaxWarning for "\d" and friends
                tree = ast.parse(src)
    except SyntaxError as exc:
        return _broken(text, member_of, lines, line_base, exc, ranks, memo)
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
        problem = SyntaxProblem(0, 0, _problem_message(exc))
        return ParsedChunk(text, member_of, None, [], line_base, problem, False, EMPTY_FACTS, lines)
    body: list[ast.stmt] = tree.body
    if member_of is not None:
        head = tree.body[0]
        assert isinstance(head, ast.If)
        body = head.body
        tree = ast.Module(body=body, type_ignores=[])
    try:
        facts = extract(tree, member_of, ranks)
    except RecursionError:
        facts = EMPTY_FACTS
    return ParsedChunk(text, member_of, tree, body, line_base, None, False, facts, lines)


def _broken(
    text: str,
    member_of: str | None,
    lines: list[str],
    line_base: int,
    exc: SyntaxError,
    ranks: RankModel,
    memo: RepairMemo | None = None,
) -> ParsedChunk:
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul)
        col = nul - (text.rfind("\n", 0, nul) + 1)
        message = "syntax error: source contains a NUL byte"
        newer = False
    else:
        line = max((exc.lineno or 1) - 1 + line_base, 0)
        line = min(line, max(len(lines) - 1, 0))
        col = max((exc.offset or 1) - 1, 0)
        col = min(col, len(lines[line].rstrip("\r\n"))) if lines else 0
        message = _problem_message(exc)
        newer = _may_be_newer_syntax(lines, line) and _newer_grammar_accepts(text, member_of)
    if newer:
        # Valid in a newer Python: not reported, and only the whole statements before it (in
        # a run of module-level statements) are analysed.
        tree = _salvage(lines, line, ranks) if member_of is None else None
        facts = _facts_or_empty(tree, None, ranks)
        body = tree.body if tree is not None else []
        return ParsedChunk(text, member_of, tree, body, line_base, None, True, facts, lines)
    problem = SyntaxProblem(line, col, message)
    fixed = repair(lines, member_of, line_base, exc) if nul < 0 else None
    if fixed is not None:
        got = _repaired(member_of, line_base, fixed, ranks, memo)
        # What the rest of the module learns from the chunk: its broken statements set aside
        # (see core/repair.py), where the repair closed a bracket or added a ':'.
        aside = None if fixed.aside else _aside_facts(lines, member_of, line_base, exc, ranks, memo)
        return ParsedChunk(
            text,
            member_of,
            got.tree,
            got.body,
            line_base,
            problem,
            False,
            got.facts if aside is None else aside,
            got.lines,
            got.repaired,
            got.cache,
        )
    # No repair found: the statements before the error still count (a run of module-level
    # statements where the user is typing the last one): their facts and findings are kept.
    tree = _salvage(lines, line, ranks) if member_of is None else None
    facts = _facts_or_empty(tree, None, ranks)
    body = tree.body if tree is not None else []
    return ParsedChunk(text, member_of, tree, body, line_base, problem, False, facts, lines)


def _repaired(
    member_of: str | None,
    line_base: int,
    fixed: Repair,
    ranks: RankModel,
    memo: RepairMemo | None,
) -> ParsedChunk:
    """The chunk as ``fixed`` repaired it: from ``memo`` when an earlier text was repaired to
    the same lines (its tree, facts and the rules' cached results), else built and kept there."""
    key = (fixed.source, member_of, fixed.lines)
    hit = memo.pop(key, None) if memo is not None else None
    if memo is not None and hit is not None:
        memo[key] = hit  # the newest again
        return hit
    tree = fixed.tree
    if member_of is not None:
        head = tree.body[0]
        assert isinstance(head, ast.If)
        tree = ast.Module(body=head.body, type_ignores=[])
    facts = _facts_or_empty(tree, member_of, ranks)
    got = ParsedChunk(
        "".join(fixed.source),
        member_of,
        tree,
        tree.body,
        line_base,
        None,
        False,
        facts,
        list(fixed.source),
        fixed.lines,
    )
    if memo is not None:
        memo[key] = got
        while len(memo) > REPAIRED_CHUNKS:
            del memo[next(iter(memo))]
    return got


def _aside_facts(
    lines: list[str],
    member_of: str | None,
    line_base: int,
    exc: SyntaxError,
    ranks: RankModel,
    memo: RepairMemo | None,
) -> ChunkFacts | None:
    """The chunk's facts with its broken statements set aside (None where that does not
    parse). Every key of one statement typed on a new line sets aside to the same lines: found
    in ``memo`` without a parse from the second key on."""
    source, changed = set_aside(lines, line_base, exc)
    key = (source, member_of, changed)
    hit = memo.pop(key, None) if memo is not None else None
    if memo is not None and hit is not None:
        memo[key] = hit  # the newest again
        return hit.facts
    aside = repair(lines, member_of, line_base, exc, aside_only=True)
    if aside is None:
        return None
    return _repaired(member_of, line_base, aside, ranks, memo).facts


def _facts_or_empty(tree: ast.Module | None, member_of: str | None, ranks: RankModel) -> ChunkFacts:
    if tree is None:
        return EMPTY_FACTS
    try:
        return extract(tree, member_of, ranks)
    except RecursionError:
        return EMPTY_FACTS


_SALVAGE_TRIES = 8


def _salvage(lines: list[str], error_line: int, ranks: RankModel) -> ast.Module | None:
    """The longest run of whole top-level statements before ``error_line`` that parses."""
    tries = 0
    for k in range(min(error_line, len(lines) - 1), 0, -1):
        head = lines[k]
        if not head[:1].strip() or head.startswith("#"):
            continue  # cut only where a top-level statement starts
        tries += 1
        if tries > _SALVAGE_TRIES:
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return ast.parse("".join(lines[:k]))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return None


def _problem_message(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"syntax error: {exc.msg}"
    if isinstance(exc, ValueError) and "null" in str(exc).lower():
        return "syntax error: source contains NUL bytes"
    if isinstance(exc, (RecursionError, MemoryError)):
        return "syntax error: too deeply nested to parse"
    return f"syntax error: {exc}"


_MAX_FALLBACK_DEPTH = 64


def _may_be_newer_syntax(lines: list[str], error_line: int) -> bool:
    """The statement with the error holds a construct of a newer grammar. Most syntax errors
    are half-typed statements with none; asking libcst costs its import (0.2 s) and a parse."""
    if not lines:
        return False
    first, end = _statement_at(lines, error_line)
    return NEWER_MARKERS.search("".join(lines[first:end])) is not None


def _newer_grammar_accepts(text: str, member_of: str | None) -> bool:
    # libcst's native parser overflows its stack (a segfault, not an exception) on absurdly
    # nested brackets; real code never nests this deep, so do not ask it.
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in ")]}" and depth:
            depth -= 1
    if deepest > _MAX_FALLBACK_DEPTH:
        return False
    src = text if member_of is None else MEMBER_PREFIX + text
    if newer_grammar_rejects(src):
        return False  # a half-typed f-string: no grammar accepts it (core/newsyntax.py)
    import libcst  # imported on first broken chunk only: it costs ~0.1 s to import

    try:
        libcst.parse_module(src)
    except Exception:  # libcst raises ParserSyntaxError, and others on odd input
        return False
    return True


class Document:
    """A module's text kept as chunks, each with a cached parse; edits re-parse locally."""

    def __init__(self, text: str, ranks: RankModel | None = None) -> None:
        self.ranks = ranks or RankModel()
        self._lines = split_lines(text)
        self._starts = chunking.split(self._lines)
        # Chunks replaced by recent edits, by (text, member_of), oldest first (RECENT_CHUNKS),
        # and those of them that had stood for a while; the edit count at which a chunk now in
        # the document was parsed (chunks of the first parse have none: they count as old).
        self._recent: dict[tuple[str, str | None], tuple[ParsedChunk, int]] = {}
        self._settled: dict[tuple[str, str | None], tuple[ParsedChunk, int]] = {}
        self._born: dict[int, int] = {}
        self._edits = 0
        self._repaired: RepairMemo = {}  # see parse_chunk
        with gc_paused(), quiet_parses():
            self._parsed = [self._parse(i, {}) for i in range(len(self._starts))]
        # How many chunks only a newer grammar parses (the engine's not_analysed reads it).
        self.newer_syntax_chunks = sum(pc.newer_syntax for pc in self._parsed)
        self._facts: ModuleFacts | None = None
        self._last_facts: ModuleFacts | None = None
        self._facts_assume: bool | None = None
        self._facts_project: ModuleProjectFacts | None = None
        self._merge_cache = MergeCache()
        self._pairs: list[tuple[int, ParsedChunk]] | None = None
        # The last analysis's findings-cache key: an equal key of a later analysis is replaced
        # by this object, so each chunk's cache lookup is an identity hit (ddp_lsp.core.engine).
        self.analysis_key: object | None = None
        # (rank model, environment, rule tuple, key) of the last analysis: the same three
        # objects give the same key without hashing them again (ddp_lsp.core.engine).
        self.analysis_key_of: tuple[object, object, object, AnalysisKey] | None = None
        self.rules_ran = 0  # chunks whose rules the last analysis ran (tests, benchmarks)
        self.finished = FinishedFindings()  # the engine's last findings, finished (engine._finish)

    # -- reading -------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return "".join(self._lines)

    @property
    def lines(self) -> list[str]:
        return self._lines

    @property
    def line_count(self) -> int:
        return len(self._lines)

    @property
    def newline(self) -> str:
        first = self._lines[0]
        if first.endswith("\r\n"):
            return "\r\n"
        if first.endswith("\r"):
            return "\r"
        return "\n"

    def chunks(self) -> list[tuple[int, ParsedChunk]]:
        """(start line, parsed chunk) in document order (a new list; the pairs are built once
        per edit: every analysis and request of the server walks them)."""
        pairs = self._pairs
        if pairs is None:
            pairs = self._pairs = [
                (cs.line, pc) for cs, pc in zip(self._starts, self._parsed, strict=True)
            ]
        return list(pairs)

    def module_facts(
        self, assume_distributed: bool = False, project: ModuleProjectFacts | None = None
    ) -> ModuleFacts:
        if (
            self._facts is None
            or self._facts_assume != assume_distributed
            or self._facts_project != project
        ):
            new = merge(
                (pc.facts for pc in self._parsed), assume_distributed, project, self._merge_cache
            )
            # Keep the old object when nothing changed: every chunk's findings cache is keyed
            # by it, and an identity hit is far cheaper than comparing the keys per chunk.
            if self._last_facts is not None and self._last_facts == new:
                new = self._last_facts
            self._facts = self._last_facts = new
            self._facts_assume = assume_distributed
            self._facts_project = project
        return self._facts

    # -- editing -------------------------------------------------------------------------------

    def set_text(self, text: str) -> None:
        """Replace everything (keeps the parses of chunks whose text is unchanged)."""
        end = Pos(len(self._lines) - 1, len(self._lines[-1]))
        self.apply_edit(Pos(0, 0), end, text)

    def apply_edit(self, start: Pos, end: Pos, text: str) -> None:
        """Replace ``start..end`` (code-point columns; clamped to the text) by ``text``."""
        lines = self._lines
        start = self.clamp(start)
        end = self.clamp(end)
        if end < start:
            start, end = end, start
        l0, l1 = start.line, end.line
        prefix = lines[l0][: start.col]
        if l0 > 0 and lines[l0 - 1].endswith("\r"):
            # A lone CR before the edit could pair with an inserted LF into one CRLF break.
            l0 -= 1
            prefix = lines[l0] + prefix
        new_lines = split_lines(prefix + text + lines[l1][end.col :])
        if l1 < len(lines) - 1:
            # The segment ends with line l1's own break; the "" after it is not a line.
            new_lines.pop()
        lines[l0 : l1 + 1] = new_lines
        delta = len(new_lines) - (l1 - l0 + 1)
        self._reindex(l0, l0 + len(new_lines) - 1, delta)

    def clamp(self, pos: Pos) -> Pos:
        if pos.line < 0:
            return Pos(0, 0)
        if pos.line >= len(self._lines):
            last = len(self._lines) - 1
            return Pos(last, len(self._lines[last]))
        line = self._lines[pos.line]
        body = len(line.rstrip("\r\n"))
        return Pos(pos.line, min(max(pos.col, 0), body))

    def reconfigure(self, ranks: RankModel) -> None:
        """New rank names change facts: re-derive every chunk's facts (parses are reused)."""
        if ranks == self.ranks:
            return
        self.ranks = ranks
        with quiet_parses():
            self._parsed = [parse_chunk(pc.text, pc.member_of, ranks) for pc in self._parsed]
        self.newer_syntax_chunks = sum(pc.newer_syntax for pc in self._parsed)
        self._pairs = None
        self._recent.clear()  # their facts were derived with the old rank names
        self._settled.clear()
        self._born.clear()
        self._repaired.clear()
        self._facts = None

    # -- internals -----------------------------------------------------------------------------

    def _chunk_text(self, i: int, starts: list[chunking.ChunkStart]) -> str:
        lo = starts[i].line
        hi = starts[i + 1].line if i + 1 < len(starts) else len(self._lines)
        return "".join(self._lines[lo:hi])

    def _parse(self, i: int, reuse: dict[tuple[str, str | None], ParsedChunk]) -> ParsedChunk:
        text = self._chunk_text(i, self._starts)
        member_of = self._starts[i].member_of
        key = (text, member_of)
        hit = reuse.get(key)
        if hit is not None:
            return hit
        back = self._recent.get(key) or self._settled.get(key)
        if back is not None:
            self._born[id(back[0])] = back[1]  # as old as when it was replaced
            return back[0]
        return parse_chunk(text, member_of, self.ranks, self._repaired)

    def _reindex(self, first_changed: int, last_changed: int, delta: int) -> None:
        old_parsed = self._parsed
        old_pairs = self._pairs
        r = chunking.resplit(self._lines, self._starts, first_changed, last_changed, delta)
        self._starts = r.starts
        self._pairs = None
        reuse = {(pc.text, pc.member_of): pc for pc in old_parsed[r.lo : r.hi_old]}
        with gc_paused():
            middle = [self._parse(i, reuse) for i in range(r.lo, r.hi_new)]
        old_middle_facts = [pc.facts for pc in old_parsed[r.lo : r.hi_old]]
        self._parsed = old_parsed[: r.lo] + middle + old_parsed[r.hi_old :]
        if old_pairs is not None and delta == 0:
            # No line moved: the chunks around the edit keep their (start, parse) pairs (a
            # rebuild is a tuple per chunk per keystroke, 1,400 at 20,000 lines).
            placed = zip(r.starts[r.lo : r.hi_new], middle, strict=True)
            self._pairs = (
                old_pairs[: r.lo] + [(cs.line, pc) for cs, pc in placed] + old_pairs[r.hi_old :]
            )
        self.newer_syntax_chunks += sum(pc.newer_syntax for pc in middle) - sum(
            pc.newer_syntax for pc in old_parsed[r.lo : r.hi_old]
        )
        self._remember(old_parsed[r.lo : r.hi_old], middle)
        new_middle_facts = [pc.facts for pc in middle]
        if new_middle_facts != old_middle_facts and not self._same_merge(
            old_middle_facts, new_middle_facts
        ):
            self._facts = None

    def _remember(self, replaced: list[ParsedChunk], current: list[ParsedChunk]) -> None:
        """Keep the chunks an edit replaced for an edit that brings their text back."""
        self._edits += 1
        recent, settled, born = self._recent, self._settled, self._born
        kept = {id(pc) for pc in current}
        for pc in replaced:
            if id(pc) in kept:
                continue
            key = (pc.text, pc.member_of)
            birth = born.pop(id(pc), -SETTLED_EDITS)  # of the first parse: old
            tier = settled if self._edits - birth >= SETTLED_EDITS else recent
            tier.pop(key, None)
            tier[key] = (pc, birth)  # newest last
        for pc in current:  # in the document (again): not kept here
            key = (pc.text, pc.member_of)
            recent.pop(key, None)
            settled.pop(key, None)
            born.setdefault(id(pc), self._edits)
        for tier in (recent, settled):
            while len(tier) > RECENT_CHUNKS:
                del tier[next(iter(tier))]

    def _same_merge(self, old: list[ChunkFacts], new: list[ChunkFacts]) -> bool:
        """The chunks' facts changed, but not in anything the module merge reads (see
        :func:`~ddp_lsp.core.factmerge.merge_input`): the module facts stay as they are."""
        facts = self._facts
        if facts is None or len(old) != len(new):
            return False
        aliases, functions = facts.aliases, facts.func_params
        return all(
            a is b or merge_input(a, aliases, functions) == merge_input(b, aliases, functions)
            for a, b in zip(old, new, strict=True)
        )
