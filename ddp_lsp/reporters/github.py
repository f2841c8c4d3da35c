"""GitHub Actions workflow commands: one ``::error``/``::warning`` annotation per finding.

``file=`` is relative to the repository root (GitHub matches annotations to the diff by it).
Values are escaped as the runner expects: ``%``, CR and LF everywhere, and ``:`` and ``,``
in properties too, so a message with a colon cannot end the property list early.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from ddp_lsp.core.types import Severity
from ddp_lsp.reporters import FileReport, ReportContext, repo_path, row_col


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def report(reports: Sequence[FileReport], out: TextIO, ctx: ReportContext) -> None:
    for rep in reports:
        path = escape_property(repo_path(rep, ctx.root))
        if rep.error:
            out.write(f"::error file={path},title=ddp-lsp::{escape_data(rep.error)}\n")
        for n in rep.not_analysed:
            text = escape_data(f"not analysed: {n.reason}")
            out.write(
                f"::warning file={path},line={n.line + 1},endLine={n.end_line + 1},"
                f"title=ddp-lsp not-analysed::{text}\n"
            )
        for f in rep.findings:
            kind = "error" if f.severity == Severity.ERROR else "warning"
            row, col = row_col(f.span.start)
            erow, ecol = row_col(f.span.end)
            title = escape_property(f.rule_id)
            text = escape_data(f"{f.message} ({f.rule_id} {f.name})" if f.name else f.message)
            out.write(
                f"::{kind} file={path},line={row},col={col},endLine={erow},"
                f"endColumn={ecol},title={title}::{text}\n"
            )
