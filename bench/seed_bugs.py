"""Seeded bugs: inject each anti-pattern the rules cover into real files of the triage corpus,
in place inside the checkout (so the project view applies), and report recall per operator.

    .venv/bin/python bench/seed_bugs.py                         # the whole corpus
    .venv/bin/python bench/seed_bugs.py --repo facebookresearch/mae --list
    .venv/bin/python bench/seed_bugs.py --operator drop-scaler-update --max-sites 5

Each operator is written over the ``ast`` of any file, never for one repository: it finds the
sites where the correct idiom is present (a ``scaler.update()`` after ``scaler.step``, a
``no_sync()`` around an accumulation step, an unguarded ``dist.barrier()``, a training
``loss.backward()``...) and rewrites one of them into the bug (drop the update, drop the
no_sync, put the barrier under ``if <dist>.get_rank() == 0:``, keep the loss in a list...).
Most rewrites keep every line where it was (a dropped statement becomes ``pass``, a guard goes
on the same line). The file is then checked with ``ddp-lsp check --select <rule> --project``
from the checkout root together with the project files it imports (two levels: a finding can
land where the sampler or the helper is defined) and the files that import it (one level, at
most ``MAX_IMPORTERS``: a per-epoch helper's missing ``set_epoch`` is reported at its caller's
epoch loop), and the site counts as found when the rule
reports there a finding whose message the untouched files do not get (so a rewrite that moves lines, and a
site where the rule already fired for another reason, are both judged right). The file is restored after every site, even on
an error or Ctrl-C.

The manifest and the snapshots are bench/triage.py's; the checkouts are laid out in a folder of
their own (``--workdir``, default /work/corpus-seed), so a triage run never reads a file while
it is seeded.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tokenize
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddp_lsp.core.crossfile import is_test_path

try:  # imported as bench.seed_bugs (the tests)
    from bench import triage
except ImportError:  # run as a script: bench/ is on sys.path
    import triage  # type: ignore[no-redef]


@dataclass(frozen=True)
class Site:
    """One seeded bug: the file's text after the rewrite, and where (1-based line)."""

    operator: str
    rule: str
    line: int
    text: str
    note: str = ""


Operator = Callable[[ast.Module, str], Iterator[Site]]

#: Seeding rewrites files in place: its checkouts are its own, apart from bench/triage.py's.
SEED_WORKDIR = Path("/work/corpus-seed")
OPERATORS: dict[str, tuple[str, Operator]] = {}


def operator(name: str, rule: str) -> Callable[[Operator], Operator]:
    def register(fn: Operator) -> Operator:
        OPERATORS[name] = (rule, fn)
        return fn

    return register


# -- text helpers (pure) ---------------------------------------------------------------------


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def replace_span(text: str, node: ast.AST, new: str) -> str:
    """Replace the source of ``node`` (by its positions, columns in UTF-8 bytes) with ``new``."""
    lines = text.splitlines(keepends=True)
    starts = _offsets(text)

    def at(lineno: int, col: int) -> int:
        line = lines[lineno - 1]
        return starts[lineno - 1] + len(
            line.encode("utf-8")[:col].decode("utf-8", errors="replace")
        )

    a = at(node.lineno, node.col_offset)  # type: ignore[attr-defined]
    b = at(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
    return text[:a] + new + text[b:]


def segment(text: str, node: ast.AST) -> str:
    return ast.get_source_segment(text, node) or ""


def one_line(node: ast.AST) -> bool:
    return getattr(node, "lineno", 0) == getattr(node, "end_lineno", -1)


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def call_attr(node: ast.AST) -> tuple[str, str] | None:
    """``(receiver, method)`` of a call ``receiver.method(...)`` with a dotted receiver."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        recv = dotted(node.func.value)
        if recv:
            return recv, node.func.attr
    return None


def expr_calls(body: Sequence[ast.stmt]) -> Iterator[tuple[ast.Expr, ast.Call]]:
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                yield node, node.value


def scopes(tree: ast.Module) -> Iterator[ast.AST]:
    """The module and every function: the units the operators pair idioms in."""
    yield tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``scope`` not inside a nested function or class."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def dist_aliases(tree: ast.Module) -> set[str]:
    """Names this module binds to ``torch.distributed`` (``dist``, ``torch.distributed``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch.distributed":
                    names.add(a.asname or "torch.distributed")
                elif a.name == "torch" and a.asname is None:
                    names.add("torch.distributed")
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and node.level == 0:
            for a in node.names:
                if a.name == "distributed":
                    names.add(a.asname or "distributed")
    return names


def indent_of(text: str, lineno: int) -> str:
    line = text.splitlines()[lineno - 1]
    return line[: len(line) - len(line.lstrip())]


_RANK_TEST = re.compile(r"rank|main_process|is_main|master|global_zero|is_primary|rank_zero", re.I)
COLLECTIVES = {
    "barrier",
    "all_reduce",
    "broadcast",
    "all_gather",
    "reduce",
    "gather",
    "scatter",
    "reduce_scatter",
    "all_to_all",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "broadcast_object_list",
    "all_gather_object",
    "monitored_barrier",
}
CLIP = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_gradients"}


def _pass_site(name: str, rule: str, text: str, stmt: ast.stmt, note: str) -> Site | None:
    if not one_line(stmt):
        return None
    return Site(name, rule, stmt.lineno, replace_span(text, stmt, "pass"), note)


# -- operators -------------------------------------------------------------------------------


@operator("drop-scaler-update", "DDP202")
def drop_scaler_update(tree: ast.Module, text: str) -> Iterator[Site]:
    """Remove ``scaler.update()`` from a scope that calls ``scaler.step(...)``."""
    for scope in scopes(tree):
        calls = [(n, call_attr(n.value)) for n in own_nodes(scope) if isinstance(n, ast.Expr)]
        stepped = {ca[0] for n, ca in calls if ca and ca[1] == "step" and n.value.args}
        for stmt, ca in calls:
            if ca and ca[1] == "update" and ca[0] in stepped and not stmt.value.args:
                site = _pass_site("drop-scaler-update", "DDP202", text, stmt, f"{ca[0]}.update()")
                if site:
                    yield site


def _clips_nothing(call: ast.Call) -> bool:
    """The threshold (second argument, or ``max_norm`` / ``clip_value``) is ``None``."""
    value = call.args[1] if len(call.args) > 1 else None
    for kw in call.keywords:
        if kw.arg in ("max_norm", "clip_value", "clip"):
            value = kw.value
    return isinstance(value, ast.Constant) and value.value is None


@operator("drop-unscale", "DDP201")
def drop_unscale(tree: ast.Module, text: str) -> Iterator[Site]:
    """Remove ``scaler.unscale_(opt)`` that precedes a gradient clip in the same scope (a
    clip that clips: not ``clip_grad_value_(params, None)``, which only measures the norm)."""
    for scope in scopes(tree):
        nodes = list(own_nodes(scope))
        clips = [
            n.lineno
            for n in nodes
            if isinstance(n, ast.Call)
            and (
                (isinstance(n.func, ast.Attribute) and n.func.attr in CLIP)
                or (isinstance(n.func, ast.Name) and n.func.id in CLIP)
            )
            and not _clips_nothing(n)
        ]
        for stmt in nodes:
            if isinstance(stmt, ast.Expr):
                ca = call_attr(stmt.value)
                if ca and ca[1] == "unscale_" and any(line > stmt.lineno for line in clips):
                    site = _pass_site("drop-unscale", "DDP201", text, stmt, f"{ca[0]}.unscale_")
                    if site:
                        yield site


@operator("scaler-step-to-optimizer-step", "DDP203")
def scaler_step_to_optimizer_step(tree: ast.Module, text: str) -> Iterator[Site]:
    """``scaler.step(opt)`` becomes ``opt.step()`` where the scope scales the loss."""
    for scope in scopes(tree):
        nodes = list(own_nodes(scope))
        scaled = {ca[0] for n in nodes if (ca := call_attr(n)) and ca[1] == "scale"}
        for stmt in nodes:
            if isinstance(stmt, ast.Expr) and one_line(stmt):
                ca = call_attr(stmt.value)
                call = stmt.value
                if (
                    ca
                    and ca[1] == "step"
                    and ca[0] in scaled
                    and len(call.args) == 1
                    and not call.keywords
                    and dotted(call.args[0])
                ):
                    new = f"{dotted(call.args[0])}.step()"
                    yield Site(
                        "scaler-step-to-optimizer-step",
                        "DDP203",
                        stmt.lineno,
                        replace_span(text, stmt, new),
                        f"{ca[0]}.step -> {new}",
                    )


@operator("update-before-step", "DDP204")
def update_before_step(tree: ast.Module, text: str) -> Iterator[Site]:
    """Swap ``scaler.step(opt)`` and a later ``scaler.update()`` of the same block."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for i, a in enumerate(body):
                ca = isinstance(a, ast.Expr) and call_attr(a.value)
                if not (ca and ca[1] == "step" and a.value.args and one_line(a)):
                    continue
                for b in body[i + 1 :]:
                    cb = isinstance(b, ast.Expr) and call_attr(b.value)
                    if (
                        cb
                        and cb[1] == "update"
                        and cb[0] == ca[0]
                        and not b.value.args
                        and one_line(b)
                    ):
                        sa, sb = segment(text, a), segment(text, b)
                        swapped = replace_span(text, b, sa)  # b is later: replace it first
                        swapped = replace_span(swapped, a, sb)
                        yield Site("update-before-step", "DDP204", a.lineno, swapped, f"{ca[0]}")
                        break


@operator("drop-no-sync", "DDP101")
def drop_no_sync(tree: ast.Module, text: str) -> Iterator[Site]:
    """``with model.no_sync():`` (in any form) becomes ``if True:``; nanoGPT's
    ``model.require_backward_grad_sync = ...`` in an accumulation loop becomes ``pass`` (not
    ``= True`` nor a restore outside a loop: removing those skips no all-reduce)."""
    looped = _in_loop(tree)
    bound = _no_sync_names(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.With, ast.AsyncWith))
            and node.body
            and node.body[0].lineno > node.lineno
        ):
            uses = any(
                isinstance(n, ast.Attribute) and n.attr == "no_sync"
                for item in node.items
                for n in ast.walk(item.context_expr)
            )
            # The context chosen earlier and entered by name (`ctx = model.no_sync() if acc
            # else nullcontext()` then `with ctx:`, or `with sync_context():` after
            # `sync_context = model.no_sync`): the same idiom, spelled in two statements.
            heads = [
                item.context_expr.func
                if isinstance(item.context_expr, ast.Call) and not item.context_expr.args
                else item.context_expr
                for item in node.items
            ]
            uses = uses or any(id(h) in bound for h in heads)
            header_end = max(
                getattr(item.optional_vars or item.context_expr, "end_lineno", 0)
                for item in node.items
            )
            # A no_sync around the backward alone skips nothing: DDP's forward reads
            # `require_backward_grad_sync` and prepares the reducer, whose hooks then all-reduce
            # in the backward whatever the flag says by then (torch's DistributedDataParallel
            # `_post_forward`, the reducer's `expect_autograd_hooks_`). Removing it changes no
            # behaviour, so it is no seeded bug (the untouched code is DDP101's finding itself:
            # modded-nanogpt's early records).
            if (
                uses
                and header_end == node.lineno
                and len(node.items) == 1
                and not _backward_only(node.body)
            ):
                line = text.splitlines(keepends=True)[node.lineno - 1]
                ind = indent_of(text, node.lineno)
                nl = line[len(line.rstrip("\r\n")) :]
                lines = text.splitlines(keepends=True)
                lines[node.lineno - 1] = f"{ind}if True:{nl}"
                yield Site("drop-no-sync", "DDP101", node.lineno, "".join(lines), "with no_sync")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if (
                isinstance(t, ast.Attribute)
                and t.attr == "require_backward_grad_sync"
                and id(node) in looped
                and not (isinstance(node.value, ast.Constant) and node.value.value is True)
            ):
                site = _pass_site(
                    "drop-no-sync", "DDP101", text, node, "require_backward_grad_sync"
                )
                if site:
                    yield site


def _no_sync_names(tree: ast.Module) -> set[int]:
    """ids of the ``Name`` loads that read a name their function binds (only) to an
    expression using ``.no_sync`` or to ``nullcontext`` (``ctx = model.no_sync() if acc
    else nullcontext()``; ``grad_sync_context = nullcontext`` then, on accumulation steps,
    ``grad_sync_context = model.no_sync``)."""
    out: set[int] = set()
    scopes: list[ast.AST] = [tree]
    scopes.extend(
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    )
    for scope in scopes:
        own = list(_own_nodes(scope))
        values: dict[str, list[ast.expr]] = {}
        for n in own:
            if isinstance(n, ast.Assign) and len(n.targets) == 1:
                t = n.targets[0]
                if isinstance(t, ast.Name):
                    values.setdefault(t.id, []).append(n.value)
        names = {
            name
            for name, vals in values.items()
            if any(_mentions_no_sync(v) for v in vals)
            and all(_mentions_no_sync(v) or "nullcontext" in _callee(v) for v in vals)
        }
        out.update(
            id(n)
            for n in own
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names
        )
    return out


def _callee(expr: ast.AST) -> str:
    return dotted(expr.func if isinstance(expr, ast.Call) else expr)


def _mentions_no_sync(expr: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "no_sync" for n in ast.walk(expr))


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``scope``'s own frame (not in nested functions or classes)."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _backward_only(body: Sequence[ast.stmt]) -> bool:
    """Every statement is ``loss.backward()`` / ``scaler.scale(loss).backward()``: no
    forward runs in ``body`` (``model(x).sum().backward()`` runs one)."""
    return all(
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == "backward"
        and all(
            n is stmt.value or (isinstance(n.func, ast.Attribute) and n.func.attr == "scale")
            for n in ast.walk(stmt.value)
            if isinstance(n, ast.Call)
        )
        for stmt in body
    )


@operator("barrier-under-rank0", "DDP103")
def barrier_under_rank0(tree: ast.Module, text: str) -> Iterator[Site]:
    """An unguarded ``dist.<collective>(...)`` statement goes under ``if dist.get_rank() == 0:``."""
    aliases = dist_aliases(tree)
    for stmt, call in expr_calls(tree.body):
        ca = call_attr(call)
        if ca and ca[0] in aliases and ca[1] in COLLECTIVES and one_line(stmt):
            new = f"if {ca[0]}.get_rank() == 0: {segment(text, stmt)}"
            yield Site(
                "barrier-under-rank0", "DDP103", stmt.lineno, replace_span(text, stmt, new), ca[1]
            )


def _loss_of_backward(call: ast.Call) -> str:
    """The loss a backward call differentiates: ``loss.backward()``,
    ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``, ``fabric.backward(loss)``."""
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr != "backward":
        return ""
    if isinstance(f.value, ast.Name) and not call.args:
        return f.value.id
    if isinstance(f.value, ast.Call) and f.value.args and isinstance(f.value.args[0], ast.Name):
        ca = call_attr(f.value)
        if ca and ca[1] == "scale":
            return f.value.args[0].id
    if (
        call.args
        and isinstance(call.args[0], ast.Name)
        and isinstance(f.value, (ast.Name, ast.Attribute))
    ):
        return call.args[0].id
    return ""


@operator("append-loss", "DDP301")
def append_loss(tree: ast.Module, text: str) -> Iterator[Site]:
    """Keep every step's loss tensor: ``history = []`` before the training loop and
    ``; history.append(loss)`` after its backward."""
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for kid in ast.iter_child_nodes(node):
            parents[id(kid)] = node
    for stmt, call in expr_calls(tree.body):
        loss = _loss_of_backward(call)
        if not loss or not one_line(stmt):
            continue
        loop, p = None, parents.get(id(stmt))
        while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
                loop = p
            p = parents.get(id(p))
        if loop is None:
            continue
        lines = text.splitlines(keepends=True)
        end = lines[stmt.lineno - 1]
        nl = end[len(end.rstrip("\r\n")) :]
        lines[stmt.lineno - 1] = end.rstrip("\r\n") + f"; seeded_history.append({loss}){nl}"
        lines.insert(
            loop.lineno - 1, f"{indent_of(text, loop.lineno)}seeded_history = []{nl or chr(10)}"
        )
        yield Site("append-loss", "DDP301", stmt.lineno + 1, "".join(lines), loss)


@operator("drop-set-epoch", "DDP402")
def drop_set_epoch(tree: ast.Module, text: str) -> Iterator[Site]:
    """Remove ``sampler.set_epoch(epoch)`` (a sampler's or a loader's: not a streaming
    dataset's own ``set_epoch``, which DDP402 does not cover)."""
    for stmt, call in expr_calls(tree.body):
        ca = call_attr(call)
        if ca and ca[1] == "set_epoch" and re.search(r"sampler|loader", ca[0], re.I):
            site = _pass_site("drop-set-epoch", "DDP402", text, stmt, ca[0])
            if site:
                yield site


def _dataloaders(tree: ast.Module) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = (
                f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            )
            if name == "DataLoader":
                yield node


def _kw(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


#: Calls that install a DistributedSampler in the loaders they are given.
_SAMPLER_INSTALLERS = re.compile(
    r"\bsetup_dataloaders\(|\baccelerator\.prepare\(|\bprepare_data_loader\("
)


@operator("drop-sampler", "DDP401")
def drop_sampler(tree: ast.Module, text: str) -> Iterator[Site]:
    """A training ``DataLoader(..., sampler=<distributed sampler>)`` shuffles by itself
    instead (``shuffle=True``, no sampler): what a script without DDP's sampler looks like.
    Not in a file that hands its loaders to a framework that installs a DistributedSampler
    itself (``fabric.setup_dataloaders``, ``accelerator.prepare``): no bug there."""
    if _SAMPLER_INSTALLERS.search(text):
        return
    for call in _dataloaders(tree):
        kw = _kw(call, "sampler")
        if (
            kw is None
            or not one_line(kw)
            or (isinstance(kw.value, ast.Constant) and kw.value.value is None)
        ):
            continue
        src = segment(text, call)
        if (
            "train" not in src.lower()
            or "eval" in src.lower()
            or "val" in segment(text, kw.value).lower()
        ):
            continue
        shuffle = _kw(call, "shuffle")
        if shuffle is None:
            new = replace_span(text, kw, "shuffle=True")
        elif one_line(shuffle):
            first, second = sorted((kw, shuffle), key=lambda n: (n.lineno, n.col_offset))
            words = {id(kw): "sampler=None", id(shuffle): "shuffle=True"}
            new = replace_span(text, second, words[id(second)])  # the later one first
            new = replace_span(new, first, words[id(first)])
        else:
            continue
        yield Site("drop-sampler", "DDP401", kw.value.lineno, new, segment(text, kw.value))


@operator("add-shuffle", "DDP403")
def add_shuffle(tree: ast.Module, text: str) -> Iterator[Site]:
    """``shuffle=True`` added to a ``DataLoader`` that has a sampler."""
    for call in _dataloaders(tree):
        kw = _kw(call, "sampler")
        if (
            kw is None
            or _kw(call, "shuffle") is not None
            or any(k.arg is None for k in call.keywords)
        ):
            continue
        if isinstance(kw.value, ast.Constant) or not one_line(kw.value):
            continue
        new = f"{segment(text, kw.value)}, shuffle=True"
        yield Site("add-shuffle", "DDP403", kw.value.lineno, replace_span(text, kw.value, new), "")


def _in_loop(tree: ast.Module) -> set[int]:
    """ids of the nodes inside a ``for``/``while`` body of the same function."""
    inside: set[int] = set()

    def visit(node: ast.AST, looping: bool) -> None:
        for kid in ast.iter_child_nodes(node):
            if isinstance(kid, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(kid, False)
                continue
            if looping:
                inside.add(id(kid))
            visit(kid, looping or isinstance(kid, (ast.For, ast.While, ast.AsyncFor)))

    visit(tree, False)
    return inside


def _training_loops(tree: ast.Module) -> set[int]:
    """ids of the nodes inside a training or evaluation loop (over epochs, steps, batches or a
    loader, or one that runs ``backward``/``step``) of the same function: where a log line
    costs one line per rank per step. A loop over metrics, process groups or retries at
    start-up prints a few lines once."""
    inside: set[int] = set()

    def training(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            names = [dotted(n) for n in ast.walk(loop.target) if isinstance(n, ast.Name)]
            if any(_LOOP_TARGET.search(n) for n in names):
                return True
            if any(_LOOP_ITER.search(dotted(n)) for n in ast.walk(loop.iter) if dotted(n)):
                return True
        return any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("backward", "step", "zero_grad")
            for n in ast.walk(loop)
        )

    def visit(node: ast.AST, looping: bool) -> None:
        for kid in ast.iter_child_nodes(node):
            if isinstance(kid, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(kid, False)
                continue
            if looping:
                inside.add(id(kid))
            is_loop = isinstance(kid, (ast.For, ast.While, ast.AsyncFor)) and training(kid)
            visit(kid, looping or is_loop)

    visit(tree, False)
    return inside


_LOOP_TARGET = re.compile(r"epoch|step|iter|batch", re.I)
_LOOP_ITER = re.compile(r"loader|epoch|steps|iters|(^|_)(train|val|valid)(_|$)", re.I)
_PROCESS_TAG = re.compile(r"rank|gpu|device|pid", re.I)


def _metric_log(call: ast.Call) -> bool:
    """A log call whose message carries a computed value and does not name its process: a
    constant marker ("Out of memory, exiting") or a per-rank tag (``f"[{rank}] ..."``) is not
    the per-step metric line that every rank would duplicate."""
    values = [
        n
        for a in (*call.args, *(k.value for k in call.keywords if k.arg != "file"))
        for n in ast.walk(a)
        if isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    ]
    if not values:
        return False
    for a in (*call.args, *(k.value for k in call.keywords)):
        for n in ast.walk(a):
            if (
                isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and _PROCESS_TAG.search(n.value)
            ):
                return False
            if isinstance(n, ast.Name) and _PROCESS_TAG.search(n.id):
                return False
            if isinstance(n, ast.Attribute) and _PROCESS_TAG.search(n.attr):
                return False
    return True


#: ``builtins.print = ...`` / ``__builtin__.print = ...``: the project silences ``print`` on
#: the other ranks (DeiT's ``setup_for_distributed``).
_PRINT_PATCH = re.compile(r"\b(?:builtins|__builtin__)\.print\s*=(?!=)")


def print_silenced(checkout: Path, paths: Sequence[str]) -> bool:
    """Some file of the project replaces ``print`` by one that prints on rank 0 only."""
    for f in triage.python_files(checkout, paths):
        try:
            if _PRINT_PATCH.search(f.read_text(encoding="utf-8", errors="replace")):
                return True
        except OSError:
            continue
    return False


def unused_holder(checkout: Path, paths: Sequence[str], text: str, line: int) -> bool:
    """The function holding ``line`` is referred to by no file of the project outside its tests
    (a ``cleanup()`` helper nothing calls, a ``destroy()`` method only the test suite calls):
    emptying it changes no run of the program."""
    holder = None
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.lineno <= line <= (node.end_lineno or node.lineno)
        ):
            if holder is None or node.lineno > holder.lineno:
                holder = node
    if holder is None:
        return False
    use = re.compile(rf"\b{re.escape(holder.name)}\b")
    define = re.compile(rf"\bdef\s+{re.escape(holder.name)}\b")
    root = checkout.resolve()
    for f in triage.python_files(checkout, paths):
        rel = f.relative_to(root).as_posix() if f.is_relative_to(root) else f.as_posix()
        if is_test_path(rel):  # the one definition of test code (F16)
            continue
        try:
            body = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if len(use.findall(body)) > len(define.findall(body)):
            return False
    return True


def prints_only(text: str, line: int) -> bool:
    """The ``if`` at ``line`` logs through ``print`` only (no logger call): with ``print``
    silenced on the other ranks (:func:`print_silenced`), removing its rank test changes no
    output."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.If) and node.lineno == line:
            logs = [
                n for s in node.body for n in ast.walk(s) if isinstance(n, ast.Call) and _is_log(n)
            ]
            return bool(logs) and all(isinstance(n.func, ast.Name) for n in logs)
    return False


def _unguard(
    name: str,
    rule: str,
    tree: ast.Module,
    text: str,
    wanted: Callable[[ast.Call], bool],
    loop_only: bool = False,
) -> Iterator[Site]:
    looped = _training_loops(tree) if loop_only else set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If) or node.orelse or not one_line(node.test):
            continue
        if loop_only and id(node) not in looped:
            continue
        if not _RANK_TEST.search(segment(text, node.test)):
            continue
        if loop_only and any(
            isinstance(n, ast.Call) and _is_save(n) for s in node.body for n in ast.walk(s)
        ):
            # A block that also writes a checkpoint is unguard-save's site (the same `if`):
            # the bug it seeds is the save, measured there.
            continue
        if any(isinstance(n, ast.Call) and wanted(n) for s in node.body for n in ast.walk(s)):
            yield Site(
                name,
                rule,
                node.lineno,
                replace_span(text, node.test, "True"),
                segment(text, node.test),
            )


def _is_save(call: ast.Call) -> bool:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return dotted(f) in ("torch.save",) or name in (
        "save_pretrained",
        "save_checkpoint",
        "save_model",
    )


def _is_log(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Name) and f.id == "print":
        return True
    ca = call_attr(call)
    return bool(ca and ca[1] in ("info", "warning") and re.search(r"log", ca[0], re.I))


def _self_guarded(tree: ast.Module, text: str) -> set[str]:
    """Functions of the file that save only under a rank test of their own (guided-diffusion's
    ``save_model``: ``if dist.get_rank() == 0: th.save(...)``): a call of one needs no guard."""
    out: set[str] = set()
    for fn in tree.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        saves = [
            n
            for n in ast.walk(fn)
            if isinstance(n, ast.Call)
            and "save" in (call_attr(n) or ("", ""))[1].lower()
            or isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and "save" in n.func.id
        ]
        guarded = {
            id(n)
            for g in ast.walk(fn)
            if isinstance(g, ast.If)
            and one_line(g.test)
            and _RANK_TEST.search(segment(text, g.test))
            for st in g.body
            for n in ast.walk(st)
        }
        if saves and all(id(n) in guarded for n in saves):
            out.add(fn.name)
    return out


@operator("unguard-save", "DDP501")
def unguard_save(tree: ast.Module, text: str) -> Iterator[Site]:
    """``if <rank test>: torch.save(...)`` loses its rank test (``if True:``). Not around a call
    of a function of the file that guards its own saves: that code is still correct."""
    own = _self_guarded(tree, text)

    def wanted(call: ast.Call) -> bool:
        return _is_save(call) and not (isinstance(call.func, ast.Name) and call.func.id in own)

    yield from _unguard("unguard-save", "DDP501", tree, text, wanted)


@operator("unguard-print", "DDP502")
def unguard_print(tree: ast.Module, text: str) -> Iterator[Site]:
    """``if <rank test>: print(...)`` in a loop (per-step logging) loses its rank test."""
    yield from _unguard(
        "unguard-print",
        "DDP502",
        tree,
        text,
        lambda c: _is_log(c) and _metric_log(c),
        loop_only=True,
    )


_DDP_NAMES = {
    "DistributedDataParallel",
    "DDP",
    "torch.nn.parallel.DistributedDataParallel",
    "nn.parallel.DistributedDataParallel",
}


@operator("forward-under-rank0", "DDP104")
def forward_under_rank0(tree: ast.Module, text: str) -> Iterator[Site]:
    """A call of a DDP-wrapped model in the scope that wrapped it goes under a rank-0 guard."""
    aliases = sorted(dist_aliases(tree))
    if not aliases:
        return
    # Only torch's DDP broadcasts buffers in its forward. apex's (or DeepScale's)
    # DistributedDataParallel, imported under the same names, makes no collective there (its
    # all-reduce runs in backward hooks), so a rank-0 call of it is no DDP104 bug.
    foreign = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("torch")
        for a in node.names
        if a.name == "DistributedDataParallel"
    }
    for scope in scopes(tree):
        nodes = sorted(
            (n for n in own_nodes(scope) if isinstance(n, ast.stmt)), key=lambda n: n.lineno
        )
        wrapped: dict[str, int] = {}
        for stmt in nodes:
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Call)
                and dotted(stmt.value.func) in _DDP_NAMES
                and dotted(stmt.value.func) not in foreign
            ):
                for t in stmt.targets:
                    if dotted(t):
                        wrapped[dotted(t)] = stmt.lineno
        for stmt in nodes:
            if not isinstance(stmt, (ast.Assign, ast.Expr)) or not one_line(stmt):
                continue
            call = stmt.value
            if (
                isinstance(call, ast.Call)
                and dotted(call.func) in wrapped
                and stmt.lineno > wrapped[dotted(call.func)]
            ):
                new = f"if {aliases[0]}.get_rank() == 0: {segment(text, stmt)}"
                yield Site(
                    "forward-under-rank0",
                    "DDP104",
                    stmt.lineno,
                    replace_span(text, stmt, new),
                    dotted(call.func),
                )


@operator("hardcode-device", "DDP504")
def hardcode_device(tree: ast.Module, text: str) -> Iterator[Site]:
    """``torch.cuda.set_device(local_rank)`` / ``.cuda(gpu)`` / ``device_ids=[gpu]`` use GPU 0."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            ca = call_attr(node)
            if (
                ca
                and ca[1] in ("set_device", "cuda")
                and len(node.args) == 1
                and not isinstance(node.args[0], ast.Constant)
            ):
                if ca[1] == "set_device" and "cuda" not in ca[0]:
                    continue
                if one_line(node.args[0]):
                    yield Site(
                        "hardcode-device",
                        "DDP504",
                        node.lineno,
                        replace_span(text, node.args[0], "0"),
                        ca[1],
                    )
            kw = _kw(node, "device_ids")
            if (
                kw is not None
                and isinstance(kw.value, ast.List)
                and len(kw.value.elts) == 1
                and one_line(kw.value)
            ):
                if not isinstance(kw.value.elts[0], ast.Constant):
                    yield Site(
                        "hardcode-device",
                        "DDP504",
                        kw.value.lineno,
                        replace_span(text, kw.value, "[0]"),
                        "device_ids",
                    )


@operator("drop-set-device", "DDP505")
def drop_set_device(tree: ast.Module, text: str) -> Iterator[Site]:
    """Remove ``torch.cuda.set_device(...)`` from a file that calls ``init_process_group``
    without ``device_id=``."""
    inits = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and (ca := call_attr(n)) and ca[1] == "init_process_group"
    ]
    if not inits or any(_kw(n, "device_id") for n in inits):
        return
    if any(
        isinstance(n, ast.Subscript)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.slice, ast.Constant)
        and n.slice.value == "device_id"
        for n in ast.walk(tree)
    ):
        # `pg_kwargs["device_id"] = torch.device("cuda", local_rank)` then
        # `init_process_group(**pg_kwargs)`: the group is given its device, as with `device_id=`.
        return
    first_init = min(n.lineno for n in inits)
    if any(
        isinstance(n, ast.Call)
        and (ca := call_attr(n))
        and ca[1] == "set_device_index"
        and n.lineno < first_init
        for n in ast.walk(tree)
    ):
        # `torch.accelerator.set_device_index(gpu)` before the group starts already selects
        # the GPU: a later `torch.cuda.set_device` is redundant, and removing it is no bug.
        return
    for stmt, call in expr_calls(tree.body):
        if dotted(call.func) == "torch.cuda.set_device":
            site = _pass_site("drop-set-device", "DDP505", text, stmt, "")
            if site:
                yield site


@operator("drop-destroy", "DDP506")
def drop_destroy(tree: ast.Module, text: str) -> Iterator[Site]:
    """Remove ``dist.destroy_process_group()``.

    Not in test code (a file that imports ``pytest`` or ``unittest``: the test runner owns the
    worker processes and their teardown, so a fixture without its destroy leaks nothing a user
    sees), and only a module's function (``dist.destroy_process_group()``, a project's
    re-export of it): a framework object's ``state.destroy_process_group()`` tears down a
    group the framework started and owns (accelerate's ``PartialState``)."""
    imports = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    } | {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    if imports & {"pytest", "unittest"}:
        return
    modules = {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    for stmt, call in expr_calls(tree.body):
        ca = call_attr(call)
        if ca and ca[1] == "destroy_process_group" and ca[0].split(".")[0] in modules:
            site = _pass_site("drop-destroy", "DDP506", text, stmt, "")
            if site:
                yield site


@operator("drop-map-location", "DDP303")
def drop_map_location(tree: ast.Module, text: str) -> Iterator[Site]:
    """``torch.load(path, map_location=X)`` loses its ``map_location`` argument."""
    # A load in either branch of an `if` on a rank (`if fabric.local_rank == 0: ... else:
    # ...`, litgpt's XLA loader) runs on a rank subset chosen on purpose: rank 0, or local rank
    # 0 of each node, restores onto the device it was saved from, which is its own, and the
    # other branch is what the others do. That is not the bug DDP303 describes (its docs: "loads
    # under a rank condition"), so such a load is not seeded (docs/accuracy.md F32).
    under_rank_test = {
        id(n)
        for g in ast.walk(tree)
        if isinstance(g, ast.If) and _RANK_TEST.search(segment(text, g.test))
        for st in (*g.body, *g.orelse)
        for n in ast.walk(st)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and dotted(node.func) == "torch.load":
            kw = _kw(node, "map_location")
            if kw is None or not one_line(node) or id(node) in under_rank_test:
                continue
            if any(
                k.arg == "mmap" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords
            ):
                # `torch.load(path, mmap=True, map_location="cpu")`: memory-mapping only spares
                # memory for tensors that stay on the host, so the file is one saved from the
                # CPU (litgpt's converted and consolidated checkpoints); without map_location
                # nothing lands on a GPU, which is not the bug DDP303 describes (docs/
                # accuracy.md F32). Not seeded.
                continue
            args: list[ast.AST] = [*node.args, *node.keywords]
            args.sort(key=lambda a: (a.lineno, a.col_offset))  # type: ignore[attr-defined]
            i = args.index(kw)
            if i == 0:
                continue  # the first argument: keep the rewrite simple, skip it
            prev = args[i - 1]
            span = ast.Constant(None)
            span.lineno, span.col_offset = prev.end_lineno, prev.end_col_offset  # type: ignore[attr-defined]
            span.end_lineno, span.end_col_offset = kw.end_lineno, kw.end_col_offset  # type: ignore[attr-defined]
            yield Site("drop-map-location", "DDP303", node.lineno, replace_span(text, span, ""), "")


@operator("wrapper-state-dict", "DDP304")
def wrapper_state_dict(tree: ast.Module, text: str) -> Iterator[Site]:
    """``torch.save(model.module.state_dict(), ...)`` saves the wrapper's ``model.state_dict()``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and dotted(node.func) == "torch.save":
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Call)
                    and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr == "state_dict"
                    and isinstance(inner.func.value, ast.Attribute)
                    and inner.func.value.attr == "module"
                    and one_line(inner.func.value)
                ):
                    owner = segment(text, inner.func.value.value)
                    yield Site(
                        "wrapper-state-dict",
                        "DDP304",
                        inner.lineno,
                        replace_span(text, inner.func.value, owner),
                        owner,
                    )


@operator("drop-seed-offset", "DDP503")
def drop_seed_offset(tree: ast.Module, text: str) -> Iterator[Site]:
    """``manual_seed(seed + rank)`` becomes ``manual_seed(seed)``."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("manual_seed", "seed")
        ):
            if (
                len(node.args) == 1
                and isinstance(node.args[0], ast.BinOp)
                and isinstance(node.args[0].op, ast.Add)
            ):
                b = node.args[0]
                if _RANK_TEST.search(segment(text, b.right)) and one_line(b):
                    yield Site(
                        "drop-seed-offset",
                        "DDP503",
                        node.lineno,
                        replace_span(text, b, segment(text, b.left)),
                        "",
                    )


def sites(text: str, names: Sequence[str] | None = None) -> Iterator[Site]:
    """Every seeded bug the operators (all, or ``names``) can make in ``text``."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return
    for name, (_rule, fn) in OPERATORS.items():
        if names and name not in names:
            continue
        for site in fn(tree, text):
            try:
                ast.parse(site.text)
            except SyntaxError:
                continue  # a rewrite that does not parse measures nothing
            yield site


# -- running ---------------------------------------------------------------------------------


def imported_files(root: Path, rel: str, text: str) -> list[str]:
    """Project files that ``rel`` imports (``from a.b import c``, ``import a.b``, relative
    imports), as paths relative to ``root``: a finding about the seeded line may land there
    (DDP402 reports at the sampler's construction, which can sit in a data module)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    here = Path(rel).parent
    names: list[tuple[Path, str]] = []  # (base directory, dotted module)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend((Path(), a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = Path()
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.parent
            module = node.module or ""
            names.append((base, module))
            names.extend((base, f"{module}.{a.name}" if module else a.name) for a in node.names)
    found: list[str] = []
    for base, dotted_name in names:
        if not dotted_name:
            continue
        parts = dotted_name.split(".")
        for start in {base, here, Path("src")} if base == Path() else {base}:
            stem = start.joinpath(*parts)
            for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
                if (root / candidate).is_file() and candidate.as_posix() not in found:
                    found.append(candidate.as_posix())
    return [f for f in found if f != rel]


#: At most this many importers of the seeded file are checked with it (a widely imported
#: utility module would otherwise pull in most of the project).
MAX_IMPORTERS = 8


def neighbourhood(
    root: Path, rel: str, text: str, importers: dict[str, list[str]] | None = None
) -> list[str]:
    """``rel``, the project files it imports, and the files those import (two levels: a
    package ``__init__`` that re-exports a submodule is followed to it); with ``importers``
    (:func:`importer_map`), also the files that import ``rel`` (one level): a per-epoch helper
    whose ``set_epoch`` was removed is reported at its caller's epoch loop (through a package
    ``__init__`` that imports ``rel``, its importers too)."""
    first = imported_files(root, rel, text)
    files = [rel, *first]
    for f in first:
        try:
            sub = (root / f).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        files.extend(x for x in imported_files(root, f, sub) if x not in files)
    if importers:
        direct = importers.get(rel, [])[:MAX_IMPORTERS]
        files.extend(x for x in direct if x not in files)
        # A package `__init__` that re-exports `rel` (`from .train_utils import setup, cleanup`)
        # stands for it: its importers (`from utils import cleanup`) use `rel` too.
        for init in direct:
            if init.endswith("/__init__.py"):
                files.extend(x for x in importers.get(init, [])[:MAX_IMPORTERS] if x not in files)
    return files


def importer_map(root: Path, rels: Sequence[str]) -> dict[str, list[str]]:
    """For each project file, the files among ``rels`` that import it (in ``rels`` order)."""
    out: dict[str, list[str]] = {}
    for rel in rels:
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for f in imported_files(root, rel, text):
            out.setdefault(f, []).append(rel)
    return out


def messages(
    checkout: Path, files: Sequence[str], rule: str | None = None
) -> Counter[tuple[str, str, str]]:
    """(rule, file, message) of every finding in ``files``, checked from the checkout root.
    ``rule``: that rule alone, selected by its id (a rule off by default, DDP501 or DDP503, runs so);
    None: every rule, those off by default included (the baseline a seeded run is compared
    with must hold what they reported before the seed)."""
    select = ["--select", rule] if rule else list(triage.SELECT_ALL)
    raw = triage.run_check(checkout, list(files), select)
    return Counter((item["code"], item["filename"], item["message"]) for item in raw)


def found_new(before: Counter[tuple[str, ...]], after: Counter[tuple[str, ...]], rule: str) -> bool:
    """The rule says something it did not say on the untouched file. Compared by message, not
    line, so rewrites that move lines and sites where the rule already fired (with another
    message, e.g. a false alarm on the same line) are both judged right."""
    return any(key[0] == rule for key in after - before)


#: A file is distributed code on its own when it names a process group, a rank, a launcher or
#: a distributed wrapper (stricter than triage's marker: a backward pass alone does not count).
_DIST_ONLY = re.compile(
    r"torch\.distributed|DistributedDataParallel|\bDDP\b|init_process_group|init_distributed|"
    r"LOCAL_RANK|\bRANK\b|WORLD_SIZE|get_rank|get_world_size|is_main_process|is_master|"
    r"master_process|rank_zero|global_rank|local_rank|\brank\b|accelerate|lightning|deepspeed|"
    r"\bFabric\b|FullyShardedDataParallel|fully_shard|DistributedSampler|mpi4py|\bMPI\b|"
    r"\bdist\b|mp\.spawn"
)


#: Rules silent in test code (ddp_lsp.core.crossfile.is_test_path, F16 in docs/accuracy.md): a
#: distributed test feeds every rank the data and the seeds it means to compare, so dropping a
#: test's sampler or its per-rank seed offset makes a weaker test, not a training bug.
_SILENT_IN_TESTS = frozenset({"DDP401", "DDP503"})


def counts(site_rule: str, text: str, rel: str = "") -> bool:
    """Whether a site measures the rule: rules that only apply to distributed code are measured
    in files that are distributed code themselves (a seeded ``torch.load`` in a single-process
    sampling script is not a DDP bug); any-module rules (AMP, graph lifetime) everywhere."""
    if site_rule in _SILENT_IN_TESTS and rel and is_test_path(rel):
        return False
    return site_rule in triage.ANY_MODULE or _DIST_ONLY.search(_without_comments(text)) is not None


def _without_comments(text: str) -> str:
    """``text`` without its comments: a checkpoint-inspection tool "adapted from
    pytorch-lightning-snippets" (a comment) is not distributed code. Strings stay: ``os.environ[
    "LOCAL_RANK"]`` is."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    return " ".join(t.string for t in tokens if t.type != tokenize.COMMENT)


def measured(row: dict, workdir: Path) -> bool:
    """``counts`` for a saved site, reading its file from the checkout (kept if unreadable)."""
    path = workdir / row["repo"].replace("/", "+") / row["path"]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return True
    return counts(row["rule"], text, row["path"])


def summarize(rows: Sequence[dict], out=sys.stdout) -> dict[str, tuple[int, int]]:
    """Print recall per operator (and per rule) of the sites in ``rows``; return it."""
    total: Counter[str] = Counter(r["operator"] for r in rows)
    found: Counter[str] = Counter(r["operator"] for r in rows if r["found"])
    result: dict[str, tuple[int, int]] = {}
    out.write(
        "\n| operator | rule | sites | found | recall |\n| --- | --- | ---: | ---: | ---: |\n"
    )
    for name, (rule, _fn) in OPERATORS.items():
        n, f = total[name], found[name]
        result[name] = (n, f)
        out.write(
            f"| {name} | {rule} | {n} | {f} | {f / n:.2f} |\n"
            if n
            else f"| {name} | {rule} | 0 | 0 | - |\n"
        )
    n_all, f_all = sum(total.values()), sum(found.values())
    out.write(
        f"| all | | {n_all} | {f_all} | {f_all / n_all:.2f} |\n"
        if n_all
        else "| all | | 0 | 0 | - |\n"
    )
    serious = [r for r in rows if r["rule"] in triage.SERIOUS]
    if serious:
        fs = sum(1 for r in serious if r["found"])
        out.write(
            f"| serious rules ({', '.join(triage.SERIOUS)}) | | {len(serious)} | {fs} | {fs / len(serious):.2f} |\n"
        )
    return result


def merge(files: Sequence[Path]) -> list[dict]:
    """Rows of several saved runs; a later file's rows replace an earlier file's rows of the
    same operators (to rerun one operator after changing it)."""
    rows: list[dict] = []
    for f in files:
        new = json.loads(f.read_text(encoding="utf-8"))["sites"]
        ops = {r["operator"] for r in new}
        rows = [r for r in rows if r["operator"] not in ops] + new
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", type=Path, default=triage.MANIFEST)
    ap.add_argument("--snapshots", type=Path, default=triage.DEFAULT_SNAPSHOTS)
    ap.add_argument(
        "--workdir",
        type=Path,
        default=SEED_WORKDIR,
        help=f"where checkouts are laid out and seeded (default {SEED_WORKDIR}: not triage's, "
        "so a triage run never reads a seeded file)",
    )
    ap.add_argument("--repo", action="append", default=[])
    ap.add_argument("--operator", action="append", default=[], choices=sorted(OPERATORS))
    ap.add_argument(
        "--max-sites", type=int, default=1, help="sites per operator per repository (default 1)"
    )
    ap.add_argument("--list", action="store_true", help="print every site and whether it was found")
    ap.add_argument("--json", type=Path, help="write the per-site results here")
    ap.add_argument(
        "--summarize",
        type=Path,
        nargs="+",
        help="print the table of saved runs (--json files) and run nothing; a later file's "
        "operators replace an earlier file's",
    )
    args = ap.parse_args(argv)
    if args.summarize:
        rows = merge(args.summarize)
        kept = [r for r in rows if measured(r, args.workdir)]
        if len(kept) != len(rows):
            print(
                f"{len(rows) - len(kept)} sites left out: distributed-only rule seeded in a non-distributed file"
            )
        summarize(kept)
        return 0

    repos = triage.load_manifest(args.manifest)
    if args.repo:
        repos = [r for r in repos if r.name in set(args.repo)]
    rows: list[dict] = []
    for repo in repos:
        try:
            checkout = triage.lay_out(repo, args.snapshots, args.workdir)
        except (FileNotFoundError, RuntimeError) as exc:
            print(f"skip {repo.name}: {exc}", file=sys.stderr)
            continue
        per_op: Counter[str] = Counter()
        baseline: dict[str, Counter[tuple[str, str, str]]] = {}
        importers: dict[str, list[str]] | None = None
        silenced: bool | None = None
        for path in triage.python_files(checkout, repo.paths):
            rel = path.relative_to(checkout.resolve()).as_posix()
            original = path.read_bytes()
            try:
                text = original.decode("utf-8")
            except UnicodeDecodeError:
                continue
            for site in sites(text, args.operator or None):
                if per_op[site.operator] >= args.max_sites or not counts(site.rule, text, rel):
                    continue
                if site.operator == "unguard-print" and prints_only(text, site.line):
                    if silenced is None:
                        silenced = print_silenced(checkout, repo.paths)
                    if silenced:
                        continue  # `print` prints on rank 0 only in this project: no bug
                if site.operator == "drop-destroy" and unused_holder(
                    checkout, repo.paths, text, site.line
                ):
                    continue  # a destroy in a helper no run calls: removing it is no bug
                per_op[site.operator] += 1
                if importers is None:
                    root = checkout.resolve()
                    importers = importer_map(
                        root,
                        [
                            p.relative_to(root).as_posix()
                            for p in triage.python_files(checkout, repo.paths)
                        ],
                    )
                files = neighbourhood(checkout.resolve(), rel, text, importers)
                if rel not in baseline:
                    baseline[rel] = messages(checkout, files)
                try:
                    path.write_text(site.text, encoding="utf-8")
                    after = messages(checkout, files, site.rule)
                finally:
                    path.write_bytes(original)
                hit = found_new(baseline[rel], after, site.rule)
                rows.append(
                    {
                        "repo": repo.name,
                        "path": rel,
                        "line": site.line,
                        "operator": site.operator,
                        "rule": site.rule,
                        "found": hit,
                        "note": site.note,
                    }
                )
                if args.list:
                    print(
                        f"{'found' if hit else 'MISS '} {site.operator:30} {repo.name} {rel}:{site.line} {site.note}",
                        flush=True,
                    )
    summarize(rows)
    if args.json:
        args.json.write_text(json.dumps({"sites": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
