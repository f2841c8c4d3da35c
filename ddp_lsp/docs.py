"""Rule documentation, generated from the rule modules' docstrings.

The same text is printed by ``ddp-lsp explain``, shown on hover in the editor and written to
``docs/rules/`` (``python -m ddp_lsp.docs``), so documentation and behaviour cannot drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddp_lsp.core.registry import SYNTAX_ERROR, all_rules, meta_by_id
from ddp_lsp.core.types import RuleMeta

_SYNTAX_DOC = """DDP000 syntax-error.

## What it does
Reports code that does not parse, at the position of the error.

## Why is this bad?
Nothing in the broken function, class or statement run can be checked until it parses. The
rest of the file is still analysed: ddp-lsp splits a module into chunks and only the chunk
with the error loses its findings.

## Fix
Fix the syntax. Code that is valid in a newer Python than the one running ddp-lsp is skipped,
not reported.
"""


def _docstring(meta: RuleMeta) -> str:
    if meta.id == SYNTAX_ERROR.id:
        return _SYNTAX_DOC
    for rule in all_rules():
        if rule.meta.id == meta.id:
            return sys.modules[type(rule).__module__].__doc__ or ""
    return ""


def rule_markdown(rule_id: str, heading: bool = True) -> str | None:
    """The rule's documentation as Markdown (None for an unknown id or name)."""
    meta = meta_by_id(rule_id)
    if meta is None:
        return None
    doc = _docstring(meta).strip()
    body = doc.split("\n", 1)[1].strip() if "\n" in doc else ""
    fixable = {"none": "no", "sometimes": "sometimes", "always": "yes"}[meta.fix.value]
    head = f"# {meta.id} {meta.name}\n\n" if heading else ""
    facts = f"*Default severity:* {meta.severity.label} · *Fix available:* {fixable}"
    if not meta.default_on:
        facts += f" · *Off by default:* runs where `select` names `{meta.id}`"
    facts += "\n\n"
    return f"{head}{meta.summary}\n\n{facts}{body}\n"


def section(rule_id: str, title: str) -> str:
    """One section (``What it does``, ``Fix``...) of a rule's documentation, or ''."""
    text = rule_markdown(rule_id, heading=False) or ""
    marker = f"## {title}\n"
    if marker not in text:
        return ""
    rest = text.split(marker, 1)[1]
    return rest.split("\n## ", 1)[0].strip()


def index_markdown() -> str:
    lines = [
        "# Rules",
        "",
        "Generated from the rule modules by `python -m ddp_lsp.docs`; do not edit by hand.",
        "",
        "| id | name | severity | fix | summary |",
        "| --- | --- | --- | --- | --- |",
    ]
    metas = [SYNTAX_ERROR, *(r.meta for r in all_rules())]
    for m in metas:
        summary = m.summary if m.default_on else f"*Off by default.* {m.summary}"
        lines.append(
            f"| [{m.id}]({m.id}.md) | {m.name} | {m.severity.label} | {m.fix.value} | {summary} |"
        )
    return "\n".join(lines) + "\n"


def write_docs(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for meta in (SYNTAX_ERROR, *(r.meta for r in all_rules())):
        path = directory / f"{meta.id}.md"
        path.write_text(rule_markdown(meta.id) or "", encoding="utf-8")
        written.append(path)
    index = directory / "README.md"
    index.write_text(index_markdown(), encoding="utf-8")
    written.append(index)
    return written


if __name__ == "__main__":
    target = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "docs" / "rules"
    )
    for p in write_docs(target):
        print(p)
