"""How to spell a qualified name in the module being fixed, and the import it needs.

A fix that calls ``torch.distributed.get_rank`` writes it the way the module already imports
it (``dist.get_rank`` after ``import torch.distributed as dist``, ``get_rank`` after ``from
torch.distributed import get_rank``), or adds an import. Reads only the module's aliases (the
recording facts view a rule holds, ``ctx.facts``, so a chunk whose fix reads an alias re-runs
when that alias changes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Aliases(Protocol):
    """What spelling needs of the facts: local name -> qualified name."""

    @property
    def aliases(self) -> Mapping[str, str]: ...


def spell(facts: Aliases, qual: str) -> tuple[str, tuple[str, ...]]:
    """How to write ``torch.distributed.get_rank`` here, and the import it needs (if any)."""
    module, _, attr = qual.rpartition(".")
    aliases = facts.aliases
    for name, target in sorted(aliases.items()):
        if target == qual:
            return name, ()
    for name, target in sorted(aliases.items()):
        if target == module:
            return f"{name}.{attr}", ()
    head = qual.split(".", 1)[0]
    if aliases.get(head) == head:
        return qual, ()
    return qual, (f"import {module}",)
