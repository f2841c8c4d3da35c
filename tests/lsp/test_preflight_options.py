"""The preflight command's options: the parameter count comes from the open document."""

from __future__ import annotations

from ddp_lsp.lsp.preflight import PreflightService
from ddp_lsp.lsp.state import ServerState

MODEL = """import torch
from torch import nn

model = nn.Sequential(nn.Linear(1024, 4096), nn.Linear(4096, 1024))
"""


def _service() -> tuple[PreflightService, ServerState]:
    state = ServerState(publish=lambda *a, **k: None, show_error=lambda *a, **k: None)
    state.schedule = lambda: None  # type: ignore[method-assign]  # no event loop here
    return PreflightService(state), state


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


def test_a_lower_bound_is_no_model_size() -> None:
    # The case: layers sized from a config object make the count a lower bound
    # (9,472 estimated for a ~25.6 M model); no verdict may rest on it.
    service, state = _service()
    text = MODEL + "\nhead = nn.Linear(cfg.hidden, cfg.vocab)\n"
    state.open("file:///proj/train.py", text, 1, "python")
    assert "params" not in service.options_for("file:///proj/train.py", {"quick": False})
