"""DDP505 missing-set-device.

## What it does
Finds `init_process_group` with the NCCL backend (`"nccl"`, `backend="nccl"`, a variable or an
argparse option whose value is `"nccl"` (an assignment after a `raise` never runs and does not
count), a lookup by device type in a table that maps CUDA to
`"nccl"`) where the process never selects its GPU first: no
`torch.cuda.set_device(local_rank)` before it in the same function and no `device_id=`
argument.

## Why is this bad?
Until a process calls `torch.cuda.set_device`, its current CUDA device is GPU 0. NCCL
communicators, `barrier()`, `.cuda()` and every other default-device call then create a CUDA
context on GPU 0 in *every* rank: GPU 0 loses hundreds of MiB per process (out of memory with
8 ranks), and NCCL may hang or warn that it is guessing the device ("using GPU 0 to perform
barrier as devices used by this process are currently unknown").

## Example
```python
dist.init_process_group("nccl")
model = DDP(model.cuda(), device_ids=[local_rank])
```

## Use instead
```python
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(model.cuda(), device_ids=[local_rank])
```

## Fix
Inserts `torch.cuda.set_device(<local rank>)` on the line before `init_process_group`, with the
local rank the function already has (`local_rank`, `args.gpu`, the `gpu` parameter of an
`mp.spawn` worker...). Otherwise it writes `int(os.environ["LOCAL_RANK"])` and adds
`import os` (marked unsafe; not offered in files that use `mp.spawn`). `mpiexec` and `srun` do
not set `LOCAL_RANK`: in a script that reads an MPI launcher's or Slurm's variables
(`OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `SLURM_PROCID`...) or uses mpi4py, the fix reads the
launcher's local-rank variable the script already reads (`OMPI_COMM_WORLD_LOCAL_RANK`,
`MPI_LOCALRANKID`, `SLURM_LOCALID`...), or else takes the global rank the code has modulo
`torch.cuda.device_count()` (marked unsafe), or offers no fix.

## Known false positives
Not reported: the gloo or mpi backends, a backend that cannot be resolved, `device_id=`,
`set_device` before the call anywhere in the function (also in a branch), `set_device` after it
with no CUDA work in between (nanoGPT sets the device right after `init_process_group`, before
any CUDA call, which is harmless; not one on the `else`/`elif` side of the test that starts the
group, which runs only in a single-process launch), `CUDA_VISIBLE_DEVICES` set per process, a same-file helper
called before `init_process_group` that sets the device (directly or through another helper),
launches configured with one process per node or machines where preflight found one GPU
(GPU 0 is then the right one), accelerate / Lightning (they select the device), and a
module-level script (the tutorial shape) that calls `set_device` anywhere at its top level or
in a helper called there (its lines may sit in several chunks, so the order is not checked
there). A module-level script that never selects its GPU is reported.
A set-up helper that does nothing after `init_process_group` but log and return
(`def setup(): dist.init_process_group("nccl")`) is not reported where it is: NCCL
communicators start lazily, so what matters is its caller, which usually selects the GPU on
the next line. Its calls are reported instead (in the same file, or in another with the
project view) when work on the current device (`.cuda()` without an index, `.to("cuda")`, a
DDP wrap without `device_ids`, `torch.cuda.*`) runs after the call before any `set_device`,
with no call in between that may select the GPU itself (a library function, or a project
function or class whose code or callees call `set_device`: torch's own calls, builtins,
logging and project code that selects no device do not).

## References
- https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group
- https://pytorch.org/tutorials/beginner/ddp_series_multigpu.html
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext, spelling
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _device as device_rules
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _patterns as patterns

_BACKEND_OPTIONS = ("backend", "dist_backend", "dist-backend", "ddp_backend", "ddp-backend")


class MissingSetDevice(Rule):
    meta = RuleMeta(
        id="DDP505",
        name="missing-set-device",
        severity=Severity.WARNING,
        summary="NCCL process group initialised before torch.cuda.set_device(local_rank).",
        fix=FixAvailability.SOMETIMES,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        if device_rules.one_gpu_per_node(ctx):
            return
        for call in ctx.calls_to(known_names.INIT_PROCESS_GROUP):
            if any(kw.arg == "device_id" or kw.arg is None for kw in call.keywords):
                continue
            root = patterns.scope_root(ctx, call)
            if not _is_nccl(ctx, call, root):
                continue
            stmt = ctx.statement(call)
            if root is ctx.module_node and fact_model.SETS_DEVICE in ctx.facts.props(
                fact_model.MODULE
            ):
                # A script's top level (the tutorial shape): its lines may sit in other chunks,
                # so order is not known; a `set_device` anywhere at the top level (or in a
                # helper called there) counts as selecting the GPU.
                continue
            if _device_selected(ctx, root, call, stmt) or _setup_helper(ctx, root, stmt):
                continue
            if guards.one_process_setup(ctx, call):
                continue  # `world_size=1`: one process, GPU 0 is its GPU
            fixes = []
            rank = device_rules.local_rank_text(ctx, stmt)
            if rank is not None and not rank.from_code:
                # No local rank in the code: `LOCAL_RANK` exists only under torchrun-style
                # launchers; an `mpiexec` launch has its own variables.
                rank = _launcher_rank(ctx, root, stmt)
            if rank is not None and patterns.starts_own_line(ctx, stmt):
                spelled, imports = spelling.spell(ctx.facts, "torch.cuda.set_device")
                line = f"{spelled}({rank.text})"
                fixes.append(
                    Fix(
                        title=f"Insert {line} before init_process_group",
                        edits=(text_edits.insert_before(ctx, stmt, line),),
                        safe=rank.from_code,
                        preferred=True,
                        imports=tuple(dict.fromkeys((*imports, *rank.imports))),
                    )
                )
            hint = rank.text if rank is not None else "local_rank"
            yield ctx.finding(
                self,
                call,
                "NCCL process group initialised before the process selects its GPU: every "
                f"rank creates a CUDA context on GPU 0; call `torch.cuda.set_device({hint})` "
                "first (or pass `device_id=`)",
                fixes=fixes,
            )
        yield from self._helper_calls(ctx)

    def _helper_calls(self, ctx: ChunkContext) -> Iterator[Finding]:
        """Calls of a set-up helper that starts the process group (in this file, or another
        with the project view) followed by CUDA work before the device is selected: the
        helper is silent (:func:`_setup_helper`), the caller decides the device."""
        for call in ctx.calls():
            if ctx.call_qualname(call) == known_names.INIT_PROCESS_GROUP:
                continue
            props = ctx.callee_props(call)
            if fact_model.INITS_PG not in props or fact_model.SETS_DEVICE in props:
                continue
            root = patterns.scope_root(ctx, call)
            work = _cuda_work_before_device(ctx, root, call)
            if work is None:
                continue
            helper = chunktext.segment(ctx.chunk, call.func)
            yield ctx.finding(
                self,
                call,
                f"`{helper}()` starts the process group, and `{chunktext.segment(ctx.chunk, work.func)}(...)` "
                "runs after it before the process selects its GPU: every rank creates a CUDA "
                f"context on GPU 0; call `torch.cuda.set_device(<local rank>)` before `{helper}()`",
            )


def _setup_helper(ctx: ChunkContext, root: ast.AST, stmt: ast.stmt) -> bool:
    """``init_process_group`` in a set-up helper that does nothing after it but log and return
    (``def setup(): dist.init_process_group("nccl")``): NCCL communicators start lazily, so
    what matters is whether its caller selects the GPU before any CUDA work; DDP505 asks there
    (`_helper_calls`)."""
    if root is ctx.module_node:
        return False
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Call) and patterns.before(stmt, node):
            if not any(node is n for n in tree_walk.bfs(stmt)) and not _log_call(node):
                return False
    return True


_LOG_NAMES = frozenset({"print", "info", "debug", "warning", "warn", "log"})


def _log_call(call: ast.Call) -> bool:
    return patterns.last_name(call.func) in _LOG_NAMES or (
        isinstance(call.func, ast.Attribute) and patterns.last_name(call.func.value) in _LOG_NAMES
    )


def _cuda_work_before_device(ctx: ChunkContext, root: ast.AST, call: ast.Call) -> ast.Call | None:
    """The first CUDA work after ``call`` in its scope that no ``set_device`` precedes (a
    ``set_device`` before ``call`` selects the GPU for all of it)."""
    sets = [
        n
        for n in patterns.walk_scope(root)
        if isinstance(n, ast.Call)
        and (device_rules.is_set_device(ctx, n) or fact_model.SETS_DEVICE in ctx.callee_props(n))
    ]
    if any(patterns.before(n, call) for n in sets):
        return None
    first_set = min(sets, key=patterns.order) if sets else None
    inside = {id(n) for n in tree_walk.bfs(call)}
    for node in sorted(
        (n for n in patterns.walk_scope(root) if isinstance(n, ast.Call)), key=patterns.order
    ):
        if id(node) in inside or not patterns.before(call, node):
            continue
        if first_set is not None and not patterns.before(node, first_set):
            return None
        if _current_device_work(ctx, node):
            return node
        if _may_select_device(ctx, node):
            return None  # a function of the project or a library may select it: not known
    return None


_PLAIN_CALLS = frozenset(
    {
        "print",
        "len",
        "range",
        "int",
        "str",
        "float",
        "bool",
        "dict",
        "list",
        "tuple",
        "set",
        "isinstance",
        "getattr",
        "setattr",
        "hasattr",
        "enumerate",
        "zip",
        "min",
        "max",
        "sorted",
    }
)


def _may_select_device(ctx: ChunkContext, call: ast.Call) -> bool:
    """A call between the set-up helper and the CUDA work that may select the GPU itself (a
    project or library function: torchtitan's set-up passes `device_id=`, a builder calls
    `set_device`); torch's own calls, builtins and logging do not."""
    qual = ctx.call_qualname(call) or ""
    if qual.startswith(("torch.", "os.", "logging.", "math.", "time.")):
        return False
    if patterns.last_name(call.func) in _PLAIN_CALLS or _log_call(call):
        return False
    known = _resolved_props(ctx, call)
    if known is not None:
        # A project function or class the index resolved: its properties say whether it (or
        # anything it calls) selects the device (`criterion = Loss(sigma)` does not).
        return fact_model.SETS_DEVICE in known
    return True


def _resolved_props(ctx: ChunkContext, call: ast.Call) -> frozenset[str] | None:
    """The properties of the project function (or class constructor) ``call`` reaches, when the
    project view resolved it; None when it is unknown (a library, a dynamic call)."""
    name = known_names.dotted(call.func)
    if name is None or name.startswith("self."):
        return None
    own = ctx.facts.func_props
    for q in (name, f"{name}.__init__"):
        if q in own:
            return own[q]  # a function or class of this file
    project = ctx.facts.project
    found = project.callee_props.get(name) if project is not None else None
    return found.props if found is not None else None


def _current_device_work(ctx: ChunkContext, call: ast.Call) -> bool:
    """A call that works on the current CUDA device whatever the backend: ``.cuda()`` without an
    index, ``.to("cuda")``, a DDP wrap without ``device_ids``, ``torch.cuda.*`` other than
    queries and the device selection
    (``.to(rank)`` names its GPU; a collective's device depends on the helper's backend, which
    the caller does not see)."""
    if device_rules.is_set_device(ctx, call):
        return False
    qual = ctx.call_qualname(call) or ""
    if qual.startswith("torch.cuda."):
        return device_rules.cuda_work(ctx, call)
    if qual == known_names.DDP:
        # Without `device_ids` DDP works where the module is: the current device, for a model
        # built there.
        return device_rules.arg(call, 1, "device_ids") is None
    if not isinstance(call.func, ast.Attribute) or qual.startswith("torch."):
        return False
    if call.func.attr == "cuda":
        return not call.args and not call.keywords
    if call.func.attr == "to":
        dev = device_rules.arg(call, 0, "device")
        return isinstance(dev, ast.Constant) and dev.value == "cuda"
    return False


# Variables MPI launchers (Open MPI, MVAPICH2, MPICH/Intel MPI, PMIx) and Slurm set: the
# global rank, and the rank on the node.
_MPI_GLOBAL = frozenset(
    {"OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}
)
_MPI_LOCAL = frozenset(
    {
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "PALS_LOCAL_RANKID",
        "SLURM_LOCALID",
    }
)


def _launcher_rank(
    ctx: ChunkContext, root: ast.AST, stmt: ast.stmt
) -> device_rules.RankText | None:
    """The local rank as the script's launcher gives it, when the code has no variable for it.

    A script that reads an MPI launcher's (or Slurm's) variables is started by `mpiexec` /
    `srun`, which do not set ``LOCAL_RANK``: read the launcher's local-rank variable when the
    script reads one, else its global rank modulo the node's GPU count (ranks are placed node
    by node), else nothing. Any other script keeps the ``LOCAL_RANK`` fallback. Never safe: the
    variable the fix reads is a guess about how the job is started."""
    strings = {
        n.value
        for n in tree_walk.bfs(root)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) < 40
    }
    mpi4py = any(q.startswith("mpi4py") for q in ctx.facts.aliases.values())
    local = sorted(strings & _MPI_LOCAL)
    if "LOCAL_RANK" in strings or not (local or mpi4py or strings & _MPI_GLOBAL):
        return device_rules.RankText(device_rules.LOCAL_ENV, ("import os",), from_code=False)
    if local:
        return device_rules.RankText(
            f'int(os.environ["{local[0]}"])', ("import os",), from_code=False
        )
    rank = device_rules.global_rank_text(ctx, stmt)
    if not rank.from_code:
        return None
    count, _ = spelling.spell(ctx.facts, "torch.cuda.device_count")
    return device_rules.RankText(f"{rank.text} % {count}()", rank.imports, from_code=False)


def _backend_value(ctx: ChunkContext, expr: ast.AST, root: ast.AST, depth: int = 0) -> str | None:
    """The backend string, resolved through assignments and argparse defaults ("" unknown)."""
    if depth > 3:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value.lower()
    if isinstance(expr, ast.IfExp):
        # `"nccl" if torch.cuda.is_available() else "gloo"`: NCCL wherever there are GPUs.
        a = _backend_value(ctx, expr.body, root, depth + 1)
        b = _backend_value(ctx, expr.orelse, root, depth + 1)
        if a is not None and "nccl" in a or b is not None and "nccl" in b:
            return "nccl"
        return None
    if isinstance(expr, ast.Name):
        value = guards.assigned_value(ctx, expr.id, root, expr, live=True)
        if value is None and root is not ctx.module_node:
            value = guards.assigned_value(ctx, expr.id, ctx.module_node, expr, live=True)
        return None if value is None else _backend_value(ctx, value, root, depth + 1)
    table = _backend_table(ctx, expr, root)
    if table is not None:
        # `{"cuda": "nccl", "xpu": "ccl"}.get(device_type, "gloo")`: a backend looked up by
        # device type is NCCL wherever the device is a GPU (as for the `IfExp` above).
        values = [_backend_value(ctx, v, root, depth + 1) for v in table]
        return "nccl" if any(v is not None and "nccl" in v for v in values) else None
    if isinstance(expr, ast.Attribute) and expr.attr.lower() in ("nccl", "gloo", "mpi", "ucc"):
        return expr.attr.lower()  # dist.Backend.NCCL
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        # `args.dist_backend = "nccl"` in scope, else `--dist-backend` with a default here.
        for node in patterns.walk_scope(root):
            if isinstance(node, ast.Assign) and patterns.before(node, expr):
                for t in node.targets:
                    if known_names.dotted(t) == known_names.dotted(expr):
                        return _backend_value(ctx, node.value, root, depth + 1)
        return _argparse_default(ctx, expr.attr)
    return None


def _argparse_default(ctx: ChunkContext, attr: str) -> str | None:
    for call in ctx.calls():
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        options = [
            a.value.lstrip("-").replace("-", "_")
            for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str)
        ]
        dest = next((kw.value for kw in call.keywords if kw.arg == "dest"), None)
        names = set(options)
        if isinstance(dest, ast.Constant):
            names = {str(dest.value)}
        if attr not in names or attr.replace("-", "_") not in {
            o.replace("-", "_") for o in _BACKEND_OPTIONS
        }:
            continue
        for kw in call.keywords:
            if kw.arg == "default" and isinstance(kw.value, ast.Constant):
                return str(kw.value.value).lower()
    return None


def _is_nccl(ctx: ChunkContext, call: ast.Call, root: ast.AST) -> bool:
    backend = device_rules.arg(call, 0, "backend")
    if backend is None:
        return False  # the default picks per device; unknown here
    value = _backend_value(ctx, backend, root)
    return value is not None and "nccl" in value


def _backend_table(ctx: ChunkContext, expr: ast.AST, root: ast.AST) -> list[ast.expr] | None:
    """The values a backend lookup in a dict literal can give (``table.get(key, default)``,
    ``table[key]``, the table a name in scope holds or written in place); None otherwise."""
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "get"
        and expr.args
    ):
        holder, extra = expr.func.value, list(expr.args[1:2])
    elif isinstance(expr, ast.Subscript):
        holder, extra = expr.value, []
    else:
        return None
    if isinstance(holder, ast.Name):
        value = guards.assigned_value(ctx, holder.id, root, expr)
        if value is None and root is not ctx.module_node:
            value = guards.assigned_value(ctx, holder.id, ctx.module_node, expr)
        holder = value if value is not None else holder
    if not isinstance(holder, ast.Dict):
        return None
    return [v for v in holder.values if v is not None] + extra


def _exclusive(ctx: ChunkContext, node: ast.AST, init: ast.Call) -> bool:
    """``node`` runs only where ``init`` does not: it sits in the ``else``/``elif`` of a test
    that guards ``init`` (``if args.distributed: init(...)`` ... ``elif args.gpu is not None:
    torch.cuda.set_device(args.gpu)``, the single-GPU branch of a later chain on the same
    test)."""
    tests: set[str] = set()
    child: ast.AST = ctx.statement(init)
    for a in ctx.ancestors(child):
        if isinstance(a, ast.If) and any(child is s for s in a.body):
            tests.add(ast.dump(a.test))
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        child = a
    if not tests:
        return False
    child = ctx.statement(node)
    for a in ctx.ancestors(child):
        if (
            isinstance(a, ast.If)
            and any(child is s for s in a.orelse)
            and ast.dump(a.test) in tests
        ):
            return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        child = a
    return False


def _device_selected(ctx: ChunkContext, root: ast.AST, init: ast.Call, stmt: ast.stmt) -> bool:
    """``set_device`` before ``init`` (or after it, before any CUDA work), ``CUDA_VISIBLE_DEVICES``
    set in the scope, or a same-file helper called first that sets the device."""
    later: list[ast.Call] = []
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.slice, ast.Constant) and node.slice.value == "CUDA_VISIBLE_DEVICES":
                return True
        if not isinstance(node, ast.Call):
            continue
        if device_rules.is_set_device(ctx, node):
            if patterns.before(node, init):
                return True
            if not _exclusive(ctx, node, init):
                later.append(node)
        elif fact_model.SETS_DEVICE in ctx.callee_props(node):
            if patterns.before(node, init):
                return True  # a same-file helper (or one it calls) sets the device first
            later.append(node)  # or right after the group starts (a training `main(cfg)`)
    if not later:
        # No selection at all: harmless when the first CUDA work after the group names its GPU
        # (`dist.barrier(device_ids=[rank])`: NCCL communicators start lazily, on that device).
        work = [
            n
            for n in patterns.walk_scope(root)
            if isinstance(n, ast.Call)
            and n is not init
            and patterns.before(init, n)
            and device_rules.cuda_work(ctx, n)
        ]
        first = min(work, key=patterns.order) if work else None
        return (
            first is not None
            and patterns.last_name(first.func) == "barrier"
            and any(kw.arg == "device_ids" for kw in first.keywords)
        )
    first_set = min(later, key=patterns.order)
    for node in patterns.walk_scope(root):
        if (
            isinstance(node, ast.Call)
            and node is not init
            and patterns.before(init, node)
            and patterns.before(node, first_set)
            and device_rules.cuda_work(ctx, node)
            and not any(node is n for n in tree_walk.bfs(first_set))
        ):
            return False
    return True


_HEAD = """\
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

MissingSetDevice.cases = (
    Invalid(
        _HEAD
        + """\
def bring_up():
    if torch.cuda.is_available():
        chosen = "nccl"
    else:
        raise RuntimeError("no GPU")
        chosen = "gloo"
    «dist.init_process_group(backend=chosen)»
    return torch.zeros(1).cuda()
""",
        fixed=_HEAD
        + """\
def bring_up():
    if torch.cuda.is_available():
        chosen = "nccl"
    else:
        raise RuntimeError("no GPU")
        chosen = "gloo"
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=chosen)
    return torch.zeros(1).cuda()
""",
        note="an assignment after a raise never runs: the backend is NCCL",
    ),
    Invalid(
        _HEAD
        + """\
def start_group():
    dist.init_process_group("nccl")


class Smoothing:
    def __init__(self, eps):
        self.eps = eps


def run(net, eps):
    «start_group()»
    smooth = Smoothing(eps)
    net = net.cuda()
    return DDP(net), smooth
""",
        note="a class of the project that selects no device between the set-up helper and the "
        "CUDA work: the GPU is still unselected there",
    ),
    Invalid(
        _HEAD
        + """\
def worker(dev_index, cfg):
    if cfg.multi:
        «dist.init_process_group(backend="nccl", rank=cfg.rank, world_size=cfg.world)»
    elif dev_index is not None:
        torch.cuda.set_device(dev_index)
    net = torch.nn.Linear(8, 8).cuda(dev_index)
    if cfg.multi:
        net = DDP(net, device_ids=[dev_index])
    for _ in range(cfg.steps):
        net(torch.randn(4, 8).cuda(dev_index)).sum().backward()
""",
        fixed=_HEAD
        + """\
def worker(dev_index, cfg):
    if cfg.multi:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend="nccl", rank=cfg.rank, world_size=cfg.world)
    elif dev_index is not None:
        torch.cuda.set_device(dev_index)
    net = torch.nn.Linear(8, 8).cuda(dev_index)
    if cfg.multi:
        net = DDP(net, device_ids=[dev_index])
    for _ in range(cfg.steps):
        net(torch.randn(4, 8).cuda(dev_index)).sum().backward()
""",
        note="the only set_device is on the single-process side of the test that starts the "
        "group: it never runs in a rank",
    ),
    Invalid(
        _HEAD
        + """\
def start(kind="cuda", backend=None):
    if backend is None:
        by_kind = {"cuda": "nccl", "cpu": "gloo"}
        backend = by_kind.get(kind, "gloo")
    «dist.init_process_group(backend=backend)»
    x = torch.ones(1, device=kind)
    dist.all_reduce(x)
    return x
""",
        fixed=_HEAD
        + """\
def start(kind="cuda", backend=None):
    if backend is None:
        by_kind = {"cuda": "nccl", "cpu": "gloo"}
        backend = by_kind.get(kind, "gloo")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=backend)
    x = torch.ones(1, device=kind)
    dist.all_reduce(x)
    return x
""",
        note="a backend looked up by device type is NCCL on a GPU",
    ),
    Valid(
        _HEAD
        + """\
def setup():
    dist.init_process_group("nccl")
    print("process group ready")


def main(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    setup()
    torch.cuda.set_device(local_rank)
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    return model
""",
        note="a set-up helper that only starts the group; its caller selects the GPU before "
        "any CUDA work (F20: NCCL communicators start lazily)",
    ),
    Valid(
        _HEAD
        + """\
def setup():
    dist.init_process_group("nccl")


def main(model, cfg):
    setup()
    engine = build_engine(cfg)
    torch.cuda.empty_cache()
    return engine.run(model.cuda())
""",
        note="a project function called between the set-up and the CUDA work may select the "
        "GPU itself (torchtitan's set-up passes device_id=): not known, not reported",
    ),
    Invalid(
        _HEAD
        + """\
def setup():
    dist.init_process_group("nccl")


def main(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    «setup()»
    model = model.cuda()
    torch.cuda.set_device(local_rank)
    return DDP(model, device_ids=[local_rank])
""",
        note="the caller works on the current device before selecting its GPU: reported at "
        "the helper's call",
    ),
    Valid(
        _HEAD
        + """\
def select_gpu():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def train(cfg):
    select_gpu()
    return torch.nn.Linear(2, 2).cuda()


def train_cmd(cfg):
    dist.init_process_group(backend="nccl")
    print("group ready")
    train(cfg)
""",
        note="the group starts, then the training function it calls selects the GPU before any "
        "CUDA work (F20)",
    ),
    Valid(
        _HEAD
        + """\
def check_connectivity(rank, world_size, url):
    dist.init_process_group("nccl", init_method=url, rank=rank, world_size=world_size)
    dist.barrier(device_ids=[rank])


class TraceTest:
    def setUp(self):
        dist.init_process_group("nccl", init_method="tcp://localhost:12357", world_size=1, rank=0)
""",
        note="the first CUDA work names its GPU; a world of one process (GPU 0 is its GPU)",
    ),
    Invalid(
        _HEAD
        + """\
def setup(local_rank):
    «dist.init_process_group("nccl")»
    dist.barrier()
    torch.cuda.set_device(local_rank)
""",
        fixed=_HEAD
        + """\
def setup(local_rank):
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    dist.barrier()
    torch.cuda.set_device(local_rank)
""",
        note="a helper that does CUDA work after starting the group is reported where it is",
    ),
    Invalid(
        _HEAD
        + """\
def setup():
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world_size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    «dist.init_process_group("nccl", rank=rank, world_size=world_size)»
    dist.barrier()
""",
        fixed=_HEAD
        + """\
def setup():
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world_size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    dist.barrier()
""",
        note="mpiexec sets no LOCAL_RANK: the global rank the script has, per node",
    ),
    Invalid(
        _HEAD
        + """\
def setup():
    node_slot = int(os.environ["SLURM_LOCALID"])
    print("slot", node_slot)
    «dist.init_process_group("nccl", rank=int(os.environ["SLURM_PROCID"]), world_size=8)»
    dist.barrier()
""",
        fixed=_HEAD
        + """\
def setup():
    node_slot = int(os.environ["SLURM_LOCALID"])
    print("slot", node_slot)
    torch.cuda.set_device(int(os.environ["SLURM_LOCALID"]))
    dist.init_process_group("nccl", rank=int(os.environ["SLURM_PROCID"]), world_size=8)
    dist.barrier()
""",
        note="srun: the local-rank variable the script reads",
    ),
    Invalid(
        _HEAD
        + """\
from mpi4py import MPI


def setup():
    comm = MPI.COMM_WORLD
    «dist.init_process_group("nccl", rank=comm.Get_rank(), world_size=comm.Get_size())»
    dist.barrier()
""",
        note="mpi4py and no rank variable: no LOCAL_RANK to read, no fix",
    ),
    Valid(
        _HEAD
        + """\
def ddp_setup():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="nccl")
""",
        note="PyTorch's multi-GPU tutorial: set_device first",
    ),
    Valid(
        _HEAD
        + """\
def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    else:
        args.distributed = False
        return
    args.distributed = True
    torch.cuda.set_device(args.gpu)
    args.dist_backend = "nccl"
    dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    dist.barrier()
""",
        note="torchvision references / DeiT init_distributed_mode",
    ),
    Valid(
        """\
import os
import torch
from torch.distributed import init_process_group, destroy_process_group

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend="nccl")
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{ddp_local_rank}"
    torch.cuda.set_device(device)
    master_process = ddp_rank == 0
""",
        note="nanoGPT: set_device right after init, before any CUDA work",
    ),
    Valid(
        _HEAD
        + """\
def setup(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
""",
        note="gloo backend",
    ),
    Valid(
        _HEAD
        + """\
def setup(local_rank):
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
""",
        note="device_id= binds the process to its GPU",
    ),
    Valid(
        _HEAD
        + """\
def select_gpu(local_rank):
    torch.cuda.set_device(local_rank)

def main(local_rank):
    select_gpu(local_rank)
    dist.init_process_group("nccl")
""",
        note="a same-file helper called before init_process_group",
    ),
    Invalid(
        _HEAD
        + """\
def log_start(local_rank):
    print("starting", local_rank)

def main(local_rank):
    log_start(local_rank)
    «dist.init_process_group("nccl")»
    model = torch.nn.Linear(2, 2).cuda()
""",
        fixed=_HEAD
        + """\
def log_start(local_rank):
    print("starting", local_rank)

def main(local_rank):
    log_start(local_rank)
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = torch.nn.Linear(2, 2).cuda()
""",
        note="a helper called first that does not set the device does not count",
    ),
    Valid(
        _HEAD
        + """\
def _distributed_worker(local_rank, main_func, world_size, global_rank, dist_url, has_gpu):
    dist.init_process_group(
        backend="NCCL" if has_gpu else "GLOO", init_method=dist_url, world_size=world_size,
        rank=global_rank,
    )
    if has_gpu:
        torch.cuda.set_device(local_rank)
    main_func()
""",
        note="detectron2 launch: set_device after init, before any CUDA work",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def main(model):
    accelerator = Accelerator()
    model = accelerator.prepare(model)
""",
        note="accelerate selects the device itself",
    ),
    Valid(
        _HEAD
        + """\
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
""",
        note="a script's module-level set-up (its lines may be split across chunks)",
    ),
    Valid(
        _HEAD
        + """\
dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])

def pick(local_rank):
    torch.cuda.set_device(local_rank)

pick(local_rank)
""",
        note="a module-level script selecting its GPU through a helper, after the group",
    ),
    Invalid(
        _HEAD
        + """\
local_rank = int(os.environ["LOCAL_RANK"])
«dist.init_process_group("nccl")»
model = DDP(torch.nn.Linear(2, 2).cuda(local_rank), device_ids=[local_rank])
for step in range(10):
    model(torch.randn(4, 2).cuda(local_rank)).sum().backward()
""",
        fixed=_HEAD
        + """\
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(2, 2).cuda(local_rank), device_ids=[local_rank])
for step in range(10):
    model(torch.randn(4, 2).cuda(local_rank)).sum().backward()
""",
        note="module-level script (tutorial shape) that never selects its GPU",
    ),
    Valid(
        _HEAD
        + """\
def setup(backend):
    dist.init_process_group(backend)
""",
        note="an unresolvable backend",
    ),
    Invalid(
        _HEAD
        + """\
def main(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    # join the job
    «dist.init_process_group("nccl")»
    model = DDP(model.cuda(), device_ids=[local_rank])
""",
        fixed=_HEAD
        + """\
def main(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    # join the job
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(model.cuda(), device_ids=[local_rank])
""",
    ),
    Invalid(
        _HEAD
        + """\
def main(model):
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--local-rank", type=int, default=0)
    args = parser.parse_args()
    «dist.init_process_group(backend=args.backend)»
    model = model.cuda()
    torch.cuda.set_device(args.local_rank)
""",
        fixed=_HEAD
        + """\
def main(model):
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--local-rank", type=int, default=0)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend=args.backend)
    model = model.cuda()
    torch.cuda.set_device(args.local_rank)
""",
        note="argparse default resolved; set_device only after CUDA work",
    ),
    Invalid(
        """\
import torch.distributed as dist

def setup():
    backend = "nccl"
    «dist.init_process_group(backend)»
    dist.barrier()
""",
        fixed="""\
import os

import torch.cuda
import torch.distributed as dist

def setup():
    backend = "nccl"
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    dist.barrier()
""",
        note="backend from a variable; LOCAL_RANK fallback with its imports",
    ),
    Invalid(
        _HEAD
        + """\
import torch.multiprocessing as mp

def worker(rank, world_size):
    «dist.init_process_group("nccl", rank=rank, world_size=world_size)»
    x = torch.ones(1).cuda(rank)

if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
""",
        fixed=None,
        note="mp.spawn worker with only a global rank name: no fix",
    ),
)
