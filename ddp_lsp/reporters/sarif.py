"""SARIF 2.1.0 for GitHub code scanning (``github/codeql-action/upload-sarif``).

One run; ``tool.driver.rules`` lists every rule (id, name, descriptions, helpUri, default
level, the full documentation as ``help``) and each result points at its rule by ``ruleId``
and ``ruleIndex``. Artifact URIs are relative to the repository root with forward slashes and
``uriBaseId: %SRCROOT%``, which is what code scanning resolves against the checkout. Columns
are code points, declared with ``columnKind`` (SARIF's default would be UTF-16 units).
Files that could not be checked become ``toolExecutionNotifications`` and make the invocation
unsuccessful, so a broken file is visible in the upload, not silently missing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ddp_lsp import __version__
from ddp_lsp.core.registry import all_meta
from ddp_lsp.core.types import DOCS_BASE_URL, Fix, RuleMeta, Severity, Span
from ddp_lsp.reporters import (
    FileReport,
    ReportContext,
    related_path,
    repo_path,
    row_col,
    shown_fix,
)

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = DOCS_BASE_URL.rsplit("/blob/", 1)[0]
_LEVELS = {
    Severity.ERROR: "error",
    Severity.WARNING: "warning",
    Severity.INFORMATION: "note",
    Severity.HINT: "note",
}


def level(sev: Severity) -> str:
    return _LEVELS[sev]


def region(span: Span) -> dict[str, int]:
    row, col = row_col(span.start)
    erow, ecol = row_col(span.end)
    # SARIF's endColumn is exclusive, like our span end; an empty span is an insertion point.
    return {"startLine": row, "startColumn": col, "endLine": erow, "endColumn": ecol}


def rule_descriptor(meta: RuleMeta) -> dict[str, Any]:
    from ddp_lsp import docs

    what = docs.section(meta.id, "What it does") or meta.summary
    markdown = docs.rule_markdown(meta.id) or meta.summary
    return {
        "id": meta.id,
        "name": meta.name,
        "shortDescription": {"text": meta.summary},
        "fullDescription": {"text": " ".join(what.split())},
        "help": {"text": markdown, "markdown": markdown},
        "helpUri": meta.url,
        "defaultConfiguration": {"level": level(meta.severity)},
        "properties": {"tags": ["pytorch", "distributed"], "fix": meta.fix.value},
    }


def _artifact(uri: str) -> dict[str, str]:
    if uri.startswith("/"):
        return {"uri": Path(uri).as_uri()}
    return {"uri": uri, "uriBaseId": "%SRCROOT%"}


def _fix(fix: Fix, uri: str) -> dict[str, Any]:
    return {
        "description": {"text": fix.title},
        "artifactChanges": [
            {
                "artifactLocation": _artifact(uri),
                "replacements": [
                    {"deletedRegion": region(e.span), "insertedContent": {"text": e.text}}
                    for e in fix.edits
                ],
            }
        ],
    }


def sarif_log(reports: Sequence[FileReport], ctx: ReportContext) -> dict[str, Any]:
    metas = all_meta()
    index = {m.id: i for i, m in enumerate(metas)}
    results: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    for rep in reports:
        uri = repo_path(rep, ctx.root)
        if rep.error:
            notifications.append(
                {
                    "level": "error",
                    "message": {"text": f"{rep.path}: {rep.error}"},
                    "locations": [{"physicalLocation": {"artifactLocation": _artifact(uri)}}],
                }
            )
        for n in rep.not_analysed:
            notifications.append(
                {
                    "level": "warning",
                    "message": {"text": f"{rep.path}: not analysed: {n.reason}"},
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": _artifact(uri),
                                "region": {"startLine": n.line + 1, "endLine": n.end_line + 1},
                            }
                        }
                    ],
                }
            )
        for f in rep.findings:
            result: dict[str, Any] = {
                "ruleId": f.rule_id,
                "level": level(f.severity),
                "message": {"text": f.message},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": _artifact(uri),
                            "region": region(f.span),
                        }
                    }
                ],
            }
            if f.rule_id in index:
                result["ruleIndex"] = index[f.rule_id]
            if f.related:
                # Related locations in other files (where the model was wrapped, the helper
                # that performs the collective) use the same base as the result's location.
                result["relatedLocations"] = [
                    {
                        "id": i,
                        "message": {"text": r.message},
                        "physicalLocation": {
                            "artifactLocation": _artifact(related_path(rep, r, ctx.root)),
                            "region": region(r.span),
                        },
                    }
                    for i, r in enumerate(f.related)
                ]
            fix = shown_fix(f, ctx.unsafe_fixes)
            if fix is not None:
                result["fixes"] = [_fix(fix, uri)]
            results.append(result)
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ddp-lsp",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": [rule_descriptor(m) for m in metas],
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": ctx.root.resolve().as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",
                "invocations": [
                    {
                        "executionSuccessful": not notifications,
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "results": results,
            }
        ],
    }


def report(reports: Sequence[FileReport], out: TextIO, ctx: ReportContext) -> None:
    json.dump(sarif_log(reports, ctx), out, indent=2, ensure_ascii=False)
    out.write("\n")
