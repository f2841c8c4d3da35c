"""The preflight command's options: the parameter count comes from the open document."""

from __future__ import annotations

from ddp_lsp.lsp.configuration import ConfigurationService
from ddp_lsp.lsp.preflight import PreflightReports, PreflightService
from ddp_lsp.lsp.state import ServerState

MODEL = """import torch
from torch import nn

model = nn.Sequential(nn.Linear(1024, 4096), nn.Linear(4096, 1024))
"""


def _service() -> tuple[PreflightService, ServerState]:
    config = ConfigurationService()
    reports = PreflightReports(config)
    state = ServerState(
        publish=lambda *a, **k: None,
        show_error=lambda *a, **k: None,
        config=config,
        machine=reports,
    )
    state.schedule = lambda: None  # type: ignore[method-assign]  # no event loop here
    return PreflightService(state, reports), state


def test_params_are_estimated_from_the_open_document() -> None:
    service, state = _service()
    state.open("file:///proj/train.py", MODEL, 1, "python")
    opts = service.options_for("file:///proj/train.py", {"quick": False})
    assert opts["params"] == 1024 * 4096 + 4096 + 4096 * 1024 + 1024


def test_explicit_params_win_and_unknown_documents_add_nothing() -> None:
    service, state = _service()
    state.open("file:///proj/train.py", MODEL, 1, "python")
    assert service.options_for("file:///proj/train.py", {"params": 7})["params"] == 7
    assert "params" not in service.options_for("file:///proj/other.py", None)


JOB = """import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader

def run(rank):
    dist.init_process_group("nccl", rank=rank, world_size=2)
    loader = DataLoader(ds, num_workers=4, pin_memory=True)

if __name__ == "__main__":
    mp.spawn(run, nprocs=2)
"""


def test_the_job_comes_from_the_open_document() -> None:
    service, state = _service()
    state.open("file:///proj/train.py", JOB, 1, "python")
    opts = service.options_for("file:///proj/train.py", None)
    assert opts["backend"] == "nccl" and opts["backend_source"] == "train.py:6"
    assert opts["world_size"] == 2 and opts["world_size_source"] == "train.py:10"
    assert (opts["num_workers"], opts["pin_memory"]) == (4, True)
    # The command's own options win; a half-typed document adds nothing and breaks nothing.
    mine = service.options_for("file:///proj/train.py", {"backend": "gloo", "worldSize": 1})
    assert (mine["backend"], mine["world_size"]) == ("gloo", 1)
    assert "backend_source" not in mine and "world_size_source" not in mine
    state.open("file:///proj/half.py", JOB + "def broken(:\n", 1, "python")
    assert "backend" not in service.options_for("file:///proj/half.py", None)


def test_a_lower_bound_is_no_model_size() -> None:
    # The case: layers sized from a config object make the count a lower bound
    # (9,472 estimated for a ~25.6 M model); no verdict may rest on it.
    service, state = _service()
    text = MODEL + "\nhead = nn.Linear(cfg.hidden, cfg.vocab)\n"
    state.open("file:///proj/train.py", text, 1, "python")
    assert "params" not in service.options_for("file:///proj/train.py", {"quick": False})
