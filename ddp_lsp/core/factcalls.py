"""Name and call helpers shared by the extractor, the merge and the rules: the places facts
attach to, the kind a qualified callee gives, whether a call is a collective.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping

from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core.factkinds import (
    _TRANSPARENT,
    DDP,
    FSDP,
    LOADER,
    OPTIMIZER,
    RANK,
    SAMPLER,
    SCALER,
    SCALER_WRAPPER,
    WRAPPER_COLLECTIVES,
    SourceMarker,
)
from ddp_lsp.core.ranks import RankModel


def _path(e: ast.AST) -> str | None:
    """``name`` or ``self.attr``: the places a fact can be attached to."""
    cls = e.__class__  # (by class: ast's node classes have no subclass)
    if cls is ast.Name:
        return e.id  # type: ignore[attr-defined,no-any-return]
    if cls is ast.Attribute:
        value = e.value  # type: ignore[attr-defined]
        if value.__class__ is ast.Name and value.id in ("self", "args", "cfg", "config"):
            return f"{value.id}.{e.attr}"  # type: ignore[attr-defined]
    return None


def path_of(e: ast.AST) -> str | None:
    return _path(e)


def _kind_of_source(source: tuple[str, ...], aliases: Mapping[str, str]) -> str | None:
    if source[0] == SourceMarker.RANK:
        return RANK
    for spelled in source:
        qual = known_names.resolve(spelled, aliases)
        if qual is None:
            # A class the project copied from a framework under its name (timm's NativeScaler
            # in MAE's misc.py): the tables' bare names.
            if spelled.rsplit(".", 1)[-1] in _SCALER_WRAPPER_NAMES:
                return SCALER_WRAPPER
            return None
        kind = kind_of_qualname(qual)
        if kind is not None:
            return kind
        if qual not in _TRANSPARENT:
            return None
    return None


def _user_collective(ranks: RankModel, calls: Iterable[str]) -> bool:
    """A call of a collective the user's `[tool.ddp-lsp]` framework entries name. Chunk facts
    are extracted before the module's imports are known, so a qualified entry matches a call
    spelled as its tail (``dist_utils.sync_all`` for ``mylib.dist_utils.sync_all``)."""
    model = ranks.frameworks
    tails = _collective_tails(model)
    for callee in calls:
        if model.matches(framework_tables.Meaning.COLLECTIVE, callee, None):
            return True
        if "." in callee and callee in tails:
            return True
    return False


_TAILS: dict[int, tuple[framework_tables.FrameworkModel, frozenset[str]]] = {}


def _collective_tails(model: framework_tables.FrameworkModel) -> frozenset[str]:
    """Every qualified collective of ``model`` and each of its dotted tails
    (``a.b.sync`` -> ``a.b.sync``, ``b.sync``, ``sync``): a callee ``c`` matches an entry ``q``
    when ``q == c`` or ``q`` ends with ``"." + c``. Kept per model (one per settings)."""
    hit = _TAILS.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    tails: set[str] = set()
    for q in model.calls(framework_tables.Meaning.COLLECTIVE):
        tails.add(q)
        i = q.find(".")
        while i >= 0:
            tails.add(q[i + 1 :])
            i = q.find(".", i + 1)
    if len(_TAILS) > 16:
        _TAILS.clear()
    out = frozenset(tails)
    _TAILS[id(model)] = (model, out)
    return out


# Framework methods that skip gradient sync (`accelerator.accumulate`, Fabric's
# `no_backward_sync`): the tables' `skips-grad-sync` entries.
_SYNC_SKIPPERS = framework_tables.BUILTIN.methods(framework_tables.Meaning.SKIPS_GRAD_SYNC)


def _last(expr: ast.AST) -> str:
    name = known_names.dotted(expr) or ""
    return name.rsplit(".", 1)[-1]


# Wrappers whose forward all-gathers parameter shards (the tables' `shards-model`); the bare
# names shard their first argument in place (`fully_shard(model)`).
_SHARDERS = framework_tables.BUILTIN.calls(framework_tables.Meaning.SHARDS_MODEL)
_IN_PLACE_SHARDERS = framework_tables.BUILTIN.functions(framework_tables.Meaning.SHARDS_MODEL)
# GradScaler wrappers that unscale, clip and step by themselves (the tables' `scaler-wrapper`).
_SCALER_WRAPPERS = framework_tables.BUILTIN.calls(framework_tables.Meaning.SCALER_WRAPPER)
_SCALER_WRAPPER_NAMES = framework_tables.BUILTIN.functions(framework_tables.Meaning.SCALER_WRAPPER)


def kind_of_qualname(qual: str) -> str | None:
    if qual in _SCALER_WRAPPERS or qual.rsplit(".", 1)[-1] in _SCALER_WRAPPER_NAMES:
        return SCALER_WRAPPER
    if qual == known_names.DDP:
        return DDP
    if qual in _SHARDERS:
        return FSDP
    if qual in known_names.GRAD_SCALERS:
        return SCALER
    if qual == known_names.DISTRIBUTED_SAMPLER:
        return SAMPLER
    if qual == known_names.DATALOADER:
        return LOADER
    if known_names.is_optimizer_class(qual):
        return OPTIMIZER
    return None


# Library functions that perform collectives, by qualified name (so any alias works:
# `from detectron2.utils import comm as d2comm; d2comm.synchronize()`): the framework tables.
QUALIFIED_WRAPPER_COLLECTIVES = framework_tables.BUILTIN.calls(framework_tables.Meaning.COLLECTIVE)


def is_collective_call(
    callee: str,
    aliases: Mapping[str, str],
    frameworks: framework_tables.FrameworkModel | None = None,
) -> bool:
    """Whether a call spelled ``callee`` is a collective: torch.distributed's, a framework
    table's, or (``frameworks``: the settings' model) one of the user's entries."""
    return is_collective_qual(callee, known_names.resolve(callee, aliases), frameworks)


def is_collective_qual(
    callee: str, qual: str | None, frameworks: framework_tables.FrameworkModel | None = None
) -> bool:
    """:func:`is_collective_call` for a callee already qualified through the imports (``qual``:
    ``known_names.resolve(callee, aliases)``, as ``ChunkContext.call_qualname`` has it)."""
    if qual is not None and (
        qual in known_names.COLLECTIVES or qual in QUALIFIED_WRAPPER_COLLECTIVES
    ):
        return True
    if frameworks is not None and frameworks is not framework_tables.BUILTIN:
        if frameworks.matches(framework_tables.Meaning.COLLECTIVE, callee, qual):
            return True
    parts = callee.rsplit(".", 2)
    if len(parts) >= 2:
        receiver, method = parts[-2], parts[-1]
        if (receiver, method) in WRAPPER_COLLECTIVES:
            return True
    return False


def iter_functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
