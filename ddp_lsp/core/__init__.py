"""The analysis core: pure functions over text (stdlib + libcst only; never pygls or torch).

Import submodules directly (``from ddp_lsp.core.engine import analyze``); the names below are
loaded on first use so that importing one submodule stays cheap and free of import cycles.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "Document": "ddp_lsp.core.document",
    "analyze": "ddp_lsp.core.engine",
    "fix_text": "ddp_lsp.core.engine",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ddp_lsp.core' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
