"""The facts' vocabulary: kinds of values, function properties, and the raw per-chunk data
types (:class:`Binding`, :class:`CallSite`, :class:`FunctionInfo`, :class:`ChunkFacts`).

Re-exported by :mod:`ddp_lsp.core.facts`; serialized in the project index (``CACHE_VERSION``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Final

from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core.gates import NO_GATES, GateFacts

# Kinds of values the rules care about.
DDP = "ddp"
FSDP = "fsdp"
SCALER = "scaler"
OPTIMIZER = "optimizer"
SAMPLER = "sampler"
LOADER = "loader"
RANK = "rank"
# An instance of a project class wrapping a GradScaler whose methods unscale (and step/update)
# by themselves (timm's NativeScaler, MAE's NativeScalerWithGradNormCount): not a GradScaler
# for the AMP rules. Only the project index gives this kind (the class is in another file).
SCALER_WRAPPER = "scaler_wrapper"

# Function properties.
COLLECTIVE = "collective"
UNSCALES = "unscale"
NO_SYNC = "no_sync"
RANK_PREDICATE = "rank_predicate"
GUARDS_ITSELF = "guards_itself"
ONLY_CALLED_GUARDED = "only_called_guarded"
_WORLD_NAME = re.compile(r"world|num_(processes|gpus|nodes)|n_?gpus?|nprocs|^n$", re.IGNORECASE)
UPDATES_SCALER = "scaler_update"  # calls .update() on a GradScaler
SETS_EPOCH = "set_epoch"  # calls .set_epoch(...) (on a sampler, a loader's sampler...)
# Builds a shuffling DistributedSampler (`*DistributedSampler(...)` without `shuffle=False`):
# a loader this helper returns may hold it (`train_loader, ds = create_dataloader(...)` in
# another file: its caller's epoch loop must call `train_loader.sampler.set_epoch`).
# Transitive: a dispatcher that returns another builder's loaders (`data.build_loader`).
MAKES_DIST_SAMPLER = "dist_sampler"
SETS_DEVICE = "set_device"  # calls torch.cuda.set_device(...)
# Writes a checkpoint (torch.save, safetensors) to a path given as a parameter, on every rank:
# where it runs is the caller's decision (`save_checkpoint(state, filename)`).
SAVES_CALLER_PATH = "saves_caller_path"
# Silences the other ranks' output for the whole process: replaces `builtins.print` (DeiT's
# `setup_for_distributed(is_master)`), or sets a logging level / filter per rank
# (`logging.basicConfig(level=INFO if rank == 0 else WARN)`, `logger.setLevel(...)` under a
# rank condition). Transitive: calling such a set-up helper installs it too.
SILENCES_PRINT = "silences_print"
SILENCES_LOGGING = "silences_logging"
# Reads a tensor value back to the host on every call (`.item()` / `.tolist()` of a parameter
# or of a loop variable, not under an `if`): called every training step, one stall per step.
HOST_SYNC = "host_sync"
MODULE = "<module>"  # pseudo-function: the module's top-level code (all chunks together)
INITS_PG = "init_process_group"
DESTROYS_PG = "destroy_process_group"
# INITS_PG stays direct: a function that calls the worker which starts the group is not
# itself a worker that must destroy it (DDP506 would report both).
TRANSITIVE_PROPS = frozenset(
    {
        COLLECTIVE,
        UNSCALES,
        NO_SYNC,
        UPDATES_SCALER,
        SETS_EPOCH,
        MAKES_DIST_SAMPLER,
        SETS_DEVICE,
        DESTROYS_PG,
        SILENCES_PRINT,
        SILENCES_LOGGING,
    }
)

# Callables that return their (first) argument's kind unchanged.
_TRANSPARENT = frozenset({"torch.compile", "torch.nn.SyncBatchNorm.convert_sync_batchnorm"})
# Well-known wrappers that perform collectives (receiver name, method): the framework tables.
WRAPPER_COLLECTIVES = framework_tables.BUILTIN.method_pairs(framework_tables.Meaning.COLLECTIVE)


@dataclass(frozen=True)
class Binding:
    scope: str  # "" module, "train" function, "Trainer.step" method, "Trainer" for self.x
    path: str  # "model", "self.model"
    source: tuple[str, ...]  # callee spellings outer -> inner ("torch.compile", "DDP")
    # Bound inside an `if` of its function over an earlier value or a parameter
    # (`model = Net(); if args.distributed: model = DDP(model)`): the name may hold this
    # value's kind on some launches only.
    conditional: bool = False
    # Bound inside an `if` of its function (`if args.distributed: model = DDP(net)
    # else: model = net` is conditional through the other binding).
    in_branch: bool = False


@dataclass(frozen=True)
class CallSite:
    caller: str
    callee: str  # "helper" or "Trainer.method"
    args: tuple[tuple[int | str, str], ...]  # (position or keyword, argument path or "")
    guarded: bool  # under a rank-0 guard


@dataclass(frozen=True)
class FunctionInfo:
    qualname: str
    cls: str | None
    params: tuple[str, ...]
    calls: frozenset[str]  # dotted callee spellings ("dist.all_reduce", "helper", "Trainer.m")
    props: frozenset[str]  # syntactic: unscale, no_sync, rank_predicate, guards_itself
    line: int  # 0-based, relative to the chunk
    # Its call sites and literal defaults, for "parameters that switch its collectives off"
    # (:mod:`ddp_lsp.core.gates`); empty when it calls nothing.
    gates: GateFacts = NO_GATES


@dataclass(frozen=True)
class ChunkFacts:
    imports: tuple[tuple[str, str], ...] = ()
    env_markers: bool = False  # "LOCAL_RANK"/"RANK" read from the environment, init_process_group
    bindings: tuple[Binding, ...] = ()
    functions: tuple[FunctionInfo, ...] = ()
    call_sites: tuple[CallSite, ...] = ()
    loads: frozenset[str] = frozenset()
    # Top-level `if` statements that call a barrier (DDP103: a module-level guarded barrier is
    # half of a "zero first" pair only if another top-level `if` holds the other half).
    barrier_ifs: int = 0


EMPTY_FACTS = ChunkFacts()


class SourceMarker:
    """The heads of a :attr:`Binding.source` that are not callee spellings: what the extractor
    saw instead of a call. Plain strings, as the project index stores them (``=`` never starts
    a spelling)."""

    RANK: Final = "=rank"  # a rank (`rank = dist.get_rank()`, a `rank` parameter)
    RANK0_FLAG: Final = "=rank0flag"  # a flag assigned from a rank-0 test (`is_master = rank == 0`)
    UNWRAP: Final = "=unwrap"  # `x = y.module`: (UNWRAP, "y")
    ALIAS: Final = "=alias"  # `x = y`: (ALIAS, "y", scope of y)
    ALL: Final = frozenset({RANK, RANK0_FLAG, UNWRAP, ALIAS})


def is_marker(head: str) -> bool:
    """``head`` (a source's first element) is a :class:`SourceMarker`, not a callee spelling."""
    return head in SourceMarker.ALL


@dataclass(frozen=True)
class SavesThrough:
    """Raw function property of the extractor: the function passes one of its parameters as
    the path of ``callee`` (``torch.save(state, filename)``, spelled as written). The merge
    resolves the spelling and turns it into :data:`SAVES_CALLER_PATH` when it names a
    checkpoint writer. Encoded as ``"saves:<callee>"`` among the function's properties."""

    callee: str
    PREFIX: ClassVar[str] = "saves:"

    def encode(self) -> str:
        return f"{self.PREFIX}{self.callee}"

    @classmethod
    def decode(cls, prop: str) -> SavesThrough | None:
        return cls(prop[len(cls.PREFIX) :]) if prop.startswith(cls.PREFIX) else None


# What writes a checkpoint to the path it is given: torch.save (the rules know it by name), and
# the framework tables' `writes-checkpoint` calls (safetensors, mmcv...).
_CHECKPOINT_WRITERS = frozenset({known_names.TORCH_SAVE}) | framework_tables.BUILTIN.calls(
    framework_tables.Meaning.WRITES_CHECKPOINT
)
