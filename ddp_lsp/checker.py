"""``ddp-lsp check | fix | rules | explain``: the command line over the analysis core.

``check`` finds Python files (directories are walked, excludes applied), reads each one the
way Python would (PEP 263 coding cookie, BOM), analyses it, and reports in one of the formats
of :mod:`ddp_lsp.reporters`. ``--fix`` writes the fixes into the file itself (same inode:
mode, owner and hard links kept; read-only files refused) in its own encoding, BOM and line
endings, the new text staged and flushed first so that a failed write loses nothing;
``--diff`` shows them instead.

One file that cannot be read, decoded or written is reported on stderr and the others are
still checked; the exit status is then 2 (the check is incomplete), else 1 when findings
remain and 0 when none do. Many files are analysed in a process pool; few or small inputs run
in this process, where the pool's start-up would cost more than it saves.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import difflib
import errno
import fnmatch
import io
import logging
import os
import stat
import sys
import tempfile
import tokenize
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from ddp_lsp.config import (
    DEFAULT_EXCLUDE,
    ConfigError,
    ConfigFileError,
    Settings,
    find_pyproject,
    merge_settings,
    settings_from_pyproject,
)
from ddp_lsp.core.env import Environment, MachineInfo
from ddp_lsp.core.types import Finding, Fix, InternalError, NotAnalysed
from ddp_lsp.reporters import FORMATS, FileReport, FixCounts, ReportContext
from ddp_lsp.sources import MAX_SOURCE_BYTES, ReadError, read_source, too_large_message

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.core.document import Document
    from ddp_lsp.core.fixes import FixStats
    from ddp_lsp.core.types import AnalysisResult
    from ddp_lsp.project import ProjectIndex


EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

# Below this much source in total, analysing in this process beats starting a pool: forked
# workers cost tens of milliseconds to start and to return their results, while the analysis
# runs at roughly 0.25-0.5 MB/s per core (bench/bench_cli.py; docs/performance.md).
PARALLEL_MIN_FILES = 8
PARALLEL_MIN_BYTES = 256 * 1024

log = logging.getLogger("ddp_lsp.checker")


class UsageError(Exception):
    """A bad command line (exit 2, message on stderr)."""


class SourceError(Exception):
    """A file that cannot be checked or written; the message says why, for a human."""


# -- reading and writing sources ------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    text: str
    encoding: str  # as tokenize.detect_encoding names it; "utf-8-sig" keeps the BOM


def decode_source(data: bytes) -> Source:
    """Decode like the interpreter: a BOM or a PEP 263 cookie, else UTF-8.

    Line endings are kept as they are (``bytes.decode`` does not translate them), so a CRLF
    file is analysed, fixed and written back as CRLF.
    """
    wide = _wide_encoding(data)
    if wide is not None:
        # Python reads source as UTF-8 (or a PEP 263 ASCII-compatible codec): a coding comment
        # cannot help a UTF-16 file, whose every ASCII character comes with a NUL byte.
        raise SourceError(
            f"the file is {wide}, which Python cannot read as source; save it as UTF-8 "
            "(Windows editors and PowerShell's `>` redirection write UTF-16)"
        )
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        # detect_encoding also raises when the first two lines are not UTF-8 and there is no
        # cookie; that is a decoding problem, reported as one below.
        if "invalid or missing encoding declaration" not in str(exc):
            raise SourceError(f"cannot determine the encoding: {exc}") from None
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        line = data.count(b"\n", 0, exc.start) + 1
        raise SourceError(
            f"cannot decode as {encoding}: byte 0x{bad} on line {line} is invalid; save the "
            "file as UTF-8 or declare its encoding with a PEP 263 comment "
            "(# -*- coding: latin-1 -*-)"
        ) from None
    return Source(text, encoding)


def _wide_encoding(data: bytes) -> str | None:
    """ "UTF-16"/"UTF-32" (with what says so) when ``data`` is in one of them, else None."""
    for bom, name in (
        (codecs.BOM_UTF32_LE, "UTF-32"),  # before UTF-16 LE: it starts with the same bytes
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if data.startswith(bom):
            return f"{name} (it starts with a {name} byte order mark)"
    head = data[:200]
    if len(head) >= 8:
        # No BOM: ASCII text in UTF-16 has a NUL in every other byte, which no UTF-8 or
        # latin-1 Python source has.
        even, odd = head[0::2], head[1::2]
        if odd.count(0) >= len(odd) * 0.9 and even.count(0) == 0:
            return "UTF-16 (little-endian, without a byte order mark)"
        if even.count(0) >= len(even) * 0.9 and odd.count(0) == 0:
            return "UTF-16 (big-endian, without a byte order mark)"
    return None


def encode_source(text: str, encoding: str) -> bytes:
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise SourceError(
            f"the fixed text cannot be encoded as {encoding} ({exc.reason}); not written"
        ) from None


def write_in_place(path: Path, data: bytes, expected: bytes) -> None:
    """Write ``data`` into ``path``'s own inode, so that its mode, owner, ACLs and hard links
    stay what they were (a rename would give a file owned by whoever ran ``--fix``, with a
    default mode, and split a hard link from its other names).

    ``expected`` is what was analysed; if the file changed meanwhile (an editor saved it),
    nothing is written. A file without any write permission bit is refused, not rewritten
    (root could write it, but a read-only file says "do not change me").

    Never losing the original on a failed write:

    1. the new bytes go to a temporary file first (next to the file when that directory is
       writable) and are fsynced: a full disk fails here, before the file is touched;
    2. the file is grown to the new size with ``posix_fallocate`` where that exists, so a
       full disk fails before its bytes change;
    3. the bytes are written over the old ones, the file truncated and fsynced;
    4. if step 3 fails anyway, the original bytes (held in memory) are written back; if even
       that fails, the error names the temporary file that holds the fixed text.
    """
    real = Path(os.path.realpath(path))  # write through a symlink, keep the link
    try:
        fd = os.open(real, os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except PermissionError:
        raise SourceError("the file is read-only (no write permission): not fixed") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError("not a regular file: not written")
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            mode = stat.S_IMODE(st.st_mode)
            raise SourceError(
                f"the file is read-only (mode {mode:o}): not fixed; make it writable to fix it"
            )
        if _read_fd(fd, len(expected) + 1) != expected:
            raise SourceError("the file changed while it was being fixed; not written")
        tmp = _stage(real, data)
        try:
            _overwrite(fd, data, len(expected))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            try:
                # Drop what the fallocate added first: the bytes past the original's end.
                os.ftruncate(fd, len(expected))
                _overwrite(fd, expected, len(expected))
            except OSError:
                raise SourceError(
                    f"cannot write ({reason}), and the original could not be restored: the "
                    f"fixed text is in {tmp}"
                ) from None
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise SourceError(f"cannot write: {reason}; the file is unchanged") from None
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while got < limit:
        chunk = os.read(fd, min(limit - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _stage(real: Path, data: bytes) -> str:
    """The fixed bytes in an fsynced temporary file (next to ``real`` when possible); its path.
    Any failure here (a full disk) leaves the original untouched and no temporary behind."""
    places = [str(real.parent), None]  # None: the system's temporary directory
    last: OSError | None = None
    for where in places:
        try:
            fd, tmp = tempfile.mkstemp(dir=where, prefix=f".{real.name}.", suffix=".ddp-lsp-fixed")
        except OSError as exc:
            last = exc
            continue
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp
    assert last is not None
    raise last


def _overwrite(fd: int, data: bytes, old_size: int) -> None:
    if len(data) > old_size and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, len(data))  # ENOSPC here changes nothing
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
    view = memoryview(data)
    offset = 0
    if not hasattr(os, "pwrite"):  # Windows
        os.lseek(fd, 0, os.SEEK_SET)
    while offset < len(data):
        if hasattr(os, "pwrite"):
            offset += os.pwrite(fd, view[offset:], offset)
        else:
            offset += os.write(fd, view[offset:])
    os.ftruncate(fd, len(data))
    os.fsync(fd)


# -- checking one file (runs in a worker process for big inputs) ---------------------------


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
    from ddp_lsp.core import fixes as F
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

    new, stats = F.fix_all_stats(text, run, choose)
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


def _worker_init() -> None:
    # A rule's crash is logged by the engine; without a handler Python's last-resort handler
    # would print its traceback. The parent reports it (with --verbose) from the result.
    logging.getLogger("ddp_lsp").addHandler(logging.NullHandler())
    logging.getLogger("ddp_lsp").propagate = False


def _pool_worker_init() -> None:
    _worker_init()
    # Ctrl-C is the parent's to handle: it cancels what is queued and exits; a worker that
    # died of SIGINT would look like a crash and trigger the crash recovery below.
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


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


def _pool_context() -> BaseContext:
    import multiprocessing
    import threading

    # fork shares what this process has imported (no re-import per worker); it is unsafe
    # only with other threads alive, and then (or where there is no fork) workers spawn.
    methods = multiprocessing.get_all_start_methods()
    method = "fork" if "fork" in methods and threading.active_count() == 1 else "spawn"
    return multiprocessing.get_context(method)


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


def _idle_cpus(cpus: int) -> int:
    """CPUs not already busy (by the 1-minute load average). Workers cost ~15% more CPU
    than one process (fork, pickled results, cold caches); on CPUs that other jobs keep
    busy they only add contention, so a loaded machine gets fewer of them, or none."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cpus
    return max(1, min(cpus, int(cpus - load + 0.5)))


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# -- finding the files -----------------------------------------------------------------------


class SettingsResolver:
    """Settings per file: the nearest pyproject.toml with [tool.ddp-lsp] (cached per
    directory), or the one ``--config`` names, with the command line's overrides on top."""

    def __init__(self, config: Path | None, overrides: dict[str, object], cwd: Path) -> None:
        self.cwd = cwd
        self.overrides = overrides
        self._fixed: tuple[Settings, Path] | None = None
        self._by_dir: dict[Path, tuple[Settings, Path]] = {}
        self._by_file: dict[Path | None, tuple[Settings, Path]] = {}
        self.problems: list[str] = []  # configuration files that could not be used
        if config is not None:
            if not config.is_file():
                raise ConfigError(f"{config}: no such configuration file")
            self._fixed = (self._override(settings_from_pyproject(config)), config.resolve().parent)

    def _override(self, settings: Settings) -> Settings:
        if self.overrides:
            settings = merge_settings(settings, self.overrides, "command line")
        return settings

    def for_dir(self, directory: Path) -> tuple[Settings, Path]:
        """(settings, the root that exclude patterns are relative to)."""
        if self._fixed is not None:
            return self._fixed
        directory = directory.resolve()
        hit = self._by_dir.get(directory)
        if hit is None:
            pyproject = find_pyproject(directory)
            hit = self._by_file.get(pyproject)
            if hit is None:
                if pyproject is None:
                    hit = (self._override(Settings()), self.cwd)
                else:
                    try:
                        settings = settings_from_pyproject(pyproject)
                    except ConfigFileError as exc:
                        # Not TOML at all: say so (file:line:col) and check with the defaults,
                        # rather than stop every check until the file is repaired.
                        self.problems.append(f"{exc}; checking with the default settings")
                        settings = Settings(source=str(pyproject))
                    hit = (self._override(settings), pyproject.parent)
                self._by_file[pyproject] = hit
            self._by_dir[directory] = hit
        return hit


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


def _pattern_excluded(path: Path, settings: Settings, root: Path) -> bool:
    """Only the ``exclude`` patterns, as Settings.is_excluded matches them (the whole
    relative path, a path prefix, the name or any component). The walk prunes default
    names itself, by entry name, so that ``ddp-lsp check build/`` still checks what it
    was explicitly given."""
    rel = _relative(path, root)
    text = rel.as_posix()
    for pattern in settings.exclude:
        pat = pattern.rstrip("/")
        if fnmatch.fnmatch(text, pat) or fnmatch.fnmatch(text, f"{pat}/*"):
            return True
        if any(fnmatch.fnmatch(part, pat) for part in rel.parts):
            return True
    return False


def _walk(
    directory: Path, resolver: SettingsResolver, problems: list[FileReport]
) -> Iterator[Path]:
    def unreadable(exc: OSError) -> None:
        # A directory that cannot be listed would otherwise be skipped without a word.
        where = _display(Path(exc.filename or directory), resolver.cwd)
        problems.append(FileReport(where, None, error=f"cannot list: {exc.strerror or exc}"))

    for dirpath, dirnames, filenames in os.walk(directory, onerror=unreadable):
        here = Path(dirpath)
        settings, root = resolver.for_dir(here)
        keep = []
        for name in sorted(dirnames):
            sub = here / name
            if name in DEFAULT_EXCLUDE or name.endswith(".egg-info"):
                continue
            if settings.exclude and _pattern_excluded(sub, settings, root):
                continue
            keep.append(name)
        dirnames[:] = keep  # os.walk descends only into what is left
        for name in sorted(filenames):
            if name.endswith((".py", ".pyi")):
                path = here / name
                if settings.exclude and _pattern_excluded(path, settings, root):
                    continue
                yield path


def _display(path: Path, cwd: Path) -> str:
    if path.is_absolute():
        try:
            return path.relative_to(cwd).as_posix()
        except ValueError:
            return str(path)
    return path.as_posix()


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
            shown = _display(file if path.is_absolute() else Path(os.path.relpath(file, cwd)), cwd)
            if anchor is None:  # a file named: the working directory, if the file is under it
                here = _resolved(cwd)
                inside = os.path.commonpath([here, resolved]) == here
                job_anchor = here if inside else os.path.dirname(resolved)
            else:
                job_anchor = anchor
            jobs.append(Job(shown, resolved, settings, mode, args.unsafe_fixes, anchor=job_anchor))
    return jobs, missing


def _resolved(path: Path) -> str:
    """The absolute, symlink-free path; a symlink loop, or a link to something that is not a
    regular file, stays the link itself (Path.resolve raises on a loop), so that reading it
    reports what the link is."""
    try:
        full = str(path.resolve())
    except (OSError, RuntimeError):
        return os.path.abspath(path)
    # A link to a device or a FIFO keeps its own name, so its error names what was checked.
    return full if os.path.isfile(full) or not os.path.islink(path) else os.path.abspath(path)


def _machine(path: Path | None) -> MachineInfo | None:
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


# -- the project view -------------------------------------------------------------------------


def _fallback_root(path: Path, anchor: Path) -> Path | None:
    """``anchor`` as the project of ``path`` when it holds the file and is not the home
    directory or the file system's root (a loose script there would index everything)."""
    from ddp_lsp.project.index import is_too_wide

    if is_too_wide(anchor):
        return None
    try:
        path.relative_to(anchor)
    except ValueError:
        return None
    return anchor


def project_root(directory: Path, memo: dict[Path, Path | None] | None = None) -> Path | None:
    """The project root of a file in ``directory`` (the nearest directory with a
    pyproject.toml or a .git), or None when there is none: such files are analysed alone."""
    from ddp_lsp.project.index import find_root, is_project_root

    if memo is not None and directory in memo:
        return memo[directory]
    root: Path | None = find_root([directory])
    assert root is not None
    if not is_project_root(root):
        root = None
    if memo is not None:
        memo[directory] = root
    return root


@dataclass(frozen=True)
class ProjectView:
    """One project root's index and cross-file facts, by path relative to the root."""

    root: Path
    facts: dict[str, ModuleProjectFacts]
    files: int = 0  # files indexed
    parsed: int = 0  # of which not found in the cache
    failed: tuple[str, ...] = ()  # files the index could not summarise (they are still checked)
    seconds: float = 0.0
    # Files the index did not read (path, reason kind, message): see sources.py.
    unread: tuple[tuple[str, str, str], ...] = ()
    cache_warning: str | None = None  # the disk cache is not trusted (SummaryCache.warning)


# Files summarised in this process before deciding whether the rest are worth a pool: on a
# warm cache they all come from it, and a pool would only add its start-up.
INDEX_SAMPLE = 16


def project_view(
    root: Path,
    settings: Settings,
    workers: int | None = None,
    overlays: Mapping[Path, bytes] | None = None,
) -> ProjectView:
    """Index every Python file under ``root`` (the settings' excludes apply; summaries are
    cached under the user's cache directory) and compute the project's cross-file facts.

    On a cold cache (CI, a first run) and a large project, worker processes summarise the
    files into the disk cache first, and this process then reads them from it: the index
    costs about one parse per file, as much as the analysis, and on a machine with many CPUs
    a serial index would take longer than the pooled analysis. ``workers``: as ``--jobs``.

    A file the index cannot summarise costs only its own contribution: unreadable files are
    skipped by the index, undecodable bytes are replaced, syntax errors give an empty summary,
    and anything else (a recursion limit on absurd nesting) is caught here per file."""
    import time

    from ddp_lsp.project import ProjectIndex, compute

    started = time.perf_counter()
    index = ProjectIndex(root, settings)
    paths = list(index.files())
    failed = _summarise(index, paths[:INDEX_SAMPLE])
    rest = paths[INDEX_SAMPLE:]
    parsed_elsewhere = 0
    if rest and index.cache.misses * 2 > min(len(paths), INDEX_SAMPLE):
        n = _index_workers(rest, index.cache.directory, workers)
        if n > 1:
            parsed_elsewhere = _prefill(index.root, settings, rest, n)
    failed += _summarise(index, rest)
    # Code read from stdin with --stdin-filename (an editor's buffer): its text, not the disk's.
    for path, data in (overlays or {}).items():
        try:
            index.update(path, data.decode("utf-8", errors="replace"))
        except Exception:
            log.debug("project index: cannot summarise stdin as %s", path, exc_info=True)
    facts = compute(index)
    return ProjectView(
        index.root,
        dict(facts.by_path),
        len(paths),
        min(len(paths), index.parsed + parsed_elsewhere),
        tuple(p.relative_to(index.root).as_posix() for p in failed),
        time.perf_counter() - started,
        unread=tuple(dict.fromkeys((str(p), e.kind, str(e)) for p, e in index.unread.items())),
        cache_warning=index.cache.warning,
    )


def _summarise(index: ProjectIndex, paths: Sequence[Path]) -> list[Path]:
    """Add ``paths`` to the index; the ones whose summary raised."""
    before = len(index.failed)
    index.build(paths)
    return index.failed[before:]


def _index_workers(paths: Sequence[Path], cache: Path | None, workers: int | None) -> int:
    """How many processes should summarise ``paths`` (1: this one). Workers hand their
    summaries over through the disk cache, so without a writable one they would be wasted."""
    if workers is None:
        size = 0
        for p in paths:
            with contextlib.suppress(OSError):
                size += p.stat().st_size
        if len(paths) < PARALLEL_MIN_FILES or size < PARALLEL_MIN_BYTES:
            return 1
        workers = _idle_cpus(_cpu_count())
    workers = min(workers, len(paths) // PARALLEL_MIN_FILES)
    if workers <= 1 or cache is None:
        return 1
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return 1
    return workers if os.access(cache, os.W_OK) else 1


def _prefill(root: Path, settings: Settings, paths: Sequence[Path], workers: int) -> int:
    """Summarise ``paths`` into the disk cache in a pool; the number of files parsed. A pool
    that fails (a worker dies) costs nothing but time: this process summarises whatever is
    not cached."""
    import concurrent.futures as cf

    step = max(1, len(paths) // (workers * 4))
    batches = [[str(p) for p in paths[i : i + step]] for i in range(0, len(paths), step)]
    pool = cf.ProcessPoolExecutor(
        workers, mp_context=_pool_context(), initializer=_pool_worker_init
    )
    parsed = 0
    try:
        for n in pool.map(_summarise_batch, [(str(root), settings, b) for b in batches]):
            parsed += n
    except Exception:  # a worker died, or the pool could not start: only time is lost
        log.debug("project index: the pool failed; indexing the rest here", exc_info=True)
    except BaseException:  # Ctrl-C
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return parsed


def _summarise_batch(task: tuple[str, Settings, list[str]]) -> int:
    from ddp_lsp.project import ProjectIndex

    root, settings, paths = task
    index = ProjectIndex(Path(root), settings)
    _summarise(index, [Path(p) for p in paths])
    return index.parsed


def says_something(facts: ModuleProjectFacts) -> bool:
    """Whether the project tells a module anything. Most modules of a project receive nothing
    from the others (no DDP model passed in, no helper of another file called); their
    analysis with empty facts equals the analysis alone, so they are sent to workers without."""
    return bool(
        facts.extra_kinds
        or facts.callee_props
        or facts.distributed is not None
        or facts.only_called_guarded
    )


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
            root = _fallback_root(Path(job.abspath), Path(job.anchor))
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
        try:
            view = project_view(root, settings, workers, overlays.get(root))
        except Exception as exc:  # a bug in the cross-file step: the files are still checked
            log.debug("project index of %s failed", root, exc_info=True)
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            err.write(
                f"warning: {_display(root, resolver.cwd)}: the project index failed ({detail}); "
                "its files are analysed alone\n"
            )
            continue
        if view.cache_warning:
            err.write(f"warning: {view.cache_warning}\n")
        if verbose:
            err.write(f"project root {_display(root, resolver.cwd) or '.'}: {why[root]}\n")
            err.write(
                f"indexed {_display(root, resolver.cwd)}: {view.files} files "
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
                shown = _display(Path(sibling), resolver.cwd)
                err.write(f"warning: {shown}: {message}; left out of the project index\n")
        for i in members:
            path = out[i].abspath
            assert path is not None
            rel = Path(path).relative_to(view.root).as_posix()
            facts = view.facts.get(rel)
            if facts is not None and says_something(facts):
                out[i] = replace(out[i], project=facts)
    return out


# -- the commands -----------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().rstrip()}")


def _split_codes(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [c.strip() for v in values for c in v.split(",") if c.strip()]


def check_parser(command: str) -> argparse.ArgumentParser:
    p = _Parser(
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
    _worker_init()
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
    jobs = with_environment(jobs, _machine(args.preflight))
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


def run_rules(argv: Sequence[str], out: TextIO) -> int:
    import json

    from ddp_lsp.core.registry import all_meta

    p = _Parser(prog="ddp-lsp rules", description="List every rule.")
    p.add_argument(
        "--format", "--output-format", choices=("text", "json"), default="text", dest="format"
    )
    args = p.parse_args(list(argv))
    metas = all_meta()
    if args.format == "json":
        rows = [
            {
                "code": m.id,
                "name": m.name,
                "severity": m.severity.label,
                "fix": m.fix.value,
                "summary": m.summary,
                "url": m.url,
            }
            for m in metas
        ]
        json.dump(rows, out, indent=2)
        out.write("\n")
        return EXIT_OK
    header = ("id", "name", "severity", "fix", "summary")
    table = [header] + [(m.id, m.name, m.severity.label, m.fix.value, m.summary) for m in metas]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        cells = [row[i].ljust(widths[i]) for i in range(4)]
        out.write("  ".join(cells) + "  " + row[4] + "\n")
    return EXIT_OK


def run_explain(argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    from ddp_lsp import docs

    p = _Parser(prog="ddp-lsp explain", description="Print a rule's documentation.")
    p.add_argument("rule", nargs="+", help="a rule id (DDP201) or name (clip-without-unscale)")
    args = p.parse_args(list(argv))
    texts = []
    for rule in args.rule:
        text = docs.rule_markdown(rule)
        if text is None:
            err.write(f"ddp-lsp explain: unknown rule {rule!r}; `ddp-lsp rules` lists them all\n")
            return EXIT_ERROR
        texts.append(text)
    out.write("\n".join(texts))
    return EXIT_OK


def main(command: str, argv: Sequence[str]) -> int:
    """Entry point from :mod:`ddp_lsp.cli`; returns the exit status, never raises."""
    out, err = sys.stdout, sys.stderr
    try:
        if command in ("check", "fix"):
            return run_check(command, argv, out, err)
        if command == "rules":
            return run_rules(argv, out)
        if command == "explain":
            return run_explain(argv, out, err)
        err.write(f"ddp-lsp: unknown command {command!r}\n")
        return EXIT_ERROR
    except UsageError as exc:
        err.write(f"{exc}\n")
        return EXIT_ERROR
    except ConfigError as exc:
        err.write(f"ddp-lsp: configuration error: {exc}\n")
        return EXIT_ERROR
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except KeyboardInterrupt:
        err.write("ddp-lsp: interrupted\n")
        return 130
    except BrokenPipeError:
        # `ddp-lsp check | head`: the reader left; nothing more to say to it.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FINDINGS
    except Exception:
        err.write("ddp-lsp: internal error (please report it):\n" + traceback.format_exc())
        return EXIT_ERROR
