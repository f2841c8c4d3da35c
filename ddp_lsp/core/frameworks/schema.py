"""The schema of a framework model: what an API means in DDP terms, and how a call matches it.

A framework table is a tuple of :class:`Api` values, pure data. Each names one API (a
qualified name, a ``receiver.method`` pair or a bare function name) and what it means for
the rules (:class:`Meaning`). The built-in tables live next to this module, one per framework;
users add their own helpers in ``[tool.ddp-lsp]`` (``ddp_lsp.config`` validates them with
:func:`check_entry` and the core receives the result as part of the frozen settings).

Nothing here reads a file or imports a framework: the tables describe APIs by name only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property


class Match(enum.Enum):
    """How a call in the analysed code is matched against an :class:`Api`'s name."""

    # A qualified name, resolved through the module's imports: ``accelerate.utils.set_seed``
    # matches ``set_seed(...)`` after ``from accelerate.utils import set_seed``.
    CALL = "call"
    # ``receiver.method``: the last part of the receiver's name and the method, whatever the
    # receiver's type (``accelerator.backward`` matches ``self.accelerator.backward(loss)``).
    METHOD = "method"
    # A function, method, attribute or class of this name wherever it is defined: helpers that
    # projects copy from a framework (``setup_for_distributed``, ``NativeScaler``).
    FUNCTION = "function"
    # A module prefix, matched against what a file imports (``mpi4py`` matches
    # ``from mpi4py import MPI``).
    MODULE = "module"
    # (Built-in tables only) A method of a receiver whose name contains this word,
    # case-insensitively: ``engine`` matches ``self.model_engine.save_checkpoint(path)``
    # (SAVES_UNWRAPPED: any save method) and ``engine.backward(loss)`` (BACKWARD).
    RECEIVER = "receiver"
    # (Built-in tables only) This string passed as the argument ``keyword`` names, to any call:
    # Lightning's ``strategy="ddp_find_unused_parameters_true"``.
    ARGUMENT = "argument"


class Meaning(enum.Enum):
    """What an API does in DDP terms. The value is the spelling in ``[tool.ddp-lsp]``."""

    # Every rank of the group must call it (a rendezvous: barrier, all-reduce, broadcast...).
    COLLECTIVE = "collective"
    # A collective that only waits for every rank (``dist.barrier``,
    # ``accelerator.wait_for_everyone``): a guarded one at module level may be half of a
    # "rank 0 first, then the others" pair whose other half is in another statement.
    BARRIER = "barrier"
    # (MODULE entries) Importing it makes a file distributed code: the rules that only apply
    # to code running as several processes look at the file.
    DISTRIBUTED = "distributed"
    # (MODULE entries) The framework starts and destroys the process group itself: a file
    # importing it need not call destroy_process_group (DDP506 is moot there).
    OWNS_PROCESS_GROUP = "owns-process-group"
    # The framework (MODULE entries) or the call (FUNCTION entries: `accelerator.prepare`,
    # `fabric.setup_dataloaders`, Lightning's `train_dataloader` hook) installs a
    # DistributedSampler in the loaders it is given or returns (DDP401 is moot there).
    INSTALLS_SAMPLER = "installs-sampler"
    # Takes DistributedDataParallel's own keywords (`find_unused_parameters`, `static_graph`)
    # and passes them to the DDP wrapper it builds (accelerate's kwargs handler, Lightning's
    # DDPStrategy).
    TAKES_DDP_KWARGS = "takes-ddp-kwargs"
    # Returns this process's rank (``dist.get_rank``).
    RANK = "rank"
    # A predicate or flag true on rank 0 only (``is_main_process``, ``trainer.is_global_zero``).
    RANK_ZERO = "rank-zero"
    # A decorator whose function body runs on rank 0 only (``@rank_zero_only``).
    RANK_ZERO_ONLY = "rank-zero-only"
    # Runs the backward pass of its first argument, all-reducing a DDP model's gradients
    # (``accelerator.backward(loss)``), unless gradient sync is skipped around it.
    BACKWARD = "backward"
    # A context or flag that skips (or manages) gradient synchronisation for the steps under it
    # (``model.no_sync()``, ``accelerator.accumulate(model)``, ``fabric.no_sync``).
    SKIPS_GRAD_SYNC = "skips-grad-sync"
    # An engine that accumulates gradients and skips their sync by itself (DeepSpeed's
    # ``engine.backward`` / ``engine.step``): DDP101 has nothing to say about its loops.
    ACCUMULATES_ITSELF = "accumulates-itself"
    # Returns its argument wrapped for data parallelism (``accelerator.prepare(model)``).
    WRAPS_MODEL = "wraps-model"
    # Wraps or shards a model whose forward all-gathers the parameter shards (FSDP, FSDP2's
    # `fully_shard`): every rank must run the forward. A `function` entry shards its first
    # argument in place (`fully_shard(model)`).
    SHARDS_MODEL = "shards-model"
    # Turns on DDP's ``find_unused_parameters`` (Lightning's
    # ``strategy="ddp_find_unused_parameters_true"``): a graph traversal after every forward.
    FINDS_UNUSED_PARAMETERS = "finds-unused-parameters"
    # Saves the model without DDP's ``module.`` prefix: a framework object that unwraps the model
    # itself (RECEIVER entries: ``accelerator.save``, ``trainer.save_checkpoint``) or a save
    # method that writes the bare model (FUNCTION entries: ``save_pretrained``).
    SAVES_UNWRAPPED = "saves-unwrapped"
    # Sets up tensor parallelism or FSDP2 (`parallelize_module`, `init_device_mesh`): the
    # module's parameters are DTensors, and `save_pretrained` gathers them, a collective that
    # every rank must call (DDP501 leaves such saves unguarded on purpose).
    MAKES_DTENSORS = "makes-dtensors"
    # Gathers sharded state across ranks (`optim_state_dict`, `consolidate_state_dict`): a
    # statement that calls it cannot be put under a rank-0 guard.
    GATHERS_STATE = "gathers-state"
    # Makes a save per rank on purpose: selecting it (FSDP's ``LOCAL_STATE_DICT``) has each
    # rank write its own shard; calling it in a path (``rank_file(path)``) names the file by
    # rank. DDP501 does not ask for a rank-0 guard there.
    SAVES_PER_RANK = "saves-per-rank"
    # Writes a checkpoint file on every rank that calls it, without a rank check of its own;
    # ``keyword`` names its path parameter (the second positional argument).
    WRITES_CHECKPOINT = "writes-checkpoint"
    # A class whose call scales the loss, runs the backward, unscales, clips and steps the
    # optimizer through a GradScaler (timm's ``NativeScaler``): not a GradScaler itself.
    SCALER_WRAPPER = "scaler-wrapper"
    # Clips the gradients of the model it is given in place, reading them as they are: after
    # `scaler.scale(loss).backward()` they are still scaled, so `scaler.unscale_(optimizer)`
    # must come first (DINO's `clip_gradients(model, clip)` helper, an FSDP module's
    # `clip_grad_norm_` method). DDP201 reads it only next to a GradScaler of the same
    # function, where the framework methods that unscale by themselves
    # (`accelerator.clip_grad_norm_`, `fabric.clip_gradients`) do not appear.
    CLIPS_GRADIENTS = "clips-gradients"
    # Seeds the random generators with the same value on every rank, unless the API's
    # ``keyword`` is passed as true (accelerate's ``set_seed(seed, device_specific=True)``).
    SEEDS = "seeds"
    # Replaces ``print`` on every rank but the main one (``setup_for_distributed(is_master)``).
    SILENCES_PRINT = "silences-print"
    # Makes logging rank-aware: a logger that logs on the main process only, or a set-up helper
    # raising the logging level on the other ranks (accelerate's ``get_logger``).
    SILENCES_LOGGING = "silences-logging"
    # (MODULE entries) The classes under it are optimizers (``torch.optim.AdamW``: a capitalised
    # last name; modules and functions there are not); (CALL entries) builds and returns one
    # (timm's ``create_optimizer_v2``). What `opt = ...` makes an `optimizer` for the AMP and
    # accumulation rules.
    OPTIMIZER = "optimizer"
    # (CALL entries: the name and everything under it) Under a distributed module, but used by
    # single-process code as well: a probe asked before deciding (`dist.is_initialized()`),
    # DeepSpeed's device abstraction, accelerate's big-model placement (one process spreading a
    # model over its devices). Calling it does not make a function distributed code
    # (`project/reach.py`: the rules of `RuleMeta.distributed_only` stay silent in a tool).
    SINGLE_PROCESS = "single-process"
    # (CALL entries) Starts a program whose ranks have roles (`torch.distributed.rpc.init_rpc`:
    # a master, parameter servers, trainers): a module that imports it runs its code on the
    # ranks of a role, not alike on every rank (DDP502 does not ask for a rank-0 guard there).
    ASSIGNS_ROLES = "assigns-roles"


@dataclass(frozen=True)
class Api:
    """One API of a framework and what it means."""

    match: Match
    name: str
    means: tuple[Meaning, ...]
    # SEEDS: the keyword that makes the seed per rank when true; WRITES_CHECKPOINT: the name of
    # the path parameter.
    keyword: str | None = None
    # Where the entry comes from: a built-in table's name, or a pyproject.toml.
    source: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[Match, str]:
        return (self.match, self.name)


def check_entry(api: Api) -> str | None:
    """Why ``api`` is malformed, or None: the name's shape must fit its match kind."""
    parts = api.name.split(".")
    if not api.name or not all(p.isidentifier() for p in parts):
        return f"{api.name!r} is not a dotted Python name"
    if api.match is Match.METHOD and len(parts) != 2:
        return f"{api.name!r}: a method is written `receiver.method` (two parts)"
    if api.match is Match.FUNCTION and len(parts) != 1:
        return f"{api.name!r}: a function is written as its bare name (`setup_for_distributed`)"
    if api.match in (Match.RECEIVER, Match.ARGUMENT) and len(parts) != 1:
        return f"{api.name!r}: a {api.match.value} is one word (`engine`, `ddp_spawn`)"
    if api.match is Match.ARGUMENT and api.keyword is None:
        return f"{api.name!r}: an argument entry needs `keyword`: the parameter it is passed as"
    module_only = {Meaning.DISTRIBUTED, Meaning.OWNS_PROCESS_GROUP}
    if api.match is Match.MODULE and not set(api.means) <= module_only | {
        Meaning.INSTALLS_SAMPLER,
        Meaning.OPTIMIZER,
    }:
        return (
            f"{api.name!r}: a `module` entry means what importing it does ({_names(module_only)})"
        )
    if api.match is not Match.MODULE and module_only & set(api.means):
        return f"{api.name!r}: {_names(module_only & set(api.means))} is for `module` entries"
    if api.match is Match.CALL and len(parts) < 2:
        return f"{api.name!r}: a call is written with its module (`mylib.dist.sync`)"
    if not api.means:
        return f"{api.name!r} means nothing: give at least one meaning"
    if api.keyword is not None and not api.keyword.isidentifier():
        return f"{api.name!r}: keyword {api.keyword!r} is not a Python identifier"
    if (
        api.keyword is not None
        and api.match is not Match.ARGUMENT
        and not {Meaning.SEEDS, Meaning.WRITES_CHECKPOINT} & set(api.means)
    ):
        return f"{api.name!r}: `keyword` only applies to `seeds` and `writes-checkpoint`"
    if Meaning.WRITES_CHECKPOINT in api.means and api.keyword is None:
        return f"{api.name!r}: `writes-checkpoint` needs `keyword`: the path parameter's name"
    return None


def _names(means: set[Meaning]) -> str:
    return ", ".join(sorted(m.value for m in means))


def duplicates(apis: Iterable[Api]) -> list[tuple[Match, str]]:
    """Keys listed more than once (each key once in the result)."""
    seen: set[tuple[Match, str]] = set()
    out: list[tuple[Match, str]] = []
    for api in apis:
        if api.key in seen and api.key not in out:
            out.append(api.key)
        seen.add(api.key)
    return out


@dataclass(frozen=True)
class FrameworkModel:
    """Every known API: the built-in tables, then the user's entries (which may add meanings
    to a built-in API). Hashable and comparable: it is part of the analysis' cache keys."""

    apis: tuple[Api, ...] = ()

    def extended(self, extra: Iterable[Api]) -> FrameworkModel:
        more = tuple(extra)
        # No entries of the user's: this model, with the tables it derived and memoised.
        return FrameworkModel(self.apis + more) if more else self

    def __hash__(self) -> int:
        # Part of every analysis's cache key: hashing hundreds of entries per keystroke cost
        # more than the key lookups it serves. Kept out of pickles (``__getstate__``): string
        # hashes differ between processes.
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash(self.apis)
        return h

    def __getstate__(self) -> dict[str, object]:
        return {"apis": self.apis}  # not the derived tables, memo and hash

    @cached_property
    def _by_meaning(self) -> Mapping[tuple[Meaning, Match], frozenset[str]]:
        out: dict[tuple[Meaning, Match], set[str]] = {}
        for api in self.apis:
            for m in api.means:
                out.setdefault((m, api.match), set()).add(api.name)
        return {k: frozenset(v) for k, v in out.items()}

    @cached_property
    def _keywords(self) -> Mapping[tuple[Match, str], str]:
        return {api.key: api.keyword for api in self.apis if api.keyword is not None}

    def calls(self, meaning: Meaning) -> frozenset[str]:
        """Qualified names with this meaning."""
        return self._by_meaning.get((meaning, Match.CALL), frozenset())

    def methods(self, meaning: Meaning) -> frozenset[str]:
        """``receiver.method`` spellings with this meaning."""
        return self._by_meaning.get((meaning, Match.METHOD), frozenset())

    def functions(self, meaning: Meaning) -> frozenset[str]:
        """Bare names with this meaning."""
        return self._by_meaning.get((meaning, Match.FUNCTION), frozenset())

    def receivers(self, meaning: Meaning) -> frozenset[str]:
        """Words of receivers whose methods have this meaning (RECEIVER entries)."""
        return self._by_meaning.get((meaning, Match.RECEIVER), frozenset())

    def receiver_pattern(self, meaning: Meaning) -> re.Pattern[str]:
        """Finds any of the RECEIVER words with this meaning in a name, case-insensitively
        (``engine`` in ``model_engine``); never matches when there is none."""
        words = sorted(self.receivers(meaning))
        return re.compile("|".join(map(re.escape, words)) or "(?!)", re.IGNORECASE)

    def arguments(self, meaning: Meaning) -> frozenset[tuple[str, str]]:
        """``(keyword, string)`` pairs with this meaning (ARGUMENT entries)."""
        return frozenset(
            (api.keyword or "", api.name)
            for api in self.apis
            if api.match is Match.ARGUMENT and meaning in api.means
        )

    def modules(self, meaning: Meaning) -> tuple[str, ...]:
        """Import prefixes with this meaning (``distributed``: importing one makes a file
        distributed code)."""
        return tuple(sorted(self._by_meaning.get((meaning, Match.MODULE), ())))

    def method_pairs(self, meaning: Meaning) -> frozenset[tuple[str, str]]:
        out = set()
        for name in self.methods(meaning):
            receiver, _, method = name.partition(".")
            out.add((receiver, method))
        return frozenset(out)

    def matches(self, meaning: Meaning, spelled: str | None, qual: str | None) -> bool:
        """Whether a callee spelled ``spelled`` (``self.accelerator.backward``), qualified as
        ``qual`` through the imports (None: not imported), has ``meaning``."""
        return self.match_of(meaning, spelled, qual) is not None

    @cached_property
    def _matches(self) -> dict[tuple[Meaning, str | None, str | None], Api | None]:
        return {}

    def match_of(self, meaning: Meaning, spelled: str | None, qual: str | None) -> Api | None:
        """The entry that gives a callee ``meaning``, or None (memoised: rules ask it for
        every call of every chunk, mostly for the same few hundred names)."""
        memo = self._matches
        key = (meaning, spelled, qual)
        try:
            return memo[key]
        except KeyError:
            pass
        if len(memo) > 50_000:
            memo.clear()
        found = memo[key] = self._match_of(meaning, spelled, qual)
        return found

    def _match_of(self, meaning: Meaning, spelled: str | None, qual: str | None) -> Api | None:
        if qual is not None and qual in self.calls(meaning):
            return self._entry(Match.CALL, qual)
        if spelled:
            parts = spelled.rsplit(".", 2)
            if len(parts) >= 2 and f"{parts[-2]}.{parts[-1]}" in self.methods(meaning):
                return self._entry(Match.METHOD, f"{parts[-2]}.{parts[-1]}")
            if parts[-1] in self.functions(meaning):
                return self._entry(Match.FUNCTION, parts[-1])
        if qual is not None and qual.rsplit(".", 1)[-1] in self.functions(meaning):
            return self._entry(Match.FUNCTION, qual.rsplit(".", 1)[-1])
        return None

    def keyword(self, api: Api) -> str | None:
        """The keyword that changes ``api``'s meaning, the user's entry winning."""
        return self._keywords.get(api.key)

    def _entry(self, match: Match, name: str) -> Api:
        for api in reversed(self.apis):
            if api.match is match and api.name == name:
                return api
        raise KeyError(name)  # pragma: no cover - only called for names of the indexes
