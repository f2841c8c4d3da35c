"""Run the preflight child from a parent (the CLI or the language server) and cache results.

The child is ``<python> -E -c <bootstrap> --format jsonl ...`` in a fresh session (its own
process group), started from an empty temporary directory so that nothing of the user's
project is importable by accident: we run our probe code only. It prints one JSON event per
line; :func:`run_preflight` turns ``probe`` events into ``on_probe`` calls (the server's
``$/progress``) and returns the final report. On cancel or overall timeout the whole process
group is killed, leftover ``/dev/shm/ddp-lsp-pf-<pgid>-*`` files are removed, and the results
that had already arrived are returned in a report whose ``error`` says what happened.

Stdlib only; asyncio subprocesses keep the server's event loop free while a preflight runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import platform
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import ddp_lsp
from ddp_lsp import proctree
from ddp_lsp.preflight.schema import PreflightOptions, PreflightReport, ProbeResult, Status

ProbeCallback = Callable[[ProbeResult], None]
StartCallback = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ChildHandle:
    """A running preflight child, for a caller that must stop it at once (the server's
    ``exit``), without waiting for :func:`run_preflight` to wind down."""

    pgid: int  # the child leads its own session: its pid is the process group id
    process: Any  # the asyncio Process

    def stop(self) -> None:
        """Kill the group and close the child's transport now, while the event loop still
        runs: a transport left to the garbage collector after the loop has closed prints
        "Exception ignored ... Event loop is closed" on the way out."""
        kill_group(self.pgid)
        transport = getattr(self.process, "_transport", None)  # asyncio has no public close
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.close()


SpawnCallback = Callable[[ChildHandle], None]

#: Generous ceiling for a whole run; each probe also has its own timeout inside the child.
DEFAULT_TIMEOUT_S = 900.0

#: The oldest Python the probe code runs on (pyproject.toml's requires-python).
MIN_PYTHON = (3, 10)
_TOO_OLD = "ddp-lsp: too old:"
# The version check comes first and is valid Python 2 as well: an old interpreter gets a clear
# message (see _too_old) instead of a SyntaxError traceback from our `from __future__` lines.
_BOOTSTRAP = (
    "import sys\n"
    f"if sys.version_info < {MIN_PYTHON!r}:\n"
    f"    sys.stderr.write('{_TOO_OLD} %d.%d\\n' % tuple(sys.version_info[:2])); sys.exit(3)\n"
    "sys.path.insert(0, sys.argv.pop(1)); "
    "from ddp_lsp.preflight.runner import main; sys.exit(main(sys.argv[1:]))"
)


def _too_old(python: str, stderr: str) -> str | None:
    """The message for an interpreter older than :data:`MIN_PYTHON`, from the child's stderr."""
    for line in stderr.splitlines():
        if line.startswith(_TOO_OLD):
            have = line[len(_TOO_OLD) :].strip()
            need = ".".join(map(str, MIN_PYTHON))
            return (
                f"{python} is Python {have}; the preflight needs Python {need} or newer. Pass "
                "--python the interpreter your training job runs with (the one with torch)"
            )
    return None


def package_root() -> str:
    """The directory holding our ``ddp_lsp`` package, put first on the child's sys.path so the
    training interpreter runs this exact probe code without ddp-lsp installed there."""
    return str(Path(ddp_lsp.__file__).resolve().parent.parent)


def child_argv(python: str, options: PreflightOptions | None) -> list[str]:
    """The child's command line; ``options=None`` asks for the ``ddp-lsp env`` report instead
    of the probes (same interpreter, same isolation)."""
    # -E: ignore PYTHONPATH/PYTHONSTARTUP, so a project directory on PYTHONPATH cannot shadow
    # our modules or torch's; -c with an empty private cwd (mkdtemp, 0700) keeps the project off
    # sys.path too. Not -I: that would also drop the user site, where the user's training
    # interpreter may keep torch (`pip install --user`); and not -P, which Pythons before 3.11
    # (still supported as training interpreters) reject. See SECURITY.md.
    args = ["--env"] if options is None else ["--format", "jsonl", *options.to_argv()]
    return [python, "-E", "-c", _BOOTSTRAP, package_root(), *args]


class PreflightError(RuntimeError):
    """The preflight could not run at all (bad interpreter, child crashed before reporting)."""


def _error_report(
    python: str, options: PreflightOptions, results: list[ProbeResult], error: str, started: float
) -> PreflightReport:
    return PreflightReport(
        host=socket.gethostname(),
        python=python,
        python_version="",
        platform=platform.platform(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_s=time.perf_counter() - started,
        probes=tuple(results),
        options=options.to_json(),
        error=error,
    )


def kill_group(pgid: int) -> None:
    """SIGKILL a preflight child's whole process group (the runner, its ranks, their forks)."""
    proctree.kill_group(pgid)


def _clean_shm(pgid: int) -> None:
    prefix = f"ddp-lsp-pf-{pgid}-"
    with contextlib.suppress(OSError):
        for name in os.listdir("/dev/shm"):
            if name.startswith(prefix):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join("/dev/shm", name))


async def run_preflight(
    python: str,
    options: PreflightOptions,
    on_probe: ProbeCallback | None = None,
    cancel: asyncio.Event | None = None,
    *,
    on_start: StartCallback | None = None,
    on_spawn: SpawnCallback | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> PreflightReport:
    """Run the preflight in ``python`` and return its report.

    ``on_start(probe_id, index, total)`` fires as each probe starts, ``on_probe(result)`` as it
    finishes; ``on_spawn(handle)`` once the child runs, so that a caller that must stop at once
    (the server's ``exit``) can stop it (:meth:`ChildHandle.stop`) without waiting for this
    coroutine. Setting ``cancel`` (or exceeding ``timeout_s``) kills the child's process group;
    the report then carries the finished probes and ``error``. Raises :class:`PreflightError`
    when the interpreter cannot be started.
    """
    started = time.perf_counter()
    results: list[ProbeResult] = []
    cwd = tempfile.mkdtemp(prefix="ddp-lsp-preflight-")
    try:
        proc = await asyncio.create_subprocess_exec(
            *child_argv(python, options),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,
            env=dict(os.environ if env is None else env),
            limit=1 << 24,
        )
    except OSError as exc:
        os.rmdir(cwd)
        raise PreflightError(f"cannot start {python}: {exc.strerror or exc}") from exc
    pgid = proc.pid  # session leader: its pid is the process group id
    if on_spawn is not None:
        on_spawn(ChildHandle(pgid, proc))
    report: PreflightReport | None = None
    error: str | None = None
    stderr_tail: list[bytes] = []

    async def read_stdout() -> None:
        nonlocal report, error
        assert proc.stdout is not None
        async for raw in proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # not ours; the child keeps stdout clean but be lenient
            kind = event.get("event")
            if kind == "probe_start" and on_start is not None:
                on_start(str(event["id"]), int(event["index"]), int(event["total"]))
            elif kind == "probe":
                result = ProbeResult.from_json(event["result"])
                results.append(result)
                if on_probe is not None:
                    on_probe(result)
            elif kind == "report":
                report = PreflightReport.from_json(event["report"])
                return  # done: do not wait for EOF, a straggler may hold the pipe open
            elif kind == "error":
                error = str(event.get("message"))

    async def read_stderr() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            stderr_tail.append(raw)
            del stderr_tail[:-40]

    readers = asyncio.ensure_future(read_stdout())
    stderr_task = asyncio.ensure_future(read_stderr())
    waiters: list[asyncio.Future[Any]] = [readers]
    cancel_task = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    if cancel_task is not None:
        waiters.append(cancel_task)
    try:
        done, _ = await asyncio.wait(
            waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if readers not in done:
            error = (
                "cancelled"
                if cancel_task is not None and cancel_task in done
                else f"timed out after {timeout_s:g} s"
            )
            kill_group(pgid)
            readers.cancel()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 10)
    except asyncio.CancelledError:
        kill_group(pgid)
        raise
    finally:
        if cancel_task is not None:
            cancel_task.cancel()
        # Stragglers in the group (a rank that outlived the runner) go too; PDEATHSIG is the
        # backstop, this is the guarantee.
        kill_group(pgid)
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(stderr_task, 2)
        stderr_task.cancel()
        if proc.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 5)
        _clean_shm(pgid)
        with contextlib.suppress(OSError):
            os.rmdir(cwd)
    if report is not None and error is None:
        return report
    if error is None:
        tail = b"".join(stderr_tail).decode("utf-8", "replace").strip()[-1500:]
        error = _too_old(python, tail) or (
            f"preflight child exited with {proc.returncode} without a report"
            + (f": {tail}" if tail else "")
        )
    return _error_report(python, options, results, error, started)


def run_preflight_sync(
    python: str,
    options: PreflightOptions,
    on_probe: ProbeCallback | None = None,
    *,
    on_start: StartCallback | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> PreflightReport:
    """Blocking wrapper for the CLI; Ctrl-C cancels the child and its ranks."""

    async def main() -> PreflightReport:
        cancel = asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, cancel.set)
            loop.add_signal_handler(signal.SIGTERM, cancel.set)
        return await run_preflight(
            python, options, on_probe, cancel, on_start=on_start, timeout_s=timeout_s, env=env
        )

    return asyncio.run(main())


# --------------------------------------------------------------------------- cache


@dataclass(frozen=True)
class CachedReport:
    report: PreflightReport
    age_s: float
    path: Path


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ddp-lsp" / "preflight"


def cache_key(workspace: str, python: str, host: str | None = None) -> str:
    """Results belong to (workspace, interpreter, host): another venv or node is another machine."""
    ident = json.dumps(
        [os.path.abspath(workspace), os.path.abspath(python), host or socket.gethostname()]
    )
    return hashlib.sha256(ident.encode("utf-8")).hexdigest()[:24]


class PreflightCache:
    """Last report per workspace, as ``<cache_dir>/<key>.json`` (written atomically)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or cache_dir()

    def path(self, workspace: str, python: str, host: str | None = None) -> Path:
        return self.directory / f"{cache_key(workspace, python, host)}.json"

    def save(
        self, workspace: str, python: str, report: PreflightReport, host: str | None = None
    ) -> Path:
        path = self.path(workspace, python, host)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(report.to_json(), handle)
        os.replace(tmp, path)
        return path

    def load(
        self, workspace: str, python: str, host: str | None = None, now: float | None = None
    ) -> CachedReport | None:
        """The cached report and its age in seconds, or None (missing, unreadable, other schema)."""
        path = self.path(workspace, python, host)
        try:
            with open(path, encoding="utf-8") as handle:
                report = PreflightReport.from_json(json.load(handle))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        from ddp_lsp.preflight.report import age_seconds

        age = age_seconds(
            report, None if now is None else datetime.fromtimestamp(now, timezone.utc)
        )
        return CachedReport(report, age if age is not None else float("inf"), path)


def default_python() -> str:
    return sys.executable


def validate_python(path: str, env: Mapping[str, str] | None = None) -> str:
    """Resolve the ``ddp-lsp.preflight.python`` setting to an executable file, or raise
    ``ValueError``: the value comes from editor settings, and it is what we execute."""
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise ValueError("ddp-lsp.preflight.python must be a path to a Python interpreter")
    path = os.path.expanduser(path.strip())
    if os.sep not in path:
        import shutil

        found = shutil.which(
            path, path=(os.environ if env is None else env).get("PATH", os.defpath)
        )
        if found is None:
            raise ValueError(f"ddp-lsp.preflight.python: {path!r} not found on PATH")
        path = found
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise ValueError(f"ddp-lsp.preflight.python: {path} is not an executable file")
    return os.path.abspath(path)


def worst_status(results: list[ProbeResult]) -> Status | None:
    order = [Status.FAIL, Status.WARN, Status.PASS, Status.SKIP]
    present = {r.status for r in results}
    return next((s for s in order if s in present), None)
