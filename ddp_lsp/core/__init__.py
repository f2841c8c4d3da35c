"""The analysis core: pure functions over text (stdlib + libcst only; never pygls or torch)."""

from __future__ import annotations

from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.types import AnalysisResult, Edit, Finding, Fix, Pos, Related, RuleMeta, Severity, Span

__all__ = [
    "AnalysisResult",
    "Document",
    "Edit",
    "Finding",
    "Fix",
    "Pos",
    "Related",
    "RuleMeta",
    "Severity",
    "Span",
    "analyze",
    "fix_text",
]
