"""DDP502 unguarded-logging.

## What it does
Finds `print(...)`, `logging.info(...)` and `logger.info(...)` of values (losses, accuracies,
steps) inside a training or evaluation loop of distributed code, when they are not under a
rank-0 guard.

## Why is this bad?
Every rank runs the loop, so every rank prints: with 64 processes each metric line appears 64
times, interleaved, and the log that people read to follow a run becomes unreadable (and
large). The values are usually rank-local too (the loss of one shard), so 63 of the 64 lines
say nothing new.

## Example
```python
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.4f}")
```

## Use instead
```python
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
```

## Fix
Wraps the logging statement (and the logging statements and checkpoint writes right next to
it, so that DDP501's fix gives the same single block) in
`if <rank> == 0:`, reusing the rank-0 test the code in scope already uses (an existing guard,
`is_main_process()`, `master_process`, `rank`, `args.rank`, `self.rank`), otherwise
`dist.get_rank() == 0` with the import it needs (marked unsafe: `get_rank()` raises where no
process group was initialised). No fix for a statement sharing its line (`if x: print(...)`).

## Known false positives
Only loops are checked: a message printed once at start-up costs N lines in total and is
often per-rank on purpose (device assignment, "rank 3 ready"), while a message in the loop
costs N lines per step. Not reported: guarded logging (any rank condition, early
`if rank != 0: return`, `@rank_zero_only`), messages that name the rank or the GPU on purpose
(`f"[rank {rank}] ..."`), constant messages, `accelerator.print`, `self.log` and other
rank-aware loggers, `logger.warning`/`error` (per-rank problems should be seen), `print` in
files that call `setup_for_distributed` / `init_distributed_mode` (DeiT, DETR, torchvision
references: they silence `print` on other ranks), and `logger.info` where the logger is
rank-aware (accelerate's `get_logger`, detectron2's `setup_logger`, mmcv's
`get_root_logger`, Swin's `create_logger`) or its level is set from the rank. Output that is
already silenced on the other ranks: `print` in a file whose functions replace
`builtins.print` / `__builtin__.print` (whatever the helper is called), or call a set-up helper
that does, in any file of the project (`setup_for_distributed(is_master)`); `logging` in a file
that sets a level or filter per rank (`basicConfig(level=INFO if rank in (-1, 0) else WARN)`,
`logger.setLevel(...)` under a rank condition, `handler.addFilter(f)` with a filter function
that compares the record's rank), itself or through such a helper; with the project view, a
file that a distributed entry point imports (directly or not) when that entry installs such
a silencer (the entry script sets up a rank-0 logging filter, the trainer module only logs);
and `print(..., force=True)`. Programs whose ranks have roles (a module that imports
`torch.distributed.rpc.init_rpc`, the tables' `assigns-roles`: a master, parameter servers and
trainers): a loop there runs on the workers of one role. A message rank 0 alone prints:
after `if not writer: continue` where `writer = None` and then `if rank == 0: writer = ...`
(the statement form of `Writer() if rank == 0 else None`). Loops that do not train: a loop
whose only backward has no optimizer step (`.step()`, `.zero_grad()`) anywhere in its
function (a profiler, a gradient check), and names inside the message itself
(`print(tokenizer.batch_decode(...))`) never make a loop a training loop.
Messages that are not per-step metrics: the last statement before
leaving (`raise`, `sys.exit(...)`, an `assert` that fails there, `break` or `return` after it
in its block: an error about a non-finite loss, "stopping early"). The single-process side of a uniform branch (the `else:`
of `if cfg.enable_fsdp:` in a module that wraps no model in DDP, of `if args.distributed:`), code
past a check that leaves unless the run is single-process (`if dist.get_world_size() != 1:
raise ...`), and a function that sets up a world of one process (`init_process_group("fake",
...)`, every parallel size the constant 1). Only loggers of the standard `logging` module imported by the file
are checked. Still reported: `print` or `logger.info` in a file checked alone whose output is
silenced by a module it neither is nor calls (the entry script installs the filter, this
`engine.py` only logs); check the project (the default of `ddp-lsp check`), or guard the call.

Distributed code only: in a project, a function that no distributed entry point reaches on
every rank and that does nothing distributed itself (an export tool, a tokenizer, a plotting
script, a helper called on rank 0 only) is single-process code, and this rule is silent there.

## References
- https://pytorch.org/docs/stable/distributed.html#torch.distributed.get_rank
- https://huggingface.co/docs/accelerate/usage_guides/logging
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _guardrun as guard_runs
from ddp_lsp.rules import _logcalls as log_calls
from ddp_lsp.rules import _patterns as patterns

_LOOP_TARGET = re.compile(r"epoch|step|iter|batch", re.IGNORECASE)
_LOOP_ITER = re.compile(r"loader|epoch|steps|iters|(^|_)(train|val|valid)(_|$)", re.IGNORECASE)
_LOOP_CALL = re.compile(
    r"train|epoch|batch|^_*(eval|evaluate|validate|validation|test)(_model|_loop|_step)?$",
    re.IGNORECASE,
)
_STEP_METHODS = frozenset({"backward", "step", "zero_grad"})
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})


class UnguardedLogging(Rule):
    meta = RuleMeta(
        id="DDP502",
        name="unguarded-logging",
        severity=Severity.HINT,
        summary="Training metrics logged by every rank: log on rank 0 only.",
        fix=FixAvailability.SOMETIMES,
        distributed_only=True,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        seen: dict[int, bool] = {}  # loop id -> is a training loop (many prints, one loop)
        patched_print: bool | None = None
        aware_logging: bool | None = None
        roles: bool | None = None
        for call in ctx.calls():
            label = log_calls.log_call(ctx, call)
            if label is None or guards.in_lambda(ctx, call):
                continue
            if not _has_value(call) or log_calls.names_process(ctx, call):
                continue
            loops = ctx.enclosing_loops(call)
            if not any(self._is_training(ctx, loop, seen) for loop in loops):
                continue
            if guards.is_guarded(ctx, call) or guards.single_process_branch(ctx, call):
                continue
            if _forced(call) or _before_exit(ctx, call):
                continue
            if roles is None:
                roles = _assigns_roles(ctx)
            if roles:
                continue
            root = patterns.scope_root(ctx, call)
            if guards.spawns_processes(ctx, root):
                continue
            if label == "print":
                if patched_print is None:
                    patched_print = _print_patched(ctx)
                if patched_print:
                    continue
            else:
                if aware_logging is None:
                    aware_logging = _logging_rank_aware(ctx)
                if aware_logging:
                    continue
            stmt = ctx.statement(call)
            cond = guards.rank_condition(ctx, stmt)
            fixes = []
            if isinstance(stmt, ast.Expr) and stmt.value is call:
                fix = guard_runs.guard_run_fix(
                    ctx, stmt, cond, f"Log on rank 0 only: wrap in `if {cond.text}:`"
                )
                if fix is not None:
                    fixes.append(fix)
            yield ctx.finding(
                self,
                call,
                f"`{label}` in the training loop runs on every rank: each line is logged once "
                f"per process; log on rank 0 only (`if {cond.text}:`)",
                fixes=fixes,
            )

    @staticmethod
    def _is_training(
        ctx: ChunkContext, loop: ast.For | ast.AsyncFor | ast.While, seen: dict[int, bool]
    ) -> bool:
        known = seen.get(id(loop))
        if known is None:
            known = seen[id(loop)] = _training_loop(ctx, loop)
        return known


def _has_value(call: ast.Call) -> bool:
    """The message carries something computed (a metric), not only constant text."""
    for arg in call.args:
        for n in tree_walk.bfs(arg):
            if isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
                return True
    return False


def _training_loop(ctx: ChunkContext, loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """A loop over batches or epochs, or one that runs backward / optimizer steps."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        if any(_LOOP_TARGET.search(n) for n in log_calls.names_in(loop.target)):
            return True
        for n in tree_walk.bfs(loop.iter):
            if isinstance(n, (ast.Name, ast.Attribute)):
                if ctx.kind(n, loop) == fact_model.LOADER:
                    return True
                name = n.id if isinstance(n, ast.Name) else n.attr
                if _LOOP_ITER.search(name):
                    return True
    backward = False
    message: set[int] = set()  # what a logging call's arguments hold says nothing of the loop
    for node in patterns.walk_scope(loop):
        if not isinstance(node, ast.Call) or id(node) in message:
            continue
        if log_calls.log_call(ctx, node) is not None:
            for a in [*node.args, *(k.value for k in node.keywords)]:
                message.update(id(n) for n in tree_walk.bfs(a))
            continue
        name = patterns.last_name(node.func) or ""
        if name == "backward" and isinstance(node.func, ast.Attribute):
            backward = True
        elif name in _STEP_METHODS and isinstance(node.func, ast.Attribute):
            return True
        elif isinstance(node.func, (ast.Name, ast.Attribute)) and _LOOP_CALL.search(name):
            return True
    # A backward without an optimizer step anywhere in its function times or checks the
    # gradients (a profiler, a gradient check), it does not train.
    return backward and _steps(patterns.scope_root(ctx, loop))


def _steps(root: ast.AST) -> bool:
    """The function (or module) steps an optimizer or zeroes gradients somewhere."""
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in ("step", "zero_grad") or name.endswith("_step"):
                return True
    return False


def _forced(call: ast.Call) -> bool:
    """``print(..., force=True)``: the keyword of a rank-0-only ``print`` (DeiT's
    ``setup_for_distributed``) that prints on every rank on purpose."""
    return any(kw.arg == "force" for kw in call.keywords)


def _exit_call(ctx: ChunkContext, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    qual = ctx.call_qualname(node) or known_names.dotted(node.func) or ""
    return qual in _EXITS


def _before_exit(ctx: ChunkContext, call: ast.Call) -> bool:
    """The message is the last word before leaving the loop or the process (an error before
    ``sys.exit(1)`` / ``raise``, a "stopping early" line before ``break``): printed once, not a
    per-step metric. The statements after it in its block (to the end of the block) decide."""
    stmt = ctx.statement(call)
    parent = ctx.parent(stmt)
    if parent is None:
        return False
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            break
    else:
        return False
    after = block[[id(s) for s in block].index(id(stmt)) + 1 :]
    for s in after:
        if isinstance(s, (ast.Raise, ast.Break, ast.Return)):
            return True
        if isinstance(s, ast.Assert) and _fails(s, parent):
            return True
        if isinstance(s, ast.Expr) and _exit_call(ctx, s.value):
            return True
    return False


def _fails(a: ast.Assert, parent: ast.AST) -> bool:
    """``assert False``, or ``assert x`` in the body of ``if not x:`` (it always fails there)."""
    if isinstance(a.test, ast.Constant):
        return not a.test.value
    test = parent.test if isinstance(parent, ast.If) and a in parent.body else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.dump(test.operand) == ast.dump(a.test)
    return False


def _chunk_calls(ctx: ChunkContext) -> Iterator[str]:
    for c in ctx.calls():
        name = patterns.last_name(c.func)
        if name is not None:
            yield name


def _assigns_roles(ctx: ChunkContext) -> bool:
    """The module imports an API that gives its ranks roles (the tables' `assigns-roles`:
    `torch.distributed.rpc.init_rpc`): its loops run on the workers of one role (a trainer,
    a parameter server), not alike on every rank."""
    apis = ctx.ranks.frameworks.calls(framework_tables.Meaning.ASSIGNS_ROLES)
    for qual in ctx.facts.aliases.values():
        if any(qual == api or qual == api.rsplit(".", 1)[0] for api in apis):
            return True
    return False


def _silenced_by_entry(ctx: ChunkContext, prop: str) -> bool:
    """A distributed entry point that imports this module installs the silencer (the project
    view: the entry script sets up a rank-0 logging filter, this `engine.py` only logs)."""
    project = ctx.facts.project
    return project is not None and prop in project.silenced


def _print_patched(ctx: ChunkContext) -> bool:
    """``print`` is silenced on other ranks by the file's setup (DeiT ``setup_for_distributed``:
    the framework tables' `silences-print` names, and the user's)."""
    if _silenced_by_entry(ctx, fact_model.SILENCES_PRINT):
        return True
    patchers = ctx.ranks.frameworks.functions(framework_tables.Meaning.SILENCES_PRINT)
    for name, qual in ctx.facts.aliases.items():
        if name in ("builtins", "__builtin__") or qual.rsplit(".", 1)[-1] in patchers:
            return True
    if any(name in patchers for name in ctx.facts.func_props):
        return True
    if any(fact_model.SILENCES_PRINT in props for props in ctx.facts.func_props.values()):
        return True  # a function of this file replaces `builtins.print`, or calls one that does
    if any(name in patchers for name in ctx.facts.names_used):
        return True
    return any(name in patchers for name in _chunk_calls(ctx))


def _logging_rank_aware(ctx: ChunkContext) -> bool:
    """The file's loggers filter by rank (a rank-aware factory, or a level set from the rank);
    the factories are the framework tables' `silences-logging` names, and the user's."""
    if _silenced_by_entry(ctx, fact_model.SILENCES_LOGGING):
        return True
    aware = ctx.ranks.frameworks.functions(framework_tables.Meaning.SILENCES_LOGGING)
    for qual in ctx.facts.aliases.values():
        if qual.rsplit(".", 1)[-1] in aware:
            return True
    if any(q.rsplit(".", 1)[-1] in aware for q in ctx.facts.func_props):
        return True
    if any(fact_model.SILENCES_LOGGING in props for props in ctx.facts.func_props.values()):
        return True  # a level or filter set per rank, here or in a set-up helper this file calls
    for c in ctx.calls():
        name = patterns.last_name(c.func)
        if name in ("basicConfig", "setLevel", "setup_logging", "set_verbosity") or (name in aware):
            if any(ctx.ranks.mentions_rank(a) for a in [*c.args, *(k.value for k in c.keywords)]):
                return True
            if name != "setup_logging" and guards.is_guarded(ctx, c):
                return True  # `if rank != 0: logger.setLevel(logging.WARNING)`
    return False


_HEAD = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

UnguardedLogging.cases = (
    # -- traps and real-world idioms: silent ---------------------------------------------------
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, rank):
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")
""",
        note="guarded",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, accelerator):
    for epoch in range(3):
        for batch in loader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} done")
        accelerator.log({"epoch": epoch}, step=epoch)
""",
        note="accelerator.print / accelerator.log print on the main process only",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, rank):
    for epoch in range(3):
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        print(f"[rank {rank}] epoch {epoch} loss {loss.item()}")
        print(f"[rank{dist.get_rank()}] samples seen: {len(loader)}")
""",
        note="messages that name the rank are per-rank on purpose",
    ),
    Valid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, gpu_id):
        self.gpu_id = gpu_id
        self.model = DDP(model, device_ids=[gpu_id])

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            print(f"[GPU{self.gpu_id}] starting epoch {epoch}")
            self._run_epoch(epoch)
""",
        note="PyTorch DDP tutorial multigpu.py tags the GPU on purpose",
    ),
    Valid(
        _HEAD
        + """\
def main(args, model):
    print(f"Start training on {torch.cuda.device_count()} GPUs")
    print(args)
    for k, v in sorted(vars(args).items()):
        print(f"{k}: {v}")
""",
        note="start-up messages outside training loops",
    ),
    Valid(
        _HEAD
        + """\
import utils

def main(args, model, data_loader_train, optimizer):
    utils.init_distributed_mode(args)
    for epoch in range(args.start_epoch, args.epochs):
        train_stats = train_one_epoch(model, data_loader_train, optimizer, epoch)
        print(f"Accuracy of the network: {train_stats['acc1']:.1f}%")
""",
        note="DeiT/torchvision references: init_distributed_mode silences print on other ranks",
    ),
    Valid(
        _HEAD
        + """\
master_process = int(os.environ.get("RANK", 0)) == 0
while True:
    loss = train_step()
    if iter_num % log_interval == 0 and master_process:
        print(f"iter {iter_num}: loss {loss:.4f}")
    iter_num += 1
""",
        note="nanoGPT: master_process in the logging condition",
    ),
    Valid(
        _HEAD
        + """\
from accelerate.logging import get_logger

logger = get_logger(__name__)

def train(model, loader, optimizer):
    for step, batch in enumerate(loader):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        logger.info(f"step {step} loss {loss.item()}")
""",
        note="accelerate's get_logger logs on the main process only",
    ),
    Valid(
        _HEAD
        + """\
import logging

logger = logging.getLogger(__name__)

def train(model, loader, optimizer, rank):
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARN)
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        logger.info("step %d loss %.4f", step, loss.item())
        logger.warning("loss is %s", loss.item())
""",
        note="level set from the rank; warnings are per-rank on purpose",
    ),
    Valid(
        _HEAD
        + """\
from logger import create_logger

def main(config, model, data_loader, optimizer):
    logger = create_logger(output_dir=config.OUTPUT, dist_rank=dist.get_rank())
    for idx, (samples, targets) in enumerate(data_loader):
        loss = model(samples).sum()
        loss.backward()
        optimizer.step()
        logger.info(f"Train: [{idx}/{len(data_loader)}] loss {loss.item():.4f}")
""",
        note="Swin: create_logger only adds a console handler on rank 0",
    ),
    Valid(
        _HEAD
        + """\
from utils import logger
from loguru import logger as log

def train(model, loader, optimizer):
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        logger.info(f"step {step} loss {loss.item()}")
        log.info(f"step {step} loss {loss.item()}")
""",
        note="loggers configured in other files (their rank filtering is not visible here)",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer):
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        print("-" * 40)
        print("step done", flush=True)
""",
        note="constant messages carry no metric",
    ),
    Valid(
        _HEAD
        + """\
from lightning.pytorch.utilities import rank_zero_only

@rank_zero_only
def log_metrics(history):
    for epoch, loss in enumerate(history):
        print(f"epoch {epoch} loss {loss}")

def train(model, loader, optimizer, rank, log_file):
    if rank != 0:
        return
    for step, batch in enumerate(loader):
        print(f"step {step}")
""",
        note="@rank_zero_only and an early return on the other ranks",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, log_file):
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        print(f"{step} {loss.item()}", file=log_file)
""",
        note="print into a file handle the script opened (often per rank)",
    ),
    Valid(
        """\
def train(model, loader, optimizer):
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item()}")
""",
        distributed=False,
        note="single-process code",
    ),
    Valid(
        _HEAD
        + """\
import builtins
import sys

def quiet_other_ranks(is_master):
    plain = builtins.print

    def gated(*args, force=False, **kw):
        if is_master or force:
            plain(*args, **kw)

    builtins.print = gated

def train(model, loader, optimizer, rank):
    quiet_other_ranks(rank == 0)
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item()}")
""",
        note="builtins.print replaced on the other ranks (by what the helper does, any name)",
    ),
    Valid(
        _HEAD
        + """\
import logging
import math
import sys

logger = logging.getLogger(__name__)

def setup(rank):
    if rank != 0:
        logging.getLogger().setLevel(logging.WARNING)

def train(model, loader, optimizer, rank, max_steps):
    setup(rank)
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        if not torch.isfinite(loss):
            print(f"Loss is {loss.item()}, stopping training", force=True)
            print(f"bad batch {batch}")
            sys.exit(1)
        if not math.isfinite(loss.item()):
            print(f"Loss is {loss.item()}")
            assert math.isfinite(loss.item())
        loss.backward()
        optimizer.step()
        logger.info("step %d loss %.4f", step, loss.item())
        if step >= max_steps:
            print(f"stopping early at step {step}")
            break
""",
        note="a level set per rank in a set-up helper; error and stop messages before exiting",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, cfg, rank):
    for epoch in range(cfg.epochs):
        for batch in loader:
            loss = model(batch).sum()
            loss.backward()
            optimizer.step()
        if cfg.enable_fsdp:
            if rank == 0:
                print(f"epoch {epoch} loss {loss.item()}")
        else:
            print(f"epoch {epoch} loss {loss.item()}")
""",
        note="the single-process side of `if cfg.enable_fsdp:`",
    ),
    Valid(
        _HEAD
        + """\
import logging
import os

log = logging.getLogger(__name__)

def configure_logging():
    handler = logging.StreamHandler()

    def main_rank_only(record):
        if record.levelno > logging.INFO:
            return True
        return getattr(record, "global_rank", 0) == 0

    def annotate(record):
        record.global_rank = int(os.environ.get("RANK", 0))
        return True

    handler.addFilter(annotate)
    handler.addFilter(main_rank_only)
    logging.basicConfig(handlers=[handler], level=logging.INFO)

def train(model, loader, optimizer):
    configure_logging()
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        log.info("step %d loss %.4f", step, loss.item())
""",
        note="a handler filter defined by a rank test drops the other ranks' INFO records",
    ),
    Valid(
        _HEAD
        + """\
import os

def train(envs, agent, optimizer, iterations):
    local_rank = int(os.getenv("LOCAL_RANK", "0"))
    writer = None
    if local_rank == 0:
        writer = make_writer("runs")
    for iteration in range(iterations):
        for step in range(128):
            reward = envs.step(agent(step))
            if not writer:
                continue
            print(f"step {step} reward {reward}")
            writer.add_scalar("reward", reward, step)
        optimizer.step()
""",
        note="an object made in a rank-0 branch (None before it): `if not writer: continue`",
    ),
    Valid(
        _HEAD
        + """\
import time

def profile(x, ops, n=10):
    for m in ops:
        start = time.time()
        for _ in range(n):
            y = m(x)
            y.sum().backward()
        print(f"{type(m).__name__}: {(time.time() - start) / n:.4f} s per forward+backward")
""",
        note="a backward without any optimizer step in its function: a profiler, not training",
    ),
    Valid(
        _HEAD
        + """\
def filter_samples(seqs, prompts, tokenizer, lengths):
    kept = []
    for i in range(len(seqs)):
        if lengths[i] <= 1:
            print(f"dropping {tokenizer.batch_decode(prompts[i:i + 1])}")
        else:
            kept.append(seqs[i])
    return kept
""",
        note="a training-like name only inside the message (`batch_decode`) makes no training loop",
    ),
    Valid(
        _HEAD
        + """\
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

def run_trainer(model, opt, batches):
    for epoch in range(10):
        for x, y in batches:
            with dist_autograd.context() as ctx_id:
                loss = model(x, y)
                dist_autograd.backward(ctx_id, [loss])
                opt.step(ctx_id)
        print(f"epoch {epoch} loss {loss.item()}")

def run_worker(rank, world_size):
    if rank == 1:
        rpc.init_rpc("trainer", rank=rank, world_size=world_size)
        run_trainer(build(), make_opt(), data())
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size)
    rpc.shutdown()
""",
        note="an RPC program: its ranks have roles (the tables' `assigns-roles`), one trains",
    ),
    # -- findings --------------------------------------------------------------------------------
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, rank):
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            «print(f"step {step} loss {loss.item():.4f}")»  # progress
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, rank):
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}")  # progress
""",
        note="the rank parameter is reused; comment kept",
    ),
    Invalid(
        _HEAD
        + """\
import logging

logger = logging.getLogger(__name__)

def train(model, loader, optimizer, args):
    sampler = torch.utils.data.DistributedSampler(loader.dataset, rank=args.rank)
    for epoch in range(args.epochs):
        for batch in loader:
            loss = model(batch).sum()
            loss.backward()
            optimizer.step()
        # end of epoch
        «logger.info("epoch %d loss %.3f", epoch, loss.item())»
        «print(
            f"epoch {epoch}",
            f"loss {loss.item():.3f}",
        )»
        print("=" * 20)
""",
        fixed=_HEAD
        + """\
import logging

logger = logging.getLogger(__name__)

def train(model, loader, optimizer, args):
    sampler = torch.utils.data.DistributedSampler(loader.dataset, rank=args.rank)
    for epoch in range(args.epochs):
        for batch in loader:
            loss = model(batch).sum()
            loss.backward()
            optimizer.step()
        # end of epoch
        if args.rank == 0:
            logger.info("epoch %d loss %.3f", epoch, loss.item())
            print(
                f"epoch {epoch}",
                f"loss {loss.item():.3f}",
            )
            print("=" * 20)
""",
        note="adjacent logging statements are guarded together; args.rank reused",
    ),
    Invalid(
        _HEAD
        + """\
def evaluate(model, val_loader):
    correct = 0
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
            «print("running accuracy", correct / len(val_loader.dataset))»
""",
        fixed=_HEAD
        + """\
def evaluate(model, val_loader):
    correct = 0
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
            if dist.get_rank() == 0:
                print("running accuracy", correct / len(val_loader.dataset))
""",
        note="no rank in scope: dist.get_rank() == 0",
    ),
    Invalid(
        _HEAD
        + """\
from logging import getLogger

log = getLogger()

def fit_one_pass(net, batches, opt, world_rank):
    for i, (inp, tgt) in enumerate(batches):
        err = (net(inp) - tgt).pow(2).mean()
        opt.zero_grad()
        err.backward()
        opt.step()
        if i % 20 == 0:
            «log.info("it %d mse %.5f", i, err.item())»
""",
        fixed=_HEAD
        + """\
from logging import getLogger

log = getLogger()

def fit_one_pass(net, batches, opt, world_rank):
    for i, (inp, tgt) in enumerate(batches):
        err = (net(inp) - tgt).pow(2).mean()
        opt.zero_grad()
        err.backward()
        opt.step()
        if i % 20 == 0:
            if world_rank == 0:
                log.info("it %d mse %.5f", i, err.item())
""",
        note="a root logger from `from logging import getLogger` logs on every rank too",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, rank):
    for step, batch in enumerate(loader):
        model(batch).sum().backward()
        optimizer.step()
        if step % 10 == 0: «print(f"step {step}")»
""",
        fixed=None,
        note="statement on the line of its if: no fix",
    ),
    Invalid(
        _HEAD
        + """\
import logging

def train(model, loader, optimizer, is_master):
\tfor step, batch in enumerate(loader):
\t\tloss = model(batch).sum()
\t\tloss.backward()
\t\toptimizer.step()
\t\t«logging.info("step %d: %.4f", step, loss.item())»
""",
        fixed=_HEAD
        + """\
import logging

def train(model, loader, optimizer, is_master):
\tfor step, batch in enumerate(loader):
\t\tloss = model(batch).sum()
\t\tloss.backward()
\t\toptimizer.step()
\t\tif is_master:
\t\t\tlogging.info("step %d: %.4f", step, loss.item())
""",
        note="logging.info, the is_master predicate, tab indentation",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, rank):
        self.rank = rank
        self.model = DDP(model)

    def fit(self, loader, optimizer, epochs):
        for epoch in range(epochs):
            loss = self.train_epoch(loader, optimizer)
            «print(f"epoch {epoch}: {loss:.3f}")»
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, model, rank):
        self.rank = rank
        self.model = DDP(model)

    def fit(self, loader, optimizer, epochs):
        for epoch in range(epochs):
            loss = self.train_epoch(loader, optimizer)
            if self.rank == 0:
                print(f"epoch {epoch}: {loss:.3f}")
""",
        note="self.rank",
    ),
    Invalid(
        _HEAD
        + """\
while iter_num < max_iters:
    loss = train_step()
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
    «print(f"iter {iter_num}: loss {loss:.4f}")»
    iter_num += 1
""",
        fixed=_HEAD
        + """\
while iter_num < max_iters:
    loss = train_step()
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
    if master_process:
        print(f"iter {iter_num}: loss {loss:.4f}")
    iter_num += 1
""",
        note="module-level nanoGPT-style loop: master_process reused",
    ),
    Invalid(
        _HEAD
        + """\
import logging

log = logging.getLogger(__name__)

def configure_logging(rank):
    handler = logging.StreamHandler()

    def no_debug(record):
        return record.levelno >= logging.INFO

    def tag(record):
        record.msg = f"[{rank}] {record.msg}"
        return True

    handler.addFilter(no_debug)
    handler.addFilter(tag)
    logging.basicConfig(handlers=[handler], level=logging.INFO)

def train(model, loader, optimizer, rank):
    configure_logging(rank)
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        «log.info("step %d loss %.4f", step, loss.item())»
""",
        fixed=_HEAD
        + """\
import logging

log = logging.getLogger(__name__)

def configure_logging(rank):
    handler = logging.StreamHandler()

    def no_debug(record):
        return record.levelno >= logging.INFO

    def tag(record):
        record.msg = f"[{rank}] {record.msg}"
        return True

    handler.addFilter(no_debug)
    handler.addFilter(tag)
    logging.basicConfig(handlers=[handler], level=logging.INFO)

def train(model, loader, optimizer, rank):
    configure_logging(rank)
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        if rank == 0:
            log.info("step %d loss %.4f", step, loss.item())
""",
        note="filters that drop by level or only use the rank (no rank test) silence nothing",
    ),
    Invalid(
        _HEAD
        + """\
import os

def train(envs, agent, optimizer, iterations):
    local_rank = int(os.getenv("LOCAL_RANK", "0"))
    writer = None
    if local_rank == 0:
        writer = make_writer("runs")
    else:
        writer = make_writer(f"runs/{local_rank}")
    for iteration in range(iterations):
        for step in range(128):
            reward = envs.step(agent(step))
            if not writer:
                continue
            «print(f"step {step} reward {reward}")»
        optimizer.step()
""",
        fixed=_HEAD
        + """\
import os

def train(envs, agent, optimizer, iterations):
    local_rank = int(os.getenv("LOCAL_RANK", "0"))
    writer = None
    if local_rank == 0:
        writer = make_writer("runs")
    else:
        writer = make_writer(f"runs/{local_rank}")
    for iteration in range(iterations):
        for step in range(128):
            reward = envs.step(agent(step))
            if not writer:
                continue
            if local_rank == 0:
                print(f"step {step} reward {reward}")
        optimizer.step()
""",
        note="every rank makes a writer (the other branch too): the early `continue` never runs",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, micro_batches, optimizer, rank):
    for i, mb in enumerate(micro_batches):
        loss = model(mb).sum() / len(micro_batches)
        loss.backward()
        «print(f"micro-batch {i}: {loss.item():.4f}")»
    optimizer.step()
""",
        fixed=_HEAD
        + """\
def train(model, micro_batches, optimizer, rank):
    for i, mb in enumerate(micro_batches):
        loss = model(mb).sum() / len(micro_batches)
        loss.backward()
        if rank == 0:
            print(f"micro-batch {i}: {loss.item():.4f}")
    optimizer.step()
""",
        note="a backward loop whose optimizer step follows it in the function: training",
    ),
    Invalid(
        _HEAD
        + """\
import sys

def train(model, loader, optimizer, rank):
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        «print(f"step {step} loss {loss.item()}")»
        if not torch.isfinite(loss):
            sys.exit(1)
""",
        fixed=_HEAD
        + """\
import sys

def train(model, loader, optimizer, rank):
    for step, batch in enumerate(loader):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item()}")
        if not torch.isfinite(loss):
            sys.exit(1)
""",
        note="an exit under a later condition does not make the per-step line a last word",
    ),
)
