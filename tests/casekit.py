"""Helpers to run a rule's own VALID / INVALID cases (used by tests/rules)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.rule import Invalid, Rule
from ddp_lsp.core.settings import Settings
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


def findings(rule: Rule, code: str, distributed: bool = True, env: object = None) -> list[Finding]:
    result = analyze(code, settings_for(rule, distributed), env)  # type: ignore[arg-type]
    assert not result.errors, result.errors
    return [f for f in result.findings if f.rule_id == rule.meta.id]


def check_invalid(rule: Rule, case: Invalid) -> None:
    m = unmark(case.code)
    found = findings(rule, m.code, case.distributed, case.env)
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
    after = findings(rule, fixed, case.distributed, case.env)
    assert len(after) < len(found), "the fix did not remove its finding"
    assert not any(
        a.span.start.line == target.span.start.line and a.message == target.message
        for a in after
        if len(found) == 1
    )
    # Idempotent: fixing the fixed text again changes nothing this rule owns.
    again, _ = fix_text(fixed, settings_for(rule, case.distributed), unsafe=True, env=case.env)  # type: ignore[arg-type]
    if len(after) == 0:
        assert again == fixed, "fix-all changed already fixed text"


def golden_findings(
    path: Path, settings: Settings | None = None, env: object = None
) -> list[dict[str, object]]:
    """The findings for a fixture file in a stable, reviewable JSON shape (1-based rows)."""
    text = path.read_text(encoding="utf-8")
    result = analyze(text, settings or Settings(), env)  # type: ignore[arg-type]
    assert not result.errors, result.errors
    return [
        {
            "code": f.rule_id,
            "row": f.span.start.line + 1,
            "column": f.span.start.col + 1,
            "end_row": f.span.end.line + 1,
            "end_column": f.span.end.col + 1,
            "message": f.message,
            "fixes": [fx.title for fx in f.fixes],
        }
        for f in result.findings
    ]


def check_golden(
    path: Path, update: bool, settings: Settings | None = None, env: object = None
) -> None:
    """Compare a fixture's findings with ``<fixture>.expected.json`` (rewrite with --update-goldens)."""
    import json

    expected_path = path.with_suffix(".expected.json")
    got = golden_findings(path, settings, env)
    if update or not expected_path.exists():
        expected_path.write_text(
            json.dumps(got, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        if not update:
            raise AssertionError(f"{expected_path} did not exist; written now, review and rerun")
    expected = json.loads(expected_path.read_text(encoding="utf-8"))
    assert got == expected, (
        f"findings differ from {expected_path.name}; rerun with --update-goldens if intended"
    )
