"""What the analysis knows about PyTorch's API, by qualified name, and how to resolve names.

Rules ask "is this call ``torch.distributed.barrier``?", never "is it spelled ``barrier``?".
A dotted expression is resolved through the module's import aliases
(``import torch.distributed as dist`` makes ``dist.barrier`` ``torch.distributed.barrier``)
and then canonicalised, so the public path and the defining module's path are the same name.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping

from ddp_lsp.core.frameworks import BUILTIN, Meaning

# Several public spellings of one object; rules compare canonical names only.
CANONICAL: dict[str, str] = {
    "torch.nn.parallel.distributed.DistributedDataParallel": (
        "torch.nn.parallel.DistributedDataParallel"
    ),
    "torch.nn.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": (
        "torch.distributed.fsdp.FullyShardedDataParallel"
    ),
    "torch.amp.grad_scaler.GradScaler": "torch.amp.GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler": "torch.cuda.amp.GradScaler",
    "torch.cuda.amp.autocast_mode.autocast": "torch.cuda.amp.autocast",
    "torch.amp.autocast_mode.autocast": "torch.amp.autocast",
    "torch.autocast": "torch.amp.autocast",
    "torch.utils.data.distributed.DistributedSampler": "torch.utils.data.DistributedSampler",
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.nn.utils.clip_grad.clip_grad_norm_": "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_": "torch.nn.utils.clip_grad_value_",
    "torch.distributed.distributed_c10d.barrier": "torch.distributed.barrier",
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm": "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
    "torch.nn.modules.batchnorm.SyncBatchNorm": "torch.nn.SyncBatchNorm",
    "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm": (
        "torch.nn.SyncBatchNorm.convert_sync_batchnorm"
    ),
}

DDP = "torch.nn.parallel.DistributedDataParallel"
FSDP = "torch.distributed.fsdp.FullyShardedDataParallel"
GRAD_SCALERS = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
DEPRECATED_AMP = {
    "torch.cuda.amp.autocast": "torch.amp.autocast",
    "torch.cuda.amp.GradScaler": "torch.amp.GradScaler",
}
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
DATALOADER = "torch.utils.data.DataLoader"
CLIP_GRAD = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_"})
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
DESTROY_PROCESS_GROUP = "torch.distributed.destroy_process_group"
TORCH_SAVE = "torch.save"
TORCH_LOAD = "torch.load"

# torch.distributed functions every rank of the group must call: the torch.distributed and FSDP
# tables (ddp_lsp.core.frameworks), by their name under `torch.distributed.` (DCP's
# `checkpoint.save` included). destroy_process_group is not one: it tears down this process's
# communicators and does not wait for the other ranks.
COLLECTIVE_FUNCTIONS = frozenset(
    q[len("torch.distributed.") :]
    for q in BUILTIN.calls(Meaning.COLLECTIVE)
    if q.startswith("torch.distributed.")
)
COLLECTIVES = frozenset(f"torch.distributed.{name}" for name in COLLECTIVE_FUNCTIONS)

# Where optimizer classes live and the factories that build one: the tables' `optimizer`
# entries (ddp_lsp.core.frameworks.optimizers). Under torch.optim, the schedulers and averaged
# models are not optimizers.
OPTIMIZER_PREFIXES = tuple(f"{m}." for m in BUILTIN.modules(Meaning.OPTIMIZER))
NOT_OPTIMIZERS_PREFIXES = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")
OPTIMIZER_FACTORIES = BUILTIN.calls(Meaning.OPTIMIZER)

# Markers of code that runs as several processes (RULES.md "Distributed context").
# (the tables' `module` entries).
DISTRIBUTED_MODULE_PREFIXES = BUILTIN.modules(Meaning.DISTRIBUTED)
# Under those, what single-process code uses too (the tables' `single-process` calls: a probe,
# DeepSpeed's device abstraction, accelerate's big-model placement): importing only these does
# not make a file distributed code.
SINGLE_PROCESS_NAMES = tuple(sorted(BUILTIN.calls(Meaning.SINGLE_PROCESS)))
RANK_ENV_VARS = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK"})


def canonical(name: str) -> str:
    return CANONICAL.get(name, name)


def last_name(e: ast.AST) -> str | None:
    """``f`` for ``f``, ``a.b.f`` and ``a.b.f(...)``; None for anything else."""
    if isinstance(e, ast.Call):
        e = e.func
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        return e.attr
    return None


_DOTTED = "_ddp_dotted"
_UNSEEN = object()


def dotted(expr: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (calls, subscripts...).

    An attribute chain's answer is kept on its node (the trees are cached per chunk text and
    never changed): every rule asks it of every call's callee, several times per call."""
    if expr.__class__ is ast.Attribute:
        # (A lookup with a default, not a KeyError caught: every attribute's first question,
        # the facts extraction's, missed, and raising costs more than the answer.)
        d = expr.__dict__
        found = d.get(_DOTTED, _UNSEEN)
        if found is _UNSEEN:
            found = d[_DOTTED] = _dotted(expr)
        return found  # type: ignore[no-any-return]
    if expr.__class__ is ast.Name:
        return expr.id
    return _dotted(expr)


def _dotted(expr: ast.AST) -> str | None:
    parts: list[str] = []
    node = expr
    while node.__class__ is ast.Attribute:  # (by class: ast's node classes have no subclass)
        parts.append(node.attr)
        node = node.value
    if node.__class__ is not ast.Name:
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


# Calls that turn a path into the same path (`Path(p)`, `str(p)`, `os.path.expanduser(p)`).
PATH_WRAPPERS = frozenset(
    {"Path", "PurePath", "str", "fspath", "abspath", "expanduser", "realpath", "normpath"}
)


def path_wrapper_of(value: ast.AST) -> str | None:
    """``p`` when ``value`` is ``Path(p)``, ``str(p)``, ``os.path.abspath(p)``... (the same
    path under another type or spelling), else None."""
    if not (isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords):
        return None
    name = dotted(value.func)
    if name is None or name.rpartition(".")[2] not in PATH_WRAPPERS:
        return None
    arg = value.args[0]
    return arg.id if isinstance(arg, ast.Name) else None


def path_root(dest: ast.AST) -> str | None:
    """The variable a path is built under, with constant names only joined to it:
    ``out_dir`` for ``out_dir``, ``out_dir / WEIGHTS_NAME``, ``os.path.join(out_dir,
    "model.pt")``, ``f"{out_dir}/model.pt"``, ``Path(out_dir) / "model.pt"``; None when another
    variable takes part (``os.path.join(out_dir, name)``, ``args.output_dir``)."""

    def constant(e: ast.AST) -> bool:
        if isinstance(e, ast.Constant):
            return isinstance(e.value, str)
        if isinstance(e, ast.Name):
            return e.id.isupper()  # a module constant (`WEIGHTS_NAME`)
        if isinstance(e, ast.JoinedStr):
            return all(isinstance(v, ast.Constant) for v in e.values)
        return False

    node = dest
    for _ in range(8):
        if isinstance(node, ast.Name):
            return node.id
        inner = path_wrapper_of(node)
        if inner is not None:
            return inner
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.Add):
            if not constant(node.right):
                return None
            node = node.left
        elif isinstance(node, ast.Call) and (dotted(node.func) or "").endswith("path.join"):
            if not node.args or node.keywords or not all(constant(a) for a in node.args[1:]):
                return None
            node = node.args[0]
        elif isinstance(node, ast.JoinedStr):
            values = [v for v in node.values if isinstance(v, ast.FormattedValue)]
            first = node.values[0] if node.values else None
            if len(values) != 1 or first is not values[0] or values[0].format_spec is not None:
                return None
            node = values[0].value
        else:
            return None
    return None


def resolve(name: str, aliases: Mapping[str, str]) -> str | None:
    """Qualify a dotted name through import aliases; None when its head was not imported."""
    head, _, rest = name.partition(".")
    target = aliases.get(head)
    if target is None:
        return None
    return canonical(f"{target}.{rest}" if rest else target)


def qualname(expr: ast.AST, aliases: Mapping[str, str]) -> str | None:
    name = dotted(expr)
    return None if name is None else resolve(name, aliases)


def is_optimizer_class(qual: str) -> bool:
    if qual in OPTIMIZER_FACTORIES:
        return True
    if qual.startswith(NOT_OPTIMIZERS_PREFIXES):
        return False
    if not qual.startswith(OPTIMIZER_PREFIXES):
        return False
    last = qual.rsplit(".", 1)[-1]
    # torch.optim.Optimizer itself, classes only (modules such as torch.optim.adamw are not).
    return last[:1].isupper() or last.startswith("create_optimizer")


# Top-level packages of libraries a project imports but never defines: calls into them are
# not project call sites (the project index does not record them).
FRAMEWORKS = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "numpy",
        "scipy",
        "pandas",
        "sklearn",
        "transformers",
        "timm",
        "accelerate",
        "deepspeed",
        "apex",
        "einops",
        "tqdm",
        "wandb",
        "PIL",
        "cv2",
        "yaml",
        "omegaconf",
        "hydra",
        "mmcv",
        "mmengine",
        "detectron2",
        "lightning",
        "pytorch_lightning",
        "fairscale",
        "datasets",
        "tokenizers",
        "safetensors",
        "triton",
        "jax",
        "tensorboard",
        "matplotlib",
        "psutil",
        "requests",
        "h5py",
        "lmdb",
        "webdataset",
        "fvcore",
        "peft",
        "xformers",
    }
)


def may_be_project_module(qual: str) -> bool:
    """An import target (``utils.misc``, ``.engine``) that is not the standard library or a
    known framework: it may name a module of the project being analysed."""
    top = qual.lstrip(".").partition(".")[0]
    return qual.startswith(".") or not (top in sys.stdlib_module_names or top in FRAMEWORKS)


def is_distributed_import(qual: str) -> bool:
    return qual.startswith(DISTRIBUTED_MODULE_PREFIXES) and not is_single_process_name(qual)


def is_single_process_name(qual: str, names: Iterable[str] = SINGLE_PROCESS_NAMES) -> bool:
    """``qual`` is one of ``names`` (``single-process`` entries) or under one."""
    return any(qual == n or qual.startswith(n + ".") for n in names)


def import_bindings(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(bound name, qualified name) for each name an import statement binds."""
    out: list[tuple[str, str]] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                out.append((alias.asname, canonical(alias.name)))
            else:
                head = alias.name.split(".", 1)[0]
                out.append((head, head))
        return out
    if node.level:  # relative imports name modules of this project, not torch
        base = "." * node.level + (node.module or "")
    else:
        base = node.module or ""
    for alias in node.names:
        if alias.name == "*":
            continue
        out.append((alias.asname or alias.name, canonical(f"{base}.{alias.name}")))
    return out
