"""The project-wide view: an index of every file's summary and the facts that flow across files.

The analysis of one file consumes its :class:`ModuleProjectFacts` (``analyze(...,
project=facts.for_path(rel))``); the CLI and the server build the index and keep it current.
"""

from __future__ import annotations

from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
from ddp_lsp.project.flow import ProjectFacts, compute
from ddp_lsp.project.index import ProjectIndex, find_root
from ddp_lsp.project.resolve import Resolver
from ddp_lsp.project.summary import ModuleSummary, module_name

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
