"""Framework models as data: what each framework's API means in DDP terms.

One declarative table per framework (a module of this package holding ``NAME`` and
``TABLE``), read by the facts and the rules through :data:`BUILTIN` or the settings' model
(the built-in tables extended with the user's ``[tool.ddp-lsp]`` entries). No rule names a
framework in code: to teach ddp-lsp a framework, add a table here (CONTRIBUTING.md).
"""

from __future__ import annotations

from ddp_lsp.core.frameworks import (
    accelerate,
    comm,
    conventions,
    deepspeed,
    fsdp,
    huggingface,
    lightning,
    mpi4py,
    optimizers,
    ray,
    safetensors,
    timm,
    torch_distributed,
)
from ddp_lsp.core.frameworks.schema import (
    Api,
    FrameworkModel,
    Match,
    Meaning,
    check_entry,
    duplicates,
)

__all__ = [
    "BUILTIN",
    "TABLES",
    "Api",
    "FrameworkModel",
    "Match",
    "Meaning",
    "check_entry",
    "duplicates",
]

# Framework name -> its table, in the order they are consulted.
TABLES: dict[str, tuple[Api, ...]] = {
    m.NAME: m.TABLE
    for m in (
        torch_distributed,
        fsdp,
        accelerate,
        lightning,
        deepspeed,
        timm,
        huggingface,
        comm,
        mpi4py,
        ray,
        safetensors,
        optimizers,
        conventions,
    )
}

BUILTIN = FrameworkModel(tuple(api for table in TABLES.values() for api in table))
