"""The human format: ``path:row:col: DDP201 [error] [*] message``, then a summary.

``[*]`` marks findings that ``--fix`` resolves (like ruff). With ``--quiet`` only the finding
lines are printed; errors about files go to stderr in every format (ddp_lsp.cli.check prints them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from ddp_lsp.core.types import Severity
from ddp_lsp.reporters import FileReport, ReportContext, fixed_line, row_col, shown_fix


def finding_lines(reports: Sequence[FileReport], ctx: ReportContext) -> list[str]:
    out: list[str] = []
    for rep in reports:
        for f in rep.findings:
            row, col = row_col(f.span.start)
            mark = "[*] " if shown_fix(f, ctx.unsafe_fixes) is not None else ""
            out.append(
                f"{rep.path}:{row}:{col}: {f.rule_id} [{f.severity.label}] {mark}{f.message}"
            )
    return out


def summary(reports: Sequence[FileReport], ctx: ReportContext) -> list[str]:
    findings = [f for r in reports for f in r.findings]
    fixed = sum(r.fixed for r in reports)
    broken = sum(1 for r in reports if r.error)
    partial = sum(1 for r in reports if r.not_analysed and not r.error)
    lines: list[str] = []
    if broken:
        lines.append(f"{_plural(broken, 'file')} could not be checked (errors above).")
    if partial:
        lines.append(
            f"{_plural(partial, 'file')} not fully analysed: code in a newer Python grammar "
            "than the one running ddp-lsp (warnings above)."
        )
    if fixed or any(r.fix_counts and r.fix_counts.fixable for r in reports):
        lines.append(fixed_line(reports))
    if not findings:
        if not broken and not partial:
            lines.append("All checks passed!" if not fixed else "No findings left.")
        return lines
    by_sev = Counter(f.severity for f in findings)
    parts = [_plural(by_sev[s], s.label) for s in Severity if by_sev[s]]
    what = "remaining" if ctx.fix_mode else ""
    head = f"Found {_plural(len(findings), 'finding')}"
    lines.append(f"{head}{' ' + what if what else ''} ({', '.join(parts)}).")
    fixable = sum(1 for f in findings if f.safe_fix is not None)
    unsafe_only = sum(1 for f in findings if f.safe_fix is None and f.fixes)
    if fixable and not ctx.fix_mode:
        lines.append(f"[*] {fixable} fixable with `ddp-lsp check --fix`.")
    if unsafe_only and not ctx.unsafe_fixes:
        lines.append(f"({unsafe_only} more fixable with `--unsafe-fixes`: review those changes.)")
    return lines


def _plural(n: int, word: str) -> str:
    if word == "information":
        return f"{n} information"
    return f"{n} {word}{'' if n == 1 else 's'}"


def report(reports: Sequence[FileReport], out: TextIO, ctx: ReportContext) -> None:
    for line in finding_lines(reports, ctx):
        out.write(line + "\n")
    if not ctx.quiet:
        for line in summary(reports, ctx):
            out.write(line + "\n")
