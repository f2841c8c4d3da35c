"""DDP103 collective-in-rank-branch.

## What it does
Finds collectives that only some ranks reach: `dist.barrier()`, `all_reduce`, `broadcast`,
`all_gather`, `reduce`, `gather`, `scatter`, `reduce_scatter`, `all_to_all`,
`monitored_barrier`, `new_group`, the same methods on a process group from `dist.new_group()`,
same-file helper functions and `self.` methods that reach one, and the collectives of
well-known wrappers (`accelerator.wait_for_everyone()` / `gather` / `reduce`,
`fabric.barrier()`, detectron2's `comm.synchronize()`, mpi4py's `comm.bcast` / `allreduce` /
`Barrier`). It reports one when it sits in a rank-guarded branch (`if rank == 0:`,
`if not is_main_process():`, `@rank_zero_only`) and the other ranks do not make the same
collective on their path, or when a rank-guarded `return`, `break`, `continue` or
`sys.exit(0)` lets some ranks skip it or leave the loop that contains it.

One finding per divergence point: a guarded branch is reported at its first stranded
collective, an early exit at the `return` / `break` / `continue` itself; the other
collectives the same point strands are related locations. Which ranks take a condition is
the core's rank-uniformity analysis (`ddp_lsp/core/uniformity.py`): flags computed from the
rank (`is_main = rank == 0`, `self.is_master = ...`), objects made on rank 0 only
(`saver = Saver() if is_main else None`), rank-0 predicates of this or another file, and
`u or rank == 0` (every rank when the uniform `u` holds, rank 0 otherwise).

## Why is this bad?
A collective completes only when every rank of the process group calls it. The ranks that
skip it never arrive, so the ranks that did call it wait inside it until the NCCL timeout
(`init_process_group(timeout=...)`, minutes by default) when the watchdog aborts the job,
with no error pointing at the cause. If the skipping ranks reach a *different* collective
later, the two are matched with each other and tensors are silently mixed up.

## Example
```python
if rank == 0:
    evaluate(model.module, val_loader)
    dist.barrier()  # the other ranks never get here
```

## Use instead
```python
if rank == 0:
    evaluate(model.module, val_loader)
dist.barrier()  # every rank waits for rank 0's evaluation
```

## Fix
None: where the collective belongs depends on what the guarded code is for. Move it out of
the branch, or make the same collective on the other path (`else: dist.barrier()`).

## Known false positives
The analysis follows each function's branches for rank 0 and for the other ranks at once.
Conditions that do not depend on the rank (`if dist.is_initialized():`,
`if world_size > 1:`, `if args.local_rank != -1:`) are the same on every rank and are not
guards, and the same condition tested twice in a function is taken to decide the same way
both times. A collective is balanced when the other ranks make the same one anywhere on their
path: in the `else` branch, or in the "zero first" idiom
(`if rank != 0: dist.barrier()` ... `if rank == 0: dist.barrier()`). Preparing a payload
under a guard and broadcasting it on every rank (`if rank == 0: obj = load()` then
`dist.broadcast_object_list([obj], src=0)`) is fine, and so is `gather(..., dst=0)` called
by all. A collective on an explicit process group (`group=pg`) is reported only when global
rank 0 alone makes it (`if dist.get_rank() == 0:`, `if is_main_process():`, a return of the
other ranks before it): the group's other members never call it. Under a local-rank-0 guard
(a group of node leaders), a rank within a group (`dist.get_rank(pg) == 0`,
`mpu.get_data_parallel_rank() == 0`, whose whole tensor-parallel group calls it), a flag whose
rank test is computed elsewhere, or another subset, only the group's members may be calling
it, so it is not reported. Rank flags computed in another function and
values derived from the rank at run time (a broadcast stop flag) are taken as the same on
every rank. At module level (a script without functions) a guarded barrier in a top-level `if`
is reported only when no other top-level `if` of the module calls a barrier: otherwise that
one may be its twin ("zero first" written as two top-level `if`s) and both are left alone. A call that makes a different collective on each
branch at the same point is not reported either, though it is a bug. A helper whose
collective an argument bound at the call switches off (`save(..., synchronize=False)`, a
zero-first helper given `rank=-1` or leaving a default of -1) is not reported under a rank
guard, nor a helper whose every path to a collective makes such a call (a validation helper
that builds its own loader with the default rank); only literals and defaults switch a
helper off, so a flag the caller computes (`sync=is_dist`) does not (docs/accuracy.md F2,
F3). A helper whose every collective sits under a mode switch read from its arguments
(`if args.fsdp:`, `getattr(cfg, "fsdp_eval", False) and args.distributed`, or a parameter
the caller binds to one) communicates only in that mode of the run, so a rank-guarded call
of it is not reported: it is missed when the mode is on (docs/accuracy.md F5). Tests of
whether the run is distributed or which rank this is (`args.distributed`, `args.rank`,
`args.world_size`, `args.local_rank`) are not modes: a helper under `if args.distributed:`
is still reported. A condition decided before a loop keeps its value inside it: an early
exit under `if not sharded and rank != 0:` and a `while` loop's `if sharded: broadcast()`
exclude each other.

Error paths: a rank-guarded `raise` or `sys.exit(<error>)` before a collective is not
reported. The launcher (torchrun's agent, `mp.spawn`, the DeepSpeed launcher) stops every
worker when one exits with an error, so the others do not hang; under a launcher that does
not (`srun` without `--kill-on-bad-exit`, a hand-written spawn) they wait until the timeout.
A rank-guarded `return` (`return -1` after "experiment exists") or `sys.exit(0)` is
reported: that rank ends normally and the others wait in their next collective. Decide the
condition on every rank (broadcast it) or raise instead.

## References
- https://pytorch.org/docs/stable/distributed.html#collective-functions
- https://pytorch.org/docs/stable/distributed.html#torch.distributed.monitored_barrier
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import rankpaths as rank_paths
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, FixAvailability, Related, RuleMeta, Severity
from ddp_lsp.rules import _collectives as collectives

_CONSEQUENCE = "the job hangs until the NCCL timeout"


class CollectiveInRankBranch(Rule):
    meta = RuleMeta(
        id="DDP103",
        name="collective-in-rank-branch",
        severity=Severity.ERROR,
        summary="A collective that only some ranks reach: the others never arrive and the job hangs.",
        fix=FixAvailability.NONE,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        misses = rank_paths.chunk_misses(ctx, rank_paths.collective_extractor(ctx))
        # One finding per divergence point: the misses one branch or exit strands together.
        groups: dict[tuple[object, ...], list[rank_paths.Miss]] = {}
        for miss in misses:
            groups.setdefault(rank_paths.divergence_key(miss), []).append(miss)
        for group in groups.values():
            first = group[0]
            message, related = collectives.explain(ctx, first, _CONSEQUENCE)
            # The message already names the helper's file; the related location goes there.
            _, elsewhere = ctx.cite(*(collectives.elsewhere_source(ctx, m) for m in group))
            if first.event.subgroup:
                message += (
                    " (the collective is on a process group: its members other than rank 0 "
                    "never call it)"
                )
            others = [m.event.node for m in group[1:]]
            if others:
                message += (
                    f" (and {len(others)} more collective{'s' if len(others) > 1 else ''} "
                    "stranded the same way: see the related locations)"
                )
            stranded = tuple(
                Related(chunktext.span(ctx.chunk, n), "also reached by these ranks only")
                for n in others
            )
            exit_node = first.reason.node if first.reason.kind == "exit" else None
            if exit_node is not None:
                # The exit is where the ranks split: report it there, the collectives related.
                at_calls = tuple(
                    Related(
                        chunktext.span(ctx.chunk, m.event.node),
                        "a collective the exiting ranks never reach",
                    )
                    for m in group
                )
                yield ctx.finding(
                    self,
                    exit_node,
                    message,
                    related=(
                        *(
                            Related(chunktext.span(ctx.chunk, n), m)
                            for n, m in related
                            if n is not exit_node
                        ),
                        *at_calls,
                        *elsewhere,
                    ),
                )
                continue
            yield ctx.finding(
                self,
                first.event.node,
                message,
                related=(
                    *(Related(chunktext.span(ctx.chunk, n), m) for n, m in related),
                    *stranded,
                    *elsewhere,
                ),
            )


_HEAD = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

CollectiveInRankBranch.cases = (
    # -- traps -----------------------------------------------------------------------------------
    Valid(
        _HEAD
        + """\
def sync(t):
    if dist.is_initialized():
        dist.all_reduce(t)
    world_size = dist.get_world_size()
    if world_size > 1:
        dist.barrier()
    return t
""",
        note="is_initialized() and world_size > 1 are the same on every rank",
    ),
    Valid(
        _HEAD
        + """\
def resume(model, path, rank):
    obj = None
    if rank == 0:
        obj = torch.load(path, map_location="cpu")
    holder = [obj]
    dist.broadcast_object_list(holder, src=0)
    model.load_state_dict(holder[0])
""",
        note="payload prepared under a guard, broadcast by every rank",
    ),
    Valid(
        _HEAD
        + """\
def wait_for_rank0(rank):
    if rank == 0:
        os.makedirs("out", exist_ok=True)
        dist.barrier()
    else:
        dist.barrier()
""",
        note="twin barriers in the if and else branches",
    ),
    Valid(
        _HEAD
        + """\
def collect(t, rank, world_size):
    if rank == 0:
        parts = [torch.zeros_like(t) for _ in range(world_size)]
        dist.gather(t, gather_list=parts, dst=0)
        return torch.cat(parts)
    dist.gather(t, dst=0)
    return None
""",
        note="gather with dst=0 called by every rank, with a gather_list on rank 0 only",
    ),
    Valid(
        _HEAD
        + """\
def share_seed(rank):
    seed = torch.zeros(1, dtype=torch.long)
    dist.broadcast(seed, src=0)
    return int(seed.item())
""",
        note="broadcast with src= in rank-independent code",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def finish(accelerator: Accelerator, model):
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.save_pretrained("out")
        print("saved")
""",
        note="accelerate: main-process guard around non-collective work",
    ),
    Valid(
        _HEAD
        + """\
from lightning.pytorch.utilities import rank_zero_only

@rank_zero_only
def log_hparams(logger, hparams):
    logger.log_hyperparams(hparams)
    print("hyperparameters", hparams)
""",
        note="Lightning @rank_zero_only function without collectives",
    ),
    Valid(
        _HEAD
        + """\
from contextlib import contextmanager

@contextmanager
def torch_distributed_zero_first(local_rank: int):
    # Make all processes wait while the local master prepares the data (YOLOv5 idiom).
    if local_rank not in [-1, 0]:
        dist.barrier(device_ids=[local_rank])
    yield
    if local_rank == 0:
        dist.barrier(device_ids=[0])
""",
        note="'zero first': every rank calls barrier exactly once",
    ),
    Valid(
        _HEAD
        + """\
def load_tokenizer(args):
    if args.local_rank not in [-1, 0]:
        torch.distributed.barrier()  # only the first process downloads the model & vocab
    tokenizer = AutoTokenizer.from_pretrained(args.model_name)
    if args.local_rank == 0:
        torch.distributed.barrier()  # the others may now load from the cache
    return tokenizer
""",
        note="Hugging Face examples' barrier pair around from_pretrained",
    ),
    Valid(
        _HEAD
        + """\
def reduce_dict(input_dict, average=True):
    world_size = dist.get_world_size()
    if world_size < 2:
        return input_dict
    with torch.no_grad():
        names = sorted(input_dict.keys())
        values = torch.stack([input_dict[k] for k in names], dim=0)
        dist.all_reduce(values)
        if average:
            values /= world_size
    return dict(zip(names, values))
""",
        note="torchvision references: an early return on world size is the same on all ranks",
    ),
    Valid(
        _HEAD
        + """\
def is_dist_avail_and_initialized():
    return dist.is_available() and dist.is_initialized()

class SmoothedValue:
    def synchronize_between_processes(self):
        if not is_dist_avail_and_initialized():
            return
        t = torch.tensor([self.count, self.total], dtype=torch.float64, device="cuda")
        dist.barrier()
        dist.all_reduce(t)
        self.count = int(t[0].item())
""",
        note="DeiT/MAE misc.py: early return when not distributed",
    ),
    Valid(
        _HEAD
        + """\
from detectron2.utils import comm

def after_train(cfg, model):
    if comm.is_main_process():
        with open("metrics.json", "w") as f:
            f.write("{}")
    comm.synchronize()
""",
        note="detectron2: main-process work, then comm.synchronize() on every rank",
    ),
    Valid(
        _HEAD
        + """\
def train(model, loader, optimizer, master_process):
    for step, (x, y) in enumerate(loader):
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        if step % 100 == 0 and master_process:
            print(f"step {step}: loss {loss.item():.4f}")
        stop = torch.tensor(float(loss.item() > 10.0))
        dist.all_reduce(stop)
        if stop.item() > 0:
            break
""",
        note="nanoGPT-style logging under master_process; a stop flag agreed by all_reduce",
    ),
    Valid(
        _HEAD
        + """\
def exchange(t, rank):
    if rank == 0:
        dist.send(t, dst=1)
    elif rank == 1:
        dist.recv(t, src=0)
""",
        note="point-to-point send/recv are not collectives",
    ),
    Valid(
        _HEAD
        + """\
def leaders_reduce(t, local_rank, leaders):
    group = dist.new_group(ranks=leaders)
    if local_rank == 0:
        dist.all_reduce(t, group=group)
""",
        note="a collective on a subgroup: only its members call it",
    ),
    Valid(
        _HEAD
        + """\
def tensor_parallel_sum(t, mpu):
    if mpu.get_data_parallel_rank() == 0:
        dist.all_reduce(t, group=mpu.get_tensor_model_parallel_group())
    return t


def within_group(t, pg):
    if dist.get_rank(group=pg) == 0:
        dist.broadcast(t, src=0, group=pg)


def workers_only(t, rank, workers_pg):
    if rank != 0:
        dist.all_reduce(t, group=workers_pg)
""",
        note="a group's collective under a rank within a group (the whole tensor-parallel group "
        "of data-parallel rank 0), or on every rank but rank 0: its members may all call it",
    ),
    Valid(
        _HEAD
        + """\
def main(args):
    if args.local_rank != -1:
        dist.init_process_group("nccl")
        dist.barrier()
""",
        note="local_rank != -1 means 'launched distributed': the same on every rank",
    ),
    Valid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, rank):
        self.model = DDP(model)
        self.rank = rank

    def _sync(self):
        dist.barrier()

    def fit(self, loader):
        for batch in loader:
            self.model(batch).sum().backward()
        if self.rank == 0:
            print("epoch done")
        self._sync()
""",
        note="self.-method collective reached by every rank",
    ),
    Valid(
        _HEAD
        + """\
def shard_report(rank, t):
    if rank % 2 == 0:
        dist.all_reduce(t)
    else:
        dist.all_reduce(t)
""",
        note="rank-dependent branch whose two sides make the same collective",
    ),
    # -- findings ------------------------------------------------------------------------------
    Invalid(
        _HEAD
        + """\
def mean_loss(loss, loss_group):
    if dist.get_rank() == 0:
        «dist.all_reduce(loss, group=loss_group)»
    return loss


def min_stat(t, pg):
    if not is_main_process():
        «return t»
    dist.reduce(t, 0, group=pg)
    return t
""",
        note="a collective on a process group that only global rank 0 makes: the group's other "
        "members never call it (before a rank-0 return, too)",
    ),
    Invalid(
        _HEAD
        + """\
def evaluate_and_wait(model, val_loader, rank):
    if rank == 0:
        for x, y in val_loader:
            model.module(x)
        «dist.barrier()»
""",
        note="barrier on rank 0 only",
    ),
    Invalid(
        _HEAD
        + """\
def sync_metrics(t):
    dist.all_reduce(t)
    return t

def log_epoch(t, is_main_process):
    if is_main_process:
        t = «sync_metrics(t)»
        print(t)
""",
        note="a same-file helper that all-reduces, called under a guard",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, rank):
        self.rank = rank

    def _gather(self, t):
        out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(out, t)
        return out

    def validate(self, t):
        if self.rank != 0:
            «return None»
        return self._gather(t)
""",
        note="a guarded early return skips a self.-method collective",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, optimizer, rank):
    for step, (x, y) in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        dist.all_reduce(loss)
        if rank == 0 and loss.item() > 100:
            «break»
""",
        note="rank 0 leaves the loop; the others all_reduce alone in the next iteration",
    ),
    Invalid(
        _HEAD
        + """\
def train(model, loader, rank):
    for x, y in loader:
        if rank != 0 and x is None:
            «continue»
        dist.barrier()
""",
        note="a rank-guarded continue skips the barrier for this iteration",
    ),
    Invalid(
        _HEAD
        + """\
def save(accelerator, model):
    if accelerator.is_main_process:
        «accelerator.wait_for_everyone()»
        accelerator.save(model.state_dict(), "model.pt")
""",
        note="accelerate's wait_for_everyone() under is_main_process",
    ),
    Invalid(
        _HEAD
        + """\
def make_group(rank):
    pg = dist.new_group()
    if rank == 0:
        «pg.barrier()»
    return pg
""",
        note="a process-group method on a world-sized group from new_group()",
    ),
    Invalid(
        _HEAD
        + """\
from lightning.pytorch.utilities import rank_zero_only

@rank_zero_only
def finalize(t):
    «dist.all_reduce(t)»
    print(t)
""",
        note="a collective inside a @rank_zero_only function",
    ),
    Invalid(
        _HEAD
        + """\
def check(rank, t):
    if rank % 2 == 0:
        «dist.barrier()»
""",
        note="a rank condition we cannot name still splits the ranks",
    ),
    Invalid(
        _HEAD
        + """\
def finish(rank, t):
    if rank == 0:
        print("done")
    else:
        «dist.all_reduce(t)»
""",
        note="the collective in the else branch: rank 0 skips it",
    ),
    Invalid(
        _HEAD
        + """\
def main(args):
    is_main = args.rank == 0
    if is_main:
        torch.save({}, "ckpt.pt")
        «dist.barrier()»
    dist.barrier()
""",
        note="a flag computed from the rank; the unguarded barrier is the twin of nothing",
    ),
    Invalid(
        _HEAD
        + """\
from detectron2.utils import comm

def evaluate(cfg, model):
    if not comm.is_main_process():
        «return {}»
    results = {"ap": 0.5}
    comm.synchronize()
    return results
""",
        note="detectron2 synchronize after a return on the non-main ranks",
    ),
    Invalid(
        _HEAD
        + """dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    torch.save({}, "ckpt.pt")
    «dist.barrier()»
dist.destroy_process_group()
""",
        note="a script without functions: the module-level guarded barrier has no twin",
    ),
    Valid(
        _HEAD
        + """dist.init_process_group("gloo")
rank = dist.get_rank()
if rank != 0:
    dist.barrier()
data = prepare_once()
if rank == 0:
    dist.barrier()
""",
        note="'zero first' at module level: the two guarded barriers are each other's twin",
    ),
    # -- the uniformity analysis (issue 14 part 1) ---------------------------------------------
    Valid(
        _HEAD
        + """\
def train(model, loss_sum):
    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        dist.all_reduce(loss_sum)
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world > 1 and model.sharded:
        dist.barrier()
""",
        note="an 'is distributed' flag computed from RANK's presence is the same on every rank",
    ),
    Valid(
        _HEAD
        + """\
def check(rank, path, t):
    import sys

    if rank == 0 and os.path.exists(path):
        raise FileExistsError(path)
    dist.barrier()
    if rank != 0 and t is None:
        sys.exit("no tensor")
    dist.all_reduce(t)
""",
        note="a fatal error on some ranks: the launcher stops every worker, nothing waits",
    ),
    Invalid(
        _HEAD
        + """\
def main(args, rank, t):
    if rank == 0 and os.path.exists(args.out):
        print("experiment exists")
        «return -1»
    dist.barrier()
    dist.all_reduce(t)
""",
        note="return -1 is a normal exit: one finding at the return, both collectives related",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, rank):
        self.is_master = rank == 0

    def finish(self, t):
        if self.is_master:
            «dist.all_reduce(t)»
""",
        note="a flag attribute assigned from a rank test in the class",
    ),
    Invalid(
        _HEAD
        + """\
def resume(args, rank, path):
    if args.load_on_all_ranks or rank == 0:
        state = torch.load(path)
        «dist.barrier()»
""",
        note="`u or rank == 0`: every rank when u holds, rank 0 alone otherwise",
    ),
    Valid(
        _HEAD
        + """\
def resume(args, rank, path):
    state = None
    if args.load_on_all_ranks or rank == 0:
        state = torch.load(path)
    dist.barrier()
    return state
""",
        note="`u or rank == 0` guarding the load only; the barrier is on every path",
    ),
    Valid(
        _HEAD
        + """\
import contextlib

@contextlib.contextmanager
def zero_first(local_rank):
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()

def build(local_rank, path):
    with zero_first(local_rank):
        data = torch.load(path)
    return data
""",
        note="zero-first: the other ranks' barrier pairs with rank 0's, the body runs on all",
    ),
    Valid(
        _HEAD
        + """\
def save_blob(path, obj, synchronize=True):
    if synchronize:
        dist.barrier()
    torch.save(obj, path)

def checkpoint(rank, state):
    if rank == 0:
        save_blob("train.pt", state, synchronize=False)
""",
        note="an argument bound at the call switches the helper's barrier off",
    ),
    Invalid(
        _HEAD
        + """\
def save_blob(path, obj, synchronize=True):
    if synchronize:
        dist.barrier()
    torch.save(obj, path)

def checkpoint(rank, state):
    if rank == 0:
        «save_blob("train.pt", state)»
""",
        note="the default keeps the helper's barrier on: rank 0 waits alone",
    ),
    Valid(
        _HEAD
        + """\
import contextlib

@contextlib.contextmanager
def zero_first(local_rank):
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()

def make_loader(path, rank=-1):
    with zero_first(rank):
        return torch.load(path)

def train(rank):
    if rank in (-1, 0):
        val = make_loader("val", rank=-1)
        test = make_loader("test")
""",
        note="a zero-first helper reached with rank -1 (single process) runs no barrier",
    ),
    Invalid(
        """\
import torch

class Evaluator:
    def prepare(self, tasks):
        if torch.distributed.is_initialized():
            if torch.distributed.get_rank() == 0:
                «torch.distributed.barrier()»
        return tasks
""",
        note="a module that reaches torch.distributed through `import torch` is distributed code",
    ),
    Valid(
        _HEAD
        + """\
def score(model, loader, args, sharded=False):
    flag = torch.ones(1)
    if sharded:
        dist.broadcast(flag, src=0)
    return [model(x) for x in loader]

def zero_shot(model, loader, args):
    sharded = getattr(args, "fsdp", False) and args.distributed
    return score(model, loader, args, sharded=sharded)

def evaluate(model, loader, args):
    if args.rank != 0:
        return {}
    return zero_shot(model, loader, args)
""",
        note="a helper that communicates only in one mode of the run (FSDP evaluation), "
        "called on rank 0 by code written for the other mode",
    ),
    Invalid(
        _HEAD
        + """\
def sync_eval(model, args):
    if args.distributed:
        dist.barrier()
    return model

def evaluate(model, args):
    if args.rank == 0:
        «sync_eval(model, args)»
""",
        note="'is distributed' is not a mode: the helper's barrier runs in every distributed run",
    ),
    Valid(
        _HEAD
        + """\
class NoiseScale:
    def __init__(self, cfg):
        self.cfg = cfg

    def _sync(self, flag):
        if self.cfg.pipe_parallel:
            dist.all_reduce(flag)
        return flag

    def _update(self, flag):
        self._sync(flag)
        if self.cfg.pipe_parallel:
            dist.all_reduce(flag)

    def update(self, flag):
        if self.cfg.pipe_parallel:
            self._update(flag)
        else:
            if dist.get_rank() == 0:
                self._update(flag)
            dist.barrier()
""",
        note="methods that communicate only in the pipeline-parallel mode (`self.cfg...`), "
        "called on rank 0 outside it",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(model, loader, args):
    sharded = args.fsdp and args.distributed
    if not sharded and args.rank != 0:
        return {}
    it = iter(loader)
    signal = torch.ones(1)
    while True:
        if sharded:
            dist.broadcast(signal, src=0)
            if signal.item() == 0:
                break
        elif next(it, None) is None:
            break
    return {}
""",
        note="the early exit and the loop's collective exclude each other through one flag",
    ),
    Valid(
        _HEAD
        + """\
def step(params, bufs, rank, world):
    for base in range(0, len(params), world):
        if base + rank < len(params):
            p = params[base + rank]
            if p.grad is None:
                p.zero_()
                dist.all_gather(bufs[base:base + world], bufs[base + rank])
                continue
            p.add_(p.grad)
        dist.all_gather(bufs[base:base + world], bufs[base + rank])
""",
        note="the rank branch's nested exit makes the same collective the rest of the loop makes",
    ),
    Invalid(
        _HEAD
        + """\
def step(params, bufs, rank, world):
    for base in range(0, len(params), world):
        if base + rank < len(params):
            p = params[base + rank]
            if p.grad is None:
                «dist.all_gather(bufs[base:base + world], bufs[base + rank])»
                continue
            p.add_(p.grad)
        torch.cuda.synchronize()
""",
        note="only the ranks that own a fresh parameter gather; nothing after the branch does",
    ),
    Valid(
        _HEAD
        + """\
import contextlib

@contextlib.contextmanager
def zero_first(local_rank):
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()

def make_loader(path, batch, rank=-1, workers=4):
    with zero_first(rank):
        return torch.load(path), batch

def evaluate(path, batch=8, net=None, loader=None, workers=4):
    standalone = net is None
    if standalone:
        loader = make_loader(path, batch, workers=workers)[0]
    return len(loader)

def train(rank, net, loader):
    if rank in (-1, 0):
        evaluate("val", batch=16, net=net, loader=loader)
""",
        note="a helper whose only path to the barrier leaves the zero-first rank at -1",
    ),
    Invalid(
        _HEAD
        + """\
import contextlib

@contextlib.contextmanager
def zero_first(local_rank):
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()

def make_loader(path, batch, rank=-1, workers=4):
    with zero_first(rank):
        return torch.load(path), batch

def evaluate(path, rank, batch=8):
    loader = make_loader(path, batch, rank, workers=2)[0]
    return len(loader)

def train(rank):
    if rank in (-1, 0):
        «evaluate("val", rank)»
""",
        note="the helper passes the caller's rank on to the zero-first barrier",
    ),
    Valid(
        _HEAD
        + """\
def load(path, load_on_all_ranks=False):
    if load_on_all_ranks:
        dist.barrier()
    return torch.load(path)

def resume(args, rank):
    if args.load_on_all_ranks or rank == 0:
        state = load(args.path, load_on_all_ranks=args.load_on_all_ranks)
""",
        note="the barrier runs only when load_on_all_ranks holds, and then every rank enters",
    ),
)
