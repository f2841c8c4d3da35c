"""Process trees: find every descendant of a process, kill them all, reap what we adopted.

One toolkit for everything ddp-lsp starts that may start more: the preflight runner (probe
workers, fork-based ranks), smallrun and feasibility (the user's launcher and its ranks).
stdlib only: the preflight child imports it in the user's training interpreter.

Killing the command's process group is not enough for a distributed run: torchrun starts
each rank with ``start_new_session=True`` (torch/distributed/elastic/.../subprocess_handler.py),
so ranks are in sessions and process groups of their own, and if the agent dies first they
are reparented to init. A supervisor therefore

- makes itself a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so orphaned ranks are
  reparented to it instead of init and stay findable as its descendants;
- walks ``/proc`` for the descendants of the command, repeatedly while it runs, and keeps
  every (pid, start time) it has seen -- the start time guards against pid reuse;
- sends SIGTERM to all of them (and their process groups), waits ``grace`` seconds, then
  SIGKILLs what is left, and reaps its zombie children.

stdlib only; psutil is used if /proc is missing (macOS), else process groups only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    start: int  # clock ticks since boot (/proc/<pid>/stat field 22); identity with pid
    state: str
    cmdline: str


def set_child_subreaper() -> bool:
    """Adopt orphaned descendants (Linux >= 3.4). Returns False where unsupported."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _read_stat(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    rparen = data.rfind(")")
    fields = data[rparen + 2 :].split()
    try:
        state, ppid, start = fields[0], int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        cmd = ""
    return ProcInfo(pid, ppid, start, state, cmd[:300])


def snapshot() -> dict[int, ProcInfo]:
    """All processes, from /proc (or psutil where /proc is missing)."""
    out: dict[int, ProcInfo] = {}
    if os.path.isdir("/proc/self"):
        for name in os.listdir("/proc"):
            if name.isdigit():
                info = _read_stat(int(name))
                if info is not None:
                    out[info.pid] = info
        return out
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return out
    for p in psutil.process_iter(["pid", "ppid", "create_time", "status", "cmdline"]):
        i = p.info
        out[i["pid"]] = ProcInfo(
            i["pid"],
            i["ppid"] or 0,
            int(i["create_time"] * 100),
            str(i["status"])[:1].upper(),
            " ".join(i["cmdline"] or [])[:300],
        )
    return out


def descendants(root: int, procs: dict[int, ProcInfo] | None = None) -> dict[int, ProcInfo]:
    procs = snapshot() if procs is None else procs
    children: dict[int, list[int]] = {}
    for info in procs.values():
        children.setdefault(info.ppid, []).append(info.pid)
    out: dict[int, ProcInfo] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid in out or pid not in procs:
            continue
        out[pid] = procs[pid]
        todo.extend(children.get(pid, []))
    return out


def alive(known: Iterable[tuple[int, int]]) -> list[ProcInfo]:
    """Those of ``(pid, start)`` that still run (same start time: not a reused pid, not a zombie)."""
    out = []
    for pid, start in known:
        info = _read_stat(pid)
        if info is not None and info.start == start and info.state not in ("Z", "X"):
            out.append(info)
    return out


def marked(key: str, value: str) -> list[ProcInfo]:
    """Live processes whose environment has ``key=value`` (Linux /proc; else none).

    Every process started under the supervised command inherits the run's marker, whatever
    session or parent it ended up with: this finds a helper that detached and whose parent
    exited before the supervisor ever saw it in the tree.
    """
    needle = f"{key}={value}".encode()
    out = []
    me = os.getpid()
    for info in snapshot().values():
        if info.pid == me or info.state in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{info.pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if needle in env:
            out.append(info)
    return out


def reap_children() -> None:
    """Collect exit statuses of our dead children (adopted orphans included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        except OSError:
            return
        if pid == 0:
            return


def _signal_all(targets: Iterable[ProcInfo], sig: int) -> None:
    groups: set[int] = set()
    for info in targets:
        try:
            os.kill(info.pid, sig)
        except (ProcessLookupError, PermissionError):
            continue
        try:
            groups.add(os.getpgid(info.pid))
        except OSError:
            pass
    own = os.getpgid(0)
    for pgid in groups - {own}:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass


def kill_tree(
    root: int,
    known: dict[int, int],
    grace: float,
    extra_roots: Iterable[int] = (),
    marker: tuple[str, str] | None = None,
) -> list[ProcInfo]:
    """Terminate ``root``, its descendants and every known ``pid -> start``; return the killed.

    SIGTERM first (torchrun forwards it and ranks can flush), SIGKILL after ``grace``.
    """
    killed: dict[int, ProcInfo] = {}

    def targets() -> list[ProcInfo]:
        procs = snapshot()
        found: dict[int, ProcInfo] = {}
        for r in (root, *extra_roots):
            if r in procs:
                found[r] = procs[r]
            found.update(descendants(r, procs))
        for info in alive(known.items()):
            found[info.pid] = info
            found.update(descendants(info.pid, procs))
        if marker is not None:
            for info in marked(*marker):
                found[info.pid] = info
        me = os.getpid()
        return [i for i in found.values() if i.pid != me and i.state not in ("Z", "X")]

    current = targets()
    for info in current:
        killed[info.pid] = info
    _signal_all(current, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap_children()
        current = targets()
        if not current:
            break
        time.sleep(0.05)
    for _ in range(20):
        reap_children()
        current = targets()
        if not current:
            break
        for info in current:
            killed.setdefault(info.pid, info)
        _signal_all(current, signal.SIGKILL)
        time.sleep(0.05)
    reap_children()
    return sorted(killed.values(), key=lambda i: i.pid)


def is_zombie_or_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (exited, or a zombie waiting to be reaped)."""
    info = _read_stat(pid)
    return info is None or info.state in ("Z", "X")


def freeze_and_kill(pid: int) -> list[int]:
    """SIGSTOP ``pid`` and its descendants so nothing forks while we look, then SIGKILL all of
    them; returns the pids signalled. For trees that get no chance to clean up (a hung probe)."""
    seen: set[int] = set()
    for _ in range(3):
        batch = [p for p in [pid, *descendants(pid)] if p not in seen]
        if not batch:
            break
        for p in batch:
            try:
                os.kill(p, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass
        seen.update(batch)
    killed: list[int] = []
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
            killed.append(p)
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def reap(pids: Iterable[int], within_s: float) -> list[int]:
    """Wait (bounded) for killed processes; they are our children or, as orphans of a killed
    worker, re-parented to us. A process stuck in the kernel (D state, e.g. inside a GPU driver
    call) cannot die on SIGKILL until the call returns: return it rather than block."""
    left = set(pids)
    deadline = time.monotonic() + within_s
    while left:
        for p in list(left):
            try:
                done, _ = os.waitpid(p, os.WNOHANG)
            except ChildProcessError:  # not our child (already reaped, or reaped elsewhere)
                done = p if is_zombie_or_gone(p) else 0
            if done:
                left.discard(p)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    reap_children()
    return sorted(left)


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group (a child started with ``start_new_session=True``)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
