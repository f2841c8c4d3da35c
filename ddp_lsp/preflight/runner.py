"""The preflight child: ``python -m ddp_lsp.preflight`` in the interpreter the user trains with.

Each probe runs in a forked worker under its own timeout. The worker's stdout goes to stderr so
nothing a library prints can corrupt the JSON-lines protocol; its result comes back on a pipe.
A worker that overruns is stopped with its whole process tree (found through /proc, this
process being a child subreaper so orphaned grandchildren come back to it), and the files it
left in /dev/shm are removed; the probes that finished keep their results.

Torch-free probes run in a helper forked before ``import torch``: they stream out while the
runner imports torch (2 s) on the other core, then the torch probes run from the runner. GPU probes never touch CUDA in this process, only in workers, because
a CUDA context does not survive fork.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import IO, Any

from ddp_lsp import proctree
from ddp_lsp.preflight.probes import ALL_PROBES, PROBES_BY_ID, Probe, ProbeContext
from ddp_lsp.preflight.probes.base import Outcome, SystemHooks
from ddp_lsp.preflight.probes.ranks import INJECT_ENV, set_pdeathsig
from ddp_lsp.preflight.schema import (
    PreflightOptions,
    PreflightReport,
    ProbeResult,
    Status,
    add_option_flags,
    options_from_flags,
)

SHM_DIR = "/dev/shm"


def shm_prefix() -> str:
    # Keyed by the process group: the client that kills the group can clean up by it.
    return f"ddp-lsp-pf-{os.getpgrp()}"


# --------------------------------------------------------------------------- process trees
# ddp_lsp.proctree: the process-tree toolkit shared with smallrun and feasibility.


def shm_snapshot() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def clean_shm(before: set[str], pids: Sequence[int], prefix: str) -> list[str]:
    """Remove /dev/shm files a killed probe left: ours (prefix), torch's (``torch_<pid>_...``)
    for the killed pids, and new ``nccl-*`` segments nobody maps any more."""
    removed = []
    pid_marks = tuple(f"torch_{p}_" for p in pids)
    for name in sorted(shm_snapshot() - before):
        ours = name.startswith(prefix) or name.startswith(pid_marks)
        # nccl-* names carry no pid: remove one only if no live process still has it open,
        # so a concurrent training job's segment is never touched.
        if ours or (name.startswith("nccl-") and not _in_use(os.path.join(SHM_DIR, name))):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def _in_use(path: str) -> bool:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/maps", encoding="utf-8", errors="replace") as handle:
                if path in handle.read():
                    return True
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") == path:
                    return True
        except OSError:
            continue
    return False


# --------------------------------------------------------------------------- one probe


def _result(probe: Probe, outcome: Outcome, duration: float) -> ProbeResult:
    return ProbeResult(
        probe.id,
        probe.title,
        outcome.status,
        outcome.message,
        dict(outcome.values),
        outcome.fix,
        tuple(outcome.references) or probe.references,
        duration,
        outcome.needed and outcome.status is Status.SKIP,
    )


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def run_isolated(probe: Probe, ctx: ProbeContext, timeout_s: float) -> ProbeResult:
    """Run one probe in a forked worker; kill its whole tree if it overruns ``timeout_s``."""
    before = shm_snapshot()
    read_fd, write_fd = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # worker
        status = 0
        try:
            os.close(read_fd)
            set_pdeathsig()
            os.dup2(2, 1)  # keep the parent's stdout protocol clean
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if probe.id in _inject_hang(ctx):
                _hang_for_tests(ctx)
            try:
                outcome = probe.run(ctx)
            except Exception as exc:  # noqa: BLE001 - a crashing probe is one probe's loss
                outcome = Outcome(
                    Status.FAIL,
                    f"probe crashed: {type(exc).__name__}: {exc}",
                    {"traceback": traceback.format_exc()[-2000:]},
                )
            payload = json.dumps(
                _json_safe(_result(probe, outcome, time.perf_counter() - t0).to_json())
            )
            with os.fdopen(write_fd, "w", encoding="utf-8") as out:
                out.write(payload)
        except BaseException:  # noqa: BLE001
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    timed_out = False
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([pipe], [], [], left)
            if ready:
                data = os.read(pipe.fileno(), 1 << 16)
                if not data:
                    break
                chunks.append(data)
    duration = time.perf_counter() - t0
    if timed_out:
        killed = proctree.freeze_and_kill(pid)
        stuck = proctree.reap(killed, 3.0)
        removed = clean_shm(before, killed, ctx.shm_prefix)
        return ProbeResult(
            probe.id,
            probe.title,
            Status.FAIL,
            f"did not finish within {timeout_s:g} s (hung; killed with {len(killed)} process(es))",
            {
                "timeout_s": timeout_s,
                "killed_pids": killed,
                "removed_shm": removed,
                # Stuck in the kernel (D state): they die when their driver call returns.
                "unkillable_pids": stuck,
            },
            _HANG_FIX.get(probe.id, "rerun this probe alone with --probe " + probe.id),
            (),
            duration,
        )
    _, wait_status = os.waitpid(pid, 0)
    proctree.reap_children()
    try:
        return ProbeResult.from_json(json.loads(b"".join(chunks).decode("utf-8")))
    except (ValueError, KeyError):
        code = os.waitstatus_to_exitcode(wait_status)
        return ProbeResult(
            probe.id,
            probe.title,
            Status.FAIL,
            f"probe worker died without a result (exit {code})",
            {"exit": code},
            None,
            (),
            duration,
        )


_HANG_FIX = {
    "dist.handshake": "a rank hangs in init_process_group: check MASTER_ADDR/PORT, NCCL_SOCKET_IFNAME; "
    "rerun with NCCL_DEBUG=INFO",
    "dist.busbw": "a collective hangs: run with NCCL_DEBUG=INFO; try NCCL_P2P_DISABLE=1 to test P2P",
    "gpu.p2p": "a peer copy hangs: broken P2P (PCIe ACS/IOMMU); export NCCL_P2P_DISABLE=1",
    "cuda.basic": "CUDA initialisation hangs: check the driver (nvidia-smi), GPU persistence mode",
    "dist.correctness": "a rank hangs in DDP's broadcast or gradient all_reduce: see dist.handshake "
    "and gpu.p2p; rerun with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL",
}


def _inject_hang(ctx: ProbeContext) -> set[str]:
    out = set()
    for item in str(ctx.env.get(INJECT_ENV, "")).split(","):
        name, _, arg = item.strip().partition(":")
        if name == "hang" and arg:
            out.add(arg)
    return out


def _hang_for_tests(ctx: ProbeContext) -> None:
    """A probe that hangs forever, with a grandchild and a /dev/shm file to clean up."""
    path = os.path.join(SHM_DIR, f"{ctx.shm_prefix}-{os.getpid()}-hang")
    with open(path, "wb") as handle:
        handle.write(b"x" * 4096)
    if os.fork() == 0:
        while True:
            time.sleep(3600)
    while True:
        time.sleep(3600)


# --------------------------------------------------------------------------- the run


def select_probes(options: PreflightOptions) -> list[Probe]:
    if options.probes:
        unknown = [p for p in options.probes if p not in PROBES_BY_ID]
        if unknown:
            raise ValueError(
                f"unknown probe(s): {', '.join(unknown)}; known: {', '.join(PROBES_BY_ID)}"
            )
        return [p for p in ALL_PROBES if p.id in options.probes]
    return [p for p in ALL_PROBES if p.quick or not options.quick]


Emit = Callable[[dict[str, Any]], None]


def run(
    options: PreflightOptions,
    emit: Emit,
    env: dict[str, str] | None = None,
    hooks: SystemHooks | None = None,
) -> PreflightReport:
    started = time.perf_counter()
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    env = dict(os.environ if env is None else env)
    ctx = ProbeContext(
        options=options, env=env, hooks=hooks or SystemHooks(), shm_prefix=shm_prefix()
    )
    probes = select_probes(options)
    emit({"event": "start", "probes": [p.id for p in probes], "pid": os.getpid()})
    results: dict[str, ProbeResult] = {}
    torch_error: str | None = None
    torch_mod: Any = None
    free = [p for p in probes if not p.needs_torch]
    needs = [p for p in probes if p.needs_torch]
    total = len(probes)

    def run_one(probe: Probe, index: int) -> None:
        emit({"event": "probe_start", "id": probe.id, "index": index, "total": total})
        if probe.needs_torch and torch_error is not None and probe.id != "env.versions":
            result = ProbeResult(
                probe.id,
                probe.title,
                Status.SKIP,
                f"torch is not importable in {sys.executable}: {torch_error}",
                {},
                needed=True,  # no torch, no training job: nothing here was checked
            )
        else:
            ctx.previous = dict(results)
            result = run_isolated(probe, ctx, probe_timeout(probe, options))
        results[probe.id] = result
        emit({"event": "probe", "result": result.to_json()})

    side = start_side_runner(free, run_one, results) if free and needs else None
    if side is None:
        for index, probe in enumerate(free):
            run_one(probe, index)
    if needs:
        try:
            import torch as torch_mod  # noqa: F811 - imported once, inherited by every fork
        except Exception as exc:  # noqa: BLE001
            torch_error = f"{type(exc).__name__}: {exc}"
    if side is not None:
        results.update(side.collect(free))
    for index, probe in enumerate(needs, start=len(free)):
        run_one(probe, index)
    # Report in registry order, whatever the run order was.
    probe_results = tuple(results[p.id] for p in probes)
    return build_report(
        options, probe_results, created, time.perf_counter() - started, torch_mod, torch_error, ctx
    )


class SideRunner:
    """The torch-free probes, run by a helper forked *before* ``import torch`` so that they (and
    slow tools such as ``nvidia-smi topo`` or ``dcgmi``) overlap the 2 s import on another core.
    The helper writes its events to our stdout itself; this process writes nothing until the
    helper is done, so lines never interleave. Results come back on a pipe at the end."""

    def __init__(self, pid: int, read_fd: int) -> None:
        self.pid = pid
        self.read_fd = read_fd

    def collect(self, probes: Sequence[Probe]) -> dict[str, ProbeResult]:
        with os.fdopen(self.read_fd, "rb") as pipe:
            data = pipe.read()
        os.waitpid(self.pid, 0)
        proctree.reap_children()
        try:
            return {r["id"]: ProbeResult.from_json(r) for r in json.loads(data.decode("utf-8"))}
        except (ValueError, KeyError, TypeError):
            # The helper died (it only runs our own probe loop, so this means it was killed).
            return {
                p.id: ProbeResult(p.id, p.title, Status.FAIL, "probe helper died", {})
                for p in probes
            }


def start_side_runner(
    probes: Sequence[Probe],
    run_one: Callable[[Probe, int], None],
    results: dict[str, ProbeResult],
) -> SideRunner:
    sys.stdout.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # helper
        status = 0
        try:
            os.close(read_fd)
            set_pdeathsig()
            proctree.set_child_subreaper()
            for index, probe in enumerate(probes):
                run_one(probe, index)
            payload = json.dumps([results[p.id].to_json() for p in probes])
            with os.fdopen(write_fd, "w", encoding="utf-8") as out:
                out.write(payload)
        except BaseException:  # noqa: BLE001
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    return SideRunner(pid, read_fd)


def probe_timeout(probe: Probe, options: PreflightOptions) -> float:
    base = probe.timeout_s
    if probe.id == "dist.handshake":
        # Ranks may wait handshake_timeout in init and again in monitored_barrier.
        base = max(base, 2 * options.handshake_timeout_s + 15)
    return base * options.timeout_scale


def build_report(
    options: PreflightOptions,
    probes: tuple[ProbeResult, ...],
    created: str,
    duration: float,
    torch_mod: Any,
    torch_error: str | None,
    ctx: ProbeContext,
) -> PreflightReport:
    versions = next((p for p in probes if p.id == "env.versions"), None)
    vals = versions.values if versions else {}
    torch_version = (
        getattr(torch_mod, "__version__", None) if torch_mod is not None else vals.get("torch")
    )
    cuda = (
        getattr(getattr(torch_mod, "version", None), "cuda", None)
        if torch_mod is not None
        else vals.get("cuda_build")
    )
    handshake = next((p for p in probes if p.id == "dist.handshake"), None)
    backend = (handshake.values.get("backend") if handshake else None) or options.backend
    world = (handshake.values.get("world_size") if handshake else None) or options.world_size
    gpus = vals.get("gpus") or []
    cuda_basic = next((p for p in probes if p.id == "cuda.basic"), None)
    if not gpus and cuda_basic is not None:
        # No nvidia-smi (some containers): the names torch.cuda reported.
        gpus = [g.get("name") for g in cuda_basic.values.get("gpus") or [] if isinstance(g, dict)]
    return PreflightReport(
        host=socket.gethostname(),
        python=sys.executable,
        python_version=platform.python_version(),
        platform=platform.platform(),
        created=created,
        duration_s=duration,
        probes=probes,
        torch=torch_version,
        cuda=cuda,
        nccl=vals.get("nccl"),
        driver=vals.get("driver"),
        gpus=tuple(str(g) for g in gpus),
        backend=backend,
        world_size=world,
        options=options.to_json(),
        node_rank=_node_rank(options, ctx.env),
    )


def _node_rank(options: PreflightOptions, env: Mapping[str, str]) -> int | None:
    if not options.torchrun:
        return None
    value = env.get("GROUP_RANK") or env.get("RANK") or "0"
    return int(value) if value.isdigit() else None


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ddp_lsp.preflight",
        description="Probe this machine for PyTorch distributed training.",
    )
    p.add_argument("--format", choices=("text", "markdown", "json", "jsonl"), default="text")
    p.add_argument(
        "--json", dest="json_file", metavar="FILE", help="also write the JSON report here"
    )
    p.add_argument("--list", action="store_true", help="list the probes and exit")
    p.add_argument(
        "--env",
        action="store_true",
        help="print the environment report (ddp-lsp env) as JSON lines and exit",
    )
    p.add_argument(
        "--script",
        metavar="FILE",
        help="read backend, ranks and DataLoader settings from this training script "
        "(statically; never imported)",
    )
    p.add_argument(
        "--options-json",
        metavar="JSON",
        help="all options as one JSON object (what ddp-lsp itself passes; other option flags "
        "are then ignored)",
    )
    # The options themselves, for a run by hand: PreflightOptions' fields, as in ddp-lsp
    # preflight plus the runner-only ones (--torchrun).
    add_option_flags(p, runner=True)
    return p


def options_from_args(ns: argparse.Namespace) -> PreflightOptions:
    if ns.options_json is not None:
        try:
            data = json.loads(ns.options_json)
        except ValueError as exc:
            raise ValueError(f"--options-json is not JSON: {exc}") from None
        return PreflightOptions.from_json(data)
    options = options_from_flags(ns)
    if ns.script:
        from ddp_lsp.preflight.scriptinfo import options_with_script

        options = options_with_script(options, ns.script)
    return options


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.list:
        for probe in ALL_PROBES:
            sys.stdout.write(
                f"{probe.id:16} {probe.timeout_s:6.0f} s  {'' if probe.quick else '(full) '}{probe.title}\n"
            )
        return 0
    # Our output gets a private copy of stdout; fd 1 itself now points at stderr, so whatever
    # torch, NCCL or a probe prints can never corrupt the JSON lines the client parses.
    sys.stdout.flush()
    out: IO[str] = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    if ns.env:
        from ddp_lsp.preflight.envinfo import child_main

        return child_main(out)
    jsonl = ns.format == "jsonl"

    def emit(event: dict[str, Any]) -> None:
        if jsonl:
            out.write(json.dumps(event) + "\n")
            out.flush()

    try:
        options = options_from_args(ns)
        select_probes(options)
    except ValueError as exc:
        if jsonl:
            emit({"event": "error", "message": str(exc)})
        else:
            sys.stderr.write(f"preflight: {exc}\n")
        return 2
    proctree.set_child_subreaper()
    signal.signal(signal.SIGTERM, _on_term)
    if options.torchrun:
        from ddp_lsp.preflight.multinode import run_torchrun

        report = run_torchrun(options, emit)
    else:
        report = run(options, emit)
    from ddp_lsp.preflight.multinode import local_rank, writes_report

    writer = writes_report(options, os.environ)
    if ns.json_file and writer:
        with open(ns.json_file, "w", encoding="utf-8") as handle:
            json.dump(report.to_json(), handle, indent=2)
    if jsonl:
        emit({"event": "report", "report": report.to_json()})
    elif ns.format == "json":
        out.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        from ddp_lsp.preflight.report import render_markdown, render_text

        if writer:
            out.write(render_markdown(report) if ns.format == "markdown" else render_text(report))
        elif local_rank(os.environ) != 0:
            out.write(
                f"node {report.node_rank} ({report.host}), local rank {local_rank(os.environ)}: "
                "this node is probed by its local rank 0; full report gathered to rank 0\n"
            )
        else:
            from ddp_lsp.preflight.report import summary_counts

            out.write(
                f"node {report.node_rank} ({report.host}): {summary_counts(report)}; "
                "full report gathered to rank 0\n"
            )
    out.flush()
    return report.exit_code(options.strict)


def _on_term(signum: int, frame: Any) -> None:
    """Cancelled: take every worker and rank down with us (the client also kills the group)."""
    for pid in proctree.descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    prefix = shm_prefix()
    for name in shm_snapshot():
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
            except OSError:
                pass
    os._exit(130)
