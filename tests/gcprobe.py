"""What only the cyclic garbage collector would free, for the tests that guard against
reference cycles (an analysis, the project index, a cold project build)."""

from __future__ import annotations

import gc
from collections import Counter


def cyclic_garbage() -> list[object]:
    """The unreachable objects a full collection finds now (``DEBUG_SAVEALL`` keeps them
    for the caller instead of freeing them); the collector's flags are restored."""
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)


def cyclic_garbage_by_type() -> Counter[str]:
    """:func:`cyclic_garbage` counted by type name."""
    return Counter(type(o).__name__ for o in cyclic_garbage())
