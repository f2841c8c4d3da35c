"""The project-wide view: an index of every file's summary and the facts that flow across files.

The analysis of one file consumes its :class:`ModuleProjectFacts` (``analyze(...,
project=facts.for_path(rel))``); the CLI and the server build the index and keep it current.

The names below are imported when first asked for (PEP 562): ``ddp-lsp check FILE`` of an
unchanged project reads its snapshot through :mod:`~ddp_lsp.project.index` and
:mod:`~ddp_lsp.project.snapshot` and never needs the computation (:mod:`~ddp_lsp.project.flow`
and the stages, resolution and reach it imports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
    from ddp_lsp.project.flow import ProjectFacts, compute
    from ddp_lsp.project.index import ProjectIndex, find_root
    from ddp_lsp.project.resolve import Resolver
    from ddp_lsp.project.summary import ModuleSummary, module_name

_FROM = {
    "CalleeProps": "ddp_lsp.core.crossfile",
    "ModuleProjectFacts": "ddp_lsp.core.crossfile",
    "ParamKind": "ddp_lsp.core.crossfile",
    "Provenance": "ddp_lsp.core.crossfile",
    "ProjectFacts": "ddp_lsp.project.flow",
    "compute": "ddp_lsp.project.flow",
    "ProjectIndex": "ddp_lsp.project.index",
    "find_root": "ddp_lsp.project.index",
    "Resolver": "ddp_lsp.project.resolve",
    "ModuleSummary": "ddp_lsp.project.summary",
    "module_name": "ddp_lsp.project.summary",
}

__all__ = [
    "CalleeProps",
    "ModuleProjectFacts",
    "ModuleSummary",
    "ParamKind",
    "ProjectFacts",
    "ProjectIndex",
    "Provenance",
    "Resolver",
    "compute",
    "find_root",
    "module_name",
]


if not TYPE_CHECKING:  # (mypy reads the imports above, and still catches a misspelt name)

    def __getattr__(name: str) -> Any:
        where = _FROM.get(name)
        if where is None:  # a submodule (`from ddp_lsp.project import snapshot`) is imported then
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM})
