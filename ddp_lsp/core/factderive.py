"""The module merge (:func:`merge`): the chunks' raw facts resolved into
:class:`~ddp_lsp.core.factmerge.ModuleFacts`, every function's properties derived in stages
(own, transitive, "only called under a guard") and its gating resolved from them
(:attr:`~ddp_lsp.core.factmerge.ModuleFacts.func_gates`, core/gates.py), kept per function and
stage in the :class:`~ddp_lsp.core.factmerge.MergeCache`, so that the merge after an edit
re-derives only what the edited chunks can change (:func:`_merge_edit`, red-green
invalidation in the manner of salsa). The building blocks are in
:mod:`ddp_lsp.core.factmerge`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddp_lsp.core import names as known_names
from ddp_lsp.core.crossfile import ModuleProjectFacts
from ddp_lsp.core.factkinds import (
    _WORLD_NAME,
    COLLECTIVE,
    GUARDS_ITSELF,
    MODULE,
    ONLY_CALLED_GUARDED,
    RANK,
    RANK_PREDICATE,
    SCALER,
    TRANSITIVE_PROPS,
    UPDATES_SCALER,
    CallSite,
    ChunkFacts,
    FunctionInfo,
)
from ddp_lsp.core.factmerge import (
    MergeCache,
    ModuleFacts,
    _callee_key,
    _chunk_part,
    _ChunkPart,
    _function_part,
    _module_place,
    _passed,
    _resolve_gates,
    _sometimes,
    visible_key,
)


def merge(
    chunks: Iterable[ChunkFacts],
    assume_distributed: bool = False,
    project: ModuleProjectFacts | None = None,
    cache: MergeCache | None = None,
) -> ModuleFacts:
    """Module facts of ``chunks``; ``project``: what other files of the project add (kinds of
    parameters from callers elsewhere, properties of imported helpers, "distributed");
    ``cache``: what an earlier merge of (mostly) the same chunks derived (see MergeCache).

    With a cache that holds the last merge's derivation, a merge after an edit of a few
    chunks re-derives only what those chunks can change (:func:`_merge_edit`); the result is
    always equal to a merge without a cache (tests/core/test_merge_incremental.py)."""
    chunk_list = list(chunks)
    if cache is not None and cache.state is not None:
        try:
            facts = _merge_edit(chunk_list, assume_distributed, project, cache)
        except BaseException:
            cache.state = None  # half updated: the next merge starts afresh
            raise
        if facts is not None:
            return facts
    if cache is None:
        return _merge_all(chunk_list, assume_distributed, project, MergeCache(), keep=False)
    cache.state = None
    return _merge_all(chunk_list, assume_distributed, project, cache, keep=True)


def _kinds_stage(
    parts: Sequence[_ChunkPart],
    call_sites: Sequence[CallSite],
    functions: Mapping[str, FunctionInfo],
    aliases: Mapping[str, str],
    project: ModuleProjectFacts | None,
) -> tuple[dict[tuple[str, str], str], frozenset[tuple[str, str]]]:
    """The module's kinds (bindings to a known callee, then carried through `y = x` and the
    parameters of calls) and the keys that hold their kind on some launches only."""
    # Kinds from bindings (aliases of aliases resolved in a second pass).
    kinds: dict[tuple[str, str], str] = {}
    alias_bindings: list[tuple[str, str, str, str]] = []
    unwrapped = frozenset().union(*(part.unwrapped for part in parts))
    for part in parts:
        for key_, kind_ in part.kinds:
            kinds.setdefault(key_, kind_)
        for ab in part.alias_bindings:
            if (ab[0], ab[1]) not in unwrapped:
                alias_bindings.append(ab)
    if project is not None:
        # Parameters of this module's functions given a kind by callers in other files.
        for key_, pk in project.extra_kinds.items():
            kinds.setdefault(key_, pk.kind)

    facts = ModuleFacts(aliases=dict(aliases), kinds=kinds)
    passed = _passed(call_sites, functions)
    # Propagate kinds: `y = x` and parameters from their call sites, to a bounded fixed point.
    for _ in range(6):
        changed = False
        for scope, path, src, src_scope in alias_bindings:
            if (scope, path) in kinds:
                continue
            fn = functions.get(src_scope)
            cls = fn.cls if fn is not None else None
            k = facts.kind(src, src_scope, cls)
            if k is not None:
                kinds[(scope, path)] = k
                changed = True
        for key_, arg_path, caller, caller_cls in passed:
            if key_ in kinds:
                continue
            k = facts.kind(arg_path, caller, caller_cls)
            if k is not None:
                kinds[key_] = k
                changed = True
        if not changed:
            break
    return kinds, _sometimes(kinds, parts, functions, alias_bindings, passed, project)


def _rank_vars(kinds: Mapping[tuple[str, str], str]) -> frozenset[str]:
    # `self.gpu_id` holding the rank makes `gpu_id` a rank name (RankModel matches last parts).
    # Not `args.gpu = int(os.environ["LOCAL_RANK"])`: `args.*` names are too generic to trust.
    # A world size is never a rank, whatever a misaligned call passes into it (the uniformity
    # analysis takes `world_size > 1` for a uniform test).
    return frozenset(
        path[5:] if path.startswith("self.") else path
        for (_, path), k in kinds.items()
        if k == RANK
        and "." not in path.removeprefix("self.")
        and not _WORLD_NAME.search(path.rsplit(".", 1)[-1])
    )


def _base_props(
    q: str,
    fi: FunctionInfo,
    own: frozenset[str],
    receivers: tuple[str, ...],
    functions: Mapping[str, FunctionInfo],
    project: ModuleProjectFacts | None,
    kinds: Mapping[tuple[str, str], str],
) -> set[str]:
    """A function's properties before the transitive ones: its own (:func:`_function_part`),
    what helpers of other files do, a scaler updated through a receiver of known kind."""
    props = set(own)
    if project is not None:
        for callee in fi.calls:
            if callee not in functions:
                cp = project.callee_props.get(callee)
                if cp is not None:
                    # A helper in another file: what it does travels to this caller.
                    props |= cp.props & TRANSITIVE_PROPS
    for receiver in receivers:
        key = visible_key(kinds, receiver, q, fi.cls)
        kind = None if key is None else kinds[key]
        # A receiver of no known kind named as a scaler (`self.scaler` set from a
        # parameter) counts too: DDP202 trusts a helper that updates to hide no bug.
        if kind == SCALER or kind is None and "scaler" in receiver.rsplit(".", 1)[-1].lower():
            props.add(UPDATES_SCALER)
    return props


def _all_guarded(sites: Mapping[tuple[str, bool], int], p1: Mapping[str, frozenset[str]]) -> bool:
    """Every call site of a function (``(caller, guarded)``: count) is under a rank-0 guard,
    or in a caller that guards itself."""
    return all(g or GUARDS_ITSELF in p1.get(caller, ()) for caller, g in sites)


def _count(table: dict[Any, int], keys: Iterable[Any], by: int) -> bool:
    """Add ``by`` to each key's count (a key at 0 is dropped); True when a key appeared or
    went away."""
    moved = False
    for k in keys:
        n = table.get(k, 0) + by
        if n:
            table[k] = n
            moved = moved or n == by
        else:
            del table[k]
            moved = True
    return moved


@dataclass
class _State:
    """The last merge's derivation, per function and per stage, for :func:`_merge_edit`."""

    chunks: list[ChunkFacts]
    parts: list[_ChunkPart]
    assume: bool
    project: ModuleProjectFacts | None
    facts: ModuleFacts
    functions: dict[str, FunctionInfo]
    pos: dict[str, int]  # each function's place in ``functions`` (the gate resolution's order)
    classes: frozenset[str]  # classes with an __init__ (a call of one passes to it)
    module_parts: list[FunctionInfo]  # each chunk's top-level code, in order
    dist_import: bool
    env_count: int  # chunks with env_markers
    barrier_ifs: int
    names_used: dict[str, int]  # imported name -> chunks that load it
    rank0: dict[str, int]  # rank-0 flag -> chunks that assign it
    p0: dict[str, frozenset[str]]  # own properties (_base_props)
    receivers: set[str]  # functions with `x.update()` receivers (read kinds)
    local: dict[str, tuple[str, ...]]  # calls of the module's functions
    callers: dict[str, set[str]]  # the reverse of ``local``
    p1: dict[str, frozenset[str]]  # with the transitive properties
    sites: dict[str, dict[tuple[str, bool], int]]  # callee -> (caller, guarded) -> count
    ocg: set[str]  # only called under a guard (from ``sites``)
    p2: dict[str, frozenset[str]]  # the final properties (what the gate resolution reads)
    # A function that reaches a collective -> the module's functions its gate sites call.
    edges: dict[str, frozenset[str]]
    gate_callers: dict[str, set[str]]  # the reverse of ``edges``
    prop_count: dict[str, int]  # property -> functions that have it
    preds: dict[str, int]  # last name of a rank predicate -> functions
    project_preds: frozenset[str]


# An edit that replaces more chunks than this is merged afresh.
_EDIT_CHUNKS = 64


def _merge_all(
    chunk_list: list[ChunkFacts],
    assume_distributed: bool,
    project: ModuleProjectFacts | None,
    cache: MergeCache,
    keep: bool,
) -> ModuleFacts:
    """Everything derived afresh (``keep``: with the derivation kept in ``cache.state`` for
    the next merge's :func:`_merge_edit`)."""
    aliases: dict[str, str] = {}
    for cf in chunk_list:
        for name, qual in cf.imports:
            aliases.setdefault(name, qual)
    cache.reset_if_changed(aliases, project)
    parts: list[_ChunkPart] = []
    kept: dict[int, tuple[ChunkFacts, _ChunkPart]] = {}
    for cf in chunk_list:
        hit = cache.chunks.get(id(cf))
        if hit is None or hit[0] is not cf:
            hit = (cf, _chunk_part(cf, aliases))
        kept[id(cf)] = hit
        parts.append(hit[1])
    cache.chunks = kept
    dist_import = any(known_names.is_distributed_import(q) for q in aliases.values())
    env_count = sum(1 for cf in chunk_list if cf.env_markers)
    distributed = (
        assume_distributed
        or (project is not None and project.distributed is not None)
        or env_count > 0
        or dist_import
    )

    functions: dict[str, FunctionInfo] = {}
    module_parts: list[FunctionInfo] = []  # each chunk's top-level code, merged into one
    for cf in chunk_list:
        for fi in cf.functions:
            if fi.qualname == MODULE:
                module_parts.append(fi)
            functions.setdefault(fi.qualname, fi)
    if len(module_parts) > 1:
        # The same parts as last time give the same object (its derived part stays cached).
        if len(cache.module_parts) != len(module_parts) or any(
            a is not b for a, b in zip(cache.module_parts, module_parts, strict=True)
        ):
            cache.module_parts = module_parts
            cache.module_info = _module_info(module_parts)
        assert cache.module_info is not None
        functions[MODULE] = cache.module_info

    call_sites = [cs for cf in chunk_list for cs in cf.call_sites]
    kinds, sometimes = _kinds_stage(parts, call_sites, functions, aliases, project)

    # Function properties: syntactic ones, collectives by resolved name, then transitively.
    func_props: dict[str, set[str]] = {}
    p0: dict[str, frozenset[str]] = {}
    receivers: set[str] = set()
    callee_memo: dict[str, frozenset[str]] = {}
    fn_kept: dict[int, tuple[FunctionInfo, frozenset[str], tuple[str, ...]]] = {}
    for q, fi in functions.items():
        fhit = cache.functions.get(id(fi))
        if fhit is None or fhit[0] is not fi:
            fhit = (fi, *_function_part(fi, aliases, callee_memo))
        fn_kept[id(fi)] = fhit
        props = _base_props(q, fi, fhit[1], fhit[2], functions, project, kinds)
        if fhit[2]:
            receivers.add(q)
        func_props[q] = props
        p0[q] = frozenset(props)
    cache.functions = fn_kept
    # Transitively through same-file helpers: a worklist from each function that has a
    # transitive property to its callers (linear in the calls, not in functions x calls).
    callers: dict[str, set[str]] = {}
    local: dict[str, tuple[str, ...]] = {}
    if cache.names != functions.keys():
        cache.names = frozenset(functions)
        cache.local_calls = {}
    local_kept: dict[int, tuple[FunctionInfo, tuple[str, ...]]] = {}
    for q, fi in functions.items():
        lhit = cache.local_calls.get(id(fi))
        if lhit is None or lhit[0] is not fi:
            lhit = (fi, tuple(callee for callee in fi.calls if callee in func_props))
        local_kept[id(fi)] = lhit
        local[q] = lhit[1]
        for callee in lhit[1]:
            callers.setdefault(callee, set()).add(q)
    cache.local_calls = local_kept
    _close(func_props, list(func_props), callers)
    # Each stage's table shares the earlier stage's set where a function gained nothing.
    p1 = {q: _same_or_frozen(p, p0[q]) for q, p in func_props.items()}
    sites: dict[str, dict[tuple[str, bool], int]] = {}
    for cs in call_sites:
        if cs.callee not in func_props:
            continue  # `print(x)`: no function of the module
        by_site = sites.setdefault(cs.callee, {})
        site = (cs.caller, cs.guarded)
        by_site[site] = by_site.get(site, 0) + 1
    ocg = {q for q, by_site in sites.items() if _all_guarded(by_site, p1)}
    for q in ocg:
        func_props[q].add(ONLY_CALLED_GUARDED)
    if project is not None:
        for q in project.only_called_guarded:
            if q in func_props:
                func_props[q].add(ONLY_CALLED_GUARDED)
    p2 = {q: _same_or_frozen(p, p1[q]) for q, p in func_props.items()}

    func_gates = _resolve_gates(p2, p2, functions, aliases, project, cache, {})
    edges: dict[str, frozenset[str]] = {}
    gate_callers: dict[str, set[str]] = {}
    for q, fi in functions.items() if keep else ():
        if COLLECTIVE in p2[q]:
            e = edges[q] = _gate_edges(fi, functions)
            for key in e:
                gate_callers.setdefault(key, set()).add(q)
    frozen_props = dict(p2)  # the module facts' table (an edit updates p2 in place)
    prop_count: dict[str, int] = {}
    preds: dict[str, int] = {}
    for q, fp in frozen_props.items():
        _count(prop_count, fp, 1)
        if RANK_PREDICATE in fp:
            _count(preds, (q.rsplit(".", 1)[-1],), 1)
    # Rank-0 flags assigned in one chunk and tested in another (`self.is_master`).
    rank0: dict[str, int] = {}
    names_used: dict[str, int] = {}
    for part in parts:
        _count(rank0, part.rank0_flags, 1)
        _count(names_used, part.names_used, 1)
    project_preds: frozenset[str] = frozenset()
    if project is not None:
        # `from utils.misc import is_master` / `misc.is_master()`: a predicate defined elsewhere.
        project_preds = frozenset(
            name.rsplit(".", 1)[-1]
            for name, cp in project.callee_props.items()
            if RANK_PREDICATE in cp.props
        )
    barrier_ifs = sum(cf.barrier_ifs for cf in chunk_list)
    facts = ModuleFacts(
        aliases=aliases,
        distributed=distributed,
        kinds=kinds,
        func_props=frozen_props,
        func_params={q: fi.params for q, fi in functions.items()},
        func_gates=func_gates,
        rank_predicates=frozenset(rank0) | frozenset(preds) | project_preds,
        rank_vars=_rank_vars(kinds),
        # Only imported names: the set must not change while the user types a new local
        # name, or every chunk would re-run its rules on every keystroke.
        names_used=frozenset(names_used),
        barrier_ifs=barrier_ifs,
        kind_set=frozenset(kinds.values()),
        prop_set=frozenset(prop_count),
        sometimes=sometimes,
        project=project,
    )
    if not keep:
        return facts
    cache.state = _State(
        chunks=chunk_list,
        parts=parts,
        assume=assume_distributed,
        project=project,
        facts=facts,
        functions=functions,
        pos={q: i for i, q in enumerate(functions)},
        classes=frozenset(q[: -len(".__init__")] for q in functions if q.endswith(".__init__")),
        module_parts=module_parts,
        dist_import=dist_import,
        env_count=env_count,
        barrier_ifs=barrier_ifs,
        names_used=names_used,
        rank0=rank0,
        p0=p0,
        receivers=receivers,
        local=local,
        callers=callers,
        p1=p1,
        sites=sites,
        ocg=ocg,
        p2=p2,
        edges=edges,
        gate_callers=gate_callers,
        prop_count=prop_count,
        preds=preds,
        project_preds=project_preds,
    )
    return facts


def _same_or_frozen(props: set[str], earlier: frozenset[str]) -> frozenset[str]:
    return earlier if len(props) == len(earlier) and props == earlier else frozenset(props)


def _module_info(module_parts: Sequence[FunctionInfo]) -> FunctionInfo:
    """The module's top-level code of every chunk as one pseudo-function."""
    return FunctionInfo(
        MODULE,
        None,
        (),
        frozenset().union(*(fi.calls for fi in module_parts)),
        frozenset().union(*(fi.props for fi in module_parts)),
        0,
    )


def _close(
    func_props: dict[str, set[str]], start: Iterable[str], callers: Mapping[str, Iterable[str]]
) -> None:
    """Carry the transitive properties of the functions in ``start`` to their callers (in
    ``func_props``), and on to theirs, to the fixed point."""
    work = [q for q in start if q in callers and func_props[q] & TRANSITIVE_PROPS]
    while work:
        done = work.pop()
        carried = func_props[done] & TRANSITIVE_PROPS
        for q in callers.get(done, ()):
            mine = func_props.get(q)
            if mine is None:
                continue
            new_props = carried - mine
            if new_props:
                mine |= new_props
                if q in callers:
                    work.append(q)


def _gate_edges(fi: FunctionInfo, functions: Mapping[str, FunctionInfo]) -> frozenset[str]:
    """The functions of the module whose properties and gating the gate resolution reads for
    ``fi``'s call sites (:attr:`FunctionInfo.gates`; ``self.m()`` in class C reads ``C.m``)."""
    keys = (_callee_key(site.callee, fi.cls) for site in fi.gates.sites)
    return frozenset(k for k in keys if k in functions)


def _reach(start: Iterable[str], graph: Mapping[str, Iterable[str]]) -> set[str]:
    """``start`` and everything reachable from it in ``graph``."""
    seen = set(start)
    work = list(seen)
    while work:
        for nxt in graph.get(work.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                work.append(nxt)
    return seen


def _merge_edit(
    new_chunks: list[ChunkFacts],
    assume_distributed: bool,
    project: ModuleProjectFacts | None,
    cache: MergeCache,
) -> ModuleFacts | None:
    """The merge after an edit of a few chunks, from the last merge's derivation
    (``cache.state``): each function's properties are derived again only where the edited
    chunks change an input of them (its own facts, the kinds it reads, a callee's derived
    properties, a call site of it), in the manner of salsa's red-green invalidation; the
    fixed points (transitive properties, gate resolution) run over the affected functions
    only, with everything else's last values. None when the edit changes what every
    function depends on (an import, the module's functions, the project), or many chunks:
    then :func:`merge` derives everything again.

    Exactness: a function's derived properties depend only on the functions it reaches
    (its callees, transitively) and on its callers' call sites; those not reverse-reachable
    from a changed function keep their values. A function's gating depends on its COLLECTIVE
    property, its :attr:`FunctionInfo.gates` and its callees' gating: the gate resolution
    (rounds over the functions in the module's order) runs over the changed functions'
    callers together with everything they call, in the same relative order, from no gating,
    which repeats exactly the rounds a fresh merge runs for them; every other function keeps
    its last gating."""
    st = cache.state
    assert st is not None
    if st.assume != assume_distributed or not (st.project is project or st.project == project):
        return None
    old_chunks = st.chunks
    n_old, n_new = len(old_chunks), len(new_chunks)
    if n_old == n_new:
        # Chunks replaced in place (the document re-parses the edited ones only; several
        # edits may have come between two merges, each kept by the early cutoff).
        at = [i for i, (a, b) in enumerate(zip(old_chunks, new_chunks, strict=True)) if a is not b]
    else:
        both = min(n_old, n_new)
        lo = 0
        while lo < both and old_chunks[lo] is new_chunks[lo]:
            lo += 1
        hi = 0
        while hi < both - lo and old_chunks[n_old - 1 - hi] is new_chunks[n_new - 1 - hi]:
            hi += 1
        at = []
    old_r = [old_chunks[i] for i in at] if at or n_old == n_new else old_chunks[lo : n_old - hi]
    new_r = [new_chunks[i] for i in at] if at or n_old == n_new else new_chunks[lo : n_new - hi]
    if not old_r and not new_r:
        return st.facts
    if len(old_r) + len(new_r) > _EDIT_CHUNKS:
        return None
    if [i for cf in old_r for i in cf.imports] != [i for cf in new_r for i in cf.imports]:
        return None  # the aliases may change: every binding and callee is resolved again
    old_fns = [fi for cf in old_r for fi in cf.functions]
    new_fns = [fi for cf in new_r for fi in cf.functions]
    old_named = [fi for fi in old_fns if fi.qualname != MODULE]
    new_named = [fi for fi in new_fns if fi.qualname != MODULE]
    if [fi.qualname for fi in old_named] != [fi.qualname for fi in new_named]:
        return None  # a function added, removed or moved: the module's order changes
    module_touched = len(old_named) != len(old_fns) or len(new_named) != len(new_fns)
    if [fi.qualname for fi in old_fns] != [fi.qualname for fi in new_fns] and _module_place(
        old_chunks
    ) != _module_place(new_chunks):
        # Top-level code appeared in or left an edited chunk (a bracket left open joins a
        # function's chunk with the statements after it while it is typed), and the module's
        # top-level code now comes first elsewhere: its place in the functions' order moves.
        return None
    aliases = st.facts.aliases
    assert cache.aliases == aliases
    functions = st.functions
    old_facts = st.facts

    # The chunks' parts. (One facts object can stand at several places: chunks of equal
    # text share their parse, and every empty chunk has the same facts.)
    old_parts = [st.parts[i] for i in at] if at or n_old == n_new else st.parts[lo : n_old - hi]
    new_parts = []
    for cf in new_r:
        chit = cache.chunks.get(id(cf))
        if chit is None or chit[0] is not cf:
            chit = cache.chunks[id(cf)] = (cf, _chunk_part(cf, aliases))
        new_parts.append(chit[1])
    alive = {id(cf) for cf in new_chunks}
    for cf in old_r:
        if id(cf) not in alive:
            cache.chunks.pop(id(cf), None)
    if n_old == n_new:
        parts = list(st.parts)
        for i, part in zip(at, new_parts, strict=True):
            parts[i] = part
    else:
        parts = st.parts[:lo] + new_parts + st.parts[n_old - hi :]
    st.chunks = new_chunks
    st.parts = parts
    st.env_count += sum(1 for cf in new_r if cf.env_markers) - sum(
        1 for cf in old_r if cf.env_markers
    )
    st.barrier_ifs += sum(cf.barrier_ifs for cf in new_r) - sum(cf.barrier_ifs for cf in old_r)
    names_moved = rank0_moved = False
    for part in old_parts:
        names_moved |= _count(st.names_used, part.names_used, -1)
        rank0_moved |= _count(st.rank0, part.rank0_flags, -1)
    for part in new_parts:
        names_moved |= _count(st.names_used, part.names_used, 1)
        rank0_moved |= _count(st.rank0, part.rank0_flags, 1)

    # The functions: the same names in the same order, some with new facts.
    changed_fi: dict[str, FunctionInfo] = {}  # name -> its facts before the edit
    if len(old_fns) != len(new_fns) or any(
        a is not b for a, b in zip(old_fns, new_fns, strict=True)
    ):
        functions = dict(functions)
        for ofi, nfi in zip(old_named, new_named, strict=True):
            q = ofi.qualname
            if functions[q] is ofi:  # not a later definition of the same name
                functions[q] = nfi
                if nfi != ofi:
                    changed_fi[q] = ofi
        if module_touched:
            module_parts = [fi for cf in new_chunks for fi in cf.functions if fi.qualname == MODULE]
            st.module_parts = module_parts
            module_before = functions[MODULE]
            if len(module_parts) > 1:
                cache.module_parts = module_parts
                cache.module_info = _module_info(module_parts)
                functions[MODULE] = cache.module_info
            else:
                functions[MODULE] = module_parts[0]
            if functions[MODULE] != module_before:
                changed_fi[MODULE] = module_before
        st.functions = functions

    # Kinds: derived again when an edited chunk changes what they are derived from.
    def kinds_input(cf: ChunkFacts, part: _ChunkPart) -> tuple[object, ...]:
        return (
            part.kinds,
            part.alias_bindings,
            part.unwrapped,
            part.conditional,
            part.unconditional,
            tuple(
                (cs.caller, cs.callee, cs.args)
                for cs in cf.call_sites
                if cs.args and (cs.callee in functions or cs.callee in st.classes)
            ),
            # Not the top-level code's part: its name, class and parameters are always the
            # same, whichever chunks hold top-level code (its calls are the call sites above).
            tuple((fi.qualname, fi.cls, fi.params) for fi in cf.functions if fi.qualname != MODULE),
        )

    kinds, sometimes = old_facts.kinds, old_facts.sometimes
    kinds_changed = False
    if [kinds_input(cf, p) for cf, p in zip(old_r, old_parts, strict=True)] != [
        kinds_input(cf, p) for cf, p in zip(new_r, new_parts, strict=True)
    ]:
        call_sites = [cs for cf in new_chunks for cs in cf.call_sites]
        new_kinds, new_sometimes = _kinds_stage(parts, call_sites, functions, aliases, project)
        if new_kinds != kinds:
            kinds = new_kinds
            kinds_changed = True
        if new_sometimes != sometimes:
            sometimes = new_sometimes

    # Own properties (p0) and calls of the module's functions.
    p0_dirty = set(changed_fi)
    if kinds_changed:
        p0_dirty |= st.receivers
    dirty1: set[str] = set()
    callee_memo: dict[str, frozenset[str]] = {}
    for q in p0_dirty:
        fi = functions[q]
        fhit = cache.functions.get(id(fi))
        if fhit is None or fhit[0] is not fi:
            fhit = cache.functions[id(fi)] = (fi, *_function_part(fi, aliases, callee_memo))
        if fhit[2]:
            st.receivers.add(q)
        else:
            st.receivers.discard(q)
        own = frozenset(_base_props(q, fi, fhit[1], fhit[2], functions, project, kinds))
        if own != st.p0[q]:
            st.p0[q] = own
            dirty1.add(q)
        if q in changed_fi:
            calls = tuple(callee for callee in fi.calls if callee in functions)
            before = st.local[q]
            if calls != before:
                st.local[q] = calls
                for callee in set(before) - set(calls):
                    st.callers[callee].discard(q)
                for callee in set(calls) - set(before):
                    st.callers.setdefault(callee, set()).add(q)
                dirty1.add(q)
    for ofi in changed_fi.values():
        tables: tuple[dict[int, Any], ...] = (cache.functions, cache.local_calls)
        for table in tables:
            stale = table.get(id(ofi))
            if stale is not None and stale[0] is ofi:
                del table[id(ofi)]

    # Transitive properties (p1): the changed functions and their callers, transitively.
    changed1: set[str] = set()
    guards_moved = False
    if dirty1:
        affected = _reach(dirty1, st.callers)
        work1: dict[str, set[str]] = {}
        for q in affected:
            props = set(st.p0[q])
            for callee in st.local[q]:
                if callee not in affected:
                    props |= st.p1[callee] & TRANSITIVE_PROPS
            work1[q] = props
        _close(work1, list(work1), st.callers)
        for q, props in work1.items():
            if props != st.p1[q]:
                guards_moved |= (GUARDS_ITSELF in props) != (GUARDS_ITSELF in st.p1[q])
                st.p1[q] = frozenset(props)
                changed1.add(q)

    # Only called under a guard (p2): the callees of the edited chunks' call sites, and
    # every callee when a caller starts or stops guarding itself.
    old_sites = [cs for cf in old_r for cs in cf.call_sites]
    new_sites = [cs for cf in new_r for cs in cf.call_sites]
    ocg_dirty: set[str] = set()
    if old_sites != new_sites:
        for sites_, by in ((old_sites, -1), (new_sites, 1)):
            for cs in sites_:
                if cs.callee in functions:
                    by_site = st.sites.setdefault(cs.callee, {})
                    _count(by_site, ((cs.caller, cs.guarded),), by)
                    if not by_site:
                        del st.sites[cs.callee]
                    ocg_dirty.add(cs.callee)
    if guards_moved:
        ocg_dirty |= st.sites.keys() | st.ocg
    dirty2 = set(changed1)
    for q in ocg_dirty:
        now_sites = st.sites.get(q)
        now = bool(now_sites) and _all_guarded(now_sites or {}, st.p1)
        if now != (q in st.ocg):
            if now:
                st.ocg.add(q)
            else:
                st.ocg.discard(q)
            dirty2.add(q)
    changed2: set[str] = set()
    project_ocg = project.only_called_guarded if project is not None else frozenset()
    for q in dirty2:
        p2 = st.p1[q]
        if q in st.ocg or q in project_ocg:
            p2 = p2 | {ONLY_CALLED_GUARDED}
        if p2 != st.p2[q]:
            st.p2[q] = p2
            changed2.add(q)

    # Gate resolution: the changed functions, their callers (transitively) and all they call,
    # each function's gating read again (core/gates.py: it depends on the function's
    # COLLECTIVE property, its FunctionInfo.gates and its callees' gating).
    func_gates = old_facts.func_gates
    dirty_g = changed2 | changed_fi.keys()
    if dirty_g:
        for q in dirty_g:
            old_e = st.edges.pop(q, frozenset())
            new_e = _gate_edges(functions[q], functions) if COLLECTIVE in st.p2[q] else frozenset()
            if new_e:
                st.edges[q] = new_e
            for key in old_e - new_e:
                st.gate_callers[key].discard(q)
            for key in new_e - old_e:
                st.gate_callers.setdefault(key, set()).add(q)
        region = _reach(_reach(dirty_g, st.gate_callers), st.edges)
        working = {q: st.p2[q] for q in sorted(region, key=st.pos.__getitem__)}
        # The last gating of every function outside the region (none of the region reads it:
        # the region holds everything its functions call); the region's resolved afresh.
        gating = {q: g for q, g in func_gates.items() if q not in region}
        _resolve_gates(working, st.p2, functions, aliases, project, cache, gating)
        if gating != func_gates:
            func_gates = gating

    # The module facts: the old tables where nothing in them changed.
    final = old_facts.func_props
    func_props = final
    preds_moved = False
    changed_final = {q: st.p2[q] for q in changed2 if st.p2[q] != final[q]}
    if changed_final:
        func_props = dict(final)
        for q, fp in changed_final.items():
            was = final[q]
            _count(st.prop_count, was - fp, -1)
            _count(st.prop_count, fp - was, 1)
            if (RANK_PREDICATE in fp) != (RANK_PREDICATE in was):
                _count(st.preds, (q.rsplit(".", 1)[-1],), 1 if RANK_PREDICATE in fp else -1)
                preds_moved = True
            func_props[q] = fp
    func_params = old_facts.func_params
    if any(functions[q].params != func_params[q] for q in changed_fi):
        func_params = {q: fi.params for q, fi in functions.items()}
    distributed = (
        assume_distributed
        or (project is not None and project.distributed is not None)
        or st.env_count > 0
        or st.dist_import
    )
    facts = ModuleFacts(
        aliases=aliases,
        distributed=distributed,
        kinds=kinds,
        func_props=func_props,
        func_params=func_params,
        func_gates=func_gates,
        rank_predicates=(
            frozenset(st.rank0) | frozenset(st.preds) | st.project_preds
            if rank0_moved or preds_moved
            else old_facts.rank_predicates
        ),
        rank_vars=_rank_vars(kinds) if kinds_changed else old_facts.rank_vars,
        names_used=frozenset(st.names_used) if names_moved else old_facts.names_used,
        barrier_ifs=st.barrier_ifs,
        kind_set=frozenset(kinds.values()) if kinds_changed else old_facts.kind_set,
        prop_set=frozenset(st.prop_count) if changed_final else old_facts.prop_set,
        sometimes=sometimes,
        project=project,
    )
    if (
        func_props is final
        and kinds is old_facts.kinds
        and func_params is old_facts.func_params
        and func_gates is old_facts.func_gates
        and facts == old_facts
    ):
        return old_facts
    st.facts = facts
    return facts
