"""Hover: a finding's rule documentation, and preflight facts on the calls they bear on.

On a diagnostic's range the hover shows the finding's message and its rule's documentation
(what it does, why it is bad, the fix), generated from the rule module's docstring like
``ddp-lsp explain``. On a call to ``init_process_group``, ``DistributedDataParallel(...)`` or
``DataLoader(...)`` it shows what the last preflight measured on this machine, when a report
is known for the workspace (see :func:`preflight_topic`; the facts themselves are rendered by
:mod:`ddp_lsp.preflight.report`).
"""

from __future__ import annotations

import ast
from typing import Any

from ddp_lsp.core.types import Pos
from ddp_lsp.lsp.diagnostics import rule_url
from ddp_lsp.lsp.state import Unit

# Qualified names (as the core resolves them) -> the preflight report's hover topic.
_TOPICS = {
    "torch.distributed.init_process_group": "init_process_group",
    "torch.distributed.distributed_c10d.init_process_group": "init_process_group",
    "torch.nn.parallel.DistributedDataParallel": "DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel": "DistributedDataParallel",
    "torch.nn.DataParallel": None,
    "torch.utils.data.DataLoader": "DataLoader",
    "torch.utils.data.dataloader.DataLoader": "DataLoader",
}


def rule_hover(unit: Unit, pos: Pos) -> str | None:
    """Markdown for the findings under ``pos`` (None when there are none)."""
    from ddp_lsp.docs import section

    parts: list[str] = []
    seen: set[str] = set()
    for f in unit.findings:
        if not f.span.contains(pos):
            continue
        text = [f"**{f.rule_id}** `{f.name}`: {f.message}"]
        if f.rule_id not in seen:
            seen.add(f.rule_id)
            for title in ("What it does", "Why is this bad?", "Fix"):
                body = section(f.rule_id, title)
                if body:
                    text.append(f"### {title}\n{body}")
            url = rule_url(f.rule_id)
            if url:
                text.append(f"[{f.rule_id} documentation]({url})")
        parts.append("\n\n".join(text))
    return "\n\n---\n\n".join(parts) if parts else None


def _utf8_to_cp(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "ignore"))


def topic_calls(unit: Unit, line: int | None = None) -> list[tuple[Pos, Pos, str]]:
    """(callee start, callee end, topic) of every call the preflight has facts for.

    ``line`` restricts the search to the chunk holding that line (hover); None scans the whole
    module (code lens). Uses the chunks' cached trees and the module's resolved imports, so
    ``dist.init_process_group`` and ``from torch.distributed import init_process_group as ipg``
    are both found.
    """
    from ddp_lsp.core.document import Document

    if not isinstance(unit.doc, Document):
        return []
    facts = unit.doc.module_facts(unit.settings.assume_distributed)
    lines = unit.doc.lines
    out: list[tuple[Pos, Pos, str]] = []
    for start, chunk in unit.doc.chunks():
        if chunk.tree is None:
            continue
        if line is not None and not start <= line < start + len(chunk.lines):
            continue
        for node in ast.walk(chunk.tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            qual = facts.qualname(func)
            topic = _TOPICS.get(qual) if qual else None
            if not topic:
                continue
            l0 = start + func.lineno - 1 + chunk.line_base
            l1 = start + (func.end_lineno or func.lineno) - 1 + chunk.line_base
            c0 = _utf8_to_cp(lines[l0], func.col_offset)
            c1 = _utf8_to_cp(lines[l1], func.end_col_offset or 0)
            out.append((Pos(l0, c0), Pos(l1, c1), topic))
    out.sort()
    return out


def preflight_topic(unit: Unit, pos: Pos) -> str | None:
    """The preflight topic of the call whose callee is under ``pos``, if any."""
    for a, b, topic in topic_calls(unit, pos.line):
        if a <= pos <= b:
            return topic
    return None


def preflight_hover(report: Any, topic: str) -> str | None:
    from ddp_lsp.preflight.report import facts_markdown

    try:
        return facts_markdown(report, topic)
    except Exception:  # a report from another schema version must not break hover
        return None
