"""The events of the rank path walk (:mod:`ddp_lsp.core.rankpaths`): the calls every rank
has to make together, and how two ranks' sequences of them are matched.

:func:`collective_extractor` finds DDP103's events in a chunk (torch.distributed
collectives, process-group methods, well-known wrappers, same-file helpers that reach one),
with what each is on (an explicit process group, :func:`process_groups`) and when a helper's
bindings switch it off; :func:`_unmatched` aligns the events of the two rank classes and
returns those left without a partner.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import gates as gate_facts
from ddp_lsp.core import names as known_names
from ddp_lsp.core.factcalls import is_collective_qual
from ddp_lsp.core.facts import path_of

if TYPE_CHECKING:
    from ddp_lsp.core.rule import ChunkContext

# torch.distributed functions every rank of the group calls. `destroy_process_group` is not a
# rendezvous the other ranks wait in, so it is left out.
_COLLECTIVE_FUNCTIONS = (known_names.COLLECTIVE_FUNCTIONS - {"destroy_process_group"}) | {
    "new_subgroups",
    "new_subgroups_by_enumeration",
}
# Positional index of the `group` parameter of each torch.distributed collective.
_GROUP_POSITION = {
    "barrier": 0,
    "monitored_barrier": 0,
    "all_reduce": 2,
    "all_reduce_coalesced": 2,
    "broadcast": 2,
    "broadcast_object_list": 2,
    "all_gather": 2,
    "all_gather_into_tensor": 2,
    "all_gather_object": 2,
    "all_gather_coalesced": 2,
    "reduce": 3,
    "reduce_scatter": 3,
    "reduce_scatter_tensor": 3,
    "gather": 3,
    "gather_object": 3,
    "scatter": 3,
    "scatter_object_list": 3,
    "all_to_all": 2,
    "all_to_all_single": 4,
}
# ProcessGroup methods and the torch.distributed function each one is.
PG_METHODS = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "allgather": "all_gather",
    "allgather_coalesced": "all_gather_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "_allgather_base": "all_gather_into_tensor",
    "broadcast": "broadcast",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
    "reduce": "reduce",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "gather": "gather",
    "scatter": "scatter",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
}
_NEW_GROUP = frozenset({"torch.distributed.new_group"})
_WORLD = frozenset({"torch.distributed.group.WORLD", "torch.distributed.GroupMember.WORLD"})
# Event labels of barriers (the framework tables' `barrier` entries): torch.distributed's by
# function name, the others as `receiver.method`.
_BARRIERS = frozenset(
    {
        *(
            qual.rsplit(".", 1)[-1]
            for qual in framework_tables.BUILTIN.calls(framework_tables.Meaning.BARRIER)
            if qual.startswith("torch.distributed.")
        ),
        *framework_tables.BUILTIN.methods(framework_tables.Meaning.BARRIER),
    }
)


# -- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """A call every rank has to make together."""

    node: ast.Call
    label: str  # what must match on the other ranks ("barrier", "all_reduce", "model")
    display: str  # how the message names it ("dist.barrier()")
    wild: bool = False  # a same-file helper: matches any collective
    subgroup: bool = False  # on an explicit process group: only its members may call it
    # A path that decided one of these conditions false does not make the call's collective
    # (`f(sync=u)` where `sync` switches f's collectives off, on a path where `u` is false).
    off_when: tuple[tuple[str, bool], ...] = ()


Extractor = Callable[[ast.Call], "Event | None"]


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def _is_true(e: ast.AST | None) -> bool:
    return isinstance(e, ast.Constant) and e.value is True


def process_groups(ctx: ChunkContext) -> dict[str, bool]:
    """Paths bound to ``dist.new_group(...)`` in this chunk: path -> is a subgroup."""
    out: dict[str, bool] = {}
    for node in ctx.nodes(ast.Assign, ast.AnnAssign):
        assert isinstance(node, (ast.Assign, ast.AnnAssign))
        value = node.value
        if not isinstance(value, ast.Call) or ctx.call_qualname(value) not in _NEW_GROUP:
            continue
        ranks = value.args[0] if value.args else _kw(value, "ranks")
        sub = ranks is not None and not (isinstance(ranks, ast.Constant) and ranks.value is None)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            p = path_of(t)
            if p is not None:
                out[p] = sub
    return out


def _group_is_sub(ctx: ChunkContext, group: ast.expr | None, pgs: dict[str, bool]) -> bool:
    if group is None or (isinstance(group, ast.Constant) and group.value is None):
        return False
    if ctx.qualname(group) in _WORLD:
        return False
    p = path_of(group)
    if p is not None and p in pgs:
        return pgs[p]
    return True


def _closure_collective(ctx: ChunkContext, call: ast.Call, name: str) -> bool:
    """``inner()`` defined in an enclosing function (the facts name it ``outer.inner``)."""
    if "." in name:
        return False
    scope, _ = ctx.scope(call)
    while scope:
        if fact_model.COLLECTIVE in ctx.facts.props(f"{scope}.{name}"):
            return True
        scope = scope.rpartition(".")[0]
    return False


def memoised(extract: Extractor) -> Extractor:
    """``extract`` answering each call once: the rank path walk asks it for every call of the
    chunk to find the frames holding an event, again for the calls of each such frame, and
    once more for each call on its path."""
    found: dict[int, Event | None] = {}

    def once(call: ast.Call) -> Event | None:
        try:
            return found[id(call)]
        except KeyError:
            event = found[id(call)] = extract(call)
            return event

    return once


def collective_extractor(ctx: ChunkContext) -> Extractor:
    """Events of DDP103: torch.distributed collectives, process-group methods, well-known
    wrappers (accelerate, Fabric, detectron2, mpi4py) and same-file helpers that reach one.
    One extractor per chunk analysis, memoised (DDP103 and the uniformity analysis's
    :meth:`~ddp_lsp.core.uniformity.ChunkUniformity.collectives` share it)."""
    return ctx.memo(("collective extractor",), lambda: memoised(_collective_extractor(ctx)))


def _collective_extractor(ctx: ChunkContext) -> Extractor:
    pgs = process_groups(ctx)

    def extract(call: ast.Call) -> Event | None:
        name = known_names.dotted(call.func)
        qual = ctx.call_qualname(call)
        if qual is not None and qual.startswith("torch.distributed."):
            fn = qual[len("torch.distributed.") :]
            if fn in _COLLECTIVE_FUNCTIONS:
                if fn == "new_group" and _is_true(_kw(call, "use_local_synchronization")):
                    return None
                pos = _GROUP_POSITION.get(fn)
                group = _kw(call, "group")
                if group is None and pos is not None and len(call.args) > pos:
                    group = call.args[pos]
                return Event(call, fn, f"{name or qual}()", subgroup=_group_is_sub(ctx, group, pgs))
            return None
        if name is None:
            return None
        if is_collective_qual(name, qual, ctx.ranks.frameworks):  # `qual`: `name` resolved
            return Event(call, ".".join(name.rsplit(".", 2)[-2:]), f"{name}()")
        if isinstance(call.func, ast.Attribute) and call.func.attr in PG_METHODS:
            receiver = path_of(call.func.value)
            if receiver is not None and receiver in pgs:
                return Event(call, PG_METHODS[call.func.attr], f"{name}()", subgroup=pgs[receiver])
        if _closure_collective(ctx, call, name):
            return Event(call, name, f"{name}()", wild=True)
        props = ctx.callee_props(call)
        if fact_model.COLLECTIVE in props:
            gating = ctx.callee_gating(call)
            if gate_facts.switched_off(call, gating):
                return None  # `save(..., synchronize=False)`, `zero_first(-1)`
            off = tuple(_key(a) for a in gate_facts.falsy_bindings(call, gating))
            return Event(call, name, f"{name}()", wild=True, off_when=off)
        return None

    return extract


def _key(test: ast.AST) -> tuple[str, bool]:
    """A condition's identity and sense: ``not x`` is ``x`` decided the other way.

    Kept on the test's node (the trees are cached per chunk text and not changed otherwise,
    as :func:`ddp_lsp.core.walk.scope_nodes` keeps its tables): the rank-path walk decides
    each condition once per joint path and per rule, and dumping the condition's tree each
    time was a tenth of the rules' time on real training scripts."""
    cached: tuple[str, bool] | None = getattr(test, "_ddp_condition_key", None)
    if cached is None:
        cached = _compute_key(test)
        test._ddp_condition_key = cached  # type: ignore[attr-defined]
    return cached


def _compute_key(test: ast.AST) -> tuple[str, bool]:
    truth = True
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, truth = test.operand, not truth
    return ast.dump(test), truth


def _unmatched(longer: Sequence[Event], shorter: Sequence[Event]) -> list[Event]:
    """Events of ``longer`` left without a partner by the best alignment with ``shorter``
    (the same call site scores higher than the same collective elsewhere)."""
    n, m = len(longer), len(shorter)
    score = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for k in range(m - 1, -1, -1):
            best = max(score[i + 1][k], score[i][k + 1])
            w = _weight(longer[i], shorter[k])
            if w:
                best = max(best, w + score[i + 1][k + 1])
            score[i][k] = best
    out: list[Event] = []
    i = k = 0
    while i < n and k < m:
        w = _weight(longer[i], shorter[k])
        if w and score[i][k] == w + score[i + 1][k + 1]:
            i += 1
            k += 1
        elif score[i][k] == score[i + 1][k]:
            out.append(longer[i])
            i += 1
        else:
            k += 1
    out.extend(longer[i:])
    return out


def _weight(a: Event, b: Event) -> int:
    if a.node is b.node:
        return 3
    if a.label == b.label:
        return 2
    if a.wild or b.wild:
        return 1
    return 0
