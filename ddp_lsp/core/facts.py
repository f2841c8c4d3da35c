"""What each chunk tells the rest of its module, and the module-wide facts merged from them.

Two layers, so that incremental analysis stays cheap:

- :class:`ChunkFacts` is *raw* and local: the imports a chunk makes, what it assigns from which
  call (``model = DDP(...)`` records the callee spelling ``"DDP"``), which helper functions it
  defines and calls, which calls sit under a rank-0 guard. It is computed once per chunk text
  without knowing the rest of the module.
- :class:`ModuleFacts` is *derived*: aliases resolved, ``model`` known to be DDP-wrapped in
  ``main`` and therefore in ``train`` (which ``main`` calls with it), ``sync_metrics`` known to
  perform a collective. Rules see only this. It changes rarely while a user types, and a
  chunk's findings are reused while it is unchanged.

This module is the one import path for both layers; the code lives by responsibility in
:mod:`~ddp_lsp.core.factkinds` (kinds, properties, raw data types),
:mod:`~ddp_lsp.core.factcalls` (name and call helpers), :mod:`~ddp_lsp.core.factextract` (the
per-chunk extractor), :mod:`~ddp_lsp.core.factmerge` (the module merge's parts,
:class:`ModuleFacts`), :mod:`~ddp_lsp.core.factderive` (the merge, incremental per function
between edits) and :mod:`~ddp_lsp.core.factview` (what rules read, what changed).
"""

from __future__ import annotations

from ddp_lsp.core.factcalls import (
    QUALIFIED_WRAPPER_COLLECTIVES,
    is_collective_call,
    iter_functions,
    kind_of_qualname,
    path_of,
)
from ddp_lsp.core.factderive import merge
from ddp_lsp.core.factextract import (
    ModuleExtract,
    extract,
    extract_module,
)
from ddp_lsp.core.factkinds import (
    COLLECTIVE,
    DDP,
    DESTROYS_PG,
    EMPTY_FACTS,
    FSDP,
    GUARDS_ITSELF,
    HOST_SYNC,
    INITS_PG,
    LOADER,
    MAKES_DIST_SAMPLER,
    MODULE,
    NO_SYNC,
    ONLY_CALLED_GUARDED,
    OPTIMIZER,
    RANK,
    RANK_PREDICATE,
    SAMPLER,
    SAVES_CALLER_PATH,
    SCALER,
    SCALER_WRAPPER,
    SETS_DEVICE,
    SETS_EPOCH,
    SILENCES_LOGGING,
    SILENCES_PRINT,
    TRANSITIVE_PROPS,
    UNSCALES,
    UPDATES_SCALER,
    WRAPPER_COLLECTIVES,
    Binding,
    CallSite,
    ChunkFacts,
    FunctionInfo,
    SavesThrough,
    SourceMarker,
    is_marker,
)
from ddp_lsp.core.factmerge import (
    MergeCache,
    ModuleFacts,
    unwrapped_names,
    visible_key,
)
from ddp_lsp.core.factview import (
    BARRIER_IFS,
    DIST,
    EVERYTHING,
    HAS_PROJECT,
    PROJECT,
    SINGLE_PROCESS,
    VALUES,
    WHOLE,
    Entry,
    EntryTag,
    FactsView,
    changed_entries,
    recording_ranks,
)

__all__ = [
    "BARRIER_IFS",
    "Binding",
    "COLLECTIVE",
    "CallSite",
    "ChunkFacts",
    "DDP",
    "DESTROYS_PG",
    "DIST",
    "EMPTY_FACTS",
    "EVERYTHING",
    "Entry",
    "EntryTag",
    "FSDP",
    "FactsView",
    "FunctionInfo",
    "GUARDS_ITSELF",
    "HAS_PROJECT",
    "HOST_SYNC",
    "INITS_PG",
    "LOADER",
    "MODULE",
    "MergeCache",
    "ModuleExtract",
    "ModuleFacts",
    "NO_SYNC",
    "ONLY_CALLED_GUARDED",
    "OPTIMIZER",
    "PROJECT",
    "QUALIFIED_WRAPPER_COLLECTIVES",
    "RANK",
    "RANK_PREDICATE",
    "SAMPLER",
    "SAVES_CALLER_PATH",
    "SCALER",
    "SCALER_WRAPPER",
    "SETS_DEVICE",
    "SETS_EPOCH",
    "MAKES_DIST_SAMPLER",
    "SILENCES_LOGGING",
    "SILENCES_PRINT",
    "SINGLE_PROCESS",
    "SavesThrough",
    "SourceMarker",
    "TRANSITIVE_PROPS",
    "UNSCALES",
    "UPDATES_SCALER",
    "VALUES",
    "WHOLE",
    "WRAPPER_COLLECTIVES",
    "changed_entries",
    "extract",
    "extract_module",
    "is_collective_call",
    "is_marker",
    "iter_functions",
    "kind_of_qualname",
    "merge",
    "path_of",
    "recording_ranks",
    "unwrapped_names",
    "visible_key",
]
