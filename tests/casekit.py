"""Helpers to run a rule's own VALID / INVALID cases (used by tests/rules)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddp_lsp.config import Settings
from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.rule import Invalid, Rule
from ddp_lsp.core.types import Finding, Pos

OPEN, CLOSE = "«", "»"


@dataclass(frozen=True)
class Marked:
    code: str
    spans: list[tuple[Pos, Pos]]


def unmark(marked: str) -> Marked:
    """Strip «» markers; return the code and each marked span (0-based line, code points)."""
    out: list[str] = []
    spans: list[tuple[Pos, Pos]] = []
    stack: list[Pos] = []
    line = col = 0
    for ch in marked:
        if ch == OPEN:
            stack.append(Pos(line, col))
            continue
        if ch == CLOSE:
            spans.append((stack.pop(), Pos(line, col)))
            continue
        out.append(ch)
        if ch == "\n":
            line += 1
            col = 0
        else:
            col += 1
    assert not stack, "unbalanced « »"
    return Marked("".join(out), sorted(spans))


def settings_for(rule: Rule, distributed: bool) -> Settings:
    return Settings(select=(rule.meta.id,), assume_distributed=distributed)


def findings(rule: Rule, code: str, distributed: bool = True) -> list[Finding]:
    result = analyze(code, settings_for(rule, distributed))
    assert not result.errors, result.errors
    return [f for f in result.findings if f.rule_id == rule.meta.id]


def check_invalid(rule: Rule, case: Invalid) -> None:
    m = unmark(case.code)
    found = findings(rule, m.code, case.distributed)
    got = sorted((f.span.start, f.span.end) for f in found)
    assert got == m.spans, f"expected spans {m.spans}, got {got}: {[f.message for f in found]}"
    for f in found:
        assert f.message and f.rule_id == rule.meta.id
    if case.fixed is None:
        if case.fix_title is None:
            assert all(not f.fixes for f in found), "case says no fix, but the rule offers one"
        return
    target = found[0]
    if case.fix_title is not None:
        fix = next(x for x in target.fixes if case.fix_title in x.title)
    else:
        fix = target.preferred_fix
    assert fix is not None, "case expects a fix, the rule offers none"
    fixed = apply_edits(m.code, fix.edits)
    assert fixed == case.fixed, f"fixed text differs:\n{fixed}"
    ast.parse(fixed)
    after = findings(rule, fixed, case.distributed)
    assert len(after) < len(found), "the fix did not remove its finding"
    assert not any(a.span.start.line == target.span.start.line and a.message == target.message
                   for a in after if len(found) == 1)
    # Idempotent: fixing the fixed text again changes nothing this rule owns.
    again, _ = fix_text(fixed, settings_for(rule, case.distributed), unsafe=True)
    if len(after) == 0:
        assert again == fixed, "fix-all changed already fixed text"
