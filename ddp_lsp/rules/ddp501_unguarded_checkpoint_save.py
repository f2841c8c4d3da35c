"""DDP501 unguarded-checkpoint-save.

## What it does
Finds checkpoint writes that run on every rank of a distributed job: `torch.save(obj, path)`,
`model.save_pretrained(dir)`, `safetensors.torch.save_file` / `save_model`, mmcv's and
mmengine's `save_checkpoint`, and `with open(path, "wb")` of a checkpoint file, when they are
not under a rank-0 guard.

## Why is this bad?
Every process of a DDP job runs the same script. An unguarded save makes all N ranks open,
truncate and write the *same* file at the same moment: on a shared file system the result is
a truncated or interleaved checkpoint that fails to load days later, and the job does N times
the I/O it needs (with 64 ranks, 64 copies of a multi-gigabyte file). DDP keeps the replicas
identical, so rank 0's copy is all you need.

## Example
```python
for epoch in range(epochs):
    train_one_epoch(model, loader, optimizer)
    torch.save(model.module.state_dict(), f"ckpt_{epoch}.pt")
```

## Use instead
```python
for epoch in range(epochs):
    train_one_epoch(model, loader, optimizer)
    if rank == 0:
        torch.save(model.module.state_dict(), f"ckpt_{epoch}.pt")
```

## Fix
Wraps the statement (the whole `with open(...)` block for file handles, together with the
logging and checkpoint writes right next to it, such as `print("saving...")`) in `if <rank> == 0:`,
reusing what the code in scope already uses: an existing rank-0 guard of the same function
(`if args.local_rank in [-1, 0]:`), a rank-0 predicate (`is_main_process()`,
`master_process`, `accelerator.is_main_process`), or a rank variable (`rank`, `global_rank`,
`args.rank`, `self.rank`). Otherwise it writes `dist.get_rank() == 0` and adds the import;
that fix is marked unsafe because `get_rank()` raises where no process group was initialised.
No fix is offered when the statement also computes a collective (an FSDP `state_dict()`,
`get_state_dict`, `consolidate_state_dict`): every rank must take part in that, so compute it
first and guard only the write. No fix either for a statement sharing its line (`if x: save`)
or one that binds names used later.

## Known false positives
Saves under any rank condition are taken as deliberate (`rank % ngpus_per_node == 0` saves
once per node) and are not reported, nor are per-rank files (the rank in the path),
`torch.save` into an `io.BytesIO`, `accelerator.save` / `fabric.save` / `xm.save`,
`trainer.save_checkpoint` and DeepSpeed's `engine.save_checkpoint` (they handle ranks
themselves and must be called on every rank), `torch.distributed.checkpoint.save` (a
collective), `save_pretrained(..., is_main_process=...)`, functions that guard themselves
(`save_on_master`) or are only called under a guard, `@rank_zero_only` functions, and code
after `mp.spawn(...)` (the parent process). A module-level save helper that writes to the
path its caller passes in (`save_checkpoint(state, filename)`), or under the directory it
passes joined with constant names (`os.path.join(out_dir, "model.pt")`, `Path(save_directory)
/ WEIGHTS_NAME`: a library's hub helper), is not reported where it saves: the caller decides
the rank, so its unguarded calls are reported instead; unless the helper also runs a collective
(a DCP save, a gathered state dict), which every rank must call: its own save is reported. With the project view
(the CLI and the server index the project; `--no-project` turns it off), so are calls of such a
helper defined in another file (`utils.save_checkpoint(state, "last.pt")`); helpers that guard
themselves (`utils.save_on_master`) are not; a function whose every caller,
in any file, calls it under a rank-0 guard (`if utils.is_main_process(): engine.export(model)`)
is not reported, and rank-0 predicates defined in other files
(`def is_leader(): return get_rank() == 0`) count as guards. Without the project view, a helper
imported from another file is not reported.

Saves that every rank makes on purpose are not reported either: a path in a temporary folder
of the process (`with TemporaryDirectory() as tmpdir`, `tempfile.mkdtemp()`: each process has
its own; not `tempfile.gettempdir()`, which they share), a path built with a function
of the rank (`f"model.{rankstr()}.pth"`, also through a file-system wrapper's
`with path_manager.open(path, "wb") as f`), a function that selects FSDP's
`LOCAL_STATE_DICT` / `SHARDED_STATE_DICT` (each rank writes its shard), and `save_pretrained`
in a module that shards its model with tensor parallelism or FSDP2 (`fully_shard`,
`parallelize_module`, `init_device_mesh`, accelerate's `ParallelismConfig`: the save gathers
DTensors, and guarding it would hang the other ranks). Nor are saves that one process makes:
functions registered with `accelerator.register_save_state_pre_hook` where every
`accelerator.save_state(...)` of the registering code is under a main-process guard (the hook
runs where `save_state` runs), and the single-process side of a uniform branch (the `else:` of
`if cfg.enable_fsdp:` / `if dist.is_initialized():`, the body of `if not args.distributed:`;
an FSDP or DeepSpeed flag counts only in a module that wraps no model in DDP), code past a
check that leaves unless the run is single-process (`if dist.get_world_size() != 1: raise
...`, `assert world_size == 1`), and a function that sets up a world of one process
(`init_process_group("fake", ...)`, `ParallelismArgs(dp=1, pp=1, tp=1)`: every parallel size
the constant 1). A file that imports only what single-process code uses too (DeepSpeed's
device abstraction, accelerate's big-model placement and device probes: the tables'
`single-process` names) is not distributed code. Caches: a write inside `with torch_distributed_zero_first(rank):` or
`accelerator.main_process_first()`, and writes of a dataset class (one with `__getitem__`),
per-sample files, or a cache built by its `__init__` or a `*cache*` method where the module
uses a zero-first block. `torch.save(*args, **kwargs)` is a save: in a forwarding helper named
like one (`save_everywhere(*args, **kwargs)`) its unguarded callers are reported.

Still reported: a save inside a method whose only caller guards it with a name not known as a
rank (the PyTorch DDP tutorial's `if self.gpu_id == 0:` is known; `gpu_id` is a default rank
name); add such a name to `rank-guard-names` to teach it.

Distributed code only: in a project, a function that no distributed entry point reaches on
every rank and that does nothing distributed itself (an export tool, a tokenizer, a plotting
script, a helper called on rank 0 only) is single-process code, and this rule is silent there.

Off by default, severity `information`: on the triage corpus of 52 public training
repositories (docs/accuracy.md) 15 of its 23 labelled findings are real (precision 0.65,
below the 0.90 every default-on rule must reach). The false alarms left are saves that only
rank 0 or one process reaches through code the analysis does not follow: a checkpoint-saver
class built on rank 0 only in a project that imports itself by a framework's name, functions
launched in a world of one process by a test helper, a helper called only on the
single-process side of a flag in another file, per-rank or per-shard paths chosen by the
caller or by the object saved. Turn it on with `extend-select = ["DDP501"]` in
`[tool.ddp-lsp]` (or `--select DDP,DDP501`; any selector more specific than `DDP` that names
it), and raise it with `severity = { DDP501 = "warning" }`.

## References
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
- https://pytorch.org/docs/stable/notes/serialization.html
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _guardrun as guard_runs
from ddp_lsp.rules import _patterns as patterns
from ddp_lsp.rules import _writes as writes


class UnguardedCheckpointSave(Rule):
    meta = RuleMeta(
        id="DDP501",
        name="unguarded-checkpoint-save",
        # Off by default and information: 0.65 precision on the triage corpus (docs/accuracy.md).
        severity=Severity.INFORMATION,
        summary="Checkpoint written by every rank at once: save on rank 0 only.",
        fix=FixAvailability.SOMETIMES,
        distributed_only=True,
        default_on=False,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        for call in ctx.calls():
            write = writes.checkpoint_write(ctx, call)
            if write is None or guards.in_lambda(ctx, call):
                continue
            if guards.is_guarded(ctx, call):
                continue
            root = patterns.scope_root(ctx, call)
            if guards.spawns_processes(ctx, root) or _pass_through_helper(ctx, call, write.dest):
                continue
            if write.dest is not None and writes.per_rank_path(ctx, write.dest, root):
                continue
            if _every_rank_on_purpose(ctx, call, root) or guards.single_process_branch(ctx, call):
                continue
            if _framework_hook(ctx, call) or _cache_write(ctx, call):
                continue
            stmt = write.stmt or ctx.statement(call)
            cond = guards.rank_condition(ctx, stmt)
            collective = writes.collective_in(ctx, stmt)
            fixes = []
            if write.fixable and collective is None:
                fix = guard_runs.guard_run_fix(
                    ctx, stmt, cond, f"Save on rank 0 only: wrap in `if {cond.text}:`"
                )
                if fix is not None:
                    fixes.append(fix)
            message = (
                f"`{write.label}` runs on every rank: all processes write the same checkpoint "
                "at once (truncated or corrupt file, N times the I/O); save on rank 0 only "
                f"(`if {cond.text}:`)"
            )
            if collective is not None:
                message += (
                    f". `{collective}` gathers across ranks, so call it on every rank first "
                    "and guard only the write"
                )
            yield ctx.finding(self, call, message, fixes=fixes, cite=(write.source,))


# Registrations of functions that a framework calls on the main process only.
_MAIN_PROCESS_HOOKS = frozenset({"register_save_state_pre_hook"})
# Context managers in which ranks take turns (the first rank writes, the others then read).
_RANK_ORDERED = re.compile(r"zero_first|main_process_first|rank_first", re.IGNORECASE)


def _every_rank_on_purpose(ctx: ChunkContext, call: ast.Call, root: ast.AST) -> bool:
    """A per-rank or collective save by design: a sharded state dict (FSDP
    ``LOCAL_STATE_DICT`` / ``SHARDED_STATE_DICT`` in the same function: each rank writes its
    shard), or ``save_pretrained`` in a module that shards its model with tensor parallelism or
    FSDP2 (the save gathers DTensors: guarding it would hang the other ranks)."""
    # Per-rank state-dict types (the tables' `saves-per-rank` names): each rank saves its shard.
    per_rank = ctx.ranks.frameworks.functions(framework_tables.Meaning.SAVES_PER_RANK)
    for node in patterns.walk_scope(root):
        if isinstance(node, ast.Attribute) and node.attr in per_rank:
            return True
    if isinstance(call.func, ast.Attribute) and call.func.attr == "save_pretrained":
        names = {q.rsplit(".", 1)[-1] for q in ctx.facts.aliases.values()}
        return not names.isdisjoint(
            ctx.ranks.frameworks.functions(framework_tables.Meaning.MAKES_DTENSORS)
        )
    return False


def _framework_hook(ctx: ChunkContext, call: ast.Call) -> bool:
    """The save is in a function registered with ``accelerator.register_save_state_pre_hook``,
    and every ``save_state(...)`` of the code that registers it runs on the main process only
    (``if accelerator.is_main_process: accelerator.save_state(path)``): accelerate calls the
    hook from ``save_state``, so it runs where that runs. An unguarded ``save_state`` (every
    rank, as DeepSpeed needs) leaves the hook's own save to be reported."""
    fn = ctx.enclosing_function(call)
    if fn is None:
        return False
    registered = False
    save_states: list[ast.Call] = []
    for c in ctx.calls():
        if not isinstance(c.func, ast.Attribute):
            continue
        if c.func.attr in _MAIN_PROCESS_HOOKS:
            registered |= any(isinstance(a, ast.Name) and a.id == fn.name for a in c.args)
        elif c.func.attr == "save_state":
            save_states.append(c)
    return registered and bool(save_states) and all(guards.is_guarded(ctx, c) for c in save_states)


def _cache_write(ctx: ChunkContext, call: ast.Call) -> bool:
    """A cache written in rank order or per sample: inside ``with torch_distributed_zero_first(
    rank):`` / ``accelerator.main_process_first()``, or by a dataset class (one that defines
    ``__getitem__``): a per-sample file (ranks read disjoint shards), or a cache its
    ``__init__`` or a ``*cache*`` method builds where the module orders the ranks with a
    zero-first block (the first rank writes, the others read)."""
    for a in ctx.ancestors(call):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            if any(_RANK_ORDERED.search(patterns.last_name(i.context_expr) or "") for i in a.items):
                return True
    qual, cls = ctx.scope(call)
    if cls is None or f"{cls}.__getitem__" not in ctx.facts.func_props:
        return False
    method = qual.rsplit(".", 1)[-1]
    if method == "__init__" or "cache" in method.lower():
        return _rank_ordered_module(ctx)
    return True


def _rank_ordered_module(ctx: ChunkContext) -> bool:
    """The module uses a zero-first context (imported, or a function of its own)."""
    names = (*ctx.facts.aliases, *ctx.facts.names_used, *ctx.facts.func_props)
    return any(_RANK_ORDERED.search(n) for n in names)


def _pass_through_helper(ctx: ChunkContext, call: ast.Call, dest: ast.expr | None) -> bool:
    """A module-level save helper writing to the path its caller passes in (the ImageNet
    example's ``save_checkpoint(state, is_best, filename)``), or under the directory it passes
    (``save_for_hf(model, save_directory)``): the caller decides the rank."""
    fn = ctx.enclosing_function(call)
    if fn is None or ctx.parent(fn) is not None or ctx.scope(call)[1] is not None:
        return False
    if not writes.SAVE_HELPER_NAME.search(fn.name):
        return False
    if writes.collective_in(ctx, fn, callees=False) is not None:
        # Every rank must call it (a DCP save, a gathered state dict, in its own code): the
        # caller cannot pick the rank, so the save inside is where the guard belongs.
        return False
    if isinstance(dest, ast.Starred):  # `torch.save(*args, **kwargs)`: all of the caller's
        vararg = fn.args.vararg
        return (
            vararg is not None and isinstance(dest.value, ast.Name) and dest.value.id == vararg.arg
        )
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    if isinstance(dest, ast.Name):
        return dest.id in params and guards.assigned_value(ctx, dest.id, fn, dest) is None
    # A path built under the directory the caller passes, with constant names only
    # (`os.path.join(out_dir, "model.pt")`, `Path(save_directory) / WEIGHTS_NAME`, the
    # parameter rebound as `save_directory = Path(save_directory)` first): the caller's too.
    if dest is None:
        return False
    root = known_names.path_root(dest)
    if root is None or root not in params:
        return False
    value = guards.assigned_value(ctx, root, fn, dest)
    return value is None or known_names.path_wrapper_of(value) == root


_HEAD = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

UnguardedCheckpointSave.cases = (
    # -- traps and real-world idioms: silent ---------------------------------------------------
    Valid(
        _HEAD
        + """\
def save_debug_snapshot(model, path):
    if dist.get_world_size() != 1:
        raise RuntimeError("debug snapshots are for single-GPU runs")
    torch.save(model.state_dict(), path)


def export_weights(model, out_dir, world_size):
    assert world_size == 1, "export runs as one process"
    torch.save(model.state_dict(), os.path.join(out_dir, "weights.pt"))
""",
        note="a helper that refuses to run in a distributed job is single-process past its "
        "check (F16)",
    ),
    Invalid(
        _HEAD
        + """\
def finish(model, path):
    if dist.get_world_size() != 1:
        print("saving on every rank")
    «torch.save(model.state_dict(), path)»
""",
        fixed=_HEAD
        + """\
def finish(model, path):
    if dist.get_world_size() != 1:
        print("saving on every rank")
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), path)
""",
        note="a world-size branch that does not leave still reaches the save on every rank",
    ),
    Valid(
        _HEAD
        + """\
def convert(src, out_dir):
    # run as `torchrun --nproc-per-node 1 convert.py`: one process
    context = ParallelContext(data_parallel_size=1, tensor_parallel_size=1, pipeline_parallel_size=1)
    model = load_sharded(src, context)
    torch.save(model.state_dict(), os.path.join(out_dir, "model.pt"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(model.config_json())
""",
        note="a function that sets up a world of one process (every parallel size 1) (F16)",
    ),
    Valid(
        """\
import torch
from deepspeed.accelerator import get_accelerator


def train(model, loader, optimizer, local_rank=-1):
    device = torch.device(get_accelerator().device_name(), max(local_rank, 0))
    model.to(device)
    for x, y in loader:
        optimizer.zero_grad()
        model(x.to(device)).sum().backward()
        optimizer.step()
    torch.save(model.state_dict(), "baseline.pt")
""",
        distributed=False,
        note="a single-GPU baseline that only imports DeepSpeed's device abstraction (the "
        "tables' `single-process` names) is not distributed code (F16)",
    ),
    Invalid(
        """\
import deepspeed
import torch
from deepspeed.accelerator import get_accelerator


def train(model, loader, args):
    engine, _, _, _ = deepspeed.initialize(args=args, model=model)
    for x, y in loader:
        engine.backward(engine(x.to(get_accelerator().device_name())).sum())
        engine.step()
    «torch.save(engine.module.state_dict(), "final.pt")»
""",
        distributed=False,
        fixed="""\
import deepspeed
import torch
from deepspeed.accelerator import get_accelerator


def train(model, loader, args):
    engine, _, _, _ = deepspeed.initialize(args=args, model=model)
    for x, y in loader:
        engine.backward(engine(x.to(get_accelerator().device_name())).sum())
        engine.step()
    if torch.distributed.get_rank() == 0:
        torch.save(engine.module.state_dict(), "final.pt")
""",
        note="the same script run through the DeepSpeed engine is distributed code",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, rank, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        if rank == 0:
            torch.save(model.module.state_dict(), f"ckpt_{epoch}.pt")
""",
        note="guarded by rank == 0",
    ),
    Valid(
        _HEAD
        + """\
def save(model, args):
    if args.local_rank in [-1, 0]:
        torch.save(model.state_dict(), os.path.join(args.output_dir, "model.bin"))
    if not dist.is_initialized() or dist.get_rank() == 0:
        model.module.save_pretrained(args.output_dir)
""",
        note="HF-style local_rank in [-1, 0], and 'not initialised or rank 0'",
    ),
    Valid(
        _HEAD
        + """\
def is_main_process():
    return dist.get_rank() == 0

def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)

def main(model, args):
    for epoch in range(args.epochs):
        save_on_master({"model": model.module.state_dict(), "epoch": epoch}, "checkpoint.pth")
""",
        note="DeiT/detectron2 save_on_master guards itself",
    ),
    Valid(
        _HEAD
        + """\
import utils

def main(args, model_without_ddp, optimizer, epoch):
    checkpoint = {"model": model_without_ddp.state_dict(), "optimizer": optimizer.state_dict()}
    utils.save_on_master(checkpoint, os.path.join(args.output_dir, f"model_{epoch}.pth"))
    utils.save_on_master(checkpoint, os.path.join(args.output_dir, "checkpoint.pth"))
""",
        note="torchvision references: utils.save_on_master from another file",
    ),
    Valid(
        _HEAD
        + """\
def save_checkpoint(state, path):
    torch.save(state, path)

def train(model, rank):
    for epoch in range(10):
        if rank == 0:
            save_checkpoint({"model": model.state_dict()}, "ckpt.pt")
""",
        note="a helper only called under a rank-0 guard",
    ),
    Valid(
        _HEAD
        + """\
import shutil

def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")

def main_worker(gpu, ngpus_per_node, args):
    for epoch in range(args.start_epoch, args.epochs):
        if not args.multiprocessing_distributed or (
            args.multiprocessing_distributed and args.rank % ngpus_per_node == 0
        ):
            save_checkpoint({"epoch": epoch + 1}, False)
""",
        note="PyTorch ImageNet example: the helper writes where its caller says; the caller guards",
    ),
    Valid(
        _HEAD
        + """\
def save(model, out_dir):
    if dist.get_rank() != 0:
        return
    torch.save(model.module.state_dict(), os.path.join(out_dir, "ckpt.pt"))
""",
        note="early return on the other ranks",
    ),
    Valid(
        _HEAD
        + """\
import sys

def export(model, is_master):
    if not is_master:
        sys.exit(0)
    torch.save(model.module.state_dict(), "export.pt")
""",
        note="the other ranks exit first",
    ),
    Valid(
        _HEAD
        + """\
ddp_rank = int(os.environ["RANK"])
master_process = ddp_rank == 0

while True:
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        if losses["val"] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses["val"]
            if iter_num > 0:
                checkpoint = {"model": raw_model.state_dict(), "iter_num": iter_num}
                torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
    iter_num += 1
""",
        note="nanoGPT: master_process in a compound condition",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def main(model, args):
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    for epoch in range(args.epochs):
        accelerator.save_state(args.output_dir)
        accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
    unwrapped_model = accelerator.unwrap_model(model)
    unwrapped_model.save_pretrained(
        args.output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save
    )
    if accelerator.is_main_process:
        tokenizer.save_pretrained(args.output_dir)
""",
        note="accelerate: save / save_state / save_pretrained(is_main_process=...) / guarded",
    ),
    Valid(
        _HEAD
        + """\
import lightning as L

def main(model, dm, model_engine, args):
    trainer = L.Trainer(strategy="ddp", devices=8)
    trainer.fit(model, dm)
    trainer.save_checkpoint("final.ckpt")
    model_engine.save_checkpoint(args.save_dir, tag=f"step{args.step}")
""",
        note="Lightning trainer.save_checkpoint and DeepSpeed save_checkpoint run on every rank",
    ),
    Valid(
        _HEAD
        + """\
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

def save(model, optimizer, step):
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=f"ckpt/{step}")
    torch.distributed.checkpoint.save({"model": model_sd}, checkpoint_id="last")
""",
        note="torch.distributed.checkpoint.save is a collective: every rank must call it",
    ),
    Valid(
        _HEAD
        + """\
def save_shards(model, optimizer, out_dir, rank):
    torch.save(optimizer.state_dict(), f"{out_dir}/optim_rank{rank}.pt")
    torch.save(torch.cuda.get_rng_state(), os.path.join(out_dir, f"rng_state_{dist.get_rank()}.pth"))
    shard_path = os.path.join(out_dir, "shard_%d.pt" % rank)
    torch.save(model.state_dict(), shard_path)
""",
        note="per-rank files: the rank is in the path on purpose",
    ),
    Valid(
        _HEAD
        + """\
import io

def broadcast_state(model):
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    payload = [buffer.getvalue()]
    dist.broadcast_object_list(payload, src=0)
""",
        note="torch.save into memory, not a file",
    ),
    Valid(
        _HEAD
        + """\
from lightning.pytorch.utilities import rank_zero_only

@rank_zero_only
def dump(model, path):
    torch.save(model.state_dict(), path)
""",
        note="@rank_zero_only",
    ),
    Valid(
        _HEAD
        + """\
import torch.multiprocessing as mp

def main():
    world_size = torch.cuda.device_count()
    mp.spawn(worker, args=(world_size,), nprocs=world_size)
    torch.save({"world_size": world_size}, "run_info.pt")
""",
        note="the launcher after mp.spawn: one parent process",
    ),
    Valid(
        _HEAD
        + """\
from transformers import Trainer

class MyTrainer(Trainer):
    def save_extra(self, output_dir):
        if self.args.should_save:
            torch.save(self.model.config, os.path.join(output_dir, "extra.bin"))
        if self.is_world_process_zero():
            torch.save(self.args, os.path.join(output_dir, "training_args.bin"))
""",
        note="Hugging Face Trainer: args.should_save and is_world_process_zero()",
    ),
    Valid(
        _HEAD
        + """\
def train(model, rank, evaluate):
    best = 0.0
    for epoch in range(10):
        acc = evaluate(model)
        save_now = rank == 0 and acc > best
        if save_now:
            torch.save(model.module.state_dict(), "best.pt")
        if rank != 0:
            pass
        else:
            torch.save(model.module.state_dict(), "last.pt")
""",
        note="a flag computed from the rank, and the else branch of rank != 0",
    ),
    Valid(
        _HEAD
        + """\
import json

def write_config(cfg, out_dir):
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(out_dir, "ckpt.pt"), "rb") as f:
        data = f.read()
""",
        note="non-checkpoint files and reads are out of scope",
    ),
    Valid(
        _HEAD
        + """\
from lightning.fabric import Fabric
import torch_xla.core.xla_model as xm

def run(fabric, state, model):
    fabric.save("ckpt/last.ckpt", state)
    xm.save(model.state_dict(), "model.pt")
""",
        note="Fabric and torch_xla save on the main process themselves",
    ),
    Valid(
        """\
import torch

def main(model):
    torch.save(model.state_dict(), "model.pt")
""",
        distributed=False,
        note="single-process code",
    ),
    # -- findings --------------------------------------------------------------------------------
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, rank, epochs):
    sampler = loader.sampler
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        # keep the latest weights
        «torch.save(model.module.state_dict(), f"ckpt_{epoch}.pt")»  # every epoch
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, rank, epochs):
    sampler = loader.sampler
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        # keep the latest weights
        if rank == 0:
            torch.save(model.module.state_dict(), f"ckpt_{epoch}.pt")  # every epoch
""",
        note="the rank parameter is reused; comments kept",
    ),
    Invalid(
        _HEAD
        + """\
def finish(model, out_dir):
    «torch.save(model.module.state_dict(), os.path.join(out_dir, "final.pt"))»
""",
        fixed=_HEAD
        + """\
def finish(model, out_dir):
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), os.path.join(out_dir, "final.pt"))
""",
        note="no rank in scope: dist.get_rank() with the module's own spelling",
    ),
    Invalid(
        """\
\"\"\"Training entry point.\"\"\"
import os

from torch import save
from torch.nn.parallel import DistributedDataParallel

def finish(model, out_dir):
    «save(model.module.state_dict(), os.path.join(out_dir, "final.pt"))»
""",
        fixed="""\
\"\"\"Training entry point.\"\"\"
import os

import torch.distributed
from torch import save
from torch.nn.parallel import DistributedDataParallel

def finish(model, out_dir):
    if torch.distributed.get_rank() == 0:
        save(model.module.state_dict(), os.path.join(out_dir, "final.pt"))
""",
        note="the import get_rank needs is added once, sorted into its import section",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, args, epoch):
    if args.local_rank in [-1, 0]:
        print("saving")
    «torch.save(
        {
            "model": model.state_dict(),  # weights
            "notes": \"\"\"epoch summary
  indented text stays as it is\"\"\",
        },
        os.path.join(args.output_dir, f"checkpoint-{epoch}.bin"),
    )»
""",
        fixed=_HEAD
        + """\
def train(model, args, epoch):
    if args.local_rank in [-1, 0]:
        print("saving")
    if args.local_rank in [-1, 0]:
        torch.save(
            {
                "model": model.state_dict(),  # weights
                "notes": \"\"\"epoch summary
  indented text stays as it is\"\"\",
            },
            os.path.join(args.output_dir, f"checkpoint-{epoch}.bin"),
        )
""",
        note="the function's own guard is reused; multi-line statement, string content untouched",
    ),
    Invalid(
        _HEAD
        + """\
from utils import is_main_process

def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        if is_main_process():
            print(f"epoch {epoch} done")
        «torch.save(model.module.state_dict(), "last.pt")»
""",
        fixed=_HEAD
        + """\
from utils import is_main_process

def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        if is_main_process():
            print(f"epoch {epoch} done")
        if is_main_process():
            torch.save(model.module.state_dict(), "last.pt")
""",
        note="is_main_process() reused",
    ),
    Invalid(
        _HEAD
        + """\
ddp = int(os.environ.get("RANK", -1)) != -1
while True:
    loss = train_step()
    if iter_num % log_interval == 0 and master_process:
        print(f"iter {iter_num}: loss {loss:.4f}")
    if iter_num % 1000 == 0:
        «torch.save(raw_model.state_dict(), os.path.join(out_dir, "ckpt.pt"))»
    iter_num += 1
""",
        fixed=_HEAD
        + """\
ddp = int(os.environ.get("RANK", -1)) != -1
while True:
    loss = train_step()
    if iter_num % log_interval == 0 and master_process:
        print(f"iter {iter_num}: loss {loss:.4f}")
    if iter_num % 1000 == 0:
        if master_process:
            torch.save(raw_model.state_dict(), os.path.join(out_dir, "ckpt.pt"))
    iter_num += 1
""",
        note="nanoGPT's master_process reused",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, global_rank, out_dir):
    for epoch in range(10):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        print(f"saving epoch {epoch} to {out_dir}")
        «torch.save(model.module.state_dict(), os.path.join(out_dir, "last.pt"))»
        torch.save(optimizer.state_dict(), os.path.join(out_dir, f"optim_{global_rank}.pt"))
""",
        fixed=_HEAD
        + """\
def train(model, loader, optimizer, global_rank, out_dir):
    for epoch in range(10):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        if global_rank == 0:
            print(f"saving epoch {epoch} to {out_dir}")
            torch.save(model.module.state_dict(), os.path.join(out_dir, "last.pt"))
        torch.save(optimizer.state_dict(), os.path.join(out_dir, f"optim_{global_rank}.pt"))
""",
        note="the message about the save joins it under one guard; the per-rank save stays out",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, rank):
        self.rank = rank
        self.model = DDP(model)

    def save(self, path):
        «self.model.module.save_pretrained(path)»
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, model, rank):
        self.rank = rank
        self.model = DDP(model)

    def save(self, path):
        if self.rank == 0:
            self.model.module.save_pretrained(path)
""",
        note="self.rank from __init__; save_pretrained",
    ),
    Invalid(
        _HEAD
        + """\
def on_epoch_end(state, ckpt_path, rank):
\tsync = True
\twith «open(ckpt_path, "wb")» as f:
\t\t# binary checkpoint
\t\ttorch.save(state, f)
""",
        fixed=_HEAD
        + """\
def on_epoch_end(state, ckpt_path, rank):
\tsync = True
\tif rank == 0:
\t\twith open(ckpt_path, "wb") as f:
\t\t\t# binary checkpoint
\t\t\ttorch.save(state, f)
""",
        note="with open(...) guarded as a whole; tab indentation kept",
    ),
    Invalid(
        _HEAD
        + """\
def main(model, loader, args, accelerator):
    model, loader = accelerator.prepare(model, loader)
    for batch in loader:
        accelerator.backward(model(batch).loss)
    «accelerator.unwrap_model(model).save_pretrained(args.output_dir)»
""",
        fixed=_HEAD
        + """\
def main(model, loader, args, accelerator):
    model, loader = accelerator.prepare(model, loader)
    for batch in loader:
        accelerator.backward(model(batch).loss)
    if accelerator.is_main_process:
        accelerator.unwrap_model(model).save_pretrained(args.output_dir)
""",
        note="an Accelerator in scope: its is_main_process",
    ),
    Invalid(
        _HEAD
        + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def save(model, rank):
    model = FSDP(model)
    «torch.save(model.state_dict(), "ckpt.pt")»
""",
        fixed=None,
        note="FSDP state_dict() is a collective: reported, no guard fix",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, rank):
    for epoch in range(10):
        if epoch % 5 == 0: «torch.save(model.state_dict(), "ckpt.pt")»
""",
        fixed=None,
        note="statement on the line of its if: no fix",
    ),
    Invalid(
        _HEAD
        + """\
import pickle

def save(state, args):
    ckpt_file = os.path.join(args.out, "state.pkl")
    with «open(ckpt_file, "wb")» as fh:
        pickle.dump(state, fh)
""",
        fixed=_HEAD
        + """\
import pickle

def save(state, args):
    ckpt_file = os.path.join(args.out, "state.pkl")
    if dist.get_rank() == 0:
        with open(ckpt_file, "wb") as fh:
            pickle.dump(state, fh)
""",
        note="open(..., 'wb') of a checkpoint path",
    ),
    Invalid(
        _HEAD
        + """\
from safetensors.torch import save_file

def export(model, local_rank, world_size):
    torch.cuda.set_device(local_rank)
    for rank in range(world_size):
        print(rank)
    «save_file(model.state_dict(), "model.safetensors")»
""",
        fixed=_HEAD
        + """\
from safetensors.torch import save_file

def export(model, local_rank, world_size):
    torch.cuda.set_device(local_rank)
    for rank in range(world_size):
        print(rank)
    if dist.get_rank() == 0:
        save_file(model.state_dict(), "model.safetensors")
""",
        note="local_rank is per node and a loop variable named rank is not the rank: get_rank()",
    ),
    Invalid(
        _HEAD
        + """\
def main(model, ddp):
    if ddp:
        rank = dist.get_rank()
        print(rank)
    «torch.save(model.state_dict(), "model.pt")»
""",
        fixed=_HEAD
        + """\
def main(model, ddp):
    if ddp:
        rank = dist.get_rank()
        print(rank)
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "model.pt")
""",
        note="a rank bound only in one branch is not reused",
    ),
    Invalid(
        _HEAD
        + """\
def save(model, epoch):
    «torch.save(model.state_dict(), f"ckpt_{epoch}.pt")»

def train(model, rank):
    save(model, 1)
    if rank == 0:
        save(model, 2)
""",
        fixed=_HEAD
        + """\
def save(model, epoch):
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), f"ckpt_{epoch}.pt")

def train(model, rank):
    save(model, 1)
    if rank == 0:
        save(model, 2)
""",
        note="a helper called both guarded and unguarded",
    ),
    Invalid(
        _HEAD
        + """\
def save_checkpoint(state, filename):
    torch.save(state, filename)

def train(model, rank, epochs):
    for epoch in range(epochs):
        «save_checkpoint(model.module.state_dict(), "last.pt")»
        if rank == 0:
            save_checkpoint(model.module.state_dict(), f"epoch{epoch}.pt")
""",
        fixed=_HEAD
        + """\
def save_checkpoint(state, filename):
    torch.save(state, filename)

def train(model, rank, epochs):
    for epoch in range(epochs):
        if rank == 0:
            save_checkpoint(model.module.state_dict(), "last.pt")
        if rank == 0:
            save_checkpoint(model.module.state_dict(), f"epoch{epoch}.pt")
""",
        note="a save helper writing where its caller says: the unguarded call is the bug",
    ),
    Valid(
        _HEAD
        + """\
from pathlib import Path

WEIGHTS_NAME = "pytorch_model.bin"


def save_for_hub(model, save_directory, config=None):
    save_directory = Path(save_directory)
    save_directory.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), save_directory / WEIGHTS_NAME)
    with open(os.path.join(save_directory, "config.json"), "w") as f:
        f.write(str(config))
""",
        note="a library's hub helper saving under the directory its caller passes (nothing in "
        "the project calls it): the caller decides the rank (F16)",
    ),
    Valid(
        _HEAD
        + """\
import tempfile
from tempfile import TemporaryDirectory


def save_for_hub(model, save_directory):
    torch.save(model.state_dict(), os.path.join(save_directory, "pytorch_model.bin"))


def push_to_hub(model, repo_id, api):
    with TemporaryDirectory() as tmpdir:
        save_for_hub(model, tmpdir)
        api.upload_folder(repo_id=repo_id, folder_path=tmpdir)


def stage(model):
    staging = tempfile.mkdtemp()
    torch.save(model.state_dict(), os.path.join(staging, "model.pt"))
    return staging
""",
        note="a temporary folder is this process's own: a hub upload staged on disk (F16)",
    ),
    Invalid(
        _HEAD
        + """\
import tempfile


def stage(model):
    «torch.save(model.state_dict(), os.path.join(tempfile.gettempdir(), "model.pt"))»
""",
        fixed=_HEAD
        + """\
import tempfile


def stage(model):
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), os.path.join(tempfile.gettempdir(), "model.pt"))
""",
        note="the system's temporary folder is shared by every process",
    ),
    Invalid(
        _HEAD
        + """\
def export_weights(model, out_dir):
    torch.save(model.state_dict(), os.path.join(out_dir, "weights.pt"))

def train(model, rank, epochs, out_dir):
    for epoch in range(epochs):
        «export_weights(model.module, out_dir)»
""",
        fixed=_HEAD
        + """\
def export_weights(model, out_dir):
    torch.save(model.state_dict(), os.path.join(out_dir, "weights.pt"))

def train(model, rank, epochs, out_dir):
    for epoch in range(epochs):
        if rank == 0:
            export_weights(model.module, out_dir)
""",
        note="a save helper writing under the directory its caller passes: the unguarded call "
        "is the bug",
    ),
    Invalid(
        _HEAD
        + """\
def export_weights(model, out_dir, name):
    «torch.save(model.state_dict(), os.path.join(out_dir, name))»

def train(model, rank, epochs, out_dir):
    for epoch in range(epochs):
        export_weights(model.module, out_dir, f"epoch{epoch}.pt")
""",
        fixed=_HEAD
        + """\
def export_weights(model, out_dir, name):
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), os.path.join(out_dir, name))

def train(model, rank, epochs, out_dir):
    for epoch in range(epochs):
        export_weights(model.module, out_dir, f"epoch{epoch}.pt")
""",
        note="a path joined with another variable is not only the caller's directory: reported "
        "where it saves",
    ),
    Invalid(
        _HEAD
        + """\
import torch.distributed.checkpoint as dcp


def save_sharded(model_sd, checkpoint_dir, epoch):
    dcp.save({"model": model_sd}, checkpoint_id=checkpoint_dir)
    «torch.save({"epoch": epoch}, os.path.join(checkpoint_dir, "extra.pt"))»


def train(model_sd, epochs, checkpoint_dir):
    for epoch in range(epochs):
        save_sharded(model_sd, checkpoint_dir, epoch)
""",
        fixed=_HEAD
        + """\
import torch.distributed.checkpoint as dcp


def save_sharded(model_sd, checkpoint_dir, epoch):
    dcp.save({"model": model_sd}, checkpoint_id=checkpoint_dir)
    if dist.get_rank() == 0:
        torch.save({"epoch": epoch}, os.path.join(checkpoint_dir, "extra.pt"))


def train(model_sd, epochs, checkpoint_dir):
    for epoch in range(epochs):
        save_sharded(model_sd, checkpoint_dir, epoch)
""",
        note="a save helper every rank must call (a DCP save): the caller cannot pick the rank, "
        "the save inside is reported (seeded unguard-save, open_clip)",
    ),
    # -- per-rank and collective saves, restricted hooks and branches, caches (F12/F15/F17) -----
    Valid(
        _HEAD
        + """\
def rank_tag():
    return "rank%02d" % dist.get_rank()

def write_shard(model, fs, out_dir):
    target = os.path.join(out_dir, f"model.{rank_tag()}.pth")
    with fs.open(target, "wb") as handle:
        torch.save(model.state_dict(), handle)
""",
        note="a file-system wrapper's open of a path named by a rank function: one file per rank",
    ),
    Valid(
        _HEAD
        + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType

def dump_local(model, ckpt_dir):
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        shard = model.state_dict()
    torch.save(shard, os.path.join(ckpt_dir, "shard.pt"))
""",
        note="a sharded state dict: each rank holds (and writes) its own shard",
    ),
    Valid(
        _HEAD
        + """\
from torch.distributed.fsdp import fully_shard

def finish(model, out_dir):
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    model.save_pretrained(out_dir)
""",
        note="save_pretrained of an FSDP2 model gathers DTensors: every rank must call it",
    ),
    Valid(
        _HEAD
        + """\
def main(accelerator, unet, loader, out_dir):
    def keep_adapters(models, weights, out_dir):
        for m in models:
            m.save_pretrained(os.path.join(out_dir, "adapter"))
            weights.pop()

    accelerator.register_save_state_pre_hook(keep_adapters)
    for step, batch in enumerate(loader):
        if accelerator.is_main_process and step % 500 == 0:
            accelerator.save_state(os.path.join(out_dir, f"state-{step}"))
""",
        note="a save-state pre-hook runs where save_state runs: here on the main process only",
    ),
    Invalid(
        _HEAD
        + """\
def main(accelerator, unet, loader, out_dir):
    def keep_adapters(models, weights, out_dir):
        for m in models:
            «m.save_pretrained(os.path.join(out_dir, "adapter"))»
            weights.pop()

    accelerator.register_save_state_pre_hook(keep_adapters)
    for step, batch in enumerate(loader):
        if step % 500 == 0:
            accelerator.save_state(os.path.join(out_dir, f"state-{step}"))
""",
        fixed=_HEAD
        + """\
def main(accelerator, unet, loader, out_dir):
    def keep_adapters(models, weights, out_dir):
        for m in models:
            if dist.get_rank() == 0:
                m.save_pretrained(os.path.join(out_dir, "adapter"))
            weights.pop()

    accelerator.register_save_state_pre_hook(keep_adapters)
    for step, batch in enumerate(loader):
        if step % 500 == 0:
            accelerator.save_state(os.path.join(out_dir, f"state-{step}"))
""",
        note="save_state on every rank (as DeepSpeed needs) runs the hook on every rank",
    ),
    Valid(
        _HEAD
        + """\
def end_of_epoch(model, cfg, rank):
    if cfg.enable_fsdp:
        if rank == 0:
            torch.save(model.state_dict(), "final.pt")
    else:
        torch.save(model.state_dict(), "final.pt")
    if not dist.is_initialized():
        torch.save(model.state_dict(), "single.pt")
""",
        note="the single-process side of a uniform is-distributed branch",
    ),
    Valid(
        _HEAD
        + """\
from torch.utils.data import Dataset

class SpeechSet(Dataset):
    def __init__(self, files):
        self.files = files

    def features(self, wav_path):
        spec_path = wav_path.replace(".wav", ".spec.pt")
        spec = torch.randn(80, 100)
        torch.save(spec, spec_path)
        return spec

    def __getitem__(self, i):
        return self.features(self.files[i])
""",
        note="a per-sample cache written by the dataset: ranks read disjoint shards",
    ),
    Valid(
        _HEAD
        + """\
from contextlib import contextmanager

@contextmanager
def zero_first(rank):
    if rank > 0:
        dist.barrier()
    yield
    if rank == 0:
        dist.barrier()

class Labels:
    def __init__(self, path):
        self.items = self.build_cache(path)

    def build_cache(self, path):
        cache = {"labels": []}
        torch.save(cache, path + ".cache")
        return cache

    def __getitem__(self, i):
        return self.items["labels"][i]

def make_loader(path, rank):
    with zero_first(rank):
        dataset = Labels(path)
    with zero_first(rank):
        torch.save({"n": 0}, os.path.join(path, "index.cache"))
    return dataset
""",
        note="a label cache built in a zero-first block: rank 0 writes, the others then read",
    ),
    Invalid(
        _HEAD
        + """\
class Labels:
    def __init__(self, path):
        self.items = self.build_cache(path)

    def build_cache(self, path):
        cache = {"labels": []}
        «torch.save(cache, path + ".cache")»
        return cache

    def __getitem__(self, i):
        return self.items["labels"][i]
""",
        fixed=_HEAD
        + """\
class Labels:
    def __init__(self, path):
        self.items = self.build_cache(path)

    def build_cache(self, path):
        cache = {"labels": []}
        if dist.get_rank() == 0:
            torch.save(cache, path + ".cache")
        return cache

    def __getitem__(self, i):
        return self.items["labels"][i]
""",
        note="a dataset's label cache built by every rank at once (no zero-first block)",
    ),
    Invalid(
        _HEAD
        + """\
def end_of_epoch(model, cfg, rank):
    if cfg.enable_fsdp:
        «torch.save(model.state_dict(), "final.pt")»
    else:
        torch.save(model.state_dict(), "final.pt")
""",
        fixed=_HEAD
        + """\
def end_of_epoch(model, cfg, rank):
    if cfg.enable_fsdp:
        if rank == 0:
            torch.save(model.state_dict(), "final.pt")
    else:
        torch.save(model.state_dict(), "final.pt")
""",
        note="the distributed side of the same branch is still reported",
    ),
    Invalid(
        _HEAD
        + """\
def end_of_epoch(model, cfg, device):
    if cfg.enable_fsdp:
        model = FSDP(model)
    else:
        model = DDP(model, device_ids=[device])
    train(model)
    if cfg.enable_fsdp:
        save_sharded(model)
    else:
        «torch.save(model.module.state_dict(), "final.pt")»
""",
        fixed=_HEAD
        + """\
def end_of_epoch(model, cfg, device):
    if cfg.enable_fsdp:
        model = FSDP(model)
    else:
        model = DDP(model, device_ids=[device])
    train(model)
    if cfg.enable_fsdp:
        save_sharded(model)
    else:
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), "final.pt")
""",
        note="the other side of an FSDP flag is DDP here: still distributed",
    ),
    Invalid(
        _HEAD
        + """\
def persist(*args, **kwargs):
    «torch.save(*args, **kwargs)»
""",
        fixed=_HEAD
        + """\
def persist(*args, **kwargs):
    if dist.get_rank() == 0:
        torch.save(*args, **kwargs)
""",
        note="torch.save(*args, **kwargs) is a save (M11)",
    ),
    Invalid(
        _HEAD
        + """\
def save_everywhere(*args, **kwargs):
    torch.save(*args, **kwargs)

def train(model, rank):
    «save_everywhere(model.state_dict(), "last.pt")»
""",
        fixed=_HEAD
        + """\
def save_everywhere(*args, **kwargs):
    torch.save(*args, **kwargs)

def train(model, rank):
    if rank == 0:
        save_everywhere(model.state_dict(), "last.pt")
""",
        note="a helper forwarding all its arguments to torch.save: its unguarded call is the bug",
    ),
    # -- the uniformity analysis (issue 14 part 1) ---------------------------------------------
    Valid(
        _HEAD
        + """\
class Evaluator:
    def evaluate(self, preds):
        if self.distributed:
            dist.barrier()
            if not dist.get_rank() == 0:
                return {}
        torch.save(preds, "checkpoint_preds.pth")
""",
        note="an early return nested in a uniform branch: only rank 0 reaches the save",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, rank):
    saver = CheckpointSaver("ckpt") if rank == 0 else None
    for epoch, batch in enumerate(loader):
        if saver is not None:
            torch.save(model.state_dict(), f"ckpt/epoch{epoch}.pth")
""",
        note="an object made on rank 0 only: `saver is not None` is a rank test",
    ),
    Valid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, rank):
        self.is_master = rank == 0

    def save(self, model):
        if self.is_master:
            torch.save(model.state_dict(), "checkpoint.pth")
""",
        note="a flag attribute assigned from a rank test in the class",
    ),
    Valid(
        _HEAD
        + """\
def is_first_proc(num_gpus=8):
    if dist.is_initialized():
        return dist.get_rank() % num_gpus == 0
    else:
        return True


def end_epoch(model, cfg):
    if not is_first_proc(cfg.NUM_GPUS * cfg.NUM_SHARDS):
        return
    torch.save(model.module.state_dict(), "checkpoint.pth")
""",
        note="an exit on a first-rank predicate that is true in a single-process run (F9)",
    ),
    Invalid(
        _HEAD
        + """\
def may_save(args):
    if args.save_everywhere:
        return True
    return dist.get_rank() == 0


def end_epoch(model, args):
    if not may_save(args):
        return
    «torch.save(model.module.state_dict(), "checkpoint.pth")»
""",
        fixed=_HEAD
        + """\
def may_save(args):
    if args.save_everywhere:
        return True
    return dist.get_rank() == 0


def end_epoch(model, args):
    if not may_save(args):
        return
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "checkpoint.pth")
""",
        note="true on every rank when a setting says so: not a rank predicate",
    ),
    Valid(
        """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.checkpoint.state_dict import get_model_state_dict


def save_adapter(model, out_dir):
    if isinstance(model, FSDP):
        state = get_model_state_dict(model)
        if torch.distributed.get_rank() == 0:
            model.save_pretrained(out_dir, state_dict=state)
    else:
        model.save_pretrained(out_dir)
""",
        note="the `else:` of `isinstance(model, FSDP)` where no model is wrapped in DDP: one process",
    ),
    Invalid(
        _HEAD
        + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def train(model, path):
    model = DDP(model)
    if isinstance(model, FSDP):
        pass
    else:
        «torch.save(model.module.state_dict(), path)»
""",
        fixed=_HEAD
        + """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def train(model, path):
    model = DDP(model)
    if isinstance(model, FSDP):
        pass
    else:
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), path)
""",
        note="the `else:` of `isinstance(model, FSDP)` in a module that wraps its model in DDP",
    ),
    Valid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, accelerator, model, local_disk):
        self.accelerator = accelerator
        self.model = accelerator.prepare(model)
        self.may_write = self.is_local_main if local_disk else self.is_main

    @property
    def is_main(self):
        return self.accelerator.is_main_process

    @property
    def is_local_main(self):
        return self.accelerator.is_local_main_process

    def save(self, path):
        if not self.may_write:
            return
        torch.save(self.model.state_dict(), path)
""",
        note="a flag that chooses, on a uniform setting, between two rank tests (F9)",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, accelerator, model, local_disk):
        self.accelerator = accelerator
        self.model = accelerator.prepare(model)
        self.may_write = self.is_main if local_disk else True

    @property
    def is_main(self):
        return self.accelerator.is_main_process

    def save(self, path):
        if not self.may_write:
            return
        «torch.save(self.model.state_dict(), path)»
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, accelerator, model, local_disk):
        self.accelerator = accelerator
        self.model = accelerator.prepare(model)
        self.may_write = self.is_main if local_disk else True

    @property
    def is_main(self):
        return self.accelerator.is_main_process

    def save(self, path):
        if not self.may_write:
            return
        if dist.get_rank() == 0:
            torch.save(self.model.state_dict(), path)
""",
        note="a choice between a rank test and True: every rank writes when the setting is off",
    ),
)
