"""Runtime guards for distributed training: the small-run memory gate and the dead-rank guard.

Needs torch (the ``preflight`` extra), but importing this package does not import torch:
the names below load on first use, so ``import ddp_lsp.runtime`` stays cheap and the
supervisor (``ddp-lsp smallrun``), which never imports torch, can live here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddp_lsp.runtime.guard import (
        DistributedGuard,
        FailureRecord,
        RankFailureError,
        guard_distributed,
    )
    from ddp_lsp.runtime.memory import (
        MemoryGrowthError,
        MemoryGrowthMonitor,
        MemorySample,
        lightning_callback,
        monitor_steps,
    )
    from ddp_lsp.runtime.memory_verdict import GrowthReport, LeakCause

_EXPORTS = {
    "DistributedGuard": "ddp_lsp.runtime.guard",
    "FailureRecord": "ddp_lsp.runtime.guard",
    "RankFailureError": "ddp_lsp.runtime.guard",
    "guard_distributed": "ddp_lsp.runtime.guard",
    "GrowthReport": "ddp_lsp.runtime.memory_verdict",
    "LeakCause": "ddp_lsp.runtime.memory_verdict",
    "MemoryGrowthError": "ddp_lsp.runtime.memory",
    "MemoryGrowthMonitor": "ddp_lsp.runtime.memory",
    "MemorySample": "ddp_lsp.runtime.memory",
    "lightning_callback": "ddp_lsp.runtime.memory",
    "monitor_steps": "ddp_lsp.runtime.memory",
}

__all__ = [
    "DistributedGuard",
    "FailureRecord",
    "GrowthReport",
    "LeakCause",
    "MemoryGrowthError",
    "MemoryGrowthMonitor",
    "MemorySample",
    "RankFailureError",
    "guard_distributed",
    "lightning_callback",
    "monitor_steps",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
