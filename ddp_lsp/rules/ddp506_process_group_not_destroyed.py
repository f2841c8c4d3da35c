"""DDP506 process-group-not-destroyed.

## What it does
Finds a worker function (one that goes on to train: a loop, a DDP wrap, a training call) that
initialises a process group, directly or through a same-file set-up helper, when nothing in the
file ever destroys it: no `dist.destroy_process_group()` in the function,
in a same-file helper (`cleanup()`), or registered with `atexit`.

## Why is this bad?
A process group holds NCCL communicators, their CUDA streams and a TCP store. Left to the
interpreter's exit, their destructors run in an arbitrary order: PyTorch warns
("process group has NOT been destroyed before we destruct ProcessGroupNCCL"), outstanding work
can hang the exit, and on some versions the job only ends at the NCCL timeout. Destroying the
group when the worker is done releases everything in order.

## Example
```python
def main():
    dist.init_process_group("nccl")
    train(model, loader)
```

## Use instead
```python
def main():
    dist.init_process_group("nccl")
    train(model, loader)
    dist.destroy_process_group()
```

## Fix
Adds `dist.destroy_process_group()` after the worker's last statement (before a final
`return`), spelled with the file's own import of `torch.distributed`. When the group is
initialised only on one branch (`if args.distributed:`), the call is guarded with
`if dist.is_initialized():`. A group started through a same-file set-up helper (`setup()`,
`init_distributed_mode(args)`) is reported where the worker calls the helper, and its destroy
is guarded with `if dist.is_initialized():` too (the helper may skip the initialisation). No
fix in methods or set-up-like functions (`setup_ddp()`, `build_trainer()`: the run ends
elsewhere), nor when the function returns early (the call would be skipped on those paths: a
`try`/`finally` is the right shape there, and a larger edit than a quick fix should make).

## Known false positives
Not reported: a destroy anywhere in the function (in a `finally`, under `if ddp:`), a same-file
function that destroys the group (`setup()` / `cleanup()` helpers called from `main`), a file
that imports `destroy_process_group` by name and uses it, or that imports `atexit`, and
accelerate / Lightning (they own the group), and a set-up helper that only initialises the
group and does no work after it (its callers are checked instead), and tests (`test_*`,
`setUp` / `setUpClass`, methods of a `Test*` class: the test runner owns each test process). A destroy at module level
(`if __name__ == "__main__": main(); dist.destroy_process_group()`) counts too. A group
initialised at the top level of a script (the tutorial shape, directly or through a same-file
`setup()`) is reported when the file destroys it nowhere (no fix: the end of the script may sit
in another chunk).

## References
- https://pytorch.org/docs/stable/distributed.html#shutdown
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import chunktext, spelling
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _patterns as patterns

_WORK = re.compile(r"train|fit|run|loop|epoch|evaluate|validate|main|worker", re.I)
# Functions that prepare a run for their caller: destroying the group at their end would end
# it before the training starts.
_SETUP = re.compile(r"setup|init|prepare|build|configure|create|make|wrap|get_", re.I)


class ProcessGroupNotDestroyed(Rule):
    meta = RuleMeta(
        id="DDP506",
        name="process-group-not-destroyed",
        severity=Severity.INFORMATION,
        summary="A worker initialises a process group and never destroys it.",
        fix=FixAvailability.SOMETIMES,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        starts = [c for c in ctx.calls() if _starts_group(ctx, c)]
        if not starts or _file_destroys(ctx):
            return
        done: set[int] = set()
        module_reported = False
        for call in starts:
            fn = ctx.enclosing_function(call)
            if fn is None:
                # One finding per script, at its first start: the branches of
                # `if cuda: init("nccl") elif mps: ... else: init("gloo")` are one process group.
                if not module_reported and _module_level_start(ctx, call):
                    module_reported = True
                    # A script's top level (the tutorial shape): the script is the worker,
                    # and the file destroys the group nowhere (checked above, in any chunk).
                    destroy, _ = spelling.spell(ctx.facts, known_names.DESTROY_PROCESS_GROUP)
                    yield ctx.finding(
                        self,
                        call,
                        "the script initialises a process group at module level and never "
                        "destroys it: PyTorch warns at exit and teardown may hang; call "
                        f"`{destroy}()` at the end of the script",
                    )
                continue
            if id(fn) in done:
                continue
            if _test_code(ctx, fn):
                continue  # the test runner owns each test process and its teardown
            if not _is_worker(ctx, fn, call):
                continue  # a set-up helper: its callers are checked where they call it
            done.add(id(fn))
            if _destroys_in(ctx, fn):
                continue
            fixes = []
            fix = _fix(ctx, fn, call)
            if fix is not None:
                fixes.append(fix)
            destroy, _ = spelling.spell(ctx.facts, known_names.DESTROY_PROCESS_GROUP)
            how = (
                "initialises a process group"
                if ctx.call_qualname(call) == known_names.INIT_PROCESS_GROUP
                else f"starts a process group through `{chunktext.segment(ctx.chunk, call.func)}`"
            )
            yield ctx.finding(
                self,
                call,
                f"`{fn.name}` {how} that is never destroyed: PyTorch warns at exit and "
                f"teardown may hang; call `{destroy}()` when the worker is done",
                fixes=fixes,
            )


_TEST_HOOKS = frozenset(
    {"setUp", "setUpClass", "setUpModule", "asyncSetUp", "setup_method", "setup_class"}
)


def _test_code(ctx: ChunkContext, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A test or a test's set-up (``test_*``, ``setUp``/``setUpClass``, ``setup_method``, a
    method of a ``Test*``/``*Test`` class): a multi-process test runner spawns a process per
    test and tears it down, and a process group shared by a test class is released by its
    own teardown or at exit on purpose."""
    if fn.name.startswith("test") or fn.name in _TEST_HOOKS:
        return True
    cls = ctx.parent(fn)
    return isinstance(cls, ast.ClassDef) and (
        cls.name.startswith("Test") or cls.name.endswith(("Test", "Tests"))
    )


def _starts_group(ctx: ChunkContext, call: ast.Call) -> bool:
    """``init_process_group(...)``, or a same-file helper that calls it (``setup()``)."""
    if ctx.call_qualname(call) == known_names.INIT_PROCESS_GROUP:
        return True
    return fact_model.INITS_PG in ctx.callee_props(call)


def _module_level_start(ctx: ChunkContext, call: ast.Call) -> bool:
    """``dist.init_process_group(...)`` at the top level, or a same-file set-up helper called
    there (``setup()``); not ``main()`` of a worker that starts the group itself (the worker is
    checked where it starts it)."""
    if ctx.call_qualname(call) == known_names.INIT_PROCESS_GROUP:
        return True
    name = (known_names.dotted(call.func) or "").rsplit(".", 1)[-1]
    return bool(_SETUP.search(name)) and not _WORK.search(name)


_OWNERS = framework_tables.BUILTIN.modules(framework_tables.Meaning.OWNS_PROCESS_GROUP)


def _file_destroys(ctx: ChunkContext) -> bool:
    if fact_model.DESTROYS_PG in ctx.facts.prop_set:
        return True
    for name, qual in ctx.facts.aliases.items():
        if qual == known_names.DESTROY_PROCESS_GROUP and name in ctx.facts.names_used:
            return True
        if qual == "atexit" or qual.startswith(_OWNERS):
            return True  # a framework that owns the group (the tables' owns-process-group)
    return False


def _destroys_in(ctx: ChunkContext, fn: ast.AST) -> bool:
    for node in patterns.walk_scope(fn):
        if isinstance(node, ast.Call):
            if ctx.call_qualname(node) == known_names.DESTROY_PROCESS_GROUP:
                return True
            if fact_model.DESTROYS_PG in ctx.callee_props(node):
                return True
            if any(ctx.qualname(a) == known_names.DESTROY_PROCESS_GROUP for a in node.args):
                return True  # atexit.register(dist.destroy_process_group), weakref.finalize
    return False


def _is_worker(
    ctx: ChunkContext, fn: ast.FunctionDef | ast.AsyncFunctionDef, init: ast.Call
) -> bool:
    """The function goes on to do the work after starting the group: a loop, or a call named
    for training (``train(...)``, ``trainer.fit(...)``, ``main_func(*args)``). A DDP wrap alone
    is set-up: the caller of ``setup_ddp()`` trains."""
    for node in patterns.walk_scope(fn):
        if not patterns.before(init, node):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            return True
        if isinstance(node, ast.Call):
            name = known_names.dotted(node.func) or ""
            if _WORK.search(name.rsplit(".", 1)[-1]) and not name.startswith(("dist.", "torch.")):
                return True
    return False


def _fix(
    ctx: ChunkContext, fn: ast.FunctionDef | ast.AsyncFunctionDef, init: ast.Call
) -> Fix | None:
    if _SETUP.search(fn.name) or ctx.scope(init)[1] is not None:
        return None  # a set-up function or a method: the end of the run is elsewhere
    body = fn.body
    last = body[-1]
    if not patterns.starts_own_line(ctx, body[0]) or not guards.ends_own_line(ctx, last):
        return None  # `def main(): init(); train()` or `...; other` on the last line
    for node in patterns.walk_scope(fn):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
        if isinstance(node, ast.Return) and node is not last:
            return None
    if isinstance(last, (ast.Raise, ast.Continue, ast.Break)) or not _is_worker(ctx, fn, init):
        return None
    init_stmt = ctx.statement(init)
    destroy, imports = spelling.spell(ctx.facts, known_names.DESTROY_PROCESS_GROUP)
    code = f"{destroy}()"
    direct = ctx.call_qualname(init) == known_names.INIT_PROCESS_GROUP
    if not direct or not any(init_stmt is s for s in body):
        # Initialised on one branch only, or inside a helper that may skip it: destroying an
        # absent group raises.
        check, more = spelling.spell(ctx.facts, "torch.distributed.is_initialized")
        imports = (*imports, *more)
        unit = chunktext.indent_unit(ctx.chunk, ctx.ancestors, body[0]) if len(body) else "    "
        code = f"if {check}():\n{unit}{code}"
    if isinstance(last, ast.Return):
        if not patterns.starts_own_line(ctx, last):
            return None
        edit = text_edits.insert_before(ctx, last, code)
    else:
        edit = text_edits.insert_after(ctx, last, code)
    return Fix(
        title=f"Add {destroy}() at the end of {fn.name}",
        edits=(edit,),
        safe=True,
        preferred=True,
        imports=tuple(dict.fromkeys(imports)),
    )


_HEAD = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

ProcessGroupNotDestroyed.cases = (
    Valid(
        _HEAD
        + """\
class DistributorTest(MultiProcessTestCase):
    def _init(self):
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size)

    def test_state_dict(self):
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size)
        for step in range(3):
            self.optimizer.step()


class TestGenerator:
    @classmethod
    def setUpClass(cls):
        dist.init_process_group("nccl")
        cls.trainer = train_setup()
""",
        note="tests: the test runner owns each test process and its teardown (F21)",
    ),
    Invalid(
        _HEAD
        + """\
class Runner:
    def run(self):
        «dist.init_process_group("gloo")»
        for step in range(3):
            self.optimizer.step()
""",
        note="the same worker outside a test is reported (a method: no fix)",
    ),
    Invalid(
        _HEAD
        + """\
«dist.init_process_group("gloo")»
model = DDP(torch.nn.Linear(2, 2))
for step in range(10):
    model(torch.randn(4, 2)).sum().backward()
""",
        note="module-level script (tutorial shape) that never destroys its group",
    ),
    Invalid(
        _HEAD
        + """\
if torch.cuda.is_available():
    «dist.init_process_group("nccl")»
else:
    dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(2, 2))
model(torch.randn(4, 2)).sum().backward()
""",
        note="one finding per script: the branches start the same process group",
    ),
    Valid(
        _HEAD
        + """\
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(2, 2))
for step in range(10):
    model(torch.randn(4, 2)).sum().backward()
dist.destroy_process_group()
""",
        note="module-level script that destroys its group at the end",
    ),
    Invalid(
        _HEAD
        + """\
def setup():
    dist.init_process_group("gloo")

«setup()»
model = DDP(torch.nn.Linear(2, 2))
""",
        note="module-level script starting its group through a same-file set-up helper",
    ),
    Valid(
        _HEAD
        + """\
def main():
    dist.init_process_group("gloo")
    for step in range(10):
        train_step(step)


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
""",
        note="destroyed at module level after the worker returns",
    ),
    Valid(
        _HEAD
        + """\
def main(model, loader):
    dist.init_process_group("nccl")
    try:
        for x in loader:
            model(x).sum().backward()
    finally:
        dist.destroy_process_group()
""",
        note="destroy in a finally",
    ),
    Valid(
        _HEAD
        + """\
def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)

def cleanup():
    dist.destroy_process_group()

def demo_basic(rank, world_size):
    setup(rank, world_size)
    model = DDP(torch.nn.Linear(10, 10).to(rank), device_ids=[rank])
    cleanup()
""",
        note="PyTorch DDP tutorial: setup() and cleanup() helpers",
    ),
    Valid(
        _HEAD
        + """\
import atexit

def main():
    dist.init_process_group("nccl")
    atexit.register(dist.destroy_process_group)
    run()
""",
        note="atexit.register(dist.destroy_process_group)",
    ),
    Valid(
        """\
import torch
from torch.distributed import init_process_group, destroy_process_group

def train(model, loader):
    init_process_group(backend="nccl")
    for x in loader:
        model(x).sum().backward()

if __name__ == "__main__":
    train(None, [])
    destroy_process_group()
""",
        note="destroy_process_group imported by name and called at module level",
    ),
    Valid(
        _HEAD
        + """\
def main(args, model):
    if args.distributed:
        dist.init_process_group("nccl")
    for epoch in range(args.epochs):
        model.train()
    if args.distributed:
        dist.destroy_process_group()
""",
        note="destroy under the same condition",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def main(model):
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    accelerator.end_training()
""",
        note="accelerate owns the process group",
    ),
    Valid(
        _HEAD
        + """\
import lightning as L

def main(model, dm):
    trainer = L.Trainer(accelerator="gpu", devices=8, strategy="ddp")
    trainer.fit(model, dm)
""",
        note="Lightning owns the process group",
    ),
    Invalid(
        _HEAD
        + """\
def main(model, loader, epochs):
    «dist.init_process_group("nccl")»
    model = DDP(model)
    for epoch in range(epochs):
        for x in loader:
            model(x).sum().backward()
    # all done
""",
        fixed=_HEAD
        + """\
def main(model, loader, epochs):
    dist.init_process_group("nccl")
    model = DDP(model)
    for epoch in range(epochs):
        for x in loader:
            model(x).sum().backward()
    dist.destroy_process_group()
    # all done
""",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, model):
    if args.distributed:
        «dist.init_process_group(backend="nccl")»
    train(model)
    return model
""",
        fixed=_HEAD
        + """\
def main(args, model):
    if args.distributed:
        dist.init_process_group(backend="nccl")
    train(model)
    if dist.is_initialized():
        dist.destroy_process_group()
    return model
""",
        note="conditional init: guarded destroy before the final return",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, model):
    «dist.init_process_group("nccl")»
    if args.dry_run:
        return
    train(model)
""",
        fixed=None,
        note="an early return: no fix (a try/finally is needed)",
    ),
    Valid(
        _HEAD
        + """\
def setup_ddp(model, local_rank):
    dist.init_process_group("nccl")
    return DDP(model.cuda(local_rank), device_ids=[local_rank])

class Trainer:
    def __init__(self, model):
        dist.init_process_group("nccl")
        self.model = DDP(model)
""",
        note="set-up code that wraps the model and returns: the run ends in the caller",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, loader):
        «dist.init_process_group("nccl")»
        self.model = DDP(model)
        for x in loader:
            self.model(x).sum().backward()
""",
        fixed=None,
        note="a method that trains: reported, but the end of the run is not its end",
    ),
    Valid(
        _HEAD
        + """\
def init_distributed():
    dist.init_process_group("nccl")
    return int(os.environ["LOCAL_RANK"])
""",
        note="a set-up helper alone: its callers are checked where they call it",
    ),
    Invalid(
        _HEAD
        + """\
def init_distributed():
    dist.init_process_group("nccl")
    return int(os.environ["LOCAL_RANK"])

def main(model, loader):
    local_rank = «init_distributed()»
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    for x in loader:
        model(x).sum().backward()
""",
        fixed=_HEAD
        + """\
def init_distributed():
    dist.init_process_group("nccl")
    return int(os.environ["LOCAL_RANK"])

def main(model, loader):
    local_rank = init_distributed()
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    for x in loader:
        model(x).sum().backward()
    if dist.is_initialized():
        dist.destroy_process_group()
""",
        note="the group started by a same-file set-up helper: the worker destroys it",
    ),
)
