"""``ddp-lsp env``: the environment block for a bug report, like ``python -m torch.utils.collect_env``
and ``accelerate env``, for distributed training.

It reports the torch and CUDA builds, cuDNN, NCCL, the NVIDIA driver, the GPUs and their
topology (``nvidia-smi topo -m``), the CPU model and the CPUs this process may use, RAM and the
container's memory limit, /dev/shm, the packages that matter to a DDP job, and the NCCL_* /
TORCH_* / CUDA_* variables that are set, as Markdown (paste it into an issue) or ``--json``.

Like the preflight, it runs in a child process started with the interpreter you train with
(``--python``; the CLI never imports torch), from an empty directory with ``-E``. The child
prints one JSON line per section, cheapest first (machine, then torch, then CUDA devices), so
when torch is missing, an import crashes, ``nvidia-smi`` is absent or CUDA initialisation hangs
until the timeout, the report still has every section that finished and says what is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from ddp_lsp import proctree

SCHEMA = "ddp-lsp-env/1"

#: Distributions worth a line in a DDP bug report (collect_env's list, plus the launchers and
#: frameworks that wrap DDP).
_PACKAGES = re.compile(
    r"^(torch|torchvision|torchaudio|torchdata|torchtext|triton|numpy|accelerate|deepspeed|"
    r"lightning|pytorch-lightning|lightning-fabric|transformers|datasets|timm|apex|fairscale|"
    r"xformers|flash-attn|bitsandbytes|peft|mpi4py|horovod|pynvml|nvidia-ml-py|ray|optree|"
    r"onnx|onnxruntime|ddp-lsp|nvidia-.*|intel-openmp|mkl)$",
    re.IGNORECASE,
)
#: Variables that change how a distributed job starts or communicates.
_ENV_PREFIXES = ("NCCL_", "TORCH_", "PYTORCH_", "CUDA_", "GLOO_", "NVIDIA_", "OMP_", "MKL_", "UCX_")
_ENV_NAMES = frozenset(
    "MASTER_ADDR MASTER_PORT WORLD_SIZE RANK LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK "
    "TORCHELASTIC_RUN_ID SLURM_JOB_ID SLURM_NNODES SLURM_NTASKS SLURM_PROCID".split()
)


# --------------------------------------------------------------------------- child side


def _ctx() -> Any:
    from ddp_lsp.preflight.probes.base import ProbeContext
    from ddp_lsp.preflight.schema import PreflightOptions

    return ProbeContext(options=PreflightOptions(), env=dict(os.environ))


def _cpu_model(text: str) -> str | None:
    for key in ("model name", "Model", "cpu model", "Hardware"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if m:
            return m.group(1).strip()
    return None


def machine_section(ctx: Any = None) -> dict[str, Any]:
    """Everything that needs neither torch nor a GPU."""
    from ddp_lsp.preflight.probes.base import read_text
    from ddp_lsp.preflight.probes.gpu import parse_topo, query_smi
    from ddp_lsp.preflight.probes.memory import cgroup_memory, read_meminfo
    from ddp_lsp.preflight.probes.system import effective_cpus

    ctx = ctx or _ctx()
    cpus, cpu_detail = effective_cpus(ctx)
    mem = read_meminfo(ctx)
    cgroup = cgroup_memory(ctx)
    try:
        shm = ctx.hooks.disk_usage(ctx.hooks.path("dev/shm"))
        shm_info: dict[str, Any] = {"total_bytes": int(shm.total), "free_bytes": int(shm.free)}
    except OSError as exc:
        shm_info = {"error": exc.strerror or str(exc)}
    import ddp_lsp

    libc = platform.libc_ver()
    out: dict[str, Any] = {
        "ddp_lsp": ddp_lsp.__version__,
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "os": {
            "platform": platform.platform(),
            "libc": " ".join(p for p in libc if p) or None,
            "hostname": ctx.hooks.hostname(),
        },
        "cpu": {
            "model": _cpu_model(read_text(ctx.hooks.path("proc/cpuinfo")) or ""),
            "machine": platform.machine(),
            "usable": cpus,
            **cpu_detail,
        },
        "memory": {
            "total_bytes": mem.get("MemTotal"),
            "available_bytes": mem.get("MemAvailable"),
            "swap_bytes": mem.get("SwapTotal"),
            "cgroup_limit_bytes": cgroup[0] if cgroup else None,
            "shm": shm_info,
        },
        "packages": _packages(),
        "variables": {
            k: v
            for k, v in sorted(ctx.env.items())
            if k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES
        },
    }
    exe = ctx.which("nvidia-smi")
    if exe is None:
        out["nvidia_smi"] = {"error": "nvidia-smi not found on PATH"}
    else:
        try:
            smi = query_smi(ctx)
            topo = ctx.run([exe, "topo", "-m"], 10)
        except (OSError, subprocess.SubprocessError) as exc:
            out["nvidia_smi"] = {"path": exe, "error": f"{type(exc).__name__}: {exc}"[:300]}
        else:
            info: dict[str, Any] = {
                "path": exe,
                "driver": smi.driver if smi else None,
                "cuda": smi.cuda if smi else None,
                "gpus": list(smi.gpus) if smi else [],
                "bus_ids": list(smi.bus_ids) if smi else [],
            }
            if topo.returncode == 0 and parse_topo(topo.stdout).gpus:
                info["topology"] = topo.stdout.strip()
            elif topo.returncode != 0:
                info["topology_error"] = (topo.stderr or topo.stdout).strip()[:300]
            if smi is None or smi.driver is None:
                info["error"] = "nvidia-smi listed no GPU (driver not loaded?)"
            out["nvidia_smi"] = info
    return out


def _packages() -> dict[str, str]:
    from importlib import metadata

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name and _PACKAGES.match(name):
            found.setdefault(name.lower(), dist.version)
    return dict(sorted(found.items()))


def torch_section(import_torch: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Versions and builds, without touching CUDA (a hang there must not cost these)."""
    try:
        if import_torch is not None:
            torch = import_torch()
        else:
            import torch
    except Exception as exc:  # ImportError, or a broken wheel raising OSError on a .so
        return {
            "error": f"torch is not importable in {sys.executable}: {type(exc).__name__}: {exc}"[
                :500
            ]
        }
    dist = getattr(torch, "distributed", None)
    available = bool(dist is not None and dist.is_available())

    def backend(name: str) -> bool:
        probe = getattr(dist, f"is_{name}_available", None)
        try:
            return bool(available and probe is not None and probe())
        except Exception:
            return False

    out: dict[str, Any] = {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "hip_build": getattr(torch.version, "hip", None),
        "git_version": getattr(torch.version, "git_version", None),
        "debug": bool(getattr(torch.version, "debug", False)),
        "distributed": available,
        "backends": {b: backend(b) for b in ("gloo", "nccl", "mpi", "ucc")},
    }
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        out["cudnn"] = None
    out["nccl"] = None
    if out["backends"]["nccl"]:
        with contextlib.suppress(Exception):
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    return out


def cuda_section(import_torch: Callable[[], Any] | None = None) -> dict[str, Any]:
    """The CUDA devices torch sees (this initialises CUDA: the last section, under the timeout)."""
    try:
        torch = import_torch() if import_torch is not None else __import__("torch")
    except Exception as exc:
        return {"error": f"torch is not importable: {type(exc).__name__}"}
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return {"available": False, "reason": "CPU-only torch build"}
    try:
        if not torch.cuda.is_available():
            return {"available": False, "reason": "torch.cuda.is_available() is False"}
        devices = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append(
                {
                    "index": i,
                    "name": props.name,
                    "capability": f"{props.major}.{props.minor}",
                    "memory_bytes": int(props.total_memory),
                }
            )
        return {"available": True, "devices": devices}
    except Exception as exc:
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"[:500]}


def child_main(out: IO[str]) -> int:
    """In the training interpreter: one JSON line per section, flushed as each is ready."""
    for name, section in (
        ("machine", machine_section),
        ("torch", torch_section),
        ("cuda", cuda_section),
    ):
        try:
            data = section()
        except Exception as exc:  # noqa: BLE001 - one section's loss, never the report's
            data = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        out.write(json.dumps({"section": name, "data": data}, default=str) + "\n")
        out.flush()
    return 0


# --------------------------------------------------------------------------- parent side


class EnvError(RuntimeError):
    """The interpreter could not be started at all."""


def collect(
    python: str, timeout_s: float = 60.0, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run the child in ``python``; the sections that arrived, and ``notes`` on what did not."""
    from ddp_lsp.preflight.client import child_argv

    cwd = tempfile.mkdtemp(prefix="ddp-lsp-env-")
    try:
        proc = subprocess.Popen(
            child_argv(python, None),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,
            env=dict(os.environ if env is None else env),
        )
    except OSError as exc:
        os.rmdir(cwd)
        raise EnvError(f"cannot start {python}: {exc.strerror or exc}") from exc
    notes: list[str] = []
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proctree.kill_group(proc.pid)
        stdout, stderr = proc.communicate()
        notes.append(
            f"timed out after {timeout_s:g} s (CUDA initialisation hung?); sections "
            "that finished are shown"
        )
    finally:
        proctree.kill_group(proc.pid)
        with contextlib.suppress(OSError):
            os.rmdir(cwd)
    report: dict[str, Any] = {"schema": SCHEMA, "interpreter": python}
    for line in stdout.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            event = json.loads(line)
            report[str(event["section"])] = event["data"]
    for name in ("machine", "torch", "cuda"):
        if name not in report:
            report[name] = {"error": "not reported"}
            if not notes:
                tail = stderr.decode("utf-8", "replace").strip()[-800:]
                notes.append(
                    f"the child exited with {proc.returncode} before the {name} section"
                    + (f": {tail}" if tail else "")
                )
    report["notes"] = notes + _notes(report)
    return report


def _notes(report: Mapping[str, Any]) -> list[str]:
    """What is missing, said once, in words."""
    out = []
    torch = report.get("torch") or {}
    if "error" in torch:
        out.append(str(torch["error"]))
    smi = (report.get("machine") or {}).get("nvidia_smi") or {}
    if "error" in smi:
        out.append(f"NVIDIA driver: {smi['error']}")
    return out


def _gib(n: Any) -> str:
    return f"{n / (1 << 30):.1f} GiB" if isinstance(n, int) else "?"


def render_markdown(report: Mapping[str, Any]) -> str:
    machine = report.get("machine") or {}
    torch = report.get("torch") or {}
    cuda = report.get("cuda") or {}
    smi = machine.get("nvidia_smi") or {}
    py = machine.get("python") or {}
    osi = machine.get("os") or {}
    cpu = machine.get("cpu") or {}
    mem = machine.get("memory") or {}
    lines = ["### Environment (`ddp-lsp env`)", ""]

    def item(label: str, text: str) -> None:
        lines.append(f"- **{label}**: {text}")

    item("ddp-lsp", str(machine.get("ddp_lsp", "?")))
    item(
        "Python",
        f"{py.get('version', '?')} ({py.get('implementation', '?')}) `{report.get('interpreter')}`",
    )
    item("OS", f"{osi.get('platform', '?')}" + (f", {osi['libc']}" if osi.get("libc") else ""))
    item(
        "CPU",
        f"{cpu.get('model') or cpu.get('machine') or '?'}; {cpu.get('usable', '?')} usable of "
        f"{cpu.get('host_cpus', '?')} (affinity {cpu.get('affinity_cpus', '?')}, cgroup quota "
        f"{cpu.get('cgroup_cpus') or 'none'})",
    )
    shm = mem.get("shm") or {}
    item(
        "Memory",
        f"{_gib(mem.get('total_bytes'))} RAM, {_gib(mem.get('available_bytes'))} available, "
        f"swap {_gib(mem.get('swap_bytes'))}; container limit "
        f"{_gib(mem['cgroup_limit_bytes']) if mem.get('cgroup_limit_bytes') else 'none'}; "
        + (
            f"/dev/shm {_gib(shm.get('free_bytes'))} free of {_gib(shm.get('total_bytes'))}"
            if "error" not in shm
            else f"/dev/shm: {shm['error']}"
        ),
    )
    if "error" in torch:
        item("PyTorch", f"not available: {torch['error']}")
    else:
        build = (
            f"CUDA {torch['cuda_build']}"
            if torch.get("cuda_build")
            else (f"ROCm {torch['hip_build']}" if torch.get("hip_build") else "CPU-only build")
        )
        backends = ", ".join(
            f"{b} {'yes' if ok else 'no'}" for b, ok in (torch.get("backends") or {}).items()
        )
        item(
            "PyTorch",
            f"{torch.get('version')} ({build}{', debug' if torch.get('debug') else ''}); "
            f"git {str(torch.get('git_version') or '?')[:12]}",
        )
        item("cuDNN / NCCL", f"{torch.get('cudnn') or '-'} / {torch.get('nccl') or '-'}")
        item("torch.distributed", backends if torch.get("distributed") else "not built in")
    if "error" in smi:
        item("NVIDIA driver", str(smi["error"]))
    else:
        item("NVIDIA driver", f"{smi.get('driver')} (supports CUDA {smi.get('cuda') or '?'})")
    if cuda.get("available"):
        for dev in cuda.get("devices") or []:
            item(
                f"GPU {dev['index']}",
                f"{dev['name']}, compute capability {dev['capability']}, {_gib(dev['memory_bytes'])}",
            )
    else:
        item("GPUs (torch)", str(cuda.get("reason") or cuda.get("error") or "none"))
    if smi.get("topology"):
        lines += ["", "GPU topology (`nvidia-smi topo -m`):", "", "```", smi["topology"], "```"]
    packages = machine.get("packages") or {}
    lines += ["", "Packages:", ""]
    lines += [f"- {name}=={version}" for name, version in packages.items()] or ["- (none found)"]
    variables = machine.get("variables") or {}
    lines += ["", "Variables:", ""]
    if variables:
        lines += ["```", *(f"{k}={v}" for k, v in variables.items()), "```"]
    else:
        lines.append("- none of NCCL_*, TORCH_*, CUDA_*, MASTER_* ... set")
    if report.get("notes"):
        lines += ["", "Not available:", ""]
        lines += [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ddp-lsp env",
        description="Print the environment of a training interpreter for a bug report: torch, "
        "CUDA, NCCL, driver, GPUs and topology, CPU, RAM, packages, NCCL_*/TORCH_* variables.",
    )
    p.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter you train with (default: this one)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (schema ddp-lsp-env/1)")
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds before giving up on the child"
    )
    return p


def main(argv: Sequence[str]) -> int:
    try:
        ns = build_parser().parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0) and 2
    if not (ns.timeout > 0):
        sys.stderr.write("ddp-lsp env: --timeout must be a positive number\n")
        return 2
    try:
        report = collect(ns.python, ns.timeout)
    except EnvError as exc:
        sys.stderr.write(f"ddp-lsp env: {exc}\n")
        return 2
    if ns.json:
        sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(render_markdown(report))
    return 0
