"""``ddp-lsp check`` and ``ddp-lsp fix``: find the files, analyse them, report (and fix).

``check`` finds Python files (directories are walked, excludes applied), reads each one the
way Python would (PEP 263 coding cookie, BOM), analyses it, and reports in one of the formats
of :mod:`ddp_lsp.reporters`. ``--fix`` writes the fixes into the file itself (same inode:
mode, owner and hard links kept; read-only files refused) in its own encoding, BOM and line
endings, the new text staged and flushed first so that a failed write loses nothing
(:func:`ddp_lsp.sources.write_in_place`); ``--diff`` shows them instead.

One file that cannot be read, decoded or written is reported on stderr and the others are
still checked; the exit status is then 2 (the check is incomplete), else 1 when findings
remain and 0 when none do. Many files are analysed in a process pool (:mod:`ddp_lsp.cli.jobs`);
few or small inputs run in this process, where the pool's start-up would cost more than it
saves.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ddp_lsp.cli.collect import (
    collect_jobs,
    machine_facts,
    repo_root,
    with_environment,
    with_project,
)
from ddp_lsp.cli.common import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, Parser, UsageError, guarded
from ddp_lsp.cli.jobs import run_jobs
from ddp_lsp.cli.settings import SettingsResolver
from ddp_lsp.pools import worker_init
from ddp_lsp.reporters import FORMATS, FileReport, ReportContext


def main(argv: Sequence[str]) -> int:
    """``ddp-lsp check``."""
    return guarded(lambda a, out, err: run_check("check", a, out, err), argv)


def fix_main(argv: Sequence[str]) -> int:
    """``ddp-lsp fix``: ``check --fix``."""
    return guarded(lambda a, out, err: run_check("fix", a, out, err), argv)


def _split_codes(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [c.strip() for v in values for c in v.split(",") if c.strip()]


def check_parser(command: str) -> argparse.ArgumentParser:
    p = Parser(
        prog=f"ddp-lsp {command}",
        description=(
            "Apply the safe fixes to the files (same as: ddp-lsp check --fix)."
            if command == "fix"
            else "Check Python files for distributed-training bugs."
        ),
        epilog="exit status: 0 no findings, 1 findings (or a diff), 2 usage/config/file errors",
    )
    p.add_argument("paths", nargs="*", help="files or directories (default: .); - reads stdin")
    p.add_argument("--format", "--output-format", choices=FORMATS, default="text", dest="format")
    p.add_argument(
        "--select",
        action="append",
        metavar="CODES",
        help="rule ids or prefixes, comma-separated (replaces the config's)",
    )
    p.add_argument(
        "--ignore",
        action="append",
        metavar="CODES",
        help="rule ids or prefixes to skip (replaces the config's)",
    )
    p.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="a pyproject.toml to use instead of the nearest one",
    )
    p.add_argument(
        "--fix", action="store_true", default=command == "fix", help="apply safe fixes in place"
    )
    p.add_argument(
        "--unsafe-fixes", action="store_true", help="also apply (and show) fixes that need review"
    )
    p.add_argument(
        "--diff",
        action="store_true",
        help="print the fixes as a unified diff; write nothing; exit 1 if there is one",
    )
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    p.add_argument(
        "--statistics", action="store_true", help="print the number of findings per rule"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="report rules that failed internally, and timings",
    )
    p.add_argument("--stdin-filename", metavar="PATH", help="the name of the file read from stdin")
    p.add_argument(
        "--preflight",
        type=Path,
        metavar="JSON",
        help="a preflight report (ddp-lsp preflight --json FILE) of the machine the job runs on:"
        " rules use its CPU and GPU counts (without one, no machine facts: never this machine's)",
    )
    p.add_argument(
        "--project",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="analyse each file with what the other files of its project say (default: the"
        " config's `project`, else on); --no-project analyses each file alone",
    )
    p.add_argument(
        "--force-exclude",
        action="store_true",
        help="apply excludes to files named on the command line too",
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        metavar="N",
        help="worker processes (default: automatic; 1 = no pool)",
    )
    return p


def run_check(command: str, argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    import time

    args = check_parser(command).parse_args(list(argv))
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"ddp-lsp {command}: --jobs must be at least 1")
    worker_init()
    started = time.perf_counter()
    cwd = Path.cwd()
    overrides: dict[str, object] = {}
    for key in ("select", "ignore"):
        codes = _split_codes(getattr(args, key))
        if codes is not None:
            overrides[key] = codes
    if args.project is not None:  # --project / --no-project win over `project` in the config
        overrides["project"] = args.project
    resolver = SettingsResolver(args.config, overrides, cwd)
    mode = "diff" if args.diff else ("fix" if args.fix else "check")
    jobs, missing = collect_jobs(args, resolver, mode)
    jobs = with_environment(jobs, machine_facts(args.preflight))
    jobs = with_project(jobs, resolver, err, args.verbose, args.jobs)
    if not jobs and not missing:
        err.write("warning: no Python files found under the given paths\n")
    outcomes = run_jobs(jobs, args.jobs)
    reports = sorted(missing + [o.report for o in outcomes], key=lambda r: r.path)

    # Errors about files go to stderr in every format, so stdout stays machine-readable.
    for problem in resolver.problems:
        err.write(f"error: {problem}\n")
    for rep in reports:
        if rep.error:
            err.write(f"error: {rep.path}: {rep.error}\n")
        for skip in rep.not_analysed:
            first, last = skip.line + 1, skip.end_line + 1
            where = f"line {first}" if first == last else f"lines {first}-{last}"
            err.write(f"warning: {rep.path}:{first}: {where} not analysed: {skip.reason}\n")
        if args.verbose:
            for e in rep.internal:
                err.write(
                    f"warning: {rep.path}:{e.line + 1}: rule {e.rule_id} failed internally "
                    f"({e.message}); its findings in this file are missing\n"
                )
    failed = sorted({e.rule_id for rep in reports for e in rep.internal})
    if failed and not args.verbose:
        # Findings are missing where a rule failed; say so once rather than stay silent.
        files = sum(1 for rep in reports if rep.internal)
        err.write(
            f"warning: {', '.join(failed)} failed internally on {files} "
            f"file{'s' if files != 1 else ''} (findings may be missing); "
            "rerun with --verbose for details\n"
        )
    # Code left unanalysed makes the check incomplete, like a file that could not be read: exit
    # 2, so that CI running an older Python than the code's never passes it unexamined.
    errors = bool(resolver.problems) or any(rep.error or rep.not_analysed for rep in reports)
    ctx = ReportContext(
        root=repo_root(cwd),
        fix_mode=mode == "fix",
        unsafe_fixes=args.unsafe_fixes,
        quiet=args.quiet,
    )
    for o in outcomes:
        if o.fixed_text is not None and mode == "fix":
            out.write(o.fixed_text)
    # With stdin --fix the fixed code owns stdout; the findings go to stderr, as ruff does.
    stream = err if any(o.fixed_text is not None for o in outcomes) and mode == "fix" else out

    if mode == "diff":
        diffs = [r.diff for r in reports if r.diff]
        for d in diffs:
            out.write(d)
        if not args.quiet:
            from ddp_lsp.reporters import fixed_line

            n = sum(r.fixed for r in reports if r.diff)
            shown = [r for r in reports if r.diff]
            err.write(f"{fixed_line(shown, 'Would fix')}\n" if n else "No fixes available.\n")
        status = EXIT_ERROR if errors else (EXIT_FINDINGS if diffs else EXIT_OK)
    else:
        if args.statistics:
            _statistics(reports, stream, args.format)
        else:
            from ddp_lsp import reporters

            reporters.get(args.format)(reports, stream, ctx)
        found = any(rep.findings for rep in reports)
        if errors:
            status = EXIT_ERROR
        elif found and not args.exit_zero:
            status = EXIT_FINDINGS
        else:
            status = EXIT_OK
    if args.verbose:
        took = time.perf_counter() - started
        err.write(f"checked {len(jobs)} file(s) in {took:.2f}s\n")
    return status


def _statistics(reports: Sequence[FileReport], out: TextIO, fmt: str) -> None:
    import json

    from ddp_lsp.core.registry import meta_by_id

    counts = Counter(f.rule_id for r in reports for f in r.findings)
    fixable = Counter(f.rule_id for r in reports for f in r.findings if f.safe_fix is not None)
    rows = []
    for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        meta = meta_by_id(code)
        rows.append(
            {"code": code, "name": meta.name if meta else "", "count": n, "fixable": fixable[code]}
        )
    if fmt == "json":
        json.dump(rows, out, indent=2)
        out.write("\n")
        return
    width = max((len(str(r["count"])) for r in rows), default=1)
    for r in rows:
        mark = "[*]" if r["fixable"] else "   "
        out.write(f"{r['count']:>{width}}\t{r['code']}\t{mark} {r['name']}\n")
