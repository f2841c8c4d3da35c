"""The module merge: the chunks' raw facts resolved into :class:`ModuleFacts` (aliases,
kinds flowing through calls, transitive function properties), incrementally through
:class:`MergeCache`.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddp_lsp.core import gates as gate_facts
from ddp_lsp.core import names as known_names
from ddp_lsp.core.crossfile import ModuleProjectFacts, ParamKind, Provenance, is_test_path
from ddp_lsp.core.factcalls import _kind_of_source, is_collective_call
from ddp_lsp.core.factkinds import (
    _CHECKPOINT_WRITERS,
    COLLECTIVE,
    DESTROYS_PG,
    INITS_PG,
    MODULE,
    SAVES_CALLER_PATH,
    SETS_DEVICE,
    CallSite,
    ChunkFacts,
    FunctionInfo,
    SavesThrough,
    SourceMarker,
)

if TYPE_CHECKING:
    from ddp_lsp.core.factderive import _State

# -- module facts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleFacts:
    """Facts of a whole module, derived from its chunks. Compared by value (tables compare as
    dicts, in C); hashable, with the hash computed on first use."""

    aliases: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    distributed: bool = False
    kinds: Mapping[tuple[str, str], str] = field(default_factory=dict, compare=False, hash=False)
    func_props: Mapping[str, frozenset[str]] = field(
        default_factory=dict, compare=False, hash=False
    )
    func_params: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict, compare=False, hash=False
    )
    # Parameter values that switch a function's collectives off (core/gates.py): only the
    # functions that have some.
    func_gates: Mapping[str, gate_facts.Gating] = field(
        default_factory=dict, compare=False, hash=False
    )
    rank_predicates: frozenset[str] = frozenset()
    rank_vars: frozenset[str] = frozenset()
    names_used: frozenset[str] = frozenset()  # imported names loaded somewhere in the module
    barrier_ifs: int = 0  # top-level `if` statements that call a barrier (ChunkFacts.barrier_ifs)
    # Every kind bound anywhere, every property of any function: rules ask "does this module
    # wrap a model in DDP at all?" per chunk, which must not cost a scan of all functions.
    kind_set: frozenset[str] = frozenset()
    prop_set: frozenset[str] = frozenset()
    # Keys of ``kinds`` that hold their kind on some launches only: wrapped under an `if`
    # (`if args.distributed: model = DDP(model)`), or passed by a caller that also passes a
    # value of no known kind. A safe fix never calls a DDP-only method on them unguarded.
    sometimes: frozenset[tuple[str, str]] = frozenset()
    # What the rest of the project says (None: analysed alone). Part of ``key``.
    project: ModuleProjectFacts | None = field(default=None, compare=False, hash=False)

    @property
    def key(self) -> tuple[object, ...]:
        """Everything the facts say, as one hashable value (built on first use: sorting every
        table costs more than the merge that made them)."""
        key = self.__dict__.get("_key")
        if key is None:
            key = (
                tuple(sorted(self.aliases.items())),
                self.distributed,
                tuple(sorted(self.kinds.items())),
                tuple(sorted((q, tuple(sorted(p))) for q, p in self.func_props.items())),
                tuple(sorted(self.func_params.items())),
                tuple(sorted(self.func_gates.items())),
                self.rank_predicates,
                self.rank_vars,
                self.names_used,
                self.barrier_ifs,
                tuple(sorted(self.sometimes)),
                self.project.key if self.project is not None else None,
            )
            object.__setattr__(self, "_key", key)
        return key

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(self.key)
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, ModuleFacts)
            and self.distributed == other.distributed
            and self.rank_predicates == other.rank_predicates
            and self.rank_vars == other.rank_vars
            and self.names_used == other.names_used
            and self.barrier_ifs == other.barrier_ifs
            and self.aliases == other.aliases
            and self.kinds == other.kinds
            and self.sometimes == other.sometimes
            and self.func_props == other.func_props
            and self.func_params == other.func_params
            and self.func_gates == other.func_gates
            and self.project == other.project
        )

    def resolve(self, dotted_name: str) -> str | None:
        return known_names.resolve(dotted_name, self.aliases)

    def qualname(self, expr: ast.AST) -> str | None:
        return known_names.qualname(expr, self.aliases)

    def has_project(self) -> bool:
        return self.project is not None

    def is_test_module(self) -> bool:
        """The module is test code (crossfile.is_test_path of its path in the project); False
        when analysed alone, without a path."""
        return self.project is not None and is_test_path(self.project.path)

    def single_process_functions(self) -> frozenset[str]:
        """The functions of this module the project finds single-process (project/reach.py);
        empty when analysed alone: no project and a project that finds none read alike."""
        return self.project.single_process if self.project is not None else frozenset()

    def kind(self, path: str, scope: str, cls: str | None) -> str | None:
        """What ``path`` (``model``, ``self.scaler``) holds in function ``scope``."""
        key = visible_key(self.kinds, path, scope, cls)
        return None if key is None else self.kinds[key]

    def kind_on_every_launch(self, path: str, scope: str, cls: str | None) -> bool:
        """``path`` has a kind in ``scope`` and holds it on every launch (see ``sometimes``)."""
        key = visible_key(self.kinds, path, scope, cls)
        return key is not None and key not in self.sometimes

    def names_of_kind(self, kind: str, scope: str, cls: str | None) -> list[str]:
        """Every path visible in ``scope`` (its own, enclosing and module level) of a kind."""
        by_kind = self.__dict__.get("_by_kind")
        if by_kind is None:  # built on first use: rules ask per chunk, the table is large
            by_kind = {}
            for (sc, path), k in self.kinds.items():
                by_kind.setdefault(k, {}).setdefault(sc, []).append(path)
            object.__setattr__(self, "_by_kind", by_kind)
        # By kind, then scope: a module binds a kind in many functions, and a function sees
        # only its own scopes (a 20,000-line file: 500 sampler scopes scanned per question).
        in_scope = by_kind.get(kind)
        if not in_scope:
            return []
        out = []
        for sc in visible_scopes(scope, cls):
            for path in in_scope.get(sc, ()):
                if not path.startswith("self.") or sc == cls:
                    out.append(path)
        return sorted(set(out))

    def props(self, qualname: str) -> frozenset[str]:
        return self.func_props.get(qualname, frozenset())

    def callee_props(self, callee: str, cls: str | None) -> frozenset[str]:
        """Properties of the function a call spelled ``callee`` reaches: in this module, or
        (``utils.save_on_master``, an inherited ``self.sync``) in another file of the project."""
        key = _callee_key(callee, cls)
        own = self.func_props.get(key)
        if own is not None:
            return own
        cp = self.project.callee_props.get(key) if self.project is not None else None
        return cp.props if cp is not None else frozenset()

    def callee_gating(self, callee: str, cls: str | None) -> gate_facts.Gating | None:
        """The parameter values that switch off the collectives of the function a call
        spelled ``callee`` reaches (as :meth:`callee_props` finds it); None when none do."""
        key = _callee_key(callee, cls)
        if key in self.func_props:
            return self.func_gates.get(key)
        cp = self.project.callee_props.get(key) if self.project is not None else None
        return cp.gating if cp is not None else None

    # -- where cross-file facts came from -----------------------------------------------------

    def kind_origin(self, path: str, scope: str, cls: str | None) -> ParamKind | None:
        """For a kind known only from another file: where it came from (else None)."""
        if self.project is None or not self.project.extra_kinds:
            return None
        key = visible_key(self.kinds, path, scope, cls)
        return None if key is None else self.project.extra_kinds.get(key)

    def callee_origin(self, callee: str, cls: str | None, prop: str) -> Provenance | None:
        """For a property of a function in another file: where it holds (else None)."""
        key = _callee_key(callee, cls)
        if self.project is None or key in self.func_props:
            return None
        cp = self.project.callee_props.get(key)
        return None if cp is None else cp.origins.get(prop)


def _resolve_gates(
    func_props: Mapping[str, Collection[str]],
    lookup: Mapping[str, Collection[str]],
    functions: Mapping[str, FunctionInfo],
    aliases: Mapping[str, str],
    project: ModuleProjectFacts | None,
    cache: MergeCache,
    gating: dict[str, gate_facts.Gating],
) -> dict[str, gate_facts.Gating]:
    """Parameters that switch a helper's collectives off (:attr:`ModuleFacts.func_gates`),
    resolved for the functions of ``func_props`` (in its order) into ``gating`` (returned).
    ``lookup``: every function of the module's properties (``func_props`` itself, or a
    superset); a call of one of them reads its gating from ``gating``, so ``gating`` holds
    the last values of the module's functions that are not resolved again (see
    core/factderive.py), and none of those that are."""

    def gating_of(caller: str, name: str) -> gate_facts.Gating | None:
        fi = functions.get(caller)
        key = _callee_key(name, fi.cls if fi is not None else None)
        if key in lookup:
            return gating.get(key)
        cp = project.callee_props.get(key) if project is not None else None
        return cp.gating if cp is not None else None

    def gates_of(q: str) -> tuple[gate_facts.GateFacts, tuple[str, ...]]:
        fi = functions[q]
        return fi.gates, gate_facts.gate_params(fi.params)

    by_name = cache.collective_names  # the same names are called from many functions

    def reaches(caller: str, name: str) -> bool:
        direct = by_name.get(name)
        if direct is None:
            direct = by_name[name] = is_collective_call(name, aliases)
        if direct:
            return True
        fi = functions.get(caller)
        key = _callee_key(name, fi.cls if fi is not None else None)
        own = lookup.get(key)
        if own is not None:
            return COLLECTIVE in own
        cp = project.callee_props.get(key) if project is not None else None
        return cp is not None and COLLECTIVE in cp.props

    gate_facts.resolve(func_props, gating_of, reaches, gates_of, gating)
    return gating


def _callee_key(callee: str, cls: str | None) -> str:
    """The name facts know a call by: ``self.m()`` in class ``C`` is ``C.m``."""
    return f"{cls}.{callee[5:]}" if callee.startswith("self.") and cls else callee


def visible_scopes(scope: str, cls: str | None) -> set[str]:
    """The scopes whose names function ``scope`` sees: its own, the enclosing ones, the
    module's (``""``) and, in a method of ``cls``, the class's (``self.x``)."""
    visible = {scope, ""}
    s = scope
    while "." in s:
        s = s.rpartition(".")[0]
        visible.add(s)
    if cls:
        visible.add(cls)
    return visible


def visible_key(
    table: Mapping[tuple[str, str], object], path: str, scope: str, cls: str | None
) -> tuple[str, str] | None:
    """The (scope, path) key of ``table`` that ``path`` means in function ``scope``: its own
    scope, then the enclosing ones up to the module; ``self.x`` in class ``cls``."""
    if path.startswith("self."):
        return (cls, path) if cls is not None and (cls, path) in table else None
    s = scope
    while True:
        if (s, path) in table:
            return (s, path)
        if not s:
            return None
        s = s.rpartition(".")[0] if "." in s else ""


class MergeCache:
    """What :func:`merge` derived from each chunk's facts and each function under the module's
    aliases and project facts. A :class:`~ddp_lsp.core.document.Document` keeps one between
    edits, so a merge after an edit re-derives only what the edited chunks hold (at 20,000
    lines, resolving every binding and callee again was most of a merge's cost)."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] | None = None
        self.project: ModuleProjectFacts | None = None
        self.chunks: dict[int, tuple[ChunkFacts, _ChunkPart]] = {}
        self.functions: dict[int, tuple[FunctionInfo, frozenset[str], tuple[str, ...]]] = {}
        # Each function's calls of functions of the module, while their names stay the same.
        self.names: frozenset[str] = frozenset()
        self.local_calls: dict[int, tuple[FunctionInfo, tuple[str, ...]]] = {}
        self.module_parts: list[FunctionInfo] = []
        self.module_info: FunctionInfo | None = None
        # Whether a name called is a collective under the aliases.
        self.collective_names: dict[str, bool] = {}
        # The last merge's derivation per function and stage (see core/factderive.py).
        self.state: _State | None = None

    def reset_if_changed(self, aliases: dict[str, str], project: ModuleProjectFacts | None) -> None:
        if self.aliases != aliases or self.project != project:
            self.aliases = dict(aliases)
            self.project = project
            self.chunks.clear()
            self.functions.clear()
            self.collective_names.clear()


@dataclass(frozen=True)
class _ChunkPart:
    kinds: tuple[tuple[tuple[str, str], str], ...]  # from bindings to a known callee
    alias_bindings: tuple[tuple[str, str, str, str], ...]  # `y = x`: (scope, path, src, scope)
    unwrapped: frozenset[tuple[str, str]]
    names_used: frozenset[str]
    # Keys with a kind bound conditionally (Binding.conditional), and otherwise.
    conditional: frozenset[tuple[str, str]] = frozenset()
    unconditional: frozenset[tuple[str, str]] = frozenset()
    rank0_flags: frozenset[str] = frozenset()  # `self.is_master = rank == 0`: "is_master"


def _chunk_part(cf: ChunkFacts, aliases: Mapping[str, str]) -> _ChunkPart:
    kinds: list[tuple[tuple[str, str], str]] = []
    alias_bindings: list[tuple[str, str, str, str]] = []
    conditional: set[tuple[str, str]] = set()
    unconditional: set[tuple[str, str]] = set()
    in_branch: set[tuple[str, str]] = set()
    plain: set[tuple[str, str]] = set()  # bound to a value of no kind (or another name)
    for b in cf.bindings:
        if b.source[0] == SourceMarker.UNWRAP:
            continue
        if b.source[0] == SourceMarker.ALIAS:
            src_scope = b.source[2] if len(b.source) > 2 else b.scope
            alias_bindings.append((b.scope, b.path, b.source[1], src_scope))
            plain.add((b.scope, b.path))
            continue
        k = _kind_of_source(b.source, aliases)
        if k is not None:
            kinds.append(((b.scope, b.path), k))
            if b.conditional:
                conditional.add((b.scope, b.path))
            else:
                (in_branch if b.in_branch else unconditional).add((b.scope, b.path))
        elif b.source[0] != SourceMarker.RANK:
            plain.add((b.scope, b.path))
    # `if d: model = DDP(net) else: model = net`: the kind is one branch's only.
    conditional |= in_branch & plain
    unconditional |= in_branch - plain
    return _ChunkPart(
        tuple(kinds),
        tuple(alias_bindings),
        unwrapped_names((cf,)),
        frozenset(cf.loads.intersection(aliases)),
        frozenset(conditional),
        frozenset(unconditional),
        frozenset(
            b.path.rsplit(".", 1)[-1] for b in cf.bindings if b.source == (SourceMarker.RANK0_FLAG,)
        ),
    )


def _callee_props_by_name(callee: str, aliases: Mapping[str, str]) -> frozenset[str]:
    """What a call spelled ``callee`` does, known from the name alone."""
    found: set[str] = set()
    if is_collective_call(callee, aliases):
        found.add(COLLECTIVE)
    resolved = known_names.resolve(callee, aliases)
    if resolved == known_names.INIT_PROCESS_GROUP:
        found.add(INITS_PG)
    elif resolved == known_names.DESTROY_PROCESS_GROUP:
        found.add(DESTROYS_PG)
    elif resolved == "torch.cuda.set_device":
        found.add(SETS_DEVICE)
    return frozenset(found)


def _function_part(
    fi: FunctionInfo, aliases: Mapping[str, str], memo: dict[str, frozenset[str]]
) -> tuple[frozenset[str], tuple[str, ...]]:
    """A function's own properties (syntactic, and from the names it calls), and the
    receivers of its `x.update()` calls (a scaler update once `x`'s kind is known)."""
    props = set(fi.props)
    raw = {p: s for p in props if (s := SavesThrough.decode(p)) is not None}
    if raw:
        props.difference_update(raw)
        if any(known_names.resolve(s.callee, aliases) in _CHECKPOINT_WRITERS for s in raw.values()):
            props.add(SAVES_CALLER_PATH)
    receivers: list[str] = []
    for callee in fi.calls:
        direct = memo.get(callee)
        if direct is None:
            direct = memo[callee] = _callee_props_by_name(callee, aliases)
        props |= direct
        if (
            callee.endswith(".update")
            and callee.count(".") == 1
            or callee.startswith("self.")
            and callee.endswith(".update")
        ):
            receivers.append(callee.rsplit(".", 1)[0])
    return frozenset(props), tuple(receivers)


def merge_input(
    cf: ChunkFacts, aliases: Mapping[str, str], functions: Container[str]
) -> tuple[object, ...]:
    """All that :func:`merge` reads of one chunk's facts, given the module's ``aliases`` and
    the qualnames of its ``functions``: two chunks with equal merge inputs give equal module
    facts (early cutoff: a keystroke that changes only what merge ignores, a local name loaded
    or bound to a value of no kind, an argument of a call that reaches no function of the
    module, keeps the module facts and every other chunk's findings as they were). Keep in
    step with :func:`merge` and :func:`_chunk_part`; tests/core/test_merge_cutoff.py checks
    the facts kept against a fresh merge."""
    return (
        cf.imports,
        cf.env_markers,
        cf.functions,
        # A call site counts only where it reaches a function of the module (kinds through
        # parameters, "only called under a guard"); `print(x)` is a call site too.
        tuple(
            cs
            for cs in cf.call_sites
            if cs.callee in functions or f"{cs.callee}.__init__" in functions
        ),
        cf.barrier_ifs,
        _chunk_part(cf, aliases),
    )


def _module_place(chunks: Sequence[ChunkFacts]) -> int | None:
    """Where the top-level code stands among the module's functions in a fresh merge (the
    functions named before its first part; None: no top-level code). Usually the imports at
    the top: found at once."""
    before: set[str] = set()
    for cf in chunks:
        for fi in cf.functions:
            if fi.qualname == MODULE:
                return len(before)
            before.add(fi.qualname)
    return None


def _passed(
    call_sites: Sequence[CallSite], functions: Mapping[str, FunctionInfo]
) -> list[tuple[tuple[str, str], str, str, str | None]]:
    """Each named argument a call site passes to a parameter of a function of the module:
    ((function, parameter), argument path, caller, caller's class), in call-site order.
    (`Trainer(model, rank)` passes its arguments to Trainer.__init__.)"""
    out: list[tuple[tuple[str, str], str, str, str | None]] = []
    classes = {q[: -len(".__init__")] for q in functions if q.endswith(".__init__")}
    for cs in call_sites:
        if not cs.args or (cs.callee not in functions and cs.callee not in classes):
            continue  # `print(x)`, `helper()`: no parameter of the module's gets a value
        target = functions.get(cs.callee) or functions.get(f"{cs.callee}.__init__")
        if target is None:
            continue
        caller_fn = functions.get(cs.caller)
        caller_cls = caller_fn.cls if caller_fn is not None else None
        for pos, arg_path in cs.args:
            if not arg_path:
                continue
            param = _param_at(target, pos)
            if param is not None:
                out.append(((target.qualname, param), arg_path, cs.caller, caller_cls))
    return out


def _sometimes(
    kinds: Mapping[tuple[str, str], str],
    parts: Sequence[_ChunkPart],
    functions: Mapping[str, FunctionInfo],
    alias_bindings: Sequence[tuple[str, str, str, str]],
    passed: Sequence[tuple[tuple[str, str], str, str, str | None]],
    project: ModuleProjectFacts | None,
) -> frozenset[tuple[str, str]]:
    """The keys of ``kinds`` whose kind holds on some launches only (``ModuleFacts.sometimes``):
    bound to it only under an `if` over an earlier value (Binding.conditional), a parameter
    some caller in another file passes a value of no known kind (``ParamKind.mixed``), or
    bound from such a value through `y = x` or a call. (A same-file argument of no known kind,
    `save(build_model(), ...)` into `def save(model: DDP)`, is not evidence of a plain model.)"""
    conditional = frozenset().union(*(p.conditional for p in parts))
    unconditional = frozenset().union(*(p.unconditional for p in parts))
    out: set[tuple[str, str]] = set(conditional - unconditional)
    if project is not None:
        out.update(k for k, pk in project.extra_kinds.items() if pk.mixed and k in kinds)
    # Carried by `y = x` and by call sites, to a bounded fixed point.
    for _ in range(6):
        changed = False
        for scope, path, src, src_scope in alias_bindings:
            fn = functions.get(src_scope)
            src_key = visible_key(kinds, src, src_scope, fn.cls if fn is not None else None)
            if src_key in out and (scope, path) in kinds and (scope, path) not in out:
                out.add((scope, path))
                changed = True
        for key, arg_path, caller, caller_cls in passed:
            if key not in kinds or key in out:
                continue
            if visible_key(kinds, arg_path, caller, caller_cls) in out:
                out.add(key)
                changed = True
        if not changed:
            break
    return frozenset(out)


def _param_at(target: FunctionInfo, pos: int | str) -> str | None:
    """The parameter of ``target`` a call's argument at ``pos`` (index or keyword) binds."""
    if isinstance(pos, int):
        params = target.params[1:] if target.cls else target.params
        return params[pos] if pos < len(params) else None
    return pos if pos in target.params else None


def unwrapped_names(chunks: Iterable[ChunkFacts]) -> frozenset[tuple[str, str]]:
    """(scope, path) of names bound to ``<wrapper>.module`` somewhere: plain models, whatever
    else they are assigned from (``model_without_ddp = model`` before the wrap)."""
    return frozenset(
        (b.scope, b.path)
        for cf in chunks
        for b in cf.bindings
        if b.source[0] == SourceMarker.UNWRAP
    )
