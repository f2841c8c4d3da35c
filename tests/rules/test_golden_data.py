"""The data-loading rules (DDP401-DDP406) on a realistic torchrun script: its exact findings
live in ``golden/data_train.expected.json`` (regenerate with ``pytest --update-goldens`` and
review the diff)."""

from __future__ import annotations

from pathlib import Path

from ddp_lsp.core.env import Environment, LaunchInfo, MachineInfo
from ddp_lsp.core.settings import Settings
from tests.casekit import check_golden

GOLDEN = Path(__file__).parent / "golden" / "data_train.py"
# A 16-CPU node running 4 ranks: fixed here so the golden does not depend on this machine.
ENV = Environment(
    machine=MachineInfo(cpu_count=16, source="preflight on gpu01"),
    launch=LaunchInfo(nproc_per_node=4, launcher="torchrun", sources=("run.sh",)),
)


def test_data_train_golden(update_goldens: bool) -> None:
    settings = Settings(select=("DDP4",))
    check_golden(GOLDEN, update_goldens, settings, ENV)
