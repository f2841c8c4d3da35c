"""Checking one file, and many in a process pool: the jobs of ``ddp-lsp check | fix``.

A :class:`Job` is what one file needs (its bytes or path, settings, launch and machine facts,
its share of the project's facts); :func:`check_job` reads, decodes, analyses and maybe fixes
it, and turns every failure into its report's ``error``. :func:`run_jobs` runs many of them in
a process pool when that pays off (:mod:`ddp_lsp.pools`), retrying around a worker that a
crash in native code killed so that only the file that kills its process is lost.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ddp_lsp.config import Settings
from ddp_lsp.core.env import Environment
from ddp_lsp.core.types import Finding, Fix, InternalError, NotAnalysed
from ddp_lsp.pools import PARALLEL_MIN_BYTES, PARALLEL_MIN_FILES
from ddp_lsp.pools import cpu_count as _cpu_count
from ddp_lsp.pools import idle_cpus as _idle_cpus
from ddp_lsp.pools import pool_context as _pool_context
from ddp_lsp.pools import pool_worker_init as _pool_worker_init
from ddp_lsp.reporters import FileReport, FixCounts
from ddp_lsp.sources import (
    MAX_SOURCE_BYTES,
    ReadError,
    SourceError,
    decode_source,
    encode_source,
    read_source,
    too_large_message,
    write_in_place,
)

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.core.document import Document
    from ddp_lsp.core.fixes import FixStats
    from ddp_lsp.core.types import AnalysisResult

log = logging.getLogger("ddp_lsp.cli")


@dataclass(frozen=True)
class Job:
    path: str  # shown to the user
    abspath: str | None  # None: stdin
    settings: Settings
    mode: str  # "check" | "fix" | "diff"
    unsafe: bool
    data: bytes | None = None  # stdin's bytes
    env: Environment | None = None  # launch config next to the file, preflight facts
    # What the other files of its project say about this one (only this module's share of the
    # project's facts: a job is pickled to a worker, and the whole project need not travel).
    project: ModuleProjectFacts | None = None
    # The project root when no pyproject.toml or .git is found above the file: the folder given
    # on the command line, or the working directory for a file named there (as ruff does).
    anchor: str | None = None


@dataclass(frozen=True)
class Context:
    """What the analysis of one file knows besides its text and settings."""

    env: Environment | None = None
    project: ModuleProjectFacts | None = None


@dataclass(frozen=True)
class Outcome:
    report: FileReport
    fixed_text: str | None = None  # stdin with --fix: the text to print


Found = tuple[tuple[Finding, ...], tuple[InternalError, ...], tuple[NotAnalysed, ...]]


def _analyze(text: str, settings: Settings, ctx: Context) -> Found:
    result = _engine_analyze(text, settings, ctx)
    return result.findings, result.errors, result.not_analysed


def _engine_analyze(source: str | Document, settings: Settings, ctx: Context) -> AnalysisResult:
    from ddp_lsp.core import engine

    if ctx.project is None:  # alone: the engine's plain call, as before projects existed
        return engine.analyze(source, settings, ctx.env)
    return engine.analyze(source, settings, ctx.env, project=ctx.project)


def _fix(text: str, settings: Settings, unsafe: bool, ctx: Context) -> tuple[str, FixStats, Found]:
    """Fix-all to a fixed point; returns the findings of the final text as well, so the
    remaining findings cost no extra analysis."""
    from ddp_lsp.core import fixes as fix_engine
    from ddp_lsp.core.document import Document

    doc = Document(text, settings.rank_model)
    last: list[tuple[str, Found]] = []

    def run(current: str) -> Sequence[Finding]:
        doc.set_text(current)
        result = _engine_analyze(doc, settings, ctx)
        last[:] = [(current, (result.findings, result.errors, result.not_analysed))]
        return result.findings

    def choose(f: Finding) -> Fix | None:
        return f.preferred_fix if unsafe else f.safe_fix

    new, stats = fix_engine.fix_all_stats(text, run, choose)
    if not last or last[0][0] != new:  # the pass limit was hit right after applying fixes
        run(new)
    return new, stats, last[0][1]


def check_job(job: Job) -> Outcome:
    """Check (and maybe fix) one file; every failure becomes the report's ``error``."""
    try:
        return _check_job(job)
    except SourceError as exc:
        return Outcome(FileReport(job.path, job.abspath, error=str(exc)))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return Outcome(FileReport(job.path, job.abspath, error=f"cannot read or write: {reason}"))
    except Exception as exc:  # an analysis bug must cost this file, not the whole run
        log.debug("internal error on %s", job.path, exc_info=True)
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return Outcome(
            FileReport(job.path, job.abspath, error=f"internal error while analysing: {detail}")
        )


def _check_job(job: Job) -> Outcome:
    if job.data is not None:
        data = job.data
        if len(data) > MAX_SOURCE_BYTES:
            raise SourceError(too_large_message(len(data)))
    else:
        assert job.abspath is not None
        try:
            data = read_source(job.abspath)
        except ReadError as exc:
            raise SourceError(str(exc)) from None
    source = decode_source(data)
    ctx = Context(job.env, job.project)
    if job.mode == "check":
        findings, errors, skipped = _analyze(source.text, job.settings, ctx)
        return Outcome(FileReport(job.path, job.abspath, findings, errors, not_analysed=skipped))
    from ddp_lsp.core.fixes import fix_key

    new, stats, (findings, errors, skipped) = _fix(source.text, job.settings, job.unsafe, ctx)
    left = [
        fix_key(f, fix)
        for f in findings
        if (fix := f.preferred_fix if job.unsafe else f.safe_fix) is not None
    ]
    absorbed, unapplied = stats.reconcile(left)
    rep = FileReport(
        job.path,
        job.abspath,
        findings,
        errors,
        fixed=stats.applied,
        not_analysed=skipped,
        fix_counts=FixCounts(stats.fixable, stats.late, absorbed, unapplied),
    )
    if new == source.text:
        return Outcome(rep, fixed_text=new if job.data is not None else None)
    if job.mode == "diff":
        import difflib

        diff = "".join(
            difflib.unified_diff(
                source.text.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile=f"a/{job.path}",
                tofile=f"b/{job.path}",
            )
        )
        if diff and not diff.endswith("\n"):
            diff += "\n\\ No newline at end of file\n"
        return Outcome(replace(rep, diff=diff))
    if job.data is not None:  # stdin: the fixed code goes to stdout
        return Outcome(rep, fixed_text=new)
    assert job.abspath is not None
    write_in_place(Path(job.abspath), encode_source(new, source.encoding), data)
    return Outcome(rep)


def run_jobs(jobs: Sequence[Job], workers: int | None = None) -> list[Outcome]:
    """Run the jobs, in a process pool when that pays off; results in job order."""
    total = sum(_size(j) for j in jobs)
    cpus = _cpu_count()
    if workers is None:
        parallel = len(jobs) >= PARALLEL_MIN_FILES and total >= PARALLEL_MIN_BYTES
        workers = min(_idle_cpus(cpus), len(jobs)) if parallel else 1
    if workers <= 1 or len(jobs) <= 1:
        return [check_job(j) for j in jobs]
    return _run_pool(jobs, min(workers, len(jobs)))


def _run_pool(
    jobs: Sequence[Job], workers: int, ctx: BaseContext | None = None, attempt: int = 0
) -> list[Outcome]:
    import concurrent.futures as cf

    from ddp_lsp.core.registry import all_rules

    all_rules()  # import the rules once here, so forked workers inherit them
    if ctx is None:
        # Chosen once: a retry after a crash must not see the broken pool's own threads.
        ctx = _pool_context()
    results: dict[int, Outcome] = {}
    chunk = max(1, min(16, len(jobs) // (workers * 4)))
    pool = cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_pool_worker_init)
    try:
        batches = [list(range(i, min(i + chunk, len(jobs)))) for i in range(0, len(jobs), chunk)]
        futures = {pool.submit(_run_batch, [jobs[i] for i in b]): b for b in batches}
        for fut in cf.as_completed(futures):
            for i, outcome in zip(futures[fut], fut.result(), strict=True):
                results[i] = outcome
    except cf.process.BrokenProcessPool:
        # A worker died (a crash in native code) and took every unfinished batch with it.
        # Retry those in a fresh pool while many remain; then run each remaining file in
        # its own process, so only a file that kills its process is lost.
        missing = [i for i in range(len(jobs)) if i not in results]
        if attempt < 2 and len(missing) > 4 * workers:
            again = _run_pool([jobs[i] for i in missing], workers, ctx, attempt + 1)
            results.update(zip(missing, again, strict=True))
        else:
            for i in missing:
                results[i] = _run_isolated(jobs[i], ctx)
    except BaseException:  # Ctrl-C: drop the queue, let running batches end, re-raise
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [results[i] for i in range(len(jobs))]


def _run_batch(jobs: list[Job]) -> list[Outcome]:
    return [check_job(j) for j in jobs]


def _run_isolated(job: Job, ctx: BaseContext) -> Outcome:
    import concurrent.futures as cf

    try:
        with cf.ProcessPoolExecutor(1, mp_context=ctx, initializer=_pool_worker_init) as pool:
            outcome: Outcome = pool.submit(_run_batch, [job]).result()[0]
            return outcome
    except cf.process.BrokenProcessPool:
        return Outcome(
            FileReport(job.path, job.abspath, error="the analysis crashed the worker process")
        )


def _size(job: Job) -> int:
    if job.data is not None:
        return len(job.data)
    try:
        return os.stat(job.abspath or "").st_size
    except OSError:
        return 0
