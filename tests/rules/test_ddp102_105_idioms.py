"""DDP102-DDP105 beyond their own cases: idioms of widely used training code that must stay
silent, the shape of the messages and related locations, and the edges of the path analysis
(try/except, module-level chunks, loops, adversarial nesting)."""

from __future__ import annotations

import ast

import pytest

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Finding

HEAD = """\
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""


def run(code: str, *rules: str) -> list[Finding]:
    result = analyze(
        HEAD + code, Settings(select=rules or ("DDP102", "DDP103", "DDP104", "DDP105"))
    )
    assert not result.errors, result.errors
    return list(result.findings)


def lines(found: list[Finding]) -> list[tuple[str, int]]:
    """(rule, 1-based line in the snippet without HEAD)."""
    offset = HEAD.count("\n")
    return [(f.rule_id, f.span.start.line + 1 - offset) for f in found]


# -- real-world idioms that must stay silent ------------------------------------------------------

SILENT = {
    "yolov5-early-stopping-broadcast": """\
def train(opt, stopper, epochs, RANK):
    stop = False
    for epoch in range(epochs):
        fi = evaluate_fitness(epoch)
        if RANK in {-1, 0}:
            stop = stopper(epoch=epoch, fitness=fi)
        if RANK != -1:  # if DDP training
            broadcast_list = [stop if RANK == 0 else None]
            dist.broadcast_object_list(broadcast_list, 0)  # broadcast 'stop' to all ranks
            if RANK != 0:
                stop = broadcast_list[0]
        if stop:
            break  # must break all DDP ranks
""",
    "detectron2-coco-evaluator": """\
from detectron2.utils import comm

class COCOEvaluator:
    def evaluate(self):
        if self._distributed:
            comm.synchronize()
            predictions = comm.gather(self._predictions, dst=0)
            if not comm.is_main_process():
                return {}
        else:
            predictions = self._predictions
        return self._eval_predictions(predictions)
""",
    "torchvision-init-distributed-mode": """\
def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    else:
        print("Not using distributed mode")
        args.distributed = False
        return
    args.distributed = True
    torch.cuda.set_device(args.gpu)
    dist.init_process_group(backend="nccl", world_size=args.world_size, rank=args.rank)
    dist.barrier()
    setup_for_distributed(args.rank == 0)
""",
    "pytorch-ddp-tutorial-checkpoint": """\
def demo_checkpoint(rank, world_size, ddp_model, path):
    if rank == 0:
        torch.save(ddp_model.state_dict(), path)
    dist.barrier()
    map_location = {"cuda:%d" % 0: "cuda:%d" % rank}
    ddp_model.load_state_dict(torch.load(path, map_location=map_location))
    if rank == 0:
        os.remove(path)
""",
    "accelerate-save-at-the-end": """\
def finish(accelerator, model, tokenizer, args):
    accelerator.wait_for_everyone()
    unwrapped_model = accelerator.unwrap_model(model)
    unwrapped_model.save_pretrained(
        args.output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save
    )
    if accelerator.is_main_process:
        tokenizer.save_pretrained(args.output_dir)
""",
    "accelerate-eval-gather-for-metrics": """\
def evaluate(accelerator, model, loader, metric):
    model.eval()
    for batch in loader:
        with torch.no_grad():
            outputs = model(**batch)
        predictions = outputs.logits.argmax(dim=-1)
        predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
        metric.add_batch(predictions=predictions, references=references)
    result = metric.compute()
    if accelerator.is_main_process:
        print(result)
    return result
""",
    "mae-all-reduce-mean": """\
def all_reduce_mean(x):
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    if world_size > 1:
        x_reduce = torch.tensor(x).cuda()
        dist.all_reduce(x_reduce)
        x_reduce /= world_size
        return x_reduce.item()
    else:
        return x
""",
    "guarded-raise-caught-in-the-same-function": """\
def load(rank, path):
    try:
        if rank == 0 and not os.path.exists(path):
            raise FileNotFoundError(path)
    except FileNotFoundError:
        path = None
    dist.barrier()
    return path
""",
    "rank-zero-only-without-collectives": """\
from lightning.pytorch.utilities import rank_zero_only

@rank_zero_only
def save_config(cfg, path):
    with open(path, "w") as f:
        f.write(str(cfg))
""",
    "twin-helpers": """\
def sync():
    dist.barrier()

def step(rank):
    if rank == 0:
        sync()
    else:
        dist.barrier()
""",
    "model-without-ddp-on-rank-0": """\
def evaluate(model, x):
    with torch.no_grad():
        return model(x)

def main(net, x, rank):
    model = DDP(net)
    model_without_ddp = model.module
    if rank == 0:
        print(evaluate(model_without_ddp, x))
""",
    "loop-variable-named-rank": """\
def broadcast_from_each(t, world_size):
    for rank in range(world_size):
        if rank == 0:
            print("first source")
        dist.broadcast(t, src=rank)
        if rank == 0:
            dist.barrier()
""",
    "print-in-rank-order": """\
def ordered_print(msg, rank, world_size):
    for r in range(world_size):
        if rank == r:
            print(msg)
        dist.barrier()
""",
    "hf-load-and-cache-examples": """\
def load_and_cache_examples(args, task, tokenizer, evaluate=False):
    if args.local_rank not in [-1, 0] and not evaluate:
        torch.distributed.barrier()  # only the first process processes the dataset
    features = build_features(args, task, tokenizer, evaluate)
    if args.local_rank == 0 and not evaluate:
        torch.distributed.barrier()  # the others may now use the cache
    return features
""",
    "zero-first-halves-under-the-same-flag": """\
def main(args):
    if not args.use_deepscale:
        if args.local_rank not in [-1, 0]:
            torch.distributed.barrier()
    model = load_model(args)
    if not args.use_deepscale:
        if args.local_rank == 0:
            torch.distributed.barrier()
    return model
""",
    "zero-first-mixed-and-nested-flag": """\
def load(args, evaluate):
    if args.local_rank not in [-1, 0] and not evaluate:
        dist.barrier()
    data = prepare(args)
    if not evaluate:
        if args.local_rank == 0:
            dist.barrier()
    return data
""",
    "world-size-single-process-or": """\
def sync(args, t):
    if args.world_size == 1 or not dist.is_initialized():
        return t
    dist.all_reduce(t)
    return t
""",
}


@pytest.mark.parametrize("name", sorted(SILENT))
def test_real_world_idioms_stay_silent(name: str) -> None:
    found = run(SILENT[name])
    assert found == [], [f"{f.rule_id} {f.span.start}: {f.message}" for f in found]


# -- messages and related locations -----------------------------------------------------------------


def test_message_names_the_collective_the_guard_and_the_skipping_ranks() -> None:
    code = """\
def after_eval(rank, model, x):
    if rank == 0:
        print(model(x))
        dist.barrier()
"""
    (f,) = run(code, "DDP103")
    assert "`dist.barrier()`" in f.message
    assert "`if rank == 0:`" in f.message
    assert "ranks 1..N-1 never reach it" in f.message
    assert "NCCL timeout" in f.message
    (rel,) = f.related
    assert rel.span.start.line == f.span.start.line - 2  # the `if rank == 0:` line
    assert f.fixes == ()


def test_local_rank_guard_is_described_per_node() -> None:
    code = """\
def prepare(args):
    if args.local_rank == 0:
        download()
        dist.barrier()
"""
    (f,) = run(code, "DDP103")
    assert "local rank 0 of each node" in f.message


def test_fatal_raise_under_a_guard_is_not_a_hang() -> None:
    """Issue 14 error paths: a rank that raises (or exits non-zero) ends the job under torchrun,
    mp.spawn and the DeepSpeed launcher, which stop every worker; nothing waits."""
    code = """\
def check(rank, path):
    if rank == 0 and not os.path.exists(path):
        raise FileNotFoundError(path)
    dist.barrier()
    if rank != 0 and path is None:
        sys.exit(1)
    dist.all_reduce(t)
"""
    assert run(code, "DDP103") == []


def test_return_after_a_fatal_condition_strands_the_others_once() -> None:
    """`return -1` after "experiment exists" on rank 0 only: the process ends normally and the
    other ranks wait in every later collective. One finding, at the return, with each stranded
    collective as a related location (issue 14: one finding per divergence point)."""
    code = """\
def main(args, rank, t):
    if rank == 0 and os.path.exists(args.run_dir):
        print("experiment exists")
        return -1
    dist.barrier()
    dist.all_reduce(t)
    dist.broadcast(t, 0)
"""
    (f,) = run(code, "DDP103")
    assert lines([f]) == [("DDP103", 4)]
    assert "rank 0 returns at `return -1`" in f.message
    assert "and 2 more collectives" in f.message
    stranded = [r for r in f.related if "never reach" in r.message]
    assert [r.span.start.line for r in stranded] == [f.span.start.line + n for n in (1, 2, 3)]


def test_sys_exit_on_the_other_ranks() -> None:
    code = """\
def finish(rank, t):
    if rank != 0:
        sys.exit(0)
    dist.all_reduce(t)
"""
    # Exit status 0: not an error, the launcher lets rank 0 wait. Reported at the exit.
    assert lines(run(code, "DDP103")) == [("DDP103", 3)]


# -- the path analysis ---------------------------------------------------------------------------------


def test_extra_collective_beside_a_twin_is_the_one_reported() -> None:
    code = """\
def step(rank, t):
    if rank == 0:
        dist.barrier()
        dist.all_reduce(t)
    else:
        dist.barrier()
"""
    assert lines(run(code, "DDP103")) == [("DDP103", 4)]


def test_guarded_collective_before_an_unguarded_one_of_the_same_kind() -> None:
    code = """\
def step(rank):
    if rank == 0:
        dist.barrier()
    dist.barrier()
"""
    # Rank 0 calls barrier twice, the others once: the guarded one has no partner.
    assert lines(run(code, "DDP103")) == [("DDP103", 3)]


def test_break_in_an_inner_loop_does_not_leave_the_outer_one() -> None:
    code = """\
def train(rank, loader, t):
    for epoch in range(3):
        for x in loader:
            if rank == 0 and x is None:
                break
        dist.all_reduce(t)
"""
    assert run(code, "DDP103") == []


def test_return_inside_a_loop_skips_the_collective_after_it() -> None:
    code = """\
def train(rank, loader, t):
    for x in loader:
        if rank == 0 and x is None:
            return
    dist.all_reduce(t)
"""
    assert lines(run(code, "DDP103")) == [("DDP103", 4)]  # the return: where the ranks split


def test_conditional_expression_and_short_circuit_guards() -> None:
    code = """\
def f(rank, t, is_main_process):
    x = dist.all_reduce(t) if rank == 0 else None
    is_main_process and dist.barrier()
"""
    assert lines(run(code, "DDP103")) == [("DDP103", 2), ("DDP103", 3)]


def test_module_level_guarded_barrier_without_a_twin_is_reported() -> None:
    code = """\
rank = int(os.environ["RANK"])
t = torch.ones(1)

if rank != 0:
    dist.barrier()

if rank == 0:
    dist.all_reduce(t)
"""
    # No other top-level `if` calls a barrier: the barrier is nobody's "zero first" twin.
    assert lines(run(code, "DDP103")) == [("DDP103", 5), ("DDP103", 8)]


def test_module_level_zero_first_pair_is_left_alone_but_other_collectives_are_not() -> None:
    code = """\
rank = int(os.environ["RANK"])
t = torch.ones(1)

if rank != 0:
    dist.barrier()

if rank == 0:
    dist.all_reduce(t)
    dist.barrier()
"""
    assert lines(run(code, "DDP103")) == [("DDP103", 8)]


def test_module_level_twin_typed_later_silences_the_first_half() -> None:
    """The count of barrier `if`s is a module fact: adding the twin re-runs the other chunk."""
    from ddp_lsp.core.document import Document
    from ddp_lsp.core.engine import analyze
    from ddp_lsp.core.settings import Settings
    from ddp_lsp.core.types import Pos

    head = "import torch.distributed as dist\nrank = dist.get_rank()\n"
    half = "if rank != 0:\n    dist.barrier()\n"
    settings = Settings(select=("DDP103",), assume_distributed=True)
    doc = Document(head + half, settings.rank_model)
    assert [f.span.start.line for f in analyze(doc, settings).findings] == [3]
    doc.apply_edit(Pos(4, 0), Pos(4, 0), "if rank == 0:\n    dist.barrier()\n")
    assert analyze(doc, settings).findings == ()


def test_subgroup_collective_known_to_be_world_sized_is_reported() -> None:
    code = """\
def f(rank, t):
    world = dist.new_group()
    if rank == 0:
        dist.all_reduce(t, group=world)
"""
    assert lines(run(code, "DDP103")) == [("DDP103", 4)]


def test_new_group_on_some_ranks_only() -> None:
    code = """\
def f(rank):
    if rank == 0:
        g = dist.new_group([0])
        return g
    return None
"""
    assert lines(run(code, "DDP103")) == [("DDP103", 3)]


def test_adversarial_nesting_finishes() -> None:
    ifs = "".join(
        f"    if flag{i}:\n        dist.all_reduce(t)\n    else:\n        dist.barrier()\n"
        for i in range(30)
    )
    loops = "    for a in A:\n        for b in B:\n            for c in C:\n" + "".join(
        f"                if f{i}:\n                    dist.barrier()\n"
        f"                if rank != 0 and g{i}:\n                    continue\n"
        for i in range(8)
    )
    found = run("def f(t, rank):\n" + ifs + loops, "DDP103")
    assert all(f.rule_id == "DDP103" for f in found)


# -- DDP104 --------------------------------------------------------------------------------------------


def test_ddp104_extra_forward_on_rank_0_inside_the_training_loop() -> None:
    code = """\
def train(net, loader, sample, rank):
    model = DDP(net)
    for x in loader:
        model(x).sum().backward()
        if rank == 0:
            print(model(sample).mean())
"""
    found = run(code, "DDP104")
    assert lines(found) == [("DDP104", 6)]
    fix = found[0].fixes[0]
    assert not fix.safe and fix.preferred
    fixed, _ = fix_text(HEAD + code, Settings(select=("DDP104",)), unsafe=True)
    assert "print(model.module(sample).mean())" in fixed
    assert run(fixed[len(HEAD) :], "DDP104") == []


def test_ddp104_and_ddp103_report_their_own_calls() -> None:
    code = """\
def evaluate(net, x, rank, t):
    model = DDP(net)
    if rank == 0:
        out = model(x)
        dist.all_reduce(t)
"""
    assert lines(run(code)) == [("DDP104", 4), ("DDP103", 5)]


# -- DDP102 / DDP105 -------------------------------------------------------------------------------


def test_ddp102_fix_is_offered_but_never_applied_by_fix_all() -> None:
    code = """\
def wrap(model, local_rank):
    return DDP(model, device_ids=[local_rank], find_unused_parameters=True)
"""
    (f,) = run(code, "DDP102")
    assert f.severity.label == "information"
    assert "static_graph=True" in f.message
    assert f.fixes and not f.fixes[0].safe and not f.fixes[0].preferred
    same, n = fix_text(HEAD + code, Settings(select=("DDP102",)))
    assert same == HEAD + code and n == 0


def test_ddp102_removal_keeps_other_arguments_on_the_first_line() -> None:
    code = """\
def wrap(model, local_rank):
    return DDP(model, find_unused_parameters=True, device_ids=[local_rank])
"""
    fixed, _ = fix_text(HEAD + code, Settings(select=("DDP102",)), unsafe=True)
    assert "return DDP(model, device_ids=[local_rank])" in fixed
    ast.parse(fixed)


def test_ddp105_points_at_the_wrap() -> None:
    code = """\
def build(net):
    model = DDP(net)
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model
"""
    (f,) = run(code, "DDP105")
    (rel,) = f.related
    assert rel.span.start.line == f.span.start.line - 1
    assert "before wrapping" in f.message


def test_loop_left_by_the_other_ranks_names_rank_0_as_the_one_calling() -> None:
    code = """\
def train(rank, loader, t):
    for x in loader:
        dist.all_reduce(t)
        if rank != 0 and x is None:
            break
"""
    (f,) = run(code, "DDP103")
    assert lines([f]) == [("DDP103", 5)]  # the break: where the ranks split
    assert f.message.startswith("ranks 1..N-1 leave the loop around `dist.all_reduce(t)`")
    assert "rank 0 keeps iterating and calls it alone" in f.message


@pytest.mark.parametrize(
    "call",
    [
        "DDP(model, find_unused_parameters=True)",
        "DDP(model, find_unused_parameters=True)  # slow",
        "DDP(find_unused_parameters=True, module=model)",
        "DDP(model, find_unused_parameters=True, device_ids=[0], )",
        "DDP(\n        model,\n        find_unused_parameters=True,\n    )",
        "DDP(\n        model, find_unused_parameters=True,\n        static_graph=False,\n    )",
        "DDP(\n        model,\n        find_unused_parameters=True,  # aux head\n        device_ids=[0],\n    )",
        "DDP(\n        model,\n        find_unused_parameters=True\n    )",
        "DDP(model,\n        find_unused_parameters=True)",
    ],
)
def test_ddp102_removal_layouts(call: str) -> None:
    code = f"def wrap(model):\n    return {call}\n"
    assert [f.rule_id for f in run(code, "DDP102")] == ["DDP102"]
    fixed, n = fix_text(HEAD + code, Settings(select=("DDP102",)), unsafe=True)
    assert n == 1
    ast.parse(fixed)
    assert "find_unused_parameters" not in fixed
    assert run(fixed[len(HEAD) :], "DDP102") == []
    if "#" in call:
        assert "#" + call.split("#", 1)[1].split("\n", 1)[0] in fixed


def test_finally_runs_for_ranks_that_returned() -> None:
    code = """\
def save(rank, state, path):
    try:
        if rank != 0:
            return
        torch.save(state, path)
    finally:
        dist.barrier()
"""
    assert run(code, "DDP103") == []


def test_collective_after_try_finally_still_skipped_by_the_returning_ranks() -> None:
    code = """\
def save(rank, state, path):
    try:
        if rank != 0:
            return
        torch.save(state, path)
    finally:
        print("done")
    dist.barrier()
"""
    assert lines(run(code, "DDP103")) == [("DDP103", 4)]  # the return that strands it


def test_closure_that_reaches_a_collective() -> None:
    code = """\
def train(rank, t):
    def sync():
        dist.all_reduce(t)

    if rank == 0:
        sync()
    sync()
"""
    found = run(code, "DDP103")
    assert lines(found) == [("DDP103", 6)]
    assert "(which reaches a collective)" in found[0].message


def test_walrus_rank_test_is_a_rank_0_guard() -> None:
    code = """\
def f():
    if (r := dist.get_rank()) == 0:
        dist.barrier()
    return r
"""
    (f,) = run(code, "DDP103")
    assert "runs only on rank 0" in f.message


def test_many_flag_branches_before_a_guarded_collective_still_find_it() -> None:
    flags = "".join(f"    if args.flag{i}:\n        setup{i}()\n" for i in range(12))
    code = f"def main(args, t):\n{flags}    if args.rank == 0:\n        dist.all_reduce(t)\n"
    assert lines(run(code, "DDP103")) == [("DDP103", 27)]


def test_wrapper_collective_found_through_any_alias() -> None:
    """detectron2's comm.synchronize() is a barrier whatever the module is imported as."""
    from ddp_lsp.core.engine import analyze
    from ddp_lsp.core.settings import Settings

    src = (
        "import torch.distributed as dist\n"
        "from detectron2.utils import comm as d2comm\n\n"
        "def f(rank):\n"
        "    if rank == 0:\n"
        "        d2comm.synchronize()\n"
    )
    found = analyze(src, Settings(select=("DDP103",))).findings
    assert [(f.rule_id, f.span.start.line) for f in found] == [("DDP103", 5)]
