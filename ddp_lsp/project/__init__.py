"""The project-wide view: an index of every file's summary and the facts that flow across files.

Nothing here changes the per-file analysis yet; rules, the CLI and the server consume
:class:`ProjectFacts` in a later step (issue 8).
"""

from __future__ import annotations

from ddp_lsp.project.flow import (
    CalleeProps,
    ModuleProjectFacts,
    ParamKind,
    ProjectFacts,
    Provenance,
    compute,
)
from ddp_lsp.project.index import ModuleSummary, ProjectIndex, find_root, module_name
from ddp_lsp.project.resolve import Resolver

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
