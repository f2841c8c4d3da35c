"""Shared fakes for the preflight tests: a fake filesystem root (sysfs, procfs, /dev/shm), fake
rlimits, and a way to find processes a run left behind (by a marker in their environment)."""

from __future__ import annotations

import os
import resource
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ddp_lsp.preflight.probes.base import ProbeContext, SystemHooks
from ddp_lsp.preflight.schema import PreflightOptions

INF = resource.RLIM_INFINITY


class FakeRoot:
    """A directory laid out like / for the parts the probes read."""

    def __init__(self, base: Path) -> None:
        self.base = base
        (base / "dev" / "shm").mkdir(parents=True)
        (base / "sys" / "class" / "net").mkdir(parents=True)

    def iface(self, name: str, up: bool = True, operstate: str | None = None) -> FakeRoot:
        d = self.base / "sys" / "class" / "net" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "flags").write_text("0x1003\n" if up else "0x1002\n")
        (d / "operstate").write_text(
            (operstate or ("unknown" if name == "lo" else "up" if up else "down")) + "\n"
        )
        return self

    def infiniband(self, device: str = "mlx5_0") -> FakeRoot:
        (self.base / "sys" / "class" / "infiniband" / device).mkdir(parents=True)
        return self

    def cpu_max(self, text: str) -> FakeRoot:
        d = self.base / "sys" / "fs" / "cgroup"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(text + "\n")
        return self

    def write(self, rel: str, text: str) -> FakeRoot:
        p = self.base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return self


def limits(
    nofile: tuple[int, int] = (65536, 65536),
    memlock: tuple[int, int] = (INF, INF),
    nproc: tuple[int, int] = (INF, INF),
) -> Callable[[int], tuple[int, int]]:
    table = {
        resource.RLIMIT_NOFILE: nofile,
        resource.RLIMIT_MEMLOCK: memlock,
        resource.RLIMIT_NPROC: nproc,
    }
    return lambda which: table[which]


def disk(total: int, free: int) -> Callable[[str], Any]:
    return lambda path: SimpleNamespace(total=total, used=total - free, free=free)


@pytest.fixture
def root(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path / "root")


def make_ctx(
    root: FakeRoot | None = None,
    env: dict[str, str] | None = None,
    *,
    options: PreflightOptions | None = None,
    **hooks: Any,
) -> ProbeContext:
    base = {"root": str(root.base)} if root is not None else {}
    base.setdefault("getrlimit", limits())
    base.setdefault("cpu_affinity", lambda: set(range(8)))
    base.setdefault("cpu_count", lambda: 8)
    base.update(hooks)
    return ProbeContext(
        options=options or PreflightOptions(),
        env=env if env is not None else {"PATH": ""},
        hooks=SystemHooks(**base),
    )


def fake_exe(directory: Path, name: str, script: str) -> Path:
    """A fake command on PATH (nvidia-smi, dcgmi) that prints canned output."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def new_marker() -> str:
    return uuid.uuid4().hex


def processes_with_marker(marker: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries ``DDP_LSP_TEST_MARKER=marker``;
    forked workers and ranks inherit the environment of the exec'd child, so this finds them all."""
    needle = f"DDP_LSP_TEST_MARKER={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle not in handle.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry))
    return found
