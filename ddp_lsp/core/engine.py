"""analyze(source | Document, settings) -> findings.

Per chunk, every enabled rule runs over the chunk's tree with the module facts; the result is
cached on the chunk under (settings, environment, rules) together with the entries of the module
facts the rules read (:class:`ddp_lsp.core.facts.FactsView`). After an edit only the edited
chunk runs its rules; when the edit changed what the module knows (a new import, a new
DDP-wrapped name, a helper that now performs a collective), a chunk re-runs its rules only if
one of the entries it read changed (red-green invalidation, as in salsa), without re-parsing.
A rule that raises is logged with its id and skipped; the others' findings still arrive.
"""

from __future__ import annotations

import ast
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import cast

from ddp_lsp.core import fixes as fix_engine
from ddp_lsp.core import names as known_names
from ddp_lsp.core.chunkcache import AnalysisKey, ChunkResult, Placed
from ddp_lsp.core.crossfile import ModuleProjectFacts
from ddp_lsp.core.document import Document, ParsedChunk, gc_paused
from ddp_lsp.core.env import Environment
from ddp_lsp.core.facts import (
    Entry,
    FactsView,
    ModuleFacts,
    changed_entries,
    recording_ranks,
)
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.registry import SYNTAX_ERROR, all_rules, default_on
from ddp_lsp.core.rule import ChunkContext, Rule
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.suppress import is_suppressed
from ddp_lsp.core.triggers import may_fire
from ddp_lsp.core.types import (
    AnalysisResult,
    Finding,
    Fix,
    InternalError,
    NotAnalysed,
    Pos,
    Span,
)

log = logging.getLogger("ddp_lsp.engine")


def analyze(
    source: str | Document,
    settings: Settings | None = None,
    env: Environment | None = None,
    rules: Sequence[Rule] | None = None,
    project: ModuleProjectFacts | None = None,
    before_line: int | None = None,
) -> AnalysisResult:
    """Findings for a module, sorted by position, suppressions and settings applied.

    ``project``: what the other files of its project say about this module (see
    :mod:`ddp_lsp.project`); None analyses the module alone. ``before_line``: run the rules
    of the chunks that start before this line only (the module facts are the whole module's,
    so those findings are final); the server's first look at a large file (docs/server.md)."""
    settings = settings or Settings()
    ranks = settings.rank_model
    if isinstance(source, Document):
        doc = source
        doc.reconfigure(ranks)
    else:
        doc = Document(source, ranks)
    if rules is None:
        # Disabled rules do not run at all (their findings would be dropped anyway).
        rules = tuple(r for r in all_rules() if settings.enabled(r.meta.id, r.meta.default_on))
    raw: list[Finding] = []
    errors: list[InternalError] = []
    # The merge and the rules allocate many small objects: a cyclic collection triggered
    # among them would scan every AST node of the document (0.4 s at 20,000 lines).
    with gc_paused():
        facts = doc.module_facts(settings.assume_distributed, project)
        if not facts.distributed:
            # Not distributed code: only the rules whose bug is a bug in any PyTorch program
            # run (a graph kept alive, a scaler misuse); the rule tuple is part of the key, so
            # chunks analysed before the module became distributed code run again.
            rules = tuple(r for r in rules if r.meta.any_module)
        rank_model = ranks.with_extra(facts.rank_vars, facts.rank_predicates)
        key = AnalysisKey((ranks, env, tuple(id(r) for r in rules)))
        if key == doc.analysis_key:
            key = cast(AnalysisKey, doc.analysis_key)  # identity hits in every chunk's cache
        doc.analysis_key = key
        doc.rules_ran = _collect(
            doc, facts, settings, rank_model, env, rules, key, raw, errors, before_line
        )
    result = _finish(doc, facts, settings, raw, errors)
    skipped = not_analysed(doc)
    return replace(result, not_analysed=skipped) if skipped else result


def not_analysed(doc: Document) -> tuple[NotAnalysed, ...]:
    """The chunks skipped because only a newer grammar than this interpreter's parses them."""
    out: list[NotAnalysed] = []
    for start, chunk in doc.chunks():
        if chunk.newer_syntax:
            body = [i for i, text in enumerate(chunk.lines) if text.strip()]
            end = start + (body[-1] if body else 0)  # the last line with code on it
            if out and out[-1].end_line + 1 >= start:  # adjacent chunks: one range
                out[-1] = NotAnalysed(out[-1].line, end, out[-1].reason)
            else:
                out.append(NotAnalysed(start, end, NEWER_GRAMMAR))
    return tuple(out)


NEWER_GRAMMAR = (
    f"this code parses only in a newer Python than the {sys.version_info[0]}."
    f"{sys.version_info[1]} running ddp-lsp (e.g. PEP 695 `def f[T]()` or `type X = ...` need "
    "3.12); run ddp-lsp with the Python the code is written for"
)


def _collect(
    doc: Document,
    facts: ModuleFacts,
    settings: Settings,
    rank_model: RankModel,
    env: Environment | None,
    rules: Sequence[Rule],
    key: AnalysisKey,
    raw: list[Finding],
    errors: list[InternalError],
    before_line: int | None = None,
) -> int:
    """Collect every chunk's findings into ``raw`` (those of the chunks starting before
    ``before_line`` when given); return how many chunks ran their rules."""
    changes: dict[int, tuple[ModuleFacts, frozenset[Entry]]] = {}
    reran = 0
    for start, chunk in doc.chunks():
        if before_line is not None and start >= before_line:
            break
        if chunk.problem is not None:
            p = chunk.problem
            raw.append(
                Finding(
                    rule_id=SYNTAX_ERROR.id,
                    span=Span(Pos(start + p.line, p.col), Pos(start + p.line, p.col)),
                    message=p.message,
                    severity=SYNTAX_ERROR.severity,
                    name=SYNTAX_ERROR.name,
                )
            )
            # The statements before the error (if any parsed) are still checked below.
        if chunk.tree is None or not rules:
            continue
        cache = chunk.cache
        cached = cache.results.get(key)
        if cached is not None and cached.facts is not facts:
            # Computed with other module facts: still right if none of what it read changed.
            memo = changes.get(id(cached.facts))
            if memo is None or memo[0] is not cached.facts:
                memo = changes[id(cached.facts)] = (
                    cached.facts,
                    changed_entries(cached.facts, facts),
                )
            if cached.reads.isdisjoint(memo[1]):
                cached.facts = facts
            else:
                cached = None
        if cached is None:
            cached = _run_rules(chunk, facts, settings, rank_model, env, rules)
            cache.store(key, cached)
            reran += 1
        found, errs = cached.found, cached.errors
        if not found and not errs:
            continue
        # Moving a chunk's findings to document lines costs new objects per finding; keep the
        # moved ones while the chunk stays where it was (every chunk above an edit does).
        moved = cache.placed
        if moved is None or moved.start != start or moved.result is not cached:
            moved = cache.placed = Placed(
                start,
                cached,
                tuple(f.shifted(start) for f in found),
                tuple(replace(e, line=e.line + start) for e in errs),
            )
        raw.extend(moved.findings)
        errors.extend(moved.errors)
    return reran


def _finish(
    doc: Document,
    facts: ModuleFacts,
    settings: Settings,
    raw: list[Finding],
    errors: list[InternalError],
) -> AnalysisResult:
    lines = doc.lines
    out: list[Finding] = []
    layout: fix_engine.ImportLayout | None = None
    newline = doc.newline
    # A finding kept from the last analysis (the same object: its chunk's text and line did
    # not change, so neither did the lines its suppression comments are read from) is
    # finished as it was then under the same settings and line ending, unless it carries a
    # fix that adds imports (those read the module facts and the import layout).
    memo = doc.finished
    if memo.settings is not settings or memo.newline != newline:
        memo.settings, memo.newline, memo.done = settings, newline, {}
    done = memo.done
    kept: dict[int, tuple[Finding, Finding | None]] = {}
    # Per rule, not per finding: hundreds of findings come from a few rules.
    enabled: dict[str, bool] = {}
    for f in raw:
        hit = done.get(id(f))
        if hit is not None and hit[0] is f:
            kept[id(f)] = hit
            if hit[1] is not None:
                out.append(hit[1])
            continue
        on = enabled.get(f.rule_id)
        if on is None:
            on = enabled[f.rule_id] = settings.enabled(f.rule_id, default_on(f.rule_id))
        finished: Finding | None = None
        if on and not is_suppressed(f.rule_id, lines, f.span.start.line, f.span.end.line):
            finished = f
            sev = settings.severity_for(f.rule_id, f.severity)
            if sev != f.severity:
                finished = replace(finished, severity=sev)
            if any(fix.imports for fix in f.fixes):
                if layout is None:
                    layout = _import_layout(doc)
                finished = replace(
                    finished,
                    fixes=tuple(_with_imports(fix, facts, layout, newline) for fix in f.fixes),
                )
                if newline != "\n" and finished.fixes:
                    finished = replace(
                        finished, fixes=tuple(_newlines(fix, newline) for fix in finished.fixes)
                    )
                out.append(finished)
                continue  # not kept: it reads the facts
            if newline != "\n" and f.fixes:
                finished = replace(
                    finished, fixes=tuple(_newlines(fix, newline) for fix in f.fixes)
                )
            out.append(finished)
        kept[id(f)] = (f, finished)
    memo.done = kept
    out.sort(key=lambda x: (x.span.start.line, x.span.start.col, x.rule_id))
    return AnalysisResult(tuple(out), tuple(errors))


def _run_rules(
    chunk: ParsedChunk,
    facts: ModuleFacts,
    settings: Settings,
    ranks: RankModel,
    env: Environment | None,
    rules: Sequence[Rule],
) -> ChunkResult:
    view = FactsView(facts)
    # The rank model holds the module's rank variables and predicates: its reads are recorded.
    # The view answers every question ModuleFacts does (duck-typed: rules need no change).
    facts_seen = cast(ModuleFacts, view)
    ctx = ChunkContext(chunk, facts_seen, settings, recording_ranks(ranks, view.reads), env)
    found: list[Finding] = []
    errors: list[InternalError] = []
    for rule in rules:
        try:
            if not may_fire(rule, ctx):
                continue  # none of the words its findings need (core/triggers.py)
            if rule.meta.distributed_only and ctx.single_process_scopes():
                found.extend(f for f in rule.check(ctx) if not ctx.in_single_process(f.span))
                continue
            found.extend(rule.check(ctx))
        except Exception as exc:  # one rule's crash is one rule's loss
            log.exception("rule %s failed", rule.meta.id)
            errors.append(InternalError(rule.meta.id, f"{type(exc).__name__}: {exc}"))
    ctx.release()  # no reference cycle outlives the chunk's rules (see ChunkContext.release)
    if chunk.repaired:
        # The chunk parsed only once its half-typed statement was repaired: what the rules
        # say about that statement is about text the user has not written.
        found = [f for f in found if not _touches(f, chunk.repaired)]
    return ChunkResult(facts, frozenset(view.reads), tuple(found), tuple(errors))


def _touches(f: Finding, lines: frozenset[int]) -> bool:
    spans = [f.span, *(e.span for fix in f.fixes for e in fix.edits)]
    return any(not lines.isdisjoint(range(sp.start.line, sp.end.line + 1)) for sp in spans)


def _import_layout(doc: Document) -> fix_engine.ImportLayout:
    head = []
    for start, chunk in doc.chunks()[:4]:
        head.append((start, chunk.tree, chunk.line_base))
    layout = fix_engine.import_layout(head)
    if layout.end == 0:
        # Never above a shebang, an encoding line or the file's leading comments.
        line, lines = 0, doc.lines
        while line < len(lines) - 1 and lines[line].lstrip().startswith("#"):
            line += 1
        layout = replace(layout, end=line)
    return layout


def _with_imports(
    fix: Fix, facts: ModuleFacts, layout: fix_engine.ImportLayout, newline: str
) -> Fix:
    if not fix.imports:
        return fix

    def present(stmt: str) -> bool:
        try:
            node = ast.parse(stmt).body[0]
        except SyntaxError:
            return False
        assert isinstance(node, (ast.Import, ast.ImportFrom))
        return all(
            facts.aliases.get(name) == qual for name, qual in known_names.import_bindings(node)
        )

    edits = fix_engine.import_edits(fix.imports, present, layout, newline)
    if not edits:
        return replace(fix, imports=())
    return replace(fix, edits=(*fix.edits, *edits))


def _newlines(fix: Fix, newline: str) -> Fix:
    edits = tuple(
        replace(e, text=e.text.replace("\r\n", "\n").replace("\n", newline))
        if "\n" in e.text
        else e
        for e in fix.edits
    )
    return replace(fix, edits=edits)


def fix_text(
    text: str,
    settings: Settings | None = None,
    unsafe: bool = False,
    env: Environment | None = None,
    project: ModuleProjectFacts | None = None,
) -> tuple[str, int]:
    """Apply every safe (or, with ``unsafe``, every preferred) fix; (new text, fixes applied)."""
    settings = settings or Settings()
    doc = Document(text, settings.rank_model)

    def run(current: str) -> Sequence[Finding]:
        doc.set_text(current)
        return analyze(doc, settings, env, project=project).findings

    def choose(f: Finding) -> Fix | None:
        return f.preferred_fix if unsafe else f.safe_fix

    return fix_engine.fix_all(text, run, choose)
