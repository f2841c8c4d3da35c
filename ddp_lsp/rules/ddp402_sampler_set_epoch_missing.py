"""DDP402 sampler-set-epoch-missing.

## What it does
Finds a shuffling `DistributedSampler` whose loader is iterated inside an epoch loop that never
calls `set_epoch` on it (as `sampler.set_epoch(epoch)`, `loader.sampler.set_epoch(epoch)` or
through a `train_sampler` variable). The sampler may reach the loader through a
`BatchSampler`, and, with the project view, be built in another file: a loader returned by a
project helper that builds a shuffling DistributedSampler (`_, train_loader =
build_loader(cfg)`, directly or through a dispatcher) is checked as `train_loader.sampler`.
A function's `sampler` / `train_sampler` parameter of no known kind (its callers are in
another file) is checked when the function runs an epoch loop over a loader; the fix then tests
`hasattr(sampler, "set_epoch")`, since other launches may pass None or a RandomSampler.

## Why is this bad?
`DistributedSampler` seeds its shuffle with `seed + epoch`, and the epoch only changes through
`set_epoch`. Without it every epoch visits the examples in exactly the same order on every
rank: the shuffle you asked for happens once, which hurts convergence in a way no error or
warning reveals.

## Example
```python
sampler = DistributedSampler(train_set)
loader = DataLoader(train_set, batch_size=64, sampler=sampler)
for epoch in range(epochs):
    for x, y in loader:
        ...
```

## Use instead
```python
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        ...
```

## Fix
Inserts `<sampler>.set_epoch(<epoch>)` as the first statement of the epoch loop (the loop
around the loop over the loader, or around the per-epoch helper call that receives it), with
the sampler written as in the code (`train_sampler`, `self.sampler`, `loader.sampler` for a
sampler built inline). A sampler that is `None` outside distributed runs gets
`if sampler is not None:` around the call, and one that is another sampler there
(`RandomSampler`) gets `if hasattr(sampler, "set_epoch"):`. No fix when the loop has no epoch variable
(`for _ in ...`, `while`).

## Known false positives
Not reported: samplers with `shuffle=False` (the order does not depend on the epoch), a
sampler or a loader built anew in each pass of the loop (a fresh sampler per pass: a loop over
test views that rebuilds its loader is no epoch loop of one sampler),
evaluation samplers (`val_sampler`...), files using Accelerate or Lightning (they call
`set_epoch` on the loaders they are given; a sampler such a file builds and iterates itself,
`for idxs in BatchSampler(DistributedSampler(...))`, is still checked), loops that call any
`set_epoch` the rule cannot attribute (a dataset's own `dataset_train.set_epoch(epoch)` is
not the sampler's), and per-epoch
helpers of the same file that receive the sampler itself, have a parameter named like a
sampler, are methods of the class that owns a `self.` sampler, or call `set_epoch` themselves
(directly or through another helper of the same file, e.g. one that receives only the loader
and calls `loader.sampler.set_epoch`). With the project view, a helper of another file that
receives the sampler (`train(model, loader, epoch, sampler=sampler)`) is known: it is reported
when neither it nor what it calls sets the epoch. Not seen: such a helper without the project, and
`shuffle=False` on a sampler built in another function or method (a `self.` attribute, a
module-level script variable): silence such a line with `# ddp-lsp: ignore[DDP402]`.

## References
- https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.facts import path_of
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import (
    Edit,
    Finding,
    Fix,
    FixAvailability,
    Pos,
    Related,
    RuleMeta,
    Severity,
)
from ddp_lsp.rules import _data as data_rules
from ddp_lsp.rules import _patterns as patterns

Loop = ast.For | ast.AsyncFor | ast.While


@dataclass
class _Sampler:
    path: str  # how to reach it: "train_sampler", "self.sampler", "loader.sampler"
    root: ast.AST  # the frame it is used in
    created: ast.Call | None  # DistributedSampler(...) in this chunk
    loaders: list[str]  # loader paths fed by it
    guard: str  # "" | "none": None off the distributed path | "hasattr": another sampler there
    # | "loader": `loader.sampler` of a loader a helper returned (maybe not a loader there)


_SAMPLER_PARAM = re.compile(r"^(train_)?sampler(_train)?$")
# A dataset's own `set_epoch` (timm's IterableImageDataset, webdataset pipelines): it reseeds
# the dataset's shuffle, never a DistributedSampler's.
_DATASET_RECEIVER = re.compile(r"^(?:\w+_)?(?:dataset|data_set|ds)(?:_\w+)?$", re.IGNORECASE)


def _known_helper(ctx: ChunkContext, call: ast.Call) -> bool:
    """A call to a function of this file or (with the project) of another project file, whose
    properties (does it set the epoch?) are therefore known."""
    name = known_names.dotted(call.func)
    if name is None:
        return False
    if name in ctx.facts.func_params:
        return True
    project = ctx.facts.project
    return project is not None and name in project.callee_props


class SamplerSetEpochMissing(Rule):
    meta = RuleMeta(
        id="DDP402",
        name="sampler-set-epoch-missing",
        severity=Severity.WARNING,
        summary="DistributedSampler without set_epoch(epoch): every epoch has the same order.",
        fix=FixAvailability.SOMETIMES,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        loops = ctx.nodes(ast.For, ast.AsyncFor, ast.While)
        if not loops:
            return  # no epoch loop here
        # Accelerate and Lightning call set_epoch on the loaders they are given; a sampler the
        # file builds and iterates itself (`for idx in BatchSampler(DistributedSampler(...))`)
        # never passes through them.
        framework = data_rules.uses_sampler_framework(ctx)
        functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = [
            *ctx.nodes(ast.FunctionDef),
            *ctx.nodes(ast.AsyncFunctionDef),
        ]
        has_sampler = (
            fact_model.SAMPLER in ctx.facts.kind_set
            or any(
                data_rules.is_sampler_call(ctx, c)
                or fact_model.MAKES_DIST_SAMPLER in ctx.callee_props(c)
                for c in ctx.calls()
            )
            or any(
                _SAMPLER_PARAM.match(a.arg)
                for fn in functions
                for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)
            )
        )
        if not has_sampler:
            return
        samplers = self._samplers(ctx, loops)
        known = {s.path for s in samplers}
        for s in samplers:
            if data_rules.is_eval_name(s.path) or any(
                data_rules.is_eval_name(lp) for lp in s.loaders
            ):
                continue
            if framework and (
                s.created is None or s.loaders or not data_rules.loops_over(ctx, s.root, s.path)
            ):
                continue
            loop = self._epoch_loop(ctx, s)
            if loop is None or self._sets_epoch(ctx, s, loop, known):
                continue
            fixes = []
            var = self._epoch_var(loop)
            if (
                var is not None
                and loop.body
                and patterns.starts_own_line(ctx, loop.body[0])
                and not self._rebound_to_batches(ctx, s)
            ):
                call = f"{s.path}.set_epoch({var})"
                unit = chunktext.indent_unit(ctx.chunk, ctx.ancestors, loop.body[0])
                if s.guard == "none":
                    code = f"if {s.path} is not None:\n{unit}{call}"
                elif s.guard == "hasattr":
                    code = f'if hasattr({s.path}, "set_epoch"):\n{unit}{call}'
                elif s.guard == "loader":
                    # The helper may return something else off the distributed path (a list).
                    owner, _, attr = s.path.rpartition(".")
                    code = (
                        f'if hasattr(getattr({owner}, "{attr}", None), "set_epoch"):\n{unit}{call}'
                    )
                else:
                    code = call
                fixes.append(
                    Fix(
                        title=f"Insert {call} at the top of the epoch loop",
                        edits=(self._insert_at_top(ctx, loop, code),),
                        safe=True,
                        preferred=True,
                    )
                )
            header = chunktext.span(
                ctx.chunk,
                loop,
                loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else loop.test,
            )
            where = s.created if s.created is not None else header
            yield ctx.finding(
                self,
                where
                if not isinstance(where, ast.Call)
                else data_rules.callee_span(ctx, where.func),
                f"`{s.path}.set_epoch({var or 'epoch'})` is never called in the epoch loop: "
                "DistributedSampler shuffles with `seed + epoch`, so every epoch visits the data "
                "in the same order on every rank",
                fixes=fixes,
                related=(Related(header, "the epoch loop"),) if s.created is not None else (),
                cite=(ctx.kind_source(s.path, loop),),
            )

    # -- the samplers of this chunk ----------------------------------------------------------

    def _samplers(self, ctx: ChunkContext, loops: list[ast.stmt]) -> list[_Sampler]:
        out: dict[tuple[int, str], _Sampler] = {}
        for call in ctx.calls():
            if not data_rules.is_sampler_call(ctx, call):
                continue
            if data_rules.is_const(
                data_rules.arg(call, "shuffle", data_rules.SAMPLER_POS), False
            ) or data_rules.has_star(call):
                continue
            root = patterns.scope_root(ctx, call)
            parent = ctx.parent(call)
            if isinstance(parent, ast.keyword) and parent.arg == "sampler":
                loader_call = ctx.parent(parent)
                if (
                    isinstance(loader_call, ast.Call)
                    and ctx.call_qualname(loader_call) == known_names.DATALOADER
                ):
                    lp = data_rules.assigned_path(ctx, loader_call)
                    if lp is not None:
                        out[(id(root), f"{lp}.sampler")] = _Sampler(
                            f"{lp}.sampler", root, call, [lp], ""
                        )
                continue
            path = data_rules.assigned_path(ctx, call)
            if path is None:
                continue
            values = data_rules.values_of(root, ast.Name(id=path))
            if "." in path:
                values = [
                    v
                    for _, a in data_rules.scope_assignments(root, path)
                    for v in data_rules.values_of(root, a)
                ]
            if any(
                not data_rules.is_none(v) and not data_rules.is_sampler_call(ctx, v) for v in values
            ):
                guard = "hasattr"  # a RandomSampler on the single-process path
            elif any(data_rules.is_none(v) for v in values):
                guard = "none"
            else:
                guard = ""
            out[(id(root), path)] = _Sampler(
                path, root, call, self._loaders_of(ctx, root, path), guard
            )
        # Samplers handed in: parameters and self attributes the module facts know.
        functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = [
            *ctx.nodes(ast.FunctionDef),
            *ctx.nodes(ast.AsyncFunctionDef),
        ]
        with_loops = {id(ctx.enclosing_function(loop)) for loop in loops}
        for fn in functions:
            if id(fn) in with_loops:
                params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
                cands = [
                    p for p in params if ctx.kind(ast.Name(id=p), fn.body[0]) == fact_model.SAMPLER
                ]
                cands.extend(
                    p
                    for p in ctx.names_of_kind(fact_model.SAMPLER, fn.body[0])
                    if p.startswith("self.")
                )
                for p in cands:
                    if (id(fn), p) in out or any(s.path == p for s in out.values()):
                        continue
                    out[(id(fn), p)] = _Sampler(p, fn, None, self._loaders_of(ctx, fn, p), "")
                # A parameter named as the training sampler, of no known kind (the callers are
                # elsewhere): `def train_model(model, data_loader, sampler, epochs)`. It may be
                # None or a RandomSampler on other launches: the fix tests for set_epoch.
                for p in params:
                    if (
                        p in cands
                        or not _SAMPLER_PARAM.match(p)
                        or data_rules.is_eval_name(p)
                        or ctx.kind(ast.Name(id=p), fn.body[0]) is not None
                        or (id(fn), p) in out
                    ):
                        continue
                    out[(id(fn), p)] = _Sampler(p, fn, None, [], "hasattr")
        # Loaders returned by a project helper that builds a shuffling DistributedSampler
        # (`train_loader, ds = create_dataloader(...)` from a data module, M14): the sampler is
        # reached as `train_loader.sampler`.
        for node in ctx.nodes(ast.Assign):
            if not isinstance(node.value, ast.Call) or len(node.targets) != 1:
                continue
            if fact_model.MAKES_DIST_SAMPLER not in ctx.callee_props(node.value):
                continue
            target = node.targets[0]
            elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            root = patterns.scope_root(ctx, node)
            for elt in elts:
                lp = path_of(elt)
                if lp is None or "loader" not in lp.rsplit(".", 1)[-1].lower():
                    continue
                path = f"{lp}.sampler"
                if (id(root), path) in out or any(lp in x.loaders for x in out.values()):
                    continue
                # Off the distributed path the helper may build no sampler (the loader's
                # default one has no set_epoch), or return no loader at all.
                out[(id(root), path)] = _Sampler(path, root, None, [lp], "loader")
        # Script-style code: the sampler is built by module-level statements (another chunk)
        # and this chunk is a top-level epoch loop.
        top_loops = [st for st in ctx.body if isinstance(st, (ast.For, ast.AsyncFor, ast.While))]
        if top_loops and ctx.member_of is None:
            for p in ctx.names_of_kind(fact_model.SAMPLER, top_loops[0]):
                if "." in p or any(x.path == p for x in out.values()):
                    continue
                root = ctx.module_node
                out[(id(root), p)] = _Sampler(p, root, None, self._loaders_of(ctx, root, p), "")
        return list(out.values())

    @staticmethod
    def _loaders_of(ctx: ChunkContext, root: ast.AST, sampler: str) -> list[str]:
        """Paths assigned from a call that receives the sampler (``DataLoader(ds, sampler=s)``,
        ``build_loader(ds, s)``), and from a call receiving one of those (DETR's
        ``DataLoader(ds, batch_sampler=BatchSampler(s, bs, drop_last=True))`` in two steps)."""
        out: list[str] = []
        todo = [sampler]
        while todo and len(out) < 8:
            source = todo.pop()
            for call in data_rules.calls_receiving(ctx, root, source):
                parent = ctx.parent(call)
                if (
                    isinstance(parent, ast.Assign)
                    and parent.value is call
                    and len(parent.targets) == 1
                ):
                    p = path_of(parent.targets[0])
                    if p and p != sampler and p not in out:
                        out.append(p)
                        if (known_names.dotted(call.func) or "").endswith("Sampler"):
                            todo.append(p)  # a batch sampler: follow it to its loader
        return out

    # -- the epoch loop ------------------------------------------------------------------------

    def _epoch_loop(self, ctx: ChunkContext, s: _Sampler) -> Loop | None:
        loaders = list(s.loaders)
        if s.created is None and not loaders:
            # A sampler handed in: the loaders visible here are the ones it feeds.
            for node in patterns.walk_scope(s.root):
                if isinstance(node, (ast.For, ast.AsyncFor)):
                    it = known_names.dotted(data_rules._strip_wrappers(node.iter)) or ""
                    if (
                        ctx.kind(data_rules._strip_wrappers(node.iter), node) == fact_model.LOADER
                        or "loader" in it.lower()
                    ):
                        loaders.append(it)
        uses: list[ast.AST] = []
        # The sampler this scope builds iterated itself (`for idxs in sampler:`, often a
        # BatchSampler rebound to its name; not a sampler handed in, which a wrapping batch
        # sampler cycles through and forwards its own `set_epoch` to), or handed to a per-epoch
        # helper of the project whose properties are known (`train(model, loader, epoch,
        # sampler=sampler)` from another file): `_sets_epoch` then asks whether that helper
        # sets the epoch.
        if s.created is not None:
            uses.extend(data_rules.loops_over(ctx, s.root, s.path))
        uses.extend(
            c
            for c in data_rules.calls_receiving(ctx, s.root, s.path)
            if _known_helper(ctx, c) and not self._is_builder(ctx, c)
        )
        for lp in loaders:
            uses.extend(data_rules.loops_over(ctx, s.root, lp))
            uses.extend(
                c
                for c in data_rules.calls_receiving(ctx, s.root, lp)
                if not self._is_builder(ctx, c)
            )
            uses.extend(self._epoch_iters(ctx, s.root, lp))
        uses.sort(key=patterns.order)
        for use in uses:
            # Not the loop whose header iterates the loader (`for batch in log_every(loader)`):
            # that is the batch loop, the epoch loop is around it.
            loops = [
                lp
                for lp in ctx.enclosing_loops(use)
                if not (isinstance(lp, ast.For | ast.AsyncFor) and self._inside(use, lp.iter))
            ]
            if not loops:
                continue
            loop = loops[0]
            if (
                s.created is not None
                and patterns.enclosing_loop_body_stmt(ctx, s.created, loop) is not None
            ):
                continue  # a sampler made per epoch
            if s.created is None and self._made_in(s, loop):
                continue  # a loader (and the sampler a helper gave it) made per pass
            if ctx.enclosing_function(loop) is not ctx.enclosing_function(use):
                continue
            return loop
        return None

    @staticmethod
    def _made_in(s: _Sampler, loop: ast.AST) -> bool:
        """Every loader the sampler feeds is built anew in the loop's body (``train_loader =
        loader.construct_loader(cfg, "train")`` once per test view): each pass has a sampler of
        its own, as for a sampler made per epoch."""
        if not s.loaders:
            return False
        built: set[str] = set()
        for st in getattr(loop, "body", ()):
            for n in tree_walk.bfs(st):
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        for e in t.elts if isinstance(t, ast.Tuple) else (t,):
                            name = known_names.dotted(e)
                            if name is not None:
                                built.add(name)
        return all(lp in built for lp in s.loaders)

    @staticmethod
    def _rebound_to_batches(ctx: ChunkContext, s: _Sampler) -> bool:
        """``sampler = BatchSampler(sampler, ...)``: the name no longer holds the sampler that
        has ``set_epoch``, so an inserted ``sampler.set_epoch(epoch)`` would be wrong."""
        if "." in s.path:
            return False
        return any(
            isinstance(v, ast.Call) and (known_names.dotted(v.func) or "").endswith("BatchSampler")
            for v in data_rules.values_of(s.root, ast.Name(id=s.path))
        )

    @staticmethod
    def _inside(node: ast.AST, outer: ast.AST) -> bool:
        return node is outer or any(n is node for n in tree_walk.bfs(outer))

    @staticmethod
    def _is_builder(ctx: ChunkContext, call: ast.Call) -> bool:
        """Calls that take the loader without running an epoch over it."""
        fn = call.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
        return name in ("len", "iter", "next", "print", "isinstance", "hasattr", "getattr")

    @staticmethod
    def _epoch_iters(ctx: ChunkContext, root: ast.AST, loader: str) -> list[ast.Call]:
        """``iter(loader)`` that starts a pass (not ``next(iter(loader))``, one batch)."""
        out = []
        for node in patterns.walk_scope(root):
            if (
                isinstance(node, ast.Call)
                and known_names.dotted(node.func) == "iter"
                and node.args
                and known_names.dotted(node.args[0]) == loader
            ):
                parent = ctx.parent(node)
                if not (isinstance(parent, ast.Call) and known_names.dotted(parent.func) == "next"):
                    out.append(node)
        return out

    def _sets_epoch(self, ctx: ChunkContext, s: _Sampler, loop: Loop, known: set[str]) -> bool:
        targets = {
            s.path,
            *(f"{lp}.sampler" for lp in s.loaders),
            *(f"{lp}.batch_sampler" for lp in s.loaders),
        }
        others = known - targets
        for node in tree_walk.bfs(loop):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name == "set_epoch":
                assert isinstance(fn, ast.Attribute)
                receiver = known_names.dotted(fn.value)
                if receiver is not None and _DATASET_RECEIVER.search(receiver.rsplit(".", 1)[-1]):
                    continue  # a streaming dataset's own epoch (`dataset_train.set_epoch`)
                if receiver is None or receiver not in others:
                    return True
                continue
            lowered = name.lower()
            if "set_epoch" in lowered or "sampler" in lowered:
                return True
            # Helpers of this file called per epoch that may set it.
            dotted_name = known_names.dotted(fn)
            if dotted_name is None:
                continue
            _, cls = ctx.scope(node)
            if dotted_name.startswith("self.") and cls is not None:
                qual = f"{cls}.{dotted_name[5:]}"
            else:
                qual = dotted_name
            if fact_model.SETS_EPOCH in ctx.callee_props(node):
                return True  # a same-file helper (or one it calls) sets the epoch
            params = ctx.facts.func_params.get(qual)
            if params is None:
                continue
            if s.path.startswith("self.") and qual.startswith(f"{cls}."):
                return True
            if any("sampler" in p.lower() for p in params):
                return True
            for a in [*node.args, *(kw.value for kw in node.keywords)]:
                an = known_names.dotted(a)
                if an is not None and (an in targets or s.path.startswith(an + ".")):
                    if an not in s.loaders:
                        return True
        return False

    @staticmethod
    def _insert_at_top(ctx: ChunkContext, loop: Loop, code: str) -> Edit:
        """Insert ``code`` as the loop's first statement, above the comments that introduce
        its current first statement (they describe that statement, not the new one)."""
        first_stmt = loop.body[0]
        first, _ = chunktext.stmt_lines(ctx.chunk, first_stmt)
        header = loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else loop.test
        lowest = chunktext.rel_line(ctx.chunk, header.end_lineno or header.lineno) + 1
        line = first
        while line - 1 >= lowest and ctx.chunk.lines[line - 1].lstrip().startswith("#"):
            line -= 1
        indent = chunktext.indent_of(ctx.chunk, first_stmt)
        text = "".join(f"{indent}{part}\n" for part in code.splitlines())
        return text_edits.insert_at(Pos(line, 0), text)

    @staticmethod
    def _epoch_var(loop: Loop) -> str | None:
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            t = loop.target
            if isinstance(t, ast.Name) and t.id != "_":
                return t.id
        return None


_HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

"""

SamplerSetEpochMissing.cases = (
    Valid(
        _HEAD
        + """\
def reshuffle(loader, epoch):
    loader.sampler.set_epoch(epoch)


def main(args, dataset, model):
    loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
    for epoch in range(args.epochs):
        reshuffle(loader, epoch)
        for x in loader:
            model(x)
""",
        note="a same-file helper that receives only the loader sets the epoch",
    ),
    Valid(
        _HEAD
        + """\
def main(args, dataset, model):
    if args.distributed:
        train_sampler = DistributedSampler(dataset)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
    data_loader = DataLoader(dataset, batch_size=32, sampler=train_sampler)
    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        train_one_epoch(model, data_loader, epoch)
""",
        note="torchvision references",
    ),
    Valid(
        _HEAD
        + """\
def main(args, dataset, model):
    loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for x in loader:
            model(x)
""",
        note="through loader.sampler (DeiT, MAE)",
    ),
    Valid(
        _HEAD
        + """\
def main(args, dataset_train, model):
    sampler = DistributedSampler(dataset_train) if args.distributed else None
    loader_train = DataLoader(dataset_train, batch_size=args.batch_size, sampler=sampler)
    for epoch in range(args.start_epoch, args.epochs):
        if hasattr(dataset_train, "set_epoch"):
            dataset_train.set_epoch(epoch)
        elif args.distributed and hasattr(loader_train.sampler, "set_epoch"):
            loader_train.sampler.set_epoch(epoch)
        train_one_epoch(epoch, model, loader_train)
""",
        note="timm train.py: set_epoch behind hasattr checks",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, model):
    sampler = DistributedSampler(dataset, shuffle=False)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    for epoch in range(10):
        for x in loader:
            model(x)
""",
        note="shuffle=False: the order does not depend on the epoch",
    ),
    Valid(
        _HEAD
        + """\
def reshuffle(sampler, epoch):
    sampler.set_epoch(epoch)

def main(dataset, model):
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    for epoch in range(10):
        reshuffle(sampler, epoch)
        for x in loader:
            model(x)
""",
        note="set in a helper called per epoch",
    ),
    Valid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, dataset):
        self.sampler = DistributedSampler(dataset)
        self.loader = DataLoader(dataset, batch_size=32, sampler=self.sampler)

    def _run_epoch(self, epoch):
        self.sampler.set_epoch(epoch)
        for x in self.loader:
            pass

    def train(self, epochs):
        for epoch in range(epochs):
            self._run_epoch(epoch)
""",
        note="PyTorch DDP tutorial: a method of the same class runs each epoch",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def main(dataset, model):
    accelerator = Accelerator()
    loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
    loader = accelerator.prepare(loader)
    for epoch in range(10):
        for x in loader:
            model(x)
""",
        note="accelerate sets the epoch itself",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, val_set, model):
    sampler = DistributedSampler(dataset)
    val_sampler = DistributedSampler(val_set)
    loader = DataLoader(dataset, sampler=sampler)
    val_loader = DataLoader(val_set, sampler=val_sampler)
    for epoch in range(10):
        sampler.set_epoch(epoch)
        for x in loader:
            model(x)
        for x in val_loader:
            model(x)
""",
        note="evaluation samplers need no set_epoch",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, model):
    loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
    for x in loader:
        model(x)
""",
        note="a single pass: no epoch loop",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, dataset, model, optimizer):
    train_sampler = «DistributedSampler»(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=train_sampler)
    for epoch in range(args.epochs):
        # one pass over the data
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
""",
        fixed=_HEAD
        + """\
def main(args, dataset, model, optimizer):
    train_sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=train_sampler)
    for epoch in range(args.epochs):
        train_sampler.set_epoch(epoch)
        # one pass over the data
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
""",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, dataset, model):
    loader = DataLoader(dataset, batch_size=32, sampler=«DistributedSampler»(dataset))
    for ep in range(args.epochs):
        train_one_epoch(model, loader, ep)
""",
        fixed=_HEAD
        + """\
def main(args, dataset, model):
    loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
    for ep in range(args.epochs):
        loader.sampler.set_epoch(ep)
        train_one_epoch(model, loader, ep)
""",
        note="inline sampler, per-epoch helper from another module",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, dataset, model):
    sampler = «DistributedSampler»(dataset) if args.distributed else None
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, shuffle=(sampler is None))
    for epoch in range(args.epochs):
        for x in loader:
            model(x)
""",
        fixed=_HEAD
        + """\
def main(args, dataset, model):
    sampler = DistributedSampler(dataset) if args.distributed else None
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, shuffle=(sampler is None))
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x in loader:
            model(x)
""",
        note="a sampler that may be None gets a guard",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, dataset, model):
    if args.distributed:
        train_sampler = «DistributedSampler»(dataset)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=train_sampler)
    for epoch in range(args.epochs):
        for x in loader:
            model(x)
""",
        fixed=_HEAD
        + """\
def main(args, dataset, model):
    if args.distributed:
        train_sampler = DistributedSampler(dataset)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=train_sampler)
    for epoch in range(args.epochs):
        if hasattr(train_sampler, "set_epoch"):
            train_sampler.set_epoch(epoch)
        for x in loader:
            model(x)
""",
        note="a RandomSampler without distributed: the call is guarded",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, dataset):
        self.sampler = DistributedSampler(dataset)
        self.loader = DataLoader(dataset, batch_size=32, sampler=self.sampler)

    def fit(self, epochs):
        «for epoch in range(epochs)»:
            for x in self.loader:
                self.step(x)
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, dataset):
        self.sampler = DistributedSampler(dataset)
        self.loader = DataLoader(dataset, batch_size=32, sampler=self.sampler)

    def fit(self, epochs):
        for epoch in range(epochs):
            self.sampler.set_epoch(epoch)
            for x in self.loader:
                self.step(x)
""",
        note="a sampler attribute set in __init__, the epoch loop in another method",
    ),
    Invalid(
        _HEAD
        + """\
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)

«for epoch in range(10)»:
    for x in loader:
        model(x)
""",
        fixed=_HEAD
        + """\
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=32, sampler=sampler)

for epoch in range(10):
    sampler.set_epoch(epoch)
    for x in loader:
        model(x)
""",
        note="a script: the sampler built at module level, the epoch loop a statement of its own",
    ),
    Invalid(
        _HEAD
        + """\
def main(dataset, model, epochs):
    sampler = «DistributedSampler»(dataset)
    loader = DataLoader(dataset, sampler=sampler)
    for epoch in range(epochs):
        it = iter(loader)
        while True:
            try:
                x = next(it)
            except StopIteration:
                break
            model(x)
""",
        fixed=_HEAD
        + """\
def main(dataset, model, epochs):
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        it = iter(loader)
        while True:
            try:
                x = next(it)
            except StopIteration:
                break
            model(x)
""",
        note="an epoch started with iter(loader)",
    ),
    Valid(
        _HEAD
        + """\
def main(dataset, model, steps):
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, sampler=sampler)
    for step in range(steps):
        x = next(iter(loader))
        model(x)
""",
        note="one batch per step, no epochs",
    ),
    Invalid(
        _HEAD
        + """\
def main(dataset, model):
    loader = DataLoader(dataset, sampler=«DistributedSampler»(dataset))
    for _ in range(3):
        for x in loader:
            model(x)
""",
        fixed=None,
        note="no epoch variable: no fix",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, dataset, model):
    if args.distributed:
        sampler = «DistributedSampler»(dataset)
    else:
        sampler = torch.utils.data.RandomSampler(dataset)
    batches = torch.utils.data.BatchSampler(sampler, args.batch_size, drop_last=True)
    loader = DataLoader(dataset, batch_sampler=batches, num_workers=4)
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, epoch)
""",
        fixed=_HEAD
        + """\
def main(args, dataset, model):
    if args.distributed:
        sampler = DistributedSampler(dataset)
    else:
        sampler = torch.utils.data.RandomSampler(dataset)
    batches = torch.utils.data.BatchSampler(sampler, args.batch_size, drop_last=True)
    loader = DataLoader(dataset, batch_sampler=batches, num_workers=4)
    for epoch in range(args.epochs):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        train_one_epoch(model, loader, epoch)
""",
        note="the sampler reaches the loader through a BatchSampler (the DETR shape)",
    ),
    Valid(
        _HEAD
        + """\
def main(args, dataset, model):
    sampler = DistributedSampler(dataset)
    batches = torch.utils.data.BatchSampler(sampler, args.batch_size, drop_last=True)
    loader = DataLoader(dataset, batch_sampler=batches)
    for epoch in range(args.epochs):
        loader.batch_sampler.sampler.set_epoch(epoch)
        train_one_epoch(model, loader, epoch)
""",
        note="set_epoch reached through the loader's batch sampler",
    ),
    Invalid(
        _HEAD
        + """\
from buckets import DistributedBucketSampler

def run_epoch(epoch, model, loaders):
    train_loader, eval_loader = loaders
    for batch in train_loader:
        model(batch).sum().backward()

def main(args, dataset, model):
    sampler = «DistributedBucketSampler»(dataset, args.batch_size, [32, 64], shuffle=True)
    loader = DataLoader(dataset, batch_sampler=sampler)
    for epoch in range(args.epochs):
        run_epoch(epoch, model, [loader, None])
""",
        fixed=_HEAD
        + """\
from buckets import DistributedBucketSampler

def run_epoch(epoch, model, loaders):
    train_loader, eval_loader = loaders
    for batch in train_loader:
        model(batch).sum().backward()

def main(args, dataset, model):
    sampler = DistributedBucketSampler(dataset, args.batch_size, [32, 64], shuffle=True)
    loader = DataLoader(dataset, batch_sampler=sampler)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        run_epoch(epoch, model, [loader, None])
""",
        note="a project's distributed bucket sampler, the loader handed in a list to the "
        "per-epoch helper (the VITS shape)",
    ),
    Valid(
        _HEAD
        + """\
from buckets import DistributedBucketSampler

def run_epoch(epoch, model, loaders):
    train_loader, eval_loader = loaders
    train_loader.batch_sampler.set_epoch(epoch)
    for batch in train_loader:
        model(batch).sum().backward()

def main(args, dataset, model):
    sampler = DistributedBucketSampler(dataset, args.batch_size, [32, 64], shuffle=True)
    loader = DataLoader(dataset, batch_sampler=sampler)
    for epoch in range(args.epochs):
        run_epoch(epoch, model, [loader, None])
""",
        note="the per-epoch helper sets the epoch through the loader it is handed",
    ),
    Invalid(
        _HEAD
        + """\
def make_loaders(cfg, train_set):
    sampler = DistributedSampler(train_set) if cfg.distributed else None
    return DataLoader(train_set, sampler=sampler, shuffle=sampler is None), None

def main(cfg, model, train_set):
    train_loader, _ = make_loaders(cfg, train_set)
    «for epoch in range(cfg.epochs)»:
        for batch in train_loader:
            model(batch).sum().backward()
""",
        fixed=_HEAD
        + """\
def make_loaders(cfg, train_set):
    sampler = DistributedSampler(train_set) if cfg.distributed else None
    return DataLoader(train_set, sampler=sampler, shuffle=sampler is None), None

def main(cfg, model, train_set):
    train_loader, _ = make_loaders(cfg, train_set)
    for epoch in range(cfg.epochs):
        if hasattr(getattr(train_loader, "sampler", None), "set_epoch"):
            train_loader.sampler.set_epoch(epoch)
        for batch in train_loader:
            model(batch).sum().backward()
""",
        note="M14 in one file: the loader of a helper that builds the sampler (Tacotron 2)",
    ),
    Valid(
        _HEAD
        + """\
def make_loaders(cfg, train_set):
    sampler = DistributedSampler(train_set) if cfg.distributed else None
    return DataLoader(train_set, sampler=sampler, shuffle=sampler is None), None

def evaluate(cfg, model, train_set):
    for n_views in cfg.test_views:
        bank_loader, _ = make_loaders(cfg, train_set)
        for batch in bank_loader:
            model.add_to_bank(batch, n_views)
""",
        note="a loader built anew in each pass of the loop: a fresh sampler per pass, as for a "
        "sampler made per epoch",
    ),
    Valid(
        _HEAD
        + """\
def make_loader(cfg, train_set):
    sampler = DistributedSampler(train_set)
    return DataLoader(train_set, sampler=sampler)

def main(cfg, model, train_set, logger):
    data_loader = make_loader(cfg, train_set)
    for data in logger.log_every(data_loader, 10):
        model(data).sum().backward()
""",
        note="one loop over the batches (an infinite sampler's iteration count): no epoch loop",
    ),
    Invalid(
        _HEAD
        + """\
def train_model(model, optimizer, data_loader, sampler, epochs):
    «for epoch in range(epochs)»:
        for x, y in data_loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
""",
        fixed=_HEAD
        + """\
def train_model(model, optimizer, data_loader, sampler, epochs):
    for epoch in range(epochs):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        for x, y in data_loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
""",
        note="a training sampler handed in beside its loader, never given the epoch",
    ),
    Valid(
        _HEAD
        + """\
def train_model(model, optimizer, data_loader, sampler, epochs):
    for epoch in range(epochs):
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        for x, y in data_loader:
            model(x).sum().backward()
            optimizer.step()
""",
        note="the handed-in sampler gets the epoch when it is a DistributedSampler",
    ),
    Valid(
        """\
import torch
from lightning.fabric import Fabric
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler


def update(fabric, agent, optimizer, data, args):
    if args.share_data:
        sampler = DistributedSampler(range(len(data)), shuffle=True)
    else:
        sampler = RandomSampler(range(len(data)))
    sampler = BatchSampler(sampler, batch_size=args.batch_size, drop_last=False)
    for epoch in range(args.update_epochs):
        if args.share_data:
            sampler.sampler.set_epoch(epoch)
        for idxs in sampler:
            fabric.backward(agent(data[idxs]))
            optimizer.step()
""",
        note="Fabric file: a sampler it iterates itself, given its epoch through the batch sampler",
    ),
    Invalid(
        """\
import torch
from lightning.fabric import Fabric
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler


def update(fabric, agent, optimizer, data, args):
    if args.share_data:
        sampler = «DistributedSampler»(range(len(data)), shuffle=True)
    else:
        sampler = RandomSampler(range(len(data)))
    sampler = BatchSampler(sampler, batch_size=args.batch_size, drop_last=False)
    for epoch in range(args.update_epochs):
        for idxs in sampler:
            fabric.backward(agent(data[idxs]))
            optimizer.step()
""",
        note="Fabric sets the epoch only of the loaders it sets up, not of a sampler iterated by "
        "hand; no fix: the name now holds the BatchSampler",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, dataset_train, model, optimizer):
    sampler = «DistributedSampler»(dataset_train)
    loader = DataLoader(dataset_train, batch_size=32, sampler=sampler)
    for epoch in range(args.epochs):
        if hasattr(dataset_train, "set_epoch"):
            dataset_train.set_epoch(epoch)
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
""",
        fixed=_HEAD
        + """\
def main(args, dataset_train, model, optimizer):
    sampler = DistributedSampler(dataset_train)
    loader = DataLoader(dataset_train, batch_size=32, sampler=sampler)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        if hasattr(dataset_train, "set_epoch"):
            dataset_train.set_epoch(epoch)
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
""",
        note="a streaming dataset's own set_epoch does not reshuffle the sampler",
    ),
    Valid(
        _HEAD
        + """\
class CyclingBatchSampler:
    def __init__(self, sampler: DistributedSampler, batch_size):
        self.sampler = sampler
        self.batch_size = batch_size

    def _cycle(self):
        while True:
            for index in self.sampler:
                yield index

    def set_epoch(self, epoch):
        self.sampler.set_epoch(epoch)
""",
        note="a batch sampler cycling through the sampler it wraps (and forwarding set_epoch)",
    ),
)
