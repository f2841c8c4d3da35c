"""DDP503-DDP506 beyond their own cases: the set-up code of widely used projects stays silent
(torchvision references, nanoGPT, DeiT, detectron2, the PyTorch tutorials, accelerate,
Lightning), launch configuration, CRLF files, fix-all with shared imports, suppression, and
the places a fix must not be offered."""

from __future__ import annotations

import ast

import pytest

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.env import Environment, LaunchInfo
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.settings import Settings

FAMILY = ("DDP503", "DDP504", "DDP505", "DDP506")
SETTINGS = Settings(select=FAMILY)


def _found(code: str, env: Environment | None = None, rules: tuple[str, ...] = FAMILY) -> list:
    result = analyze(code, Settings(select=rules), env)
    assert result.errors == ()
    return list(result.findings)


# -- real-world set-up code: silent ------------------------------------------------------------

TORCHVISION = """\
import datetime
import os

import torch
import torch.distributed as dist
import torchvision


def setup_for_distributed(is_master):
    import builtins as __builtin__

    builtin_print = __builtin__.print

    def print(*args, **kwargs):
        force = kwargs.pop("force", False)
        if is_master or force:
            builtin_print(*args, **kwargs)

    __builtin__.print = print


def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    elif "SLURM_PROCID" in os.environ:
        args.rank = int(os.environ["SLURM_PROCID"])
        args.gpu = args.rank % torch.cuda.device_count()
    elif hasattr(args, "rank"):
        pass
    else:
        print("Not using distributed mode")
        args.distributed = False
        return

    args.distributed = True

    torch.cuda.set_device(args.gpu)
    args.dist_backend = "nccl"
    print(f"| distributed init (rank {args.rank}): {args.dist_url}", flush=True)
    torch.distributed.init_process_group(
        backend=args.dist_backend, init_method=args.dist_url, world_size=args.world_size, rank=args.rank
    )
    torch.distributed.barrier()
    setup_for_distributed(args.rank == 0)


def main(args):
    init_distributed_mode(args)
    device = torch.device(args.device)
    model = torchvision.models.get_model(args.model, weights=args.weights, num_classes=10)
    model.to(device)
    model_without_ddp = model
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        model_without_ddp = model.module
    if args.resume:
        checkpoint = torch.load(args.resume, map_location="cpu", weights_only=True)
        model_without_ddp.load_state_dict(checkpoint["model"])
    for epoch in range(args.start_epoch, args.epochs):
        checkpoint = {"model": model_without_ddp.state_dict(), "epoch": epoch, "args": args}
        if args.output_dir:
            torch.save(checkpoint, os.path.join(args.output_dir, f"model_{epoch}.pth"))
"""

NANOGPT = """\
import os
import time

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed import init_process_group, destroy_process_group

backend = "nccl"
device = "cuda"
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = f"cuda:{ddp_local_rank}"
    torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
else:
    master_process = True
    seed_offset = 0
    ddp_world_size = 1

torch.manual_seed(1337 + seed_offset)
torch.backends.cuda.matmul.allow_tf32 = True

model.to(device)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])

if ddp:
    destroy_process_group()
"""

TORCHVISION_SETUP = TORCHVISION.split("\n\ndef main(")[0] + "\n"
TORCHVISION_MAIN = TORCHVISION

DEIT_MAIN = """\
import numpy as np
import torch
import torch.backends.cudnn as cudnn
from torch.nn.parallel import DistributedDataParallel

import utils


def main(args):
    utils.init_distributed_mode(args)
    device = torch.device(args.device)
    seed = args.seed + utils.get_rank()
    torch.manual_seed(seed)
    np.random.seed(seed)
    cudnn.benchmark = True
    model = create_model(args.model)
    model.to(device)
    if args.distributed:
        model = DistributedDataParallel(model, device_ids=[args.gpu])
        model_without_ddp = model.module
"""

DETECTRON2_LAUNCH = """\
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from detectron2.utils import comm


def launch(main_func, num_gpus_per_machine, num_machines=1, machine_rank=0, dist_url=None,
           args=(), timeout=timedelta(minutes=30)):
    world_size = num_machines * num_gpus_per_machine
    if world_size > 1:
        mp.start_processes(
            _distributed_worker,
            nprocs=num_gpus_per_machine,
            args=(main_func, world_size, num_gpus_per_machine, machine_rank, dist_url, args, timeout),
            daemon=False,
        )
    else:
        main_func(*args)


def _distributed_worker(local_rank, main_func, world_size, num_gpus_per_machine, machine_rank,
                        dist_url, args, timeout=timedelta(minutes=30)):
    has_gpu = torch.cuda.is_available()
    global_rank = machine_rank * num_gpus_per_machine + local_rank
    try:
        dist.init_process_group(
            backend="NCCL" if has_gpu else "GLOO",
            init_method=dist_url,
            world_size=world_size,
            rank=global_rank,
            timeout=timeout,
        )
    except Exception as e:
        raise e
    comm.create_local_process_group(num_gpus_per_machine)
    if has_gpu:
        torch.cuda.set_device(local_rank)
    comm.synchronize()
    main_func(*args)
"""

DETECTRON2_WORKER = DETECTRON2_LAUNCH

DDP_TUTORIAL = """\
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


def demo_basic(rank, world_size):
    setup(rank, world_size)
    model = nn.Linear(10, 5).to(rank)
    ddp_model = DDP(model, device_ids=[rank])
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5).to(rank)
    loss_fn(outputs, labels).backward()
    optimizer.step()
    cleanup()


def run_demo(demo_fn, world_size):
    mp.spawn(demo_fn, args=(world_size,), nprocs=world_size, join=True)
"""

MULTIGPU_TORCHRUN = """\
import os

import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


def ddp_setup():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    init_process_group(backend="nccl")


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = model.to(self.gpu_id)
        self.model = DDP(self.model, device_ids=[self.gpu_id])

    def _load_snapshot(self, snapshot_path):
        loc = f"cuda:{self.gpu_id}"
        snapshot = torch.load(snapshot_path, map_location=loc)
        self.model.load_state_dict(snapshot["MODEL_STATE"])

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, "snapshot.pt")


def main(save_every, total_epochs, batch_size, snapshot_path="snapshot.pt"):
    ddp_setup()
    trainer = Trainer(load_train_objs(), save_every, snapshot_path)
    trainer.train(total_epochs)
    destroy_process_group()
"""

ACCELERATE = """\
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed


def main(args, model, optimizer, train_dataloader):
    accelerator = Accelerator()
    set_seed(args.seed, device_specific=True)  # without it: DDP503 (issue 14)
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    for batch in train_dataloader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    accelerator.save(unwrapped.state_dict(), "model.pt")
    accelerator.end_training()
"""

LIGHTNING = """\
import lightning as L
import torch


def main(model, dm):
    L.seed_everything(42, workers=True)
    trainer = L.Trainer(accelerator="gpu", devices=8, strategy="ddp")
    trainer.fit(model, dm)
    model = type(model).load_from_checkpoint("best.ckpt", map_location="cpu")
"""


@pytest.mark.parametrize(
    "code",
    [
        TORCHVISION_SETUP,
        NANOGPT,
        DEIT_MAIN,
        DDP_TUTORIAL,
        MULTIGPU_TORCHRUN,
        ACCELERATE,
        LIGHTNING,
    ],
    ids=[
        "torchvision-setup",
        "nanogpt",
        "deit",
        "ddp-tutorial",
        "multigpu-torchrun",
        "accelerate",
        "lightning",
    ],
)
def test_real_world_setup_is_silent(code: str) -> None:
    assert [f"{f.span.start.line + 1}: {f.rule_id} {f.message}" for f in _found(code)] == []


@pytest.mark.parametrize(
    ("code", "where"),
    [
        (TORCHVISION_MAIN, "init_distributed_mode(args)"),
        (DETECTRON2_WORKER, "dist.init_process_group("),
    ],
    ids=["torchvision", "detectron2"],
)
def test_real_world_setup_reports_only_the_missing_destroy(code: str, where: str) -> None:
    """torchvision's references and detectron2's launcher never destroy their process group
    (PyTorch warns about it at exit since 2.4): that one information, nothing else."""
    found = _found(code)
    assert [f.rule_id for f in found] == ["DDP506"]
    line = code.splitlines()[found[0].span.start.line]
    assert where in line


# -- launch configuration ---------------------------------------------------------------------

ONE_GPU_SCRIPT = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(model):
    torch.manual_seed(0)
    dist.init_process_group("nccl")
    model = DDP(model.cuda(0), device_ids=[0])
    for _ in range(3):
        model.train()
    dist.destroy_process_group()
"""


def test_one_process_launch_is_silent_and_eight_processes_are_not() -> None:
    one = Environment(launch=LaunchInfo(nproc_per_node=1, num_nodes=1, sources=("run.sh",)))
    assert _found(ONE_GPU_SCRIPT, one) == []
    world_one = Environment(launch=LaunchInfo(world_size=1))
    assert _found(ONE_GPU_SCRIPT, world_one) == []
    eight = Environment(launch=LaunchInfo(nproc_per_node=8, sources=("run.sh",)))
    assert sorted(f.rule_id for f in _found(ONE_GPU_SCRIPT, eight)) == [
        "DDP503",
        "DDP504",
        "DDP504",
        "DDP505",
    ]
    # One process per node on four nodes: still distributed, seeds must still differ.
    per_node = Environment(launch=LaunchInfo(nproc_per_node=1, num_nodes=4))
    assert "DDP503" in {f.rule_id for f in _found(ONE_GPU_SCRIPT, per_node)}


# -- fixes ---------------------------------------------------------------------------------------

FALLBACKS = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def build(net):
    torch.manual_seed(1234)
    net = net.cuda(0)
    return DDP(net, device_ids=[0], output_device=0)
"""


def test_fallback_fixes_are_unsafe_and_share_one_import() -> None:
    found = _found(FALLBACKS)
    assert [f.rule_id for f in found] == ["DDP503", "DDP504", "DDP504", "DDP504"]
    assert all(not fix.safe for f in found for fix in f.fixes)
    safe, n = fix_text(FALLBACKS, SETTINGS)
    assert safe == FALLBACKS and n == 0
    fixed, n = fix_text(FALLBACKS, SETTINGS, unsafe=True)
    assert n == 4
    ast.parse(fixed)
    assert fixed.count("import os") == 1
    assert 'torch.manual_seed(1234 + int(os.environ.get("RANK", 0)))' in fixed
    assert 'net = net.cuda(int(os.environ["LOCAL_RANK"]))' in fixed
    assert _found(fixed) == []
    again, more = fix_text(fixed, SETTINGS, unsafe=True)
    assert again == fixed and more == 0


def test_crlf_file_gets_crlf_fixes() -> None:
    code = (
        "import os\r\n"
        "import torch\r\n"
        "import torch.distributed as dist\r\n"
        "\r\n"
        "def main(model, loader):\r\n"
        '    local_rank = int(os.environ["LOCAL_RANK"])\r\n'
        '    dist.init_process_group("nccl")\r\n'
        "    for x in loader:\r\n"
        "        model(x)\r\n"
    )
    fixed, n = fix_text(code, SETTINGS)
    assert n == 2
    assert "\n" not in fixed.replace("\r\n", "")
    assert '    torch.cuda.set_device(local_rank)\r\n    dist.init_process_group("nccl")' in fixed
    assert fixed.endswith("        model(x)\r\n    dist.destroy_process_group()\r\n")


def test_set_device_fix_keeps_indentation_and_comments_in_nested_blocks() -> None:
    code = """\
import os
import torch
import torch.distributed as dist

def main(args, model):
\tif args.distributed:
\t\tlocal_rank = int(os.environ["LOCAL_RANK"])
\t\t# join the job
\t\tdist.init_process_group(backend="nccl")  # NCCL for GPUs
\t\tmodel = model.cuda()
\treturn model
"""
    (f,) = _found(code, rules=("DDP505",))
    fixed = apply_edits(code, f.fixes[0].edits)
    assert (
        '\t\t# join the job\n\t\ttorch.cuda.set_device(local_rank)\n\t\tdist.init_process_group(backend="nccl")'
        "  # NCCL for GPUs\n" in fixed
    )
    ast.parse(fixed)


def test_no_set_device_fix_when_init_shares_its_line() -> None:
    code = """\
import os
import torch.distributed as dist

def main(local_rank, use_nccl, model):
    if use_nccl: dist.init_process_group("nccl")
    return model.cuda()
"""
    (f,) = _found(code, rules=("DDP505",))
    assert f.fixes == ()


def test_local_rank_assigned_later_is_not_used_by_the_fix() -> None:
    code = """\
import os
import torch
import torch.distributed as dist

def main(model):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = model.cuda()
"""
    (f,) = _found(code, rules=("DDP505",))
    fixed = apply_edits(code, f.fixes[0].edits)
    assert 'torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n    dist.init' in fixed
    assert not f.fixes[0].safe


def test_destroy_fix_goes_before_a_final_return_and_after_a_trailing_block() -> None:
    code = """\
import torch.distributed as dist

def main(model, loader, epochs):
    dist.init_process_group("gloo")
    for epoch in range(epochs):
        for x in loader:
            model(x)
    return model
"""
    (f,) = _found(code, rules=("DDP506",))
    fixed = apply_edits(code, f.fixes[0].edits)
    assert fixed.endswith(
        "            model(x)\n    dist.destroy_process_group()\n    return model\n"
    )


def test_generator_worker_gets_no_destroy_fix() -> None:
    code = """\
import torch.distributed as dist

def batches(loader):
    dist.init_process_group("gloo")
    for x in loader:
        yield x
"""
    (f,) = _found(code, rules=("DDP506",))
    assert f.fixes == ()


def test_module_level_init_is_checked_by_ddp506() -> None:
    # Issue 14 ("more shapes"): the tutorial shape is reported, once, without a fix (the end
    # of the script may sit in another chunk); a destroy anywhere in the file silences it.
    code = """\
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(10):
    pass
"""
    (f,) = _found(code, rules=("DDP506",))
    assert f.span.start.line == 2 and f.fixes == ()
    assert _found(code + "dist.destroy_process_group()\n", rules=("DDP506",)) == []


def test_suppression_comment() -> None:
    code = """\
import torch
import torch.distributed as dist

def main(model):
    model = model.cuda(0)  # ddp-lsp: ignore[DDP504]
    return model
"""
    assert _found(code) == []


def test_hardcoded_device_under_other_rank_conditions_is_deliberate() -> None:
    code = """\
import torch
import torch.distributed as dist

def main(local_rank, model):
    if local_rank == 1:
        probe = torch.zeros(1, device="cuda:1")
    return model
"""
    assert _found(code, rules=("DDP504",)) == []


def test_seed_fix_uses_the_rank_parameter_of_a_method() -> None:
    code = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

class Trainer:
    def __init__(self, model, rank):
        self.rank = rank
        torch.cuda.manual_seed_all(1 + 2)
        self.model = DDP(model)
"""
    (f,) = _found(code, rules=("DDP503",))
    assert "`torch.cuda.manual_seed_all((1 + 2) + rank)`" in f.message
    assert f.fixes[0].safe


def test_preflight_machine_with_one_gpu_silences_the_device_rules_only() -> None:
    """Preflight found one GPU: GPU 0 is every process's own; seeds are still per rank (other
    nodes)."""
    from ddp_lsp.core.env import MachineInfo

    one_gpu = Environment(machine=MachineInfo(cpu_count=8, source="preflight", gpu_count=1))
    assert [f.rule_id for f in _found(ONE_GPU_SCRIPT, one_gpu)] == ["DDP503"]
    eight = Environment(machine=MachineInfo(cpu_count=64, source="preflight on gpu01", gpu_count=8))
    messages = [f.message for f in _found(ONE_GPU_SCRIPT, eight) if f.rule_id == "DDP504"]
    assert messages and all(
        "(8 processes per node, from 8 GPUs (preflight on gpu01))" in m for m in messages
    )


def test_a_gpu_flag_is_not_taken_for_the_local_rank() -> None:
    code = """\
import os
import torch
import torch.distributed as dist

def flag(model):
    gpu = torch.cuda.is_available()
    return model.cuda(0)

def index(model):
    gpu = int(os.environ["LOCAL_RANK"])
    return model.cuda(0)
"""
    found = _found(code, rules=("DDP504",))
    assert [f.fixes[0].title for f in found] == [
        'Use the local rank: int(os.environ["LOCAL_RANK"])',
        "Use the local rank: gpu",
    ]


SAME_SEED = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model):
    torch.manual_seed(args.seed)
    return DDP(model)
"""


def test_ddp503_runs_only_where_select_names_it() -> None:
    """DDP503 is off by default (docs/accuracy.md F34): the default settings and a prefix do
    not run it; its full id in `select` does, and `ignore` still wins."""
    from ddp_lsp.core.engine import analyze as run
    from ddp_lsp.core.registry import default_on
    from ddp_lsp.core.settings import Settings as S

    assert not default_on("DDP503")

    def ids(settings: S) -> set[str]:
        return {f.rule_id for f in run(SAME_SEED, settings).findings}

    assert "DDP503" not in ids(S())
    assert "DDP503" not in ids(S(select=("DDP5",)))
    assert "DDP503" in ids(S(select=("DDP", "DDP503")))
    assert "DDP503" not in ids(S(select=("DDP503",), ignore=("DDP503",)))
