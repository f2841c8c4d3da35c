"""The probe registry: every probe, in the order the runner runs them.

Torch-free probes come first so their results stream out while the runner imports torch.
"""

from __future__ import annotations

from ddp_lsp.preflight.probes.base import Outcome, Probe, ProbeContext, SystemHooks
from ddp_lsp.preflight.probes.correctness import CORRECTNESS_PROBES
from ddp_lsp.preflight.probes.dist import DIST_PROBES
from ddp_lsp.preflight.probes.gpu import GPU_PROBES
from ddp_lsp.preflight.probes.memory import MEMORY_PROBES
from ddp_lsp.preflight.probes.system import SYSTEM_PROBES

ALL_PROBES: tuple[Probe, ...] = (
    *SYSTEM_PROBES,
    *MEMORY_PROBES,
    *GPU_PROBES,
    *DIST_PROBES[:1],  # dist.handshake: the group forms at all
    *CORRECTNESS_PROBES,  # dist.correctness: DDP on it trains like one process
    *DIST_PROBES[1:],
)
PROBES_BY_ID: dict[str, Probe] = {p.id: p for p in ALL_PROBES}

__all__ = ["ALL_PROBES", "PROBES_BY_ID", "Outcome", "Probe", "ProbeContext", "SystemHooks"]
