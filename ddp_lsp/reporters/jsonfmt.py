"""JSON output in ruff's shape, so tools that read ``ruff check --output-format json`` read it.

A list of objects: ``code``, ``name``, ``message``, ``severity``, ``filename`` (absolute, as
ruff prints it), ``location``/``end_location`` (``{row, column}``, 1-based), ``noqa_row``,
``fix`` (null, or ``{message, applicability, edits: [{content, location, end_location}]}``),
``url``, ``cell`` (always null: no notebooks), and one key ruff does not have: ``related``, the
places that explain a finding (``{message, filename, location, end_location}``; ``filename`` is
another file of the project for cross-file provenance, such as where the model was wrapped in
DistributedDataParallel). Readers of ruff's shape ignore it. Code that was not analysed (a
newer Python grammar than the running one) is an entry with ``code`` null and ``name``
``not-analysed``, the way ruff writes a syntax error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

from ddp_lsp.core.registry import meta_by_id
from ddp_lsp.core.types import Finding, Fix, NotAnalysed, Pos
from ddp_lsp.reporters import FileReport, ReportContext, related_file, row_col, shown_fix


def _loc(pos: Pos) -> dict[str, int]:
    row, col = row_col(pos)
    return {"row": row, "column": col}


def fix_object(fix: Fix | None) -> dict[str, Any] | None:
    if fix is None:
        return None
    return {
        "message": fix.title,
        "applicability": "safe" if fix.safe else "unsafe",
        "edits": [
            {"content": e.text, "location": _loc(e.span.start), "end_location": _loc(e.span.end)}
            for e in fix.edits
        ],
    }


def finding_object(rep: FileReport, f: Finding, unsafe: bool) -> dict[str, Any]:
    meta = meta_by_id(f.rule_id)
    # The fix shown is the one --fix (or --unsafe-fixes) applies; an unsafe-only fix is still
    # shown, marked "unsafe", so editors and bots can offer it.
    fix = shown_fix(f, unsafe) or f.preferred_fix
    return {
        "cell": None,
        "code": f.rule_id,
        "name": f.name or (meta.name if meta else ""),
        "message": f.message,
        "severity": f.severity.label,
        "filename": rep.abspath or rep.path,
        "location": _loc(f.span.start),
        "end_location": _loc(f.span.end),
        "noqa_row": f.span.start.line + 1,
        "fix": fix_object(fix),
        "url": meta.url if meta else None,
        "related": [
            {
                "message": r.message,
                "filename": related_file(rep, r),
                "location": _loc(r.span.start),
                "end_location": _loc(r.span.end),
            }
            for r in f.related
        ],
    }


def not_analysed_object(rep: FileReport, n: NotAnalysed) -> dict[str, Any]:
    """Code that was not analysed, as ruff writes a syntax error: ``code`` null (no rule),
    so readers of ruff's shape see an entry that is not a rule's finding."""
    return {
        "cell": None,
        "code": None,
        "name": "not-analysed",
        "message": f"not analysed: {n.reason}",
        "severity": "warning",
        "filename": rep.abspath or rep.path,
        "location": {"row": n.line + 1, "column": 1},
        "end_location": {"row": n.end_line + 1, "column": 1},
        "noqa_row": None,
        "fix": None,
        "url": None,
        "related": [],
    }


def report(reports: Sequence[FileReport], out: TextIO, ctx: ReportContext) -> None:
    items: list[dict[str, Any]] = []
    for r in reports:
        items.extend(finding_object(r, f, ctx.unsafe_fixes) for f in r.findings)
        items.extend(not_analysed_object(r, n) for n in r.not_analysed)
    json.dump(items, out, indent=2, ensure_ascii=False)
    out.write("\n")
