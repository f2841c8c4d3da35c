"""Output formats of ``ddp-lsp check``: text, json (ruff's shape), sarif (2.1.0), github.

``ddp-lsp check`` (:mod:`ddp_lsp.cli.check`) turns every file into a :class:`FileReport`; a
reporter turns the reports into text on a stream. Reporters never read files or run rules,
so each can be tested on hand-built reports. Positions in the core are 0-based lines and
code-point columns; every format here prints 1-based rows and columns, as ruff and SARIF
(``unicodeCodePoints``) do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TextIO

from ddp_lsp.core.types import Finding, Fix, InternalError, NotAnalysed, Pos, Related

FORMATS = ("text", "json", "sarif", "github")


@dataclass(frozen=True)
class FixCounts:
    """How ``--fix`` (or ``--diff``) relates to the "N fixable" that ``check`` printed:
    ``fixable`` findings had a fix in the file as given; of the fixes applied, ``late`` were for
    findings that appeared only after other fixes; of the fixable ones, ``absorbed`` went away
    with the fixes of others, ``left`` are still there (their edits overlap, or change nothing).
    So: fixed = fixable - absorbed - left + late."""

    fixable: int = 0
    late: int = 0
    absorbed: int = 0
    left: int = 0


@dataclass(frozen=True)
class FileReport:
    """What checking one file produced."""

    path: str  # as shown to the user: relative to the working directory when it is under it
    abspath: str | None  # None for stdin without --stdin-filename
    findings: tuple[Finding, ...] = ()
    internal: tuple[InternalError, ...] = ()  # rules that raised (printed with --verbose)
    error: str | None = None  # the file could not be read, decoded, analysed or written
    fixed: int = 0  # fixes applied (--fix) or that would be applied (--diff)
    diff: str = ""  # --diff: the unified diff of the fixes
    # Code that was not analysed (a newer Python grammar than the running one): the check of
    # this file is incomplete, and every format says so.
    not_analysed: tuple[NotAnalysed, ...] = ()
    fix_counts: FixCounts | None = None  # --fix / --diff: see FixCounts


@dataclass(frozen=True)
class ReportContext:
    """What a reporter needs besides the reports."""

    root: Path  # the repository root: SARIF and GitHub paths are relative to it
    fix_mode: bool = False  # fixes were applied; findings are the ones left
    unsafe_fixes: bool = False
    quiet: bool = False


def fixed_line(reports: Sequence[FileReport], verb: str = "Fixed") -> str:
    """``Fixed N findings.``, with why N differs from the fixable count ``check`` printed."""
    fixed = sum(r.fixed for r in reports)
    counts = [r.fix_counts for r in reports if r.fix_counts is not None]
    fixable = sum(c.fixable for c in counts)
    late = sum(c.late for c in counts)
    absorbed = sum(c.absorbed for c in counts)
    left = sum(c.left for c in counts)
    head = f"{verb} {fixed} finding{'' if fixed == 1 else 's'}"
    if not counts or (fixed == fixable and not (late or absorbed or left)):
        return head + "."
    why = []
    if absorbed:
        why.append(f"{absorbed} went away with the fixes of others")
    if left:
        why.append(
            f"{left} could not be applied (overlapping or empty edits; "
            f"{'it is' if left == 1 else 'they are'} reported below)"
        )
    if late:
        why.append(
            f"{late} more appeared only after other fixes and {'was' if late == 1 else 'were'}"
            " fixed too"
        )
    was = "was" if fixable == 1 else "were"
    return f"{head} ({fixable} {was} fixable: {'; '.join(why)})."


def row_col(pos: Pos) -> tuple[int, int]:
    """1-based (row, column) from a 0-based line and code-point column."""
    return pos.line + 1, pos.col + 1


def shown_fix(finding: Finding, unsafe: bool) -> Fix | None:
    """The fix ``--fix`` would apply (safe), or with ``--unsafe-fixes`` the preferred one."""
    return finding.preferred_fix if unsafe else finding.safe_fix


def repo_path(report: FileReport, root: Path) -> str:
    """The file's path relative to the repository root with forward slashes (absolute if
    the file is outside it); what SARIF uploads and GitHub annotations must use."""
    if report.abspath is None:
        return PurePosixPath(report.path.replace("\\", "/")).as_posix()
    path = Path(report.abspath)
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def related_path(report: FileReport, related: Related, root: Path) -> str:
    """Where a related location is, as :func:`repo_path` writes the finding's own file: a
    location in the same file (``path`` None) is in the report's file, one in another file of
    the project (cross-file provenance: "wrapped in DistributedDataParallel at main.py:12")
    carries that file's absolute path."""
    if related.path is None:
        return repo_path(report, root)
    path = Path(related.path)
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def related_file(report: FileReport, related: Related) -> str:
    """The related location's file as JSON names files: absolute (or stdin's name)."""
    if related.path is None:
        return report.abspath or report.path
    return related.path


Reporter = Callable[[Sequence[FileReport], TextIO, ReportContext], None]


def get(name: str) -> Reporter:
    """The reporter for a format name (imported on demand: sarif pulls in the rule docs)."""
    if name == "text":
        from ddp_lsp.reporters.text import report
    elif name == "json":
        from ddp_lsp.reporters.jsonfmt import report
    elif name == "sarif":
        from ddp_lsp.reporters.sarif import report
    elif name == "github":
        from ddp_lsp.reporters.github import report
    else:
        raise ValueError(f"unknown format {name!r}; expected one of {', '.join(FORMATS)}")
    return report
