"""DDP504 hardcoded-device.

## What it does
Finds a fixed GPU index in distributed code: `torch.device("cuda:0")`, `torch.device("cuda", 0)`,
`.cuda(0)`, `.to("cuda:0")`, `device="cuda:0"` arguments, `torch.cuda.set_device(0)`,
`DistributedDataParallel(..., device_ids=[0], output_device=0)`,
`torch.load(..., map_location="cuda:0")` and `device = "cuda:0"`.

## Why is this bad?
Every process of a DDP job runs the same code. A fixed index puts every rank on the same GPU:
its memory runs out (N copies of the model on one card) while the other GPUs sit idle, and NCCL
may refuse to run two ranks on one device. Each rank must use the GPU of its local rank.

## Example
```python
model = model.to("cuda:0")
model = DDP(model, device_ids=[0])
```

## Use instead
```python
local_rank = int(os.environ["LOCAL_RANK"])
model = model.to(f"cuda:{local_rank}")
model = DDP(model, device_ids=[local_rank])
```

## Fix
Replaces the index with the local rank the code already has where the device is chosen
(`local_rank`, `ddp_local_rank`, `gpu` in `main_worker(gpu, ...)`, `args.gpu`,
`args.local_rank`, `self.local_rank`): `"cuda:0"` becomes `f"cuda:{local_rank}"` and `0`
becomes `local_rank`. Otherwise it writes `int(os.environ["LOCAL_RANK"])` (set by torchrun) and
adds `import os`; that fix is marked unsafe, and it is not offered in files that start their
workers with `mp.spawn`, where `LOCAL_RANK` is not set.

## Known false positives
Not reported: devices built from a variable (`f"cuda:{local_rank}"`, `"cuda"` without an index,
which means the current device after `set_device(local_rank)`), code under a rank condition
(rank 0 is on GPU 0 of its node), the single-process branch of `if args.distributed: ... else:`
(or of `if cfg.enable_fsdp:`, in a module that wraps no model in DDP), code past a check that
leaves unless the run is single-process (`if dist.get_world_size() != 1: raise ...`), the
entry for key N of a table keyed by the rank (`{0: ..."cuda:0"..., 1: ..."cuda:1"...}[rank]`),
the parent process after `mp.spawn`, launches configured with one process per node, machines
where preflight found one GPU, and chunks that set `CUDA_VISIBLE_DEVICES` per process (each
process then sees its own GPU as `cuda:0`). Setting `CUDA_VISIBLE_DEVICES` in another function,
or in the launcher, is not visible here: such code is reported; silence it with
`# ddp-lsp: ignore[DDP504]`. Nor is a GPU chosen only when the device so far is the CPU
(`if device.type == "cpu": device = torch.device("cuda:0")`, a backend that needs a GPU
falling back to the first one): every rank of a GPU job holds its own GPU already.

Distributed code only: in a project, a function that no distributed entry point reaches on
every rank and that does nothing distributed itself (an export tool, a tokenizer, a plotting
script, a helper called on rank 0 only) is single-process code, and this rule is silent there.

## References
- https://pytorch.org/docs/stable/notes/ddp.html
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_lsp.core import chunktext
from ddp_lsp.core import edits as text_edits
from ddp_lsp.core import names as known_names
from ddp_lsp.core.rule import ChunkContext, Invalid, Rule, Valid
from ddp_lsp.core.types import Finding, Fix, FixAvailability, RuleMeta, Severity
from ddp_lsp.rules import _device as device_rules
from ddp_lsp.rules import _guard as guards
from ddp_lsp.rules import _patterns as patterns

_CVD = "CUDA_VISIBLE_DEVICES"


class HardcodedDevice(Rule):
    meta = RuleMeta(
        id="DDP504",
        name="hardcoded-device",
        severity=Severity.WARNING,
        summary="A fixed GPU index in distributed code puts every rank on the same GPU.",
        fix=FixAvailability.SOMETIMES,
        distributed_only=True,
    )

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        if device_rules.one_gpu_per_node(ctx) or _sets_visible_devices(ctx):
            return
        seen: set[int] = set()
        for node, label in _hardcoded(ctx):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if device_rules.guarded(ctx, node) or device_rules.single_process_branch(ctx, node):
                continue
            if _per_rank_entry(ctx, node) or _compared(ctx, node) or _cpu_fallback(ctx, node):
                continue
            if guards.spawns_processes(ctx, patterns.scope_root(ctx, node)):
                continue
            stmt = ctx.statement(node)
            rank = device_rules.local_rank_text(ctx, stmt)
            index = device_rules.cuda_index(node)
            shown = index if index is not None else device_rules.int_const(node)
            fixes = []
            if rank is not None:
                if index is not None:
                    inner = rank.text.replace('"', "'")
                    new = f'f"cuda:{{{inner}}}"'
                else:
                    new = rank.text
                fixes.append(
                    Fix(
                        title=f"Use the local rank: {new}",
                        edits=(text_edits.replace_node(ctx, node, new),),
                        safe=rank.from_code,
                        preferred=True,
                        imports=rank.imports,
                    )
                )
            hint = rank.text if rank is not None else "the local rank"
            yield ctx.finding(
                self,
                node,
                f"{label} puts every rank on GPU {shown}{device_rules.procs_note(ctx)}: use each "
                f"process's local rank (`{hint}`) instead of a fixed index",
                fixes=fixes,
            )


def _sets_visible_devices(ctx: ChunkContext) -> bool:
    """The chunk sets ``CUDA_VISIBLE_DEVICES`` (per process, so ``cuda:0`` is its own GPU)."""
    for node in ctx.nodes(ast.Subscript):
        if isinstance(node.ctx, ast.Store) and isinstance(node.slice, ast.Constant):
            if node.slice.value == _CVD:
                return True
    for call in ctx.calls():
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("setdefault", "putenv"):
            if call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == _CVD:
                return True
    return False


def _compared(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` only builds a value compared with another (``assert get_device() ==
    torch.device("cuda:3")``, a test's expected value): nothing is placed on that GPU."""
    up = ctx.parent(node)
    if isinstance(up, ast.Call) and ctx.call_qualname(up) == "torch.device":
        up = ctx.parent(up)
    return isinstance(up, ast.Compare)


def _cpu_test(test: ast.expr) -> bool | None:
    """True for a test that a device is the CPU (``device.type == "cpu"``, ``str(device) ==
    "cpu"``, ``device.type in ("cpu", "mps")``), False for its negation, None otherwise."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _cpu_test(test.operand)
        return None if inner is None else not inner
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, right = test.ops[0], test.comparators[0]
    names = [
        e.value
        for side in (test.left, right)
        for e in (side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else (side,))
        if isinstance(e, ast.Constant) and isinstance(e.value, str)
    ]
    if "cpu" not in names or any(n.startswith("cuda") for n in names):
        return None
    if isinstance(op, (ast.Eq, ast.In, ast.Is)):
        return True
    if isinstance(op, (ast.NotEq, ast.NotIn, ast.IsNot)):
        return False
    return None


def _cpu_fallback(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` runs only when the device chosen so far is the CPU (``if device.type == "cpu":
    device = torch.device("cuda:0")``, a backend that needs a GPU falling back to the first
    one): the ranks of a GPU job each hold their own GPU already and never take that branch."""
    child: ast.AST = node
    for up in ctx.ancestors(node):
        if isinstance(up, ast.If):
            cpu = _cpu_test(up.test)
            if cpu is True and any(child is st for st in up.body):
                return True
            if cpu is False and any(child is st for st in up.orelse):
                return True
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        child = up
    return False


def _per_rank_entry(ctx: ChunkContext, node: ast.AST) -> bool:
    """``node`` (``"cuda:N"`` or ``N``) sits in the entry for key ``N`` of a table keyed by the
    rank or the device (``{0: zeros(device="cuda:0"), 1: zeros(device="cuda:1")}[rank]``):
    each rank picks its own GPU's entry."""
    index = device_rules.cuda_index(node)
    if index is None:
        index = device_rules.int_const(node)
    if index is None:
        return False
    child: ast.AST = node
    for up in ctx.ancestors(node):
        if isinstance(up, ast.Dict):
            for key, value in zip(up.keys, up.values, strict=True):
                if value is child:
                    return isinstance(key, ast.Constant) and key.value == index
            return False
        if isinstance(up, ast.stmt):
            return False
        child = up
    return False


def _index_node(expr: ast.AST | None) -> ast.AST | None:
    """``expr`` itself when it is ``"cuda:N"`` or an int constant."""
    if expr is None:
        return None
    if device_rules.cuda_index(expr) is not None or device_rules.int_const(expr) is not None:
        return expr
    return None


def _hardcoded(ctx: ChunkContext) -> Iterator[tuple[ast.AST, str]]:
    """(the constant to replace, a label for the message), in source order."""
    out: list[tuple[ast.AST, str]] = []
    for call in ctx.calls():
        qual = ctx.call_qualname(call)
        func = call.func
        if qual == "torch.device":
            first = call.args[0] if call.args else None
            if device_rules.cuda_index(first) is not None:
                assert first is not None
                out.append((first, f"`torch.device({chunktext.segment(ctx.chunk, first)})`"))
            elif (
                isinstance(first, ast.Constant)
                and first.value == "cuda"
                and len(call.args) > 1
                and device_rules.int_const(call.args[1]) is not None
            ):
                out.append((call.args[1], f'`torch.device("cuda", {call.args[1].value})`'))  # type: ignore[attr-defined]
            continue
        if qual in ("torch.cuda.set_device", "torch.accelerator.set_device_index"):
            node = _index_node(device_rules.arg(call, 0, "device"))
            if node is not None:
                out.append(
                    (
                        node,
                        f"`{chunktext.segment(ctx.chunk, func)}({chunktext.segment(ctx.chunk, node)})`",
                    )
                )
            continue
        if qual == known_names.DDP:
            ids = device_rules.arg(call, 1, "device_ids")
            if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1:
                node = _index_node(ids.elts[0])
                if node is not None:
                    out.append((node, f"`device_ids=[{chunktext.segment(ctx.chunk, node)}]`"))
            node = _index_node(device_rules.arg(call, 2, "output_device"))
            if node is not None:
                out.append((node, f"`output_device={chunktext.segment(ctx.chunk, node)}`"))
            continue
        if qual == known_names.TORCH_LOAD:
            loc = device_rules.arg(call, 1, "map_location")
            if loc is not None and device_rules.cuda_index(loc) is not None:
                out.append((loc, f"`map_location={chunktext.segment(ctx.chunk, loc)}`"))
            continue
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("cuda", "to")
            and (qual is None or not qual.startswith("torch."))
        ):
            dev = device_rules.arg(call, 0, "device")
            if (
                func.attr == "cuda"
                and device_rules.int_const(dev) is not None
                or device_rules.cuda_index(dev) is not None
            ):
                assert dev is not None
                out.append((dev, f"`.{func.attr}({chunktext.segment(ctx.chunk, dev)})`"))
                continue
            if func.attr == "to" and device_rules.int_const(dev) is not None and call.args:
                assert dev is not None
                out.append((dev, f"`.to({chunktext.segment(ctx.chunk, dev)})`"))
                continue
        for kw in call.keywords:
            if kw.arg == "device" and device_rules.cuda_index(kw.value) is not None:
                out.append((kw.value, f"`device={chunktext.segment(ctx.chunk, kw.value)}`"))
    for assign in ctx.nodes(ast.Assign):
        if len(assign.targets) != 1 or device_rules.cuda_index(assign.value) is None:
            continue
        target = known_names.dotted(assign.targets[0]) or ""
        if "device" in target.rsplit(".", 1)[-1].lower():
            out.append((assign.value, f"`{target} = {chunktext.segment(ctx.chunk, assign.value)}`"))
    out.sort(key=lambda x: patterns.order(x[0]))
    yield from out


_HEAD = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

"""

HardcodedDevice.cases = (
    Valid(
        _HEAD
        + """\
class EngineRunner:
    def __init__(self, engine_file, device):
        if device.type == "cpu":
            device = torch.device("cuda:0")  # the engine needs a GPU
        self.device = device
        self.engine = load_engine(engine_file, device)


def check_half(model, local_rank):
    dist.init_process_group("nccl")
    device = torch.device("cuda", local_rank)
    if str(device) != "cpu":
        runner = EngineRunner("probe.engine", device)
    else:
        runner = EngineRunner("probe.engine", torch.device("cuda:0"))
    return runner
""",
        note="a GPU chosen only when the device so far is the CPU: GPU ranks never take it "
        "(F16, an inference backend built on every rank)",
    ),
    Invalid(
        _HEAD
        + """\
def place(model, device):
    dist.init_process_group("nccl")
    if device.type == "cuda":
        device = torch.device(«"cuda:0"»)
    return model.to(device)
""",
        fixed=_HEAD
        + """\
def place(model, device):
    dist.init_process_group("nccl")
    if device.type == "cuda":
        device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}")
    return model.to(device)
""",
        note="a GPU test is no CPU fallback: every rank lands on GPU 0",
    ),
    Valid(
        _HEAD
        + """\
def main(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    device = torch.device(f"cuda:{local_rank}")
    model = DDP(model.to(device), device_ids=[local_rank], output_device=local_rank)
""",
        note="every index comes from the local rank",
    ),
    Valid(
        _HEAD
        + """\
def main(model, local_rank):
    torch.cuda.set_device(local_rank)
    device = "cuda"
    model = DDP(model.to(device))
    x = torch.zeros(3, device="cuda")
    return model.cuda(), x
""",
        note='"cuda" without an index after set_device(local_rank) is the local GPU',
    ),
    Valid(
        _HEAD
        + """\
def main(args, model):
    if args.distributed:
        torch.cuda.set_device(args.gpu)
        model = DDP(model.cuda(args.gpu), device_ids=[args.gpu])
    else:
        model = model.to("cuda:0")
    return model
""",
        note="the single-process branch of a distributed set-up",
    ),
    Valid(
        _HEAD
        + """\
def main(args, model):
    if args.local_rank == -1:
        device = torch.device("cuda:0")
    else:
        torch.cuda.set_device(args.local_rank)
        device = torch.device("cuda", args.local_rank)
    return device
""",
        note="Hugging Face style local_rank == -1 means one process",
    ),
    Valid(
        _HEAD
        + """\
def export(model, rank):
    if rank == 0:
        probe = torch.zeros(1, 3, 224, 224, device="cuda:0")
        torch.onnx.export(model.module, probe, "model.onnx")
""",
        note="rank 0 alone: it is on GPU 0 of its node",
    ),
    Valid(
        _HEAD
        + """\
def worker(local_rank, world_size):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)
    dist.init_process_group("nccl", rank=local_rank, world_size=world_size)
    model = torch.nn.Linear(4, 4).cuda(0)
    return DDP(model, device_ids=[0])
""",
        note="CUDA_VISIBLE_DEVICES per process: cuda:0 is this process's own GPU",
    ),
    Valid(
        _HEAD
        + """\
import torch.multiprocessing as mp

def worker(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)

def main():
    mp.spawn(worker, args=(2,), nprocs=2)
    summary = torch.load("summary.pt", map_location="cuda:0")
    print(summary)
""",
        note="the parent process after mp.spawn runs once",
    ),
    Valid(
        _HEAD
        + """\
def main(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    state = torch.load("ckpt.pt", map_location={"cuda:0": f"cuda:{local_rank}"})
    model.load_state_dict(state)
""",
        note="a map_location dict remapping cuda:0 to the local GPU",
    ),
    Valid(
        _HEAD
        + """\
import lightning as L

class LitModel(L.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        noise = torch.randn_like(x, device=self.device)
        return self.model(x + noise).sum()

def main(model, dm):
    trainer = L.Trainer(accelerator="gpu", devices=[0, 1, 2, 3], strategy="ddp")
    trainer.fit(model, dm)
""",
        note="Lightning: devices=[0, 1, 2, 3] lists the node's GPUs; self.device is per rank",
    ),
    Valid(
        _HEAD
        + """\
from accelerate import Accelerator

def main(model, batch):
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    return model(batch.to(accelerator.device))
""",
        note="accelerate: accelerator.device is the process's own GPU",
    ),
    Valid(
        _HEAD
        + """\
def evaluate(model, loader, cfg, local_rank):
    for batch in loader:
        if cfg.enable_fsdp:
            batch = batch.to(local_rank)
        else:
            batch = batch.to("cuda:0")
        model(batch)


def save_debug_batch(batch):
    if dist.get_world_size() > 1:
        return
    torch.save(batch.to("cuda:0"), "batch.pt")
""",
        note="the single-process side of an FSDP flag, and past a world-size exit (F15, F16)",
    ),
    Valid(
        """\
import torch
from accelerate.utils import is_xpu_available


def chat(model, tokens):
    if is_xpu_available():
        tokens = tokens.to("xpu:0")
    else:
        tokens = tokens.to("cuda:0")
    return model.generate(input_ids=tokens)
""",
        distributed=False,
        note="an inference script that only asks accelerate's device probes is single-process "
        "(F16)",
    ),
    Valid(
        _HEAD
        + """\
def test_local_device_follows_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert pick_device() == torch.device("cuda:3")
    assert pick_device() != torch.device("cuda", 0)
""",
        note="a test's expected device, only compared: nothing is placed on it (F16)",
    ),
    Valid(
        _HEAD
        + """\
def precompile(model, world_size):
    # one process traces for all ranks on torch's fake process group
    dist.init_process_group("fake", rank=0, world_size=world_size)
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    return model.to(device)


def convert(model, out):
    layout = ParallelLayout(dp=1, tp=1, pp=1)
    model = model.to("cuda:0")
    return shard(model, layout)
""",
        note="a function that sets up a world of one process (a fake process group, every "
        "parallel size 1) is single-process (F16)",
    ),
    Invalid(
        _HEAD
        + """\
def convert(model, out, tp):
    layout = ParallelLayout(dp=1, tp=tp, pp=1)
    model = model.to(«"cuda:0"»)
    return shard(model, layout)
""",
        fixed=_HEAD
        + """\
def convert(model, out, tp):
    layout = ParallelLayout(dp=1, tp=tp, pp=1)
    model = model.to(f"cuda:{int(os.environ['LOCAL_RANK'])}")
    return shard(model, layout)
""",
        note="a layout with a size that is not 1 is several processes",
    ),
    Valid(
        _HEAD
        + """\
def expected_shards(size):
    return {
        0: (torch.zeros(size, device="cuda:0"), torch.zeros(size // 2, device="cuda:0")),
        1: (torch.zeros(size // 2, device="cuda:1"), torch.ones(size, device=torch.device("cuda:1"))),
    }[dist.get_rank()]
""",
        note="a table keyed by the rank: each rank takes the entry on its own GPU (F16)",
    ),
    Invalid(
        _HEAD
        + """\
def expected_shards(size, local_rank):
    return {
        0: torch.zeros(size, device="cuda:0"),
        1: torch.zeros(size, device=«"cuda:0"»),
    }[dist.get_rank()]
""",
        fixed=_HEAD
        + """\
def expected_shards(size, local_rank):
    return {
        0: torch.zeros(size, device="cuda:0"),
        1: torch.zeros(size, device=f"cuda:{local_rank}"),
    }[dist.get_rank()]
""",
        note="an entry on another rank's GPU is still reported",
    ),
    Invalid(
        _HEAD
        + """\
def main(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    # one GPU per process
    torch.cuda.set_device(«0»)
    model = model.to(«"cuda:0"»)
    model = DDP(model, device_ids=[«0»], output_device=«0»)
""",
        fixed=_HEAD
        + """\
def main(model):
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    # one GPU per process
    torch.cuda.set_device(local_rank)
    model = model.to("cuda:0")
    model = DDP(model, device_ids=[0], output_device=0)
""",
        note="every hardcoded index reported; the fix uses the local rank in scope",
    ),
    Invalid(
        _HEAD
        + """\
def main_worker(gpu, ngpus_per_node, args):
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    device = torch.device(«"cuda:0"»)
    return device
""",
        fixed=_HEAD
        + """\
def main_worker(gpu, ngpus_per_node, args):
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    device = torch.device(f"cuda:{gpu}")
    return device
""",
        note="ImageNet example's gpu parameter is the local rank",
    ),
    Invalid(
        """\
import torch
from torch.nn.parallel import DistributedDataParallel

def build(net):
    net = net.cuda(«0»)
    return DistributedDataParallel(net)
""",
        fixed="""\
import os

import torch
from torch.nn.parallel import DistributedDataParallel

def build(net):
    net = net.cuda(int(os.environ["LOCAL_RANK"]))
    return DistributedDataParallel(net)
""",
        note="no local rank in scope: LOCAL_RANK from the environment, import added once",
    ),
    Invalid(
        _HEAD
        + """\
class Trainer:
    def __init__(self, model, local_rank):
        self.local_rank = local_rank
        self.model = model

    def load(self, path):
        state = torch.load(path, map_location=«"cuda:0"»)
        self.model.load_state_dict(state)
""",
        fixed=_HEAD
        + """\
class Trainer:
    def __init__(self, model, local_rank):
        self.local_rank = local_rank
        self.model = model

    def load(self, path):
        state = torch.load(path, map_location=f"cuda:{self.local_rank}")
        self.model.load_state_dict(state)
""",
        note="map_location pinned to cuda:0 loads every rank's copy onto GPU 0",
    ),
    Invalid(
        _HEAD
        + """\
import torch.multiprocessing as mp

def worker(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    x = torch.ones(4, device=«"cuda:0"»)
    dist.all_reduce(x)

if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
""",
        fixed=None,
        note="mp.spawn file without a local rank name: no LOCAL_RANK fallback, no fix",
    ),
)
