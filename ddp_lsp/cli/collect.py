"""Which files ``ddp-lsp check`` checks, and what each one's analysis knows besides its text.

:func:`collect_jobs` turns the command line's paths into :class:`~ddp_lsp.cli.jobs.Job` s:
directories are walked by :func:`~ddp_lsp.project.discover.discover` (the walk the server and
the project index use too), each directory with the settings of its nearest pyproject.toml;
files named are checked even if excluded, unless ``--force-exclude``. :func:`with_environment`
adds the launch configuration next to each file and the ``--preflight`` machine facts;
:func:`with_project` adds each file's share of its project's cross-file facts
(:func:`~ddp_lsp.project.build.project_view`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from ddp_lsp.cli.common import UsageError, display
from ddp_lsp.cli.common import resolved as _resolved
from ddp_lsp.cli.jobs import Job
from ddp_lsp.cli.settings import SettingsResolver
from ddp_lsp.config import Settings
from ddp_lsp.core.env import Environment, MachineInfo
from ddp_lsp.project.build import fallback_root, project_root, project_view, says_something
from ddp_lsp.project.discover import discover
from ddp_lsp.reporters import FileReport

log = logging.getLogger("ddp_lsp.cli")


def collect_jobs(
    args: argparse.Namespace, resolver: SettingsResolver, mode: str
) -> tuple[list[Job], list[FileReport]]:
    """Jobs for every file to check, and reports for paths that do not exist."""
    cwd = resolver.cwd
    jobs: list[Job] = []
    missing: list[FileReport] = []
    seen: set[str] = set()
    paths = args.paths or ["."]
    for raw in paths:
        if raw == "-":
            name = args.stdin_filename or "-"
            where = (cwd / name).parent if args.stdin_filename else cwd
            settings, root = resolver.for_dir(where if where.is_dir() else cwd)
            if args.stdin_filename and args.force_exclude and _excluded(cwd / name, settings, root):
                continue
            abspath = str((cwd / name).resolve()) if args.stdin_filename else None
            data = sys.stdin.buffer.read()
            jobs.append(
                Job(name, abspath, settings, mode, args.unsafe_fixes, data, anchor=str(cwd))
            )
            continue
        path = Path(raw)
        full = path if path.is_absolute() else cwd / path
        anchor = None
        if full.is_dir():
            files: Iterable[Path] = _walk(full, resolver, missing)
            anchor = _resolved(full)
        elif os.path.lexists(full):  # a symlink loop or a dangling link: read_source says so
            settings, root = resolver.for_dir(full.parent)
            # Files named on the command line are checked even if excluded (as ruff does),
            # unless --force-exclude: pre-commit passes every changed file by name.
            if args.force_exclude and _excluded(full, settings, root):
                continue
            files = [full]
        else:
            missing.append(FileReport(raw, None, error="no such file or directory"))
            continue
        for file in files:
            resolved = _resolved(file)
            key = os.path.normcase(resolved)
            if key in seen:
                continue
            seen.add(key)
            settings, _ = resolver.for_dir(file.parent)
            shown = display(file if path.is_absolute() else Path(os.path.relpath(file, cwd)), cwd)
            if anchor is None:  # a file named: the working directory, if the file is under it
                here = _resolved(cwd)
                inside = os.path.commonpath([here, resolved]) == here
                job_anchor = here if inside else os.path.dirname(resolved)
            else:
                job_anchor = anchor
            jobs.append(Job(shown, resolved, settings, mode, args.unsafe_fixes, anchor=job_anchor))
    return jobs, missing


def _walk(
    directory: Path, resolver: SettingsResolver, problems: list[FileReport]
) -> Iterator[Path]:
    def unreadable(exc: OSError) -> None:
        # A directory that cannot be listed would otherwise be skipped without a word.
        where = display(Path(exc.filename or directory), resolver.cwd)
        problems.append(FileReport(where, None, error=f"cannot list: {exc.strerror or exc}"))

    return discover(directory, resolver.for_dir, unreadable)


def _relative(path: Path, root: Path) -> Path:
    full = Path(_resolved(path))
    try:
        return full.relative_to(root)
    except ValueError:
        return Path(os.path.relpath(full, root))


def _excluded(path: Path, settings: Settings, root: Path) -> bool:
    """Default names and ``exclude`` patterns (for --force-exclude on named files)."""
    # A relative path: Settings.is_excluded matches the default names against every part,
    # and an absolute one would exclude a whole project that lives under ~/build/.
    return settings.is_excluded(_relative(path, root))


def machine_facts(path: Path | None) -> MachineInfo | None:
    """Machine facts from a preflight JSON report (a usage error if it cannot be read)."""
    if path is None:
        return None
    import json

    from ddp_lsp.preflight.report import machine_info
    from ddp_lsp.preflight.schema import PreflightReport

    try:
        report = PreflightReport.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--preflight {path}: not a readable preflight report ({exc})") from None
    return machine_info(report, path.name)


def with_environment(jobs: list[Job], machine: MachineInfo | None) -> list[Job]:
    """Each job with the launch configuration found next to its file and the machine facts."""
    from ddp_lsp.launch import launch_info

    out = []
    for job in jobs:
        launch = None
        if job.abspath is not None:
            script = Path(job.abspath)
            launch = launch_info(script, repo_root(script.parent))
        if launch is None and machine is None:
            out.append(job)
        else:
            out.append(replace(job, env=Environment(machine=machine, launch=launch)))
    return out


def repo_root(start: Path) -> Path:
    """The nearest directory with a .git (file or directory), else ``start``."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return start


def with_project(
    jobs: list[Job],
    resolver: SettingsResolver,
    err: TextIO,
    verbose: bool = False,
    workers: int | None = None,
) -> list[Job]:
    """Each job with its module's share of its project's facts.

    The files to check are grouped by project root (a run over several projects builds one
    index per root) and each root is indexed whole, so a file checked alone gets exactly the
    findings it gets when its whole project is checked. A file with no pyproject.toml or .git
    above it belongs to the folder given on the command line (or the working directory, for a
    file named there), as in ruff: the files of one job in a plain folder keep their cross-file
    findings. Bare stdin, files whose settings say ``project = false`` and files whose only
    candidate is the home directory or the file system's root are analysed alone; code read
    from stdin with ``--stdin-filename`` inside a project is analysed with its project, its own
    text laid over the file's (an editor's unsaved buffer)."""
    from ddp_lsp.project.index import PROJECT_MARKERS

    memo: dict[Path, Path | None] = {}
    by_root: dict[Path, list[int]] = {}
    why: dict[Path, str] = {}
    overlays: dict[Path, dict[Path, bytes]] = {}
    for i, job in enumerate(jobs):
        if job.abspath is None or not job.settings.project:
            continue
        root = project_root(Path(job.abspath).parent, memo)
        if root is not None:
            if root not in why:
                markers = [m for m in PROJECT_MARKERS if (root / m).exists()]
                why[root] = f"it has {' and '.join(markers)}"
        elif job.anchor is not None:
            root = fallback_root(Path(job.abspath), Path(job.anchor))
            if root is not None and root not in why:
                what = (
                    "the working directory"
                    if root == Path(_resolved(resolver.cwd))
                    else ("the folder given")
                )
                why[root] = f"no pyproject.toml or .git at or above it: {what}, as ruff does"
        if root is not None:
            by_root.setdefault(root, []).append(i)
            if job.data is not None:  # stdin with --stdin-filename
                overlays.setdefault(root, {})[Path(job.abspath)] = job.data
    out = list(jobs)
    checked = {job.abspath for job in jobs}
    for root, members in sorted(by_root.items()):
        settings, _ = resolver.for_dir(root)
        wanted = [_rel_to(jobs[i].abspath, root) for i in members]
        try:
            view = project_view(root, settings, workers, overlays.get(root), wanted)
        except Exception as exc:  # a bug in the cross-file step: the files are still checked
            log.debug("project index of %s failed", root, exc_info=True)
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            err.write(
                f"warning: {display(root, resolver.cwd)}: the project index failed ({detail}); "
                "its files are analysed alone\n"
            )
            continue
        if view.cache_warning:
            err.write(f"warning: {view.cache_warning}\n")
        if verbose:
            err.write(f"project root {display(root, resolver.cwd) or '.'}: {why[root]}\n")
            err.write(
                f"indexed {display(root, resolver.cwd)}: {view.files} files "
                f"({view.parsed} parsed, {view.files - view.parsed} from the cache) "
                f"in {view.seconds:.2f}s\n"
            )
            for rel in view.failed:
                err.write(
                    f"warning: {rel}: not in the project index (it could not be summarised)\n"
                )
        # Odd siblings (a FIFO, a device, a symlink loop) are said once; the checked files
        # report their own. A large generated sibling is ordinary: only with --verbose.
        for sibling, kind, message in view.unread:
            if _resolved(Path(sibling)) not in checked and (verbose or kind != "too-large"):
                shown = display(Path(sibling), resolver.cwd)
                err.write(f"warning: {shown}: {message}; left out of the project index\n")
        for i in members:
            path = out[i].abspath
            assert path is not None
            rel = Path(path).relative_to(view.root).as_posix()
            facts = view.facts.get(rel)
            if facts is not None and says_something(facts):
                out[i] = replace(out[i], project=facts)
    return out


def _rel_to(path: str | None, root: Path) -> str:
    """``path`` relative to the project root as the index names files (POSIX separators)."""
    assert path is not None
    try:
        return Path(path).relative_to(root.resolve()).as_posix()
    except ValueError:
        return Path(path).name
