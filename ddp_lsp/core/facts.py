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
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from ddp_lsp.core import frameworks as FW
from ddp_lsp.core import gates as G
from ddp_lsp.core import names as N
from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.uniformity import condition_ranks
from ddp_lsp.core.walk import children, walk

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
RANK0_FLAG = "=rank0flag"  # binding source: a flag assigned from a rank-0 test
_WORLD_NAME = re.compile(r"world|num_(processes|gpus|nodes)|n_?gpus?|nprocs|^n$", re.IGNORECASE)
UPDATES_SCALER = "scaler_update"  # calls .update() on a GradScaler
SETS_EPOCH = "set_epoch"  # calls .set_epoch(...) (on a sampler, a loader's sampler...)
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
        SETS_DEVICE,
        DESTROYS_PG,
        SILENCES_PRINT,
        SILENCES_LOGGING,
    }
)

# Callables that return their (first) argument's kind unchanged.
_TRANSPARENT = frozenset({"torch.compile", "torch.nn.SyncBatchNorm.convert_sync_batchnorm"})
# Well-known wrappers that perform collectives (receiver name, method): the framework tables.
WRAPPER_COLLECTIVES = FW.BUILTIN.method_pairs(FW.Meaning.COLLECTIVE)


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
# Last names of the barrier calls that ``barrier_ifs`` counts (the rules resolve them fully).
_BARRIER_NAMES = frozenset(
    {"barrier", "monitored_barrier", "wait_for_everyone", "synchronize", "Barrier"}
)


def _barrier_ifs(body: list[ast.stmt]) -> int:
    n = 0
    for stmt in body:
        if isinstance(stmt, ast.If) and any(
            isinstance(node, ast.Call)
            and (
                node.func.attr
                if isinstance(node.func, ast.Attribute)
                else getattr(node.func, "id", "")
            )
            in _BARRIER_NAMES
            for node in ast.walk(stmt)
        ):
            n += 1
    return n


def extract(
    tree: ast.Module,
    member_of: str | None,
    ranks: RankModel,
    extractor: _Extractor | None = None,
) -> ChunkFacts:
    """Raw facts of one chunk (``member_of``: the class its methods belong to)."""
    x = extractor if extractor is not None else _Extractor(ranks)
    if member_of is not None:
        x.class_stack.append(member_of)
    # Top-level code is summarised like a function named "<module>" (merged across chunks), so
    # `if __name__ == "__main__": main(); dist.destroy_process_group()` is visible to rules.
    x._calls.append(set())
    x._props.append(set())
    x.block(tree.body, scope="", guarded=False)
    top_calls, top_props = x._calls.pop(), x._props.pop()
    if top_calls or top_props:
        x.functions.append(
            FunctionInfo(MODULE, None, (), frozenset(top_calls), frozenset(top_props), 0)
        )
    return ChunkFacts(
        imports=tuple(x.imports),
        env_markers=x.env_markers,
        bindings=tuple(x.bindings),
        functions=tuple(x.functions),
        call_sites=tuple(x.call_sites),
        loads=frozenset(x.loads),
        barrier_ifs=_barrier_ifs(tree.body) if member_of is None else 0,
    )


@dataclass(frozen=True)
class ModuleExtract:
    """A whole file's facts as the project index needs them (see :func:`extract_module`)."""

    facts: ChunkFacts
    # Calls through a module attribute (`engine.train_one_epoch(model)`, `du.save_on_master()`),
    # which a chunk does not record as call sites (in one file they reach no local function).
    dotted_sites: tuple[CallSite, ...]
    # 1-based line of each call site: facts.call_sites, then dotted_sites.
    site_lines: tuple[int, ...]


def extract_module(tree: ast.Module, ranks: RankModel) -> ModuleExtract:
    """Raw facts of a whole module parsed at once, with the call sites the project needs."""
    x = _Extractor(ranks, project=True)
    cf = extract(tree, None, ranks, x)
    return ModuleExtract(cf, tuple(x.dotted_sites), (*x.site_lines, *x.dotted_lines))


_SAVERS = frozenset({"save", "save_file", "save_model"})
UNWRAP = "=unwrap"  # a binding's source: `x = y.module`
_SAVES_RAW = "saves:"
_CHECKPOINT_WRITERS = frozenset(
    {N.TORCH_SAVE, "safetensors.torch.save_file", "safetensors.torch.save_model"}
)


# Calls that set which log records are emitted: a level or filter chosen per rank silences the
# other ranks' INFO logging.
_LEVEL_SETTERS = frozenset({"basicConfig", "setLevel", "addFilter", "set_verbosity", "disable"})


def _is_builtin_print(t: ast.expr) -> bool:
    """``builtins.print = ...`` / ``__builtin__.print = ...``."""
    return (
        isinstance(t, ast.Attribute)
        and t.attr == "print"
        and isinstance(t.value, ast.Name)
        and t.value.id in ("builtins", "__builtin__", "__builtins__")
    )


class _Extractor:
    def __init__(self, ranks: RankModel, project: bool = False) -> None:
        self.ranks = ranks
        # Whole-module extraction for the project index: also dotted call sites, and lines.
        self.project = project
        self.dotted_sites: list[CallSite] = []
        self.site_lines: list[int] = []
        self.dotted_lines: list[int] = []
        self._imported: dict[str, str] | None = None
        self._imported_n = 0
        self.imports: list[tuple[str, str]] = []
        self.env_markers = False
        self.bindings: list[Binding] = []
        self.functions: list[FunctionInfo] = []
        self.call_sites: list[CallSite] = []
        self.loads: set[str] = set()
        self.class_stack: list[str] = []
        self._calls: list[set[str]] = []  # per open function
        self._props: list[set[str]] = []
        self._params: list[frozenset[str]] = []
        self._rank_branches = 0  # depth of `if <rank condition>:` branches around the statement
        self._ifs = 0  # depth of `if` branches around the statement, in its own function
        self._assigned: list[set[str]] = [set()]  # paths assigned so far, per open function
        self._loop_names: list[set[str]] = []  # names bound by `for` targets, per open function

    def _maybe_project_call(self, name: str) -> bool:
        """``engine.train_one_epoch`` / ``du.save_on_master``: a call through an imported
        name that may be a project module (not the standard library or a known framework:
        their call sites are most of a file's and can never reach project code)."""
        if self._imported is None or self._imported_n != len(self.imports):
            self._imported = {}
            for bound, target in self.imports:
                self._imported.setdefault(bound, target)
            self._imported_n = len(self.imports)
        qual = self._imported.get(name.partition(".")[0])
        return qual is not None and N.may_be_project_module(qual)

    # -- statements ----------------------------------------------------------------------------

    def block(self, body: list[ast.stmt], scope: str, guarded: bool) -> None:
        for stmt in body:
            self.stmt(stmt, scope, guarded)
            # `if not is_main_process(): return` guards the rest of the block.
            if (
                not guarded
                and isinstance(stmt, ast.If)
                and stmt.body
                and isinstance(stmt.body[-1], (ast.Return, ast.Continue, ast.Raise))
                and _nonzero(condition_ranks(self.ranks, stmt.test))
            ):
                guarded = True

    def stmt(self, s: ast.stmt, scope: str, guarded: bool) -> None:
        if isinstance(s, (ast.For, ast.AsyncFor)) and self._loop_names:
            self._loop_names[-1].update(n.id for n in ast.walk(s.target) if isinstance(n, ast.Name))
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function(s, scope)
            return
        if isinstance(s, ast.ClassDef):
            for d in s.decorator_list:
                self.expr(d, scope, guarded)
            for b in s.bases:
                self.expr(b, scope, guarded)
            self.class_stack.append(s.name)
            self.block(s.body, scope, guarded)
            self.class_stack.pop()
            return
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            self.imports.extend(N.import_bindings(s))
            return
        if isinstance(s, ast.If):
            pol = condition_ranks(self.ranks, s.test)
            self.expr(s.test, scope, guarded)
            self._rank_branches += pol is not None
            self._ifs += 1
            mark = len(self.bindings)
            self.block(s.body, scope, guarded or _zero(pol))
            self._drop_if_raises(s.body, scope, mark)
            mark = len(self.bindings)
            self.block(s.orelse, scope, guarded or _nonzero(pol))
            self._drop_if_raises(s.orelse, scope, mark)
            self._ifs -= 1
            self._rank_branches -= pol is not None
            return
        if isinstance(s, (ast.Assign, ast.AnnAssign)):
            value = s.value
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if any(_is_builtin_print(t) for t in targets):
                self._prop(SILENCES_PRINT)
            if value is not None:
                for t in targets:
                    self.bind(t, value, scope)
            if isinstance(s, ast.AnnAssign):
                self.annotation(s.target, s.annotation, scope)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and s.value.args:
            # `fully_shard(model)` shards the module in place: an FSDP module from here on.
            callee = N.dotted(s.value.func) or ""
            if callee.rsplit(".", 1)[-1] in _IN_PLACE_SHARDERS:
                self.bind(s.value.args[0], s.value, scope)
        for child in children(s):
            if isinstance(child, (ast.stmt, ast.ExceptHandler)):
                continue
            if isinstance(child, ast.expr):
                self.expr(child, scope, guarded)
            else:  # withitem, match_case, arguments, keyword...
                for sub in children(child):
                    if isinstance(sub, ast.expr):
                        self.expr(sub, scope, guarded)
                if isinstance(child, ast.match_case):
                    self.block(child.body, scope, guarded)
        # Source order: the try body before its handlers, so that for
        # `try: from torch.amp import X / except ImportError: from torch.cuda.amp import X`
        # the first (preferred) import is the one the module's aliases keep.
        body = getattr(s, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            self.block(body, scope, guarded)
        for handler in getattr(s, "handlers", ()):
            if handler.type is not None:
                self.expr(handler.type, scope, guarded)
            mark = len(self.bindings)
            self.block(handler.body, scope, guarded)
            self._drop_if_raises(handler.body, scope, mark)
        for name in ("orelse", "finalbody"):
            tail = getattr(s, name, None)
            if isinstance(tail, list) and tail and isinstance(tail[0], ast.stmt):
                self.block(tail, scope, guarded)

    def _drop_if_raises(self, body: list[ast.stmt], scope: str, mark: int) -> None:
        """A branch that ends in ``raise`` leaves by the exception: the local names it bound
        (``model = DDP(model)`` before ``raise ValueError(...)``) never reach the code after
        it, so they give no kind to the merged facts. Attributes (``self.model``) stay: the
        object outlives the exception."""
        if body and isinstance(body[-1], ast.Raise) and len(self.bindings) > mark:
            kept = [b for b in self.bindings[mark:] if b.scope != scope]
            del self.bindings[mark:]
            self.bindings.extend(kept)

    def function(self, f: ast.FunctionDef | ast.AsyncFunctionDef, scope: str) -> None:
        cls = self.class_stack[-1] if self.class_stack and not scope else None
        if cls is not None:
            qual = f"{cls}.{f.name}"
        elif scope:
            qual = f"{scope}.{f.name}"
        else:
            qual = f.name
        for d in f.decorator_list:
            self.expr(d, scope, False)
        params = [a.arg for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)]
        if f.args.vararg is not None:  # `*args` forwarded whole (`torch.save(*args, **kwargs)`)
            params.append(f"*{f.args.vararg.arg}")
        for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs):
            if a.annotation is not None:
                src = N.dotted(a.annotation)
                if src:
                    self.bindings.append(Binding(qual, a.arg, (src,)))
            if a.arg in self.ranks.names:
                self.bindings.append(Binding(qual, a.arg, ("=rank",)))
        self._calls.append(set())
        self._props.append(set())
        self._params.append(frozenset(params))
        saved_classes, saved_ifs = self.class_stack, self._ifs
        self.class_stack = [cls] if cls else []
        self._ifs = 0
        self._assigned.append(set())
        self._loop_names.append(set())
        body_guarded = _guards_itself(f.body, self.ranks)
        self.block(f.body, qual, body_guarded)
        self._loop_names.pop()
        self._assigned.pop()
        self.class_stack, self._ifs = saved_classes, saved_ifs
        calls = self._calls.pop()
        props = self._props.pop()
        self._params.pop()
        if self.ranks.frameworks is not FW.BUILTIN and _user_collective(self.ranks, calls):
            props.add(COLLECTIVE)
        if body_guarded:
            props.add(GUARDS_ITSELF)
        if _is_rank_predicate(f, self.ranks):
            props.add(RANK_PREDICATE)
        props |= G.site_props(f, N.dotted)  # parameters that switch collectives off
        self.functions.append(
            FunctionInfo(qual, cls, tuple(params), frozenset(calls), frozenset(props), f.lineno - 1)
        )

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e: ast.AST, scope: str, guarded: bool) -> None:
        for node in walk(e):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    self.loads.add(node.id)
            elif isinstance(node, ast.Call):
                if self._ifs == 0 and self._loop_names and _reads_back(node):
                    root = node.func.value  # type: ignore[attr-defined]
                    while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                        root = root.func if isinstance(root, ast.Call) else root.value
                    if isinstance(root, ast.Name) and (
                        root.id in self._params[-1] or root.id in self._loop_names[-1]
                    ):
                        self._prop(HOST_SYNC)
                self.call(node, scope, guarded)
            elif isinstance(node, ast.Attribute):
                if node.attr in ("no_sync", "require_backward_grad_sync"):
                    self._prop(NO_SYNC)
                elif f"{_last(node.value)}.{node.attr}" in _SYNC_SKIPPERS:
                    self._prop(NO_SYNC)  # `accelerator.accumulate`: the tables' skips-grad-sync
            elif isinstance(node, ast.Constant):
                if isinstance(node.value, str) and node.value in N.RANK_ENV_VARS:
                    self.env_markers = True
            elif isinstance(node, ast.Lambda):
                pass

    def _prop(self, prop: str) -> None:
        if self._props:
            self._props[-1].add(prop)

    def call(self, c: ast.Call, scope: str, guarded: bool) -> None:
        if (  # `logging.getLogger().setLevel(...)` too: no dotted name needed
            isinstance(c.func, ast.Attribute)
            and c.func.attr in _LEVEL_SETTERS
            and (
                self._rank_branches
                or any(
                    self.ranks.mentions_rank(a) for a in (*c.args, *(k.value for k in c.keywords))
                )
            )
        ):
            self._prop(SILENCES_LOGGING)
        name = N.dotted(c.func)
        if name is None:
            return
        last = name.rsplit(".", 1)[-1]
        if last == "unscale_":
            self._prop(UNSCALES)
        elif last == "set_epoch":
            self._prop(SETS_EPOCH)
        elif last == "init_process_group":
            self.env_markers = True
        elif last in _SAVERS and not guarded and self._params:
            dest = c.args[1] if len(c.args) > 1 else None
            for kw in c.keywords:
                if kw.arg in ("f", "filename"):
                    dest = kw.value
            forwarded = (  # `torch.save(*args, **kwargs)`: the caller's arguments, path too
                dest is None
                and c.args
                and isinstance(c.args[0], ast.Starred)
                and isinstance(c.args[0].value, ast.Name)
                and f"*{c.args[0].value.id}" in self._params[-1]
            )
            if forwarded or isinstance(dest, ast.Name) and dest.id in self._params[-1]:
                # Raw: the spelling is resolved in merge (`torch.save`, not `self.save`).
                self._prop(f"{_SAVES_RAW}{name}")
        callee = name
        if name.startswith("self.") and name.count(".") == 1 and self.class_stack:
            callee = f"{self.class_stack[-1]}.{last}"
        if self._calls:
            self._calls[-1].add(callee)
        local = "." not in name or callee != name
        if local or (self.project and self._maybe_project_call(name)):
            # Every argument, "" for one that is not a name (`train(nn.Linear(2, 2))`): a
            # caller passing something of no known kind makes a parameter's kind "mixed".
            args: list[tuple[int | str, str]] = []
            for i, a in enumerate(c.args):
                if isinstance(a, ast.Starred):
                    break  # positions after *args are unknown
                args.append((i, _path(a) or ""))
            for kw in c.keywords:
                if kw.arg:
                    args.append((kw.arg, _path(kw.value) or ""))
            site = CallSite(scope, callee, tuple(args), guarded)
            if local:
                self.call_sites.append(site)
                if self.project:
                    self.site_lines.append(c.lineno)
            else:
                self.dotted_sites.append(site)
                self.dotted_lines.append(c.lineno)

    def bind(self, target: ast.AST, value: ast.AST, scope: str) -> None:
        path = _path(target)
        if path is None:
            return
        b_scope = scope
        if path.startswith("self.") and self.class_stack:
            b_scope = self.class_stack[-1]
        if self.ranks.is_rank_expr(value):
            self.bindings.append(Binding(b_scope, path, ("=rank",)))
            return
        earlier = path in self._assigned[-1] or path in (self._params[-1] if self._params else ())
        self._assigned[-1].add(path)
        if ("." in path or not scope) and isinstance(
            value, (ast.Compare, ast.BoolOp, ast.Call, ast.IfExp)
        ):
            # `self.is_master = rank == 0`, `args.save_logs = args.logs and is_master(args)`,
            # `self.saver = Saver() if is_master else None`: a rank-0 flag (or an object only
            # rank 0 holds) other chunks of the module test (the uniformity analysis).
            test: ast.expr = value
            if isinstance(value, ast.IfExp):
                none = [
                    isinstance(v, ast.Constant) and v.value is None
                    for v in (value.body, value.orelse)
                ]
                test = value.test if none == [False, True] else ast.Constant(None)
            flag = condition_ranks(self.ranks, test)
            if _zero(flag):
                self.bindings.append(Binding(b_scope, path, (RANK0_FLAG,)))
        chain = _call_chain(value)
        if chain:
            self.bindings.append(
                Binding(b_scope, path, chain, self._ifs > 0 and earlier, self._ifs > 0)
            )
        elif (
            isinstance(value, ast.Attribute)
            and value.attr == "module"
            and _path(value.value) is not None
        ):
            # `model_without_ddp = model.module`: the plain model inside the wrapper. A name
            # bound so is never given the wrapper's kind through `model_without_ddp = model`.
            self.bindings.append(Binding(b_scope, path, (UNWRAP, _path(value.value) or "")))
        elif isinstance(value, (ast.Name, ast.Attribute)):
            src = _path(value)
            if src:
                # The source is looked up where the assignment runs (a method's parameter
                # for `self.gpu_id = gpu_id`), the target where it is stored.
                self.bindings.append(Binding(b_scope, path, ("=alias", src, scope)))

    def annotation(self, target: ast.AST, ann: ast.AST, scope: str) -> None:
        path = _path(target)
        src = N.dotted(ann)
        if path and src:
            b_scope = (
                self.class_stack[-1] if path.startswith("self.") and self.class_stack else scope
            )
            self.bindings.append(Binding(b_scope, path, (src,)))


def _path(e: ast.AST) -> str | None:
    """``name`` or ``self.attr``: the places a fact can be attached to."""
    if isinstance(e, ast.Name):
        return e.id
    if (
        isinstance(e, ast.Attribute)
        and isinstance(e.value, ast.Name)
        and e.value.id in ("self", "args", "cfg", "config")
    ):
        return f"{e.value.id}.{e.attr}"
    return None


def path_of(e: ast.AST) -> str | None:
    return _path(e)


def _reads_back(call: ast.Call) -> bool:
    """``x.item()`` / ``x.tolist()``: a tensor's value copied to the host."""
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr in ("item", "tolist")
        and not call.args
        and not call.keywords
    )


def _call_chain(value: ast.AST) -> tuple[str, ...]:
    chain: list[str] = []
    node = value
    while isinstance(node, ast.Call):
        name = N.dotted(node.func)
        if name is None:
            break
        chain.append(name)
        if not node.args:
            break
        node = node.args[0]
    return tuple(chain)


def _guards_itself(body: list[ast.stmt], ranks: RankModel) -> bool:
    """A body that does its work only on rank 0 (``save_on_master``)."""
    stmts = [s for s in body if not _is_docstring(s)]
    if not stmts:
        return False
    first = stmts[0]
    if isinstance(first, ast.If):
        pol = condition_ranks(ranks, first.test)
        if _zero(pol) and len(stmts) == 1 and not first.orelse:
            return True
        if _nonzero(pol) and first.body and isinstance(first.body[-1], (ast.Return, ast.Raise)):
            return True
    return False


def _is_docstring(s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Constant)
        and isinstance(s.value.value, str)
    )


def _is_rank_predicate(f: ast.FunctionDef | ast.AsyncFunctionDef, ranks: RankModel) -> bool:
    returns = [n for n in walk(f) if isinstance(n, ast.Return) and n.value is not None]
    if not returns:
        return False
    return all(_zero(condition_ranks(ranks, r.value)) for r in returns if r.value is not None)


def _zero(found: object) -> bool:
    """Rank 0 only (global or local), with no uniform escape (the uniformity analysis)."""
    return getattr(found, "zero", False) and not getattr(found, "unless", "")


def _nonzero(found: object) -> bool:
    return getattr(found, "nonzero", False) and not getattr(found, "unless", "")


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
            and self.project == other.project
        )

    def resolve(self, dotted_name: str) -> str | None:
        return N.resolve(dotted_name, self.aliases)

    def qualname(self, expr: ast.AST) -> str | None:
        return N.qualname(expr, self.aliases)

    def has_project(self) -> bool:
        return self.project is not None

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
        visible = {scope, ""}
        s = scope
        while "." in s:
            s = s.rpartition(".")[0]
            visible.add(s)
        if cls:
            visible.add(cls)
        out = []
        for (sc, path), k in self.kinds.items():
            if k == kind and sc in visible and (not path.startswith("self.") or sc == cls):
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
    func_props: dict[str, set[str]],
    functions: Mapping[str, FunctionInfo],
    aliases: Mapping[str, str],
    project: ModuleProjectFacts | None,
) -> None:
    """``gate-off:`` properties: parameters that switch a helper's collectives off."""

    def props_of(caller: str, name: str) -> frozenset[str] | set[str] | None:
        fi = functions.get(caller)
        key = _callee_key(name, fi.cls if fi is not None else None)
        own = func_props.get(key)
        if own is not None:
            return own
        cp = project.callee_props.get(key) if project is not None else None
        return cp.props if cp is not None else None

    def reaches(caller: str, name: str) -> bool:
        if is_collective_call(name, aliases):
            return True
        return COLLECTIVE in (props_of(caller, name) or ())

    G.resolve(func_props, props_of, reaches)


def _callee_key(callee: str, cls: str | None) -> str:
    """The name facts know a call by: ``self.m()`` in class ``C`` is ``C.m``."""
    return f"{cls}.{callee[5:]}" if callee.startswith("self.") and cls else callee


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

    def reset_if_changed(self, aliases: dict[str, str], project: ModuleProjectFacts | None) -> None:
        if self.aliases != aliases or self.project != project:
            self.aliases = dict(aliases)
            self.project = project
            self.chunks.clear()
            self.functions.clear()


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
        if b.source[0] == UNWRAP:
            continue
        if b.source[0] == "=alias":
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
        elif b.source[0] != "=rank":
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
        frozenset(b.path.rsplit(".", 1)[-1] for b in cf.bindings if b.source == (RANK0_FLAG,)),
    )


def _callee_props_by_name(callee: str, aliases: Mapping[str, str]) -> frozenset[str]:
    """What a call spelled ``callee`` does, known from the name alone."""
    found: set[str] = set()
    if is_collective_call(callee, aliases):
        found.add(COLLECTIVE)
    resolved = N.resolve(callee, aliases)
    if resolved == N.INIT_PROCESS_GROUP:
        found.add(INITS_PG)
    elif resolved == N.DESTROY_PROCESS_GROUP:
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
    raw = [p for p in props if p.startswith(_SAVES_RAW)]
    if raw:
        props.difference_update(raw)
        if any(N.resolve(p[len(_SAVES_RAW) :], aliases) in _CHECKPOINT_WRITERS for p in raw):
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


def merge(
    chunks: Iterable[ChunkFacts],
    assume_distributed: bool = False,
    project: ModuleProjectFacts | None = None,
    cache: MergeCache | None = None,
) -> ModuleFacts:
    """Module facts of ``chunks``; ``project``: what other files of the project add (kinds of
    parameters from callers elsewhere, properties of imported helpers, "distributed");
    ``cache``: what an earlier merge of (mostly) the same chunks derived (see MergeCache)."""
    chunk_list = list(chunks)
    aliases: dict[str, str] = {}
    for cf in chunk_list:
        for name, qual in cf.imports:
            aliases.setdefault(name, qual)
    if cache is None:
        cache = MergeCache()
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
    distributed = (
        assume_distributed
        or (project is not None and project.distributed is not None)
        or any(cf.env_markers for cf in chunk_list)
        or any(N.is_distributed_import(q) for q in aliases.values())
    )

    functions: dict[str, FunctionInfo] = {}
    for cf in chunk_list:
        for fi in cf.functions:
            seen = functions.get(fi.qualname)
            if seen is not None and fi.qualname == MODULE:
                functions[MODULE] = FunctionInfo(
                    MODULE, None, (), seen.calls | fi.calls, seen.props | fi.props, 0
                )
            else:
                functions.setdefault(fi.qualname, fi)

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

    facts = ModuleFacts(aliases=aliases, kinds=kinds)
    call_sites = [cs for cf in chunk_list for cs in cf.call_sites]
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
        for cs in call_sites:
            # `Trainer(model, rank)` passes its arguments to Trainer.__init__.
            target = functions.get(cs.callee) or functions.get(f"{cs.callee}.__init__")
            if target is None:
                continue
            caller_cls = functions[cs.caller].cls if cs.caller in functions else None
            for pos, arg_path in cs.args:
                if not arg_path:
                    continue
                if isinstance(pos, int):
                    params = target.params[1:] if target.cls else target.params
                    if pos >= len(params):
                        continue
                    param = params[pos]
                else:
                    if pos not in target.params:
                        continue
                    param = pos
                if (target.qualname, param) in kinds:
                    continue
                k = facts.kind(arg_path, cs.caller, caller_cls)
                if k is not None:
                    kinds[(target.qualname, param)] = k
                    changed = True
        if not changed:
            break
    sometimes = _sometimes(kinds, parts, functions, alias_bindings, call_sites, project)

    # Function properties: syntactic ones, collectives by resolved name, then transitively.
    func_props: dict[str, set[str]] = {}
    callee_memo: dict[str, frozenset[str]] = {}
    fn_kept: dict[int, tuple[FunctionInfo, frozenset[str], tuple[str, ...]]] = {}
    for q, fi in functions.items():
        fhit = cache.functions.get(id(fi))
        if fhit is None or fhit[0] is not fi:
            fhit = (fi, *_function_part(fi, aliases, callee_memo))
        fn_kept[id(fi)] = fhit
        props = set(fhit[1])
        if project is not None:
            for callee in fi.calls:
                if callee not in functions:
                    cp = project.callee_props.get(callee)
                    if cp is not None:
                        # A helper in another file: what it does travels to this caller.
                        props |= cp.props & TRANSITIVE_PROPS
        for receiver in fhit[2]:
            if facts.kind(receiver, q, fi.cls) == SCALER:
                props.add(UPDATES_SCALER)
        func_props[q] = props
    cache.functions = fn_kept
    # Transitively through same-file helpers: a worklist from each function that has a
    # transitive property to its callers (linear in the calls, not in functions x calls).
    callers: dict[str, list[str]] = {}
    for q, fi in functions.items():
        for callee in fi.calls:
            if callee in func_props:
                callers.setdefault(callee, []).append(q)
    work = [q for q, p in func_props.items() if p & TRANSITIVE_PROPS and q in callers]
    while work:
        done = work.pop()
        carried = func_props[done] & TRANSITIVE_PROPS
        for q in callers.get(done, ()):
            new_props = carried - func_props[q]
            if new_props:
                func_props[q] |= new_props
                if q in callers:
                    work.append(q)
    sites_by_callee: dict[str, list[bool]] = {}
    for cs in call_sites:
        sites_by_callee.setdefault(cs.callee, []).append(
            cs.guarded or GUARDS_ITSELF in func_props.get(cs.caller, ())
        )
    for q, guards in sites_by_callee.items():
        if q in func_props and guards and all(guards):
            func_props[q].add(ONLY_CALLED_GUARDED)
    if project is not None:
        for q in project.only_called_guarded:
            if q in func_props:
                func_props[q].add(ONLY_CALLED_GUARDED)

    _resolve_gates(func_props, functions, aliases, project)
    # Rank-0 flags assigned in one chunk and tested in another (`self.is_master`).
    flags = frozenset().union(*(part.rank0_flags for part in parts))
    rank_predicates = flags | frozenset(
        q.rsplit(".", 1)[-1] for q, p in func_props.items() if RANK_PREDICATE in p
    )
    if project is not None:
        # `from utils.misc import is_master` / `misc.is_master()`: a predicate defined elsewhere.
        rank_predicates |= frozenset(
            name.rsplit(".", 1)[-1]
            for name, cp in project.callee_props.items()
            if RANK_PREDICATE in cp.props
        )
    # `self.gpu_id` holding the rank makes `gpu_id` a rank name (RankModel matches last parts).
    # Not `args.gpu = int(os.environ["LOCAL_RANK"])`: `args.*` names are too generic to trust.
    # A world size is never a rank, whatever a misaligned call passes into it (the uniformity
    # analysis takes `world_size > 1` for a uniform test).
    rank_vars = frozenset(
        path[5:] if path.startswith("self.") else path
        for (_, path), k in kinds.items()
        if k == RANK
        and "." not in path.removeprefix("self.")
        and not _WORLD_NAME.search(path.rsplit(".", 1)[-1])
    )
    # Only imported names: the set must not change while the user types a new local name,
    # or every chunk would re-run its rules on every keystroke.
    names_used = frozenset().union(*(part.names_used for part in parts))
    barrier_ifs = sum(cf.barrier_ifs for cf in chunk_list)
    frozen_props = {q: frozenset(p) for q, p in func_props.items()}
    func_params = {q: fi.params for q, fi in functions.items()}
    return ModuleFacts(
        aliases=aliases,
        distributed=distributed,
        kinds=kinds,
        func_props=frozen_props,
        func_params=func_params,
        rank_predicates=rank_predicates,
        rank_vars=rank_vars,
        names_used=names_used,
        barrier_ifs=barrier_ifs,
        kind_set=frozenset(kinds.values()),
        prop_set=frozenset().union(*frozen_props.values()) if frozen_props else frozenset(),
        sometimes=sometimes,
        project=project,
    )


def _sometimes(
    kinds: Mapping[tuple[str, str], str],
    parts: Sequence[_ChunkPart],
    functions: Mapping[str, FunctionInfo],
    alias_bindings: Sequence[tuple[str, str, str, str]],
    call_sites: Sequence[CallSite],
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
        for cs in call_sites:
            target = functions.get(cs.callee) or functions.get(f"{cs.callee}.__init__")
            if target is None:
                continue
            caller_cls = functions[cs.caller].cls if cs.caller in functions else None
            for pos, arg_path in cs.args:
                param = _param_at(target, pos)
                key = (target.qualname, param) if param is not None else None
                if key is None or not arg_path or key not in kinds or key in out:
                    continue
                if visible_key(kinds, arg_path, cs.caller, caller_cls) in out:
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
        (b.scope, b.path) for cf in chunks for b in cf.bindings if b.source[0] == UNWRAP
    )


def _kind_of_source(source: tuple[str, ...], aliases: Mapping[str, str]) -> str | None:
    if source[0] == "=rank":
        return RANK
    for spelled in source:
        qual = N.resolve(spelled, aliases)
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
    qualified = model.calls(FW.Meaning.COLLECTIVE)
    for callee in calls:
        if model.matches(FW.Meaning.COLLECTIVE, callee, None):
            return True
        if "." in callee and any(q == callee or q.endswith("." + callee) for q in qualified):
            return True
    return False


# Framework methods that skip gradient sync (`accelerator.accumulate`, Fabric's
# `no_backward_sync`): the tables' `skips-grad-sync` entries.
_SYNC_SKIPPERS = FW.BUILTIN.methods(FW.Meaning.SKIPS_GRAD_SYNC)


def _last(expr: ast.AST) -> str:
    name = N.dotted(expr) or ""
    return name.rsplit(".", 1)[-1]


# Wrappers whose forward all-gathers parameter shards (the tables' `shards-model`); the bare
# names shard their first argument in place (`fully_shard(model)`).
_SHARDERS = FW.BUILTIN.calls(FW.Meaning.SHARDS_MODEL)
_IN_PLACE_SHARDERS = FW.BUILTIN.functions(FW.Meaning.SHARDS_MODEL)
# GradScaler wrappers that unscale, clip and step by themselves (the tables' `scaler-wrapper`).
_SCALER_WRAPPERS = FW.BUILTIN.calls(FW.Meaning.SCALER_WRAPPER)
_SCALER_WRAPPER_NAMES = FW.BUILTIN.functions(FW.Meaning.SCALER_WRAPPER)


def kind_of_qualname(qual: str) -> str | None:
    if qual in _SCALER_WRAPPERS or qual.rsplit(".", 1)[-1] in _SCALER_WRAPPER_NAMES:
        return SCALER_WRAPPER
    if qual == N.DDP:
        return DDP
    if qual in _SHARDERS:
        return FSDP
    if qual in N.GRAD_SCALERS:
        return SCALER
    if qual == N.DISTRIBUTED_SAMPLER:
        return SAMPLER
    if qual == N.DATALOADER:
        return LOADER
    if N.is_optimizer_class(qual):
        return OPTIMIZER
    return None


# Library functions that perform collectives, by qualified name (so any alias works:
# `from detectron2.utils import comm as d2comm; d2comm.synchronize()`): the framework tables.
QUALIFIED_WRAPPER_COLLECTIVES = FW.BUILTIN.calls(FW.Meaning.COLLECTIVE)


def is_collective_call(
    callee: str, aliases: Mapping[str, str], frameworks: FW.FrameworkModel | None = None
) -> bool:
    """Whether a call spelled ``callee`` is a collective: torch.distributed's, a framework
    table's, or (``frameworks``: the settings' model) one of the user's entries."""
    qual = N.resolve(callee, aliases)
    if qual is not None and (qual in N.COLLECTIVES or qual in QUALIFIED_WRAPPER_COLLECTIVES):
        return True
    if frameworks is not None and frameworks is not FW.BUILTIN:
        if frameworks.matches(FW.Meaning.COLLECTIVE, callee, qual):
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


# -- what a chunk's rules read of the module facts ------------------------------------------------
#
# Salsa-style red-green invalidation (as in rust-analyzer): a chunk's findings record which
# entries of the module facts its rules read; when the facts change, the engine compares only
# those entries between the facts the findings were computed with and the new ones, and re-runs
# the chunk's rules only when one of them differs. An entry is a tuple: a table tag and a key
# (an alias name, a (scope, path) kind key, a function's qualified name...), or the table tag
# and WHOLE for a read that depends on the whole table (iterating it, its length).

WHOLE = "\x00*"  # no name, path or qualified name can be this
VALUES = "\x00values"  # the set of a table's distinct values
EVERYTHING = ("\x00everything",)  # a read the view cannot narrow down (the facts' key itself)
DIST = ("dist",)
PROJECT = ("proj",)  # the project facts as a whole (a rule holding the object)
HAS_PROJECT = ("proj?",)  # whether the module is analysed inside a project
SINGLE_PROCESS = ("proj-sp",)  # the project's single-process functions of the module
BARRIER_IFS = ("bifs",)  # how many top-level ifs call a barrier
Entry = tuple[object, ...]


class _RecMap(Mapping[Any, Any]):
    """A read-only mapping that records each key it is asked for (and whole-table reads)."""

    __slots__ = ("_d", "_tag", "_reads")

    def __init__(self, d: Mapping[Any, Any], tag: str, reads: set[Entry]) -> None:
        self._d = d
        self._tag = tag
        self._reads = reads

    def __getitem__(self, k: Any) -> Any:
        self._reads.add((self._tag, k))
        return self._d[k]

    def get(self, k: Any, default: Any = None) -> Any:
        self._reads.add((self._tag, k))
        return self._d.get(k, default)

    def __contains__(self, k: object) -> bool:
        self._reads.add((self._tag, k))
        return k in self._d

    def __iter__(self) -> Iterator[Any]:
        self._reads.add((self._tag, WHOLE))
        return iter(self._d)

    def __len__(self) -> int:
        self._reads.add((self._tag, WHOLE))
        return len(self._d)

    def keys(self) -> Any:
        self._reads.add((self._tag, WHOLE))
        return self._d.keys()

    def values(self) -> Any:
        # Rules ask whether some value is there (`"logging" in aliases.values()`, `any(...)`),
        # so this read rests on the set of distinct values: a new alias of a module already
        # imported (`import torch.distributed as d` while typing `dist`) leaves it unchanged.
        self._reads.add((self._tag, VALUES))
        return self._d.values()

    def items(self) -> Any:
        self._reads.add((self._tag, WHOLE))
        return self._d.items()

    def __eq__(self, other: object) -> bool:
        self._reads.add((self._tag, WHOLE))
        return self._d == (other._d if isinstance(other, _RecMap) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"_RecMap({self._tag}, {self._d!r})"


class _RecSet(AbstractSet[Any]):
    """A read-only set that records each membership test (and whole-set reads)."""

    __slots__ = ("_s", "_tag", "_reads")

    def __init__(self, s: AbstractSet[Any], tag: str, reads: set[Entry]) -> None:
        self._s = s
        self._tag = tag
        self._reads = reads

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)

    def __contains__(self, x: object) -> bool:
        self._reads.add((self._tag, x))
        return x in self._s

    def __iter__(self) -> Iterator[Any]:
        self._reads.add((self._tag, WHOLE))
        return iter(self._s)

    def __len__(self) -> int:
        self._reads.add((self._tag, WHOLE))
        return len(self._s)

    def __bool__(self) -> bool:
        self._reads.add((self._tag, WHOLE))
        return bool(self._s)

    def __eq__(self, other: object) -> bool:
        self._reads.add((self._tag, WHOLE))
        return self._s == (other._s if isinstance(other, _RecSet) else other)

    def __hash__(self) -> int:
        self._reads.add((self._tag, WHOLE))
        return hash(self._s)

    def __repr__(self) -> str:
        return f"_RecSet({self._tag}, {self._s!r})"


class _RecProject:
    """The project facts, recording any use beyond "there are some" as a read of all of it."""

    __slots__ = ("_p", "_reads")

    def __init__(self, p: ModuleProjectFacts, reads: set[Entry]) -> None:
        self._p = p
        self._reads = reads

    def __bool__(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        # Every distributed-only rule asks for the single-process functions: a read of its
        # own, so a change elsewhere in the project facts does not re-run them all.
        self._reads.add(SINGLE_PROCESS if name == "single_process" else PROJECT)
        return getattr(self._p, name)

    def __eq__(self, other: object) -> bool:
        self._reads.add(PROJECT)
        return self._p == (other._p if isinstance(other, _RecProject) else other)

    def __hash__(self) -> int:
        self._reads.add(PROJECT)
        return hash(self._p)


class FactsView:
    """The module facts as one chunk's rules see them: the same questions as
    :class:`ModuleFacts`, each answer recorded in ``reads`` as the entries it rests on."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.base = facts
        reads: set[Entry] = set()
        self.reads = reads
        self.aliases: Mapping[str, str] = _RecMap(facts.aliases, "a", reads)
        self.kinds: Mapping[tuple[str, str], str] = _RecMap(facts.kinds, "k", reads)
        self.func_props: Mapping[str, frozenset[str]] = _RecMap(facts.func_props, "p", reads)
        self.func_params: Mapping[str, tuple[str, ...]] = _RecMap(facts.func_params, "fp", reads)
        self.rank_predicates: AbstractSet[str] = _RecSet(facts.rank_predicates, "rp", reads)
        self.rank_vars: AbstractSet[str] = _RecSet(facts.rank_vars, "rv", reads)
        self.names_used: AbstractSet[str] = _RecSet(facts.names_used, "n", reads)
        self.kind_set: AbstractSet[str] = _RecSet(facts.kind_set, "kset", reads)
        self.prop_set: AbstractSet[str] = _RecSet(facts.prop_set, "pset", reads)

    @property
    def distributed(self) -> bool:
        self.reads.add(DIST)
        return self.base.distributed

    @property
    def barrier_ifs(self) -> int:
        self.reads.add(BARRIER_IFS)
        return self.base.barrier_ifs

    @property
    def project(self) -> ModuleProjectFacts | None:
        # `if ctx.facts.project` / `is None` rests only on there being one; what is read of
        # it rests on all of it.
        self.reads.add(HAS_PROJECT)
        if self.base.project is None:
            return None
        return _RecProject(self.base.project, self.reads)  # type: ignore[return-value]

    @property
    def key(self) -> tuple[object, ...]:
        self.reads.add(EVERYTHING)
        return self.base.key

    def has_project(self) -> bool:
        self.reads.add(HAS_PROJECT)
        return self.base.project is not None

    def resolve(self, dotted_name: str) -> str | None:
        return N.resolve(dotted_name, self.aliases)

    def qualname(self, expr: ast.AST) -> str | None:
        return N.qualname(expr, self.aliases)

    def kind(self, path: str, scope: str, cls: str | None) -> str | None:
        key = visible_key(self.kinds, path, scope, cls)
        return None if key is None else self.kinds[key]

    def kind_on_every_launch(self, path: str, scope: str, cls: str | None) -> bool:
        key = visible_key(self.kinds, path, scope, cls)
        if key is None:
            return False
        self.reads.add(("sm", key))
        return key not in self.base.sometimes

    def names_of_kind(self, kind: str, scope: str, cls: str | None) -> list[str]:
        # Depends on every kind bound in the visible scopes: one entry per scope.
        for s in _visible_scopes(scope, cls):
            self.reads.add(("ks", s))
        return self.base.names_of_kind(kind, scope, cls)

    def props(self, qualname: str) -> frozenset[str]:
        found = self.func_props.get(qualname)
        return found if found is not None else frozenset()

    def callee_props(self, callee: str, cls: str | None) -> frozenset[str]:
        key = _callee_key(callee, cls)
        own = self.func_props.get(key)
        if own is not None:
            return own
        self.reads.add(("pc", key))
        return self.base.callee_props(callee, cls)

    def kind_origin(self, path: str, scope: str, cls: str | None) -> ParamKind | None:
        self.reads.add(HAS_PROJECT)
        if self.base.project is None:
            return None
        key = visible_key(self.kinds, path, scope, cls)
        if key is None:
            return None
        self.reads.add(("pk", key))
        return self.base.project.extra_kinds.get(key)

    def callee_origin(self, callee: str, cls: str | None, prop: str) -> Provenance | None:
        self.reads.add(HAS_PROJECT)
        if self.base.project is None:
            return None
        key = _callee_key(callee, cls)
        if key in self.func_props:
            return None
        self.reads.add(("pc", key))
        return self.base.callee_origin(callee, cls, prop)


def recording_ranks(model: RankModel, reads: set[Entry]) -> RankModel:
    """``model`` (the module's rank model: configured names and predicates with the module's
    rank variables and predicate functions) recording each name it is asked about. Configured
    names never change under an analysis key, so a name's entry is the module's own one."""
    return RankModel(
        _RecSet(model.names, "rv", reads),  # type: ignore[arg-type]
        _RecSet(model.predicates, "rp", reads),  # type: ignore[arg-type]
        model.frameworks,
    )


def _visible_scopes(scope: str, cls: str | None) -> set[str]:
    visible = {scope, ""}
    s = scope
    while "." in s:
        s = s.rpartition(".")[0]
        visible.add(s)
    if cls:
        visible.add(cls)
    return visible


_MISSING = object()


def _diff_map(out: set[Entry], tag: str, old: Mapping[Any, Any], new: Mapping[Any, Any]) -> None:
    if old is new or old == new:
        return
    for k in old.keys() | new.keys():
        if old.get(k, _MISSING) != new.get(k, _MISSING):
            out.add((tag, k))
            if tag == "k":
                out.add(("ks", k[0]))
    out.add((tag, WHOLE))
    try:
        if set(old.values()) != set(new.values()):
            out.add((tag, VALUES))
    except TypeError:  # unhashable values
        out.add((tag, VALUES))


def _diff_set(out: set[Entry], tag: str, old: AbstractSet[Any], new: AbstractSet[Any]) -> None:
    if old is new or old == new:
        return
    for x in old ^ new:
        out.add((tag, x))
    out.add((tag, WHOLE))


def _callee_entries(cp: Mapping[str, CalleeProps]) -> dict[str, object]:
    return {k: (v, tuple(sorted(v.origins.items()))) for k, v in cp.items()}


def changed_entries(old: ModuleFacts, new: ModuleFacts) -> frozenset[Entry]:
    """The entries (see :class:`FactsView`) whose value differs between two module facts;
    findings that read none of them are the same under both."""
    if old is new or old == new:
        return frozenset()
    out: set[Entry] = {EVERYTHING}
    _diff_map(out, "a", old.aliases, new.aliases)
    _diff_map(out, "k", old.kinds, new.kinds)
    _diff_map(out, "p", old.func_props, new.func_props)
    _diff_map(out, "fp", old.func_params, new.func_params)
    _diff_set(out, "rp", old.rank_predicates, new.rank_predicates)
    _diff_set(out, "rv", old.rank_vars, new.rank_vars)
    _diff_set(out, "n", old.names_used, new.names_used)
    _diff_set(out, "kset", old.kind_set, new.kind_set)
    _diff_set(out, "pset", old.prop_set, new.prop_set)
    _diff_set(out, "sm", old.sometimes, new.sometimes)
    if old.distributed != new.distributed:
        out.add(DIST)
    if old.barrier_ifs != new.barrier_ifs:
        out.add(BARRIER_IFS)
    if old.project != new.project:
        out.add(PROJECT)
        op, np_ = old.project, new.project
        if (op is None) != (np_ is None):
            out.add(HAS_PROJECT)
        if (op.single_process if op else None) != (np_.single_process if np_ else None):
            out.add(SINGLE_PROCESS)
        _diff_map(out, "pk", op.extra_kinds if op else {}, np_.extra_kinds if np_ else {})
        _diff_map(
            out,
            "pc",
            _callee_entries(op.callee_props) if op else {},
            _callee_entries(np_.callee_props) if np_ else {},
        )
    return frozenset(out)
