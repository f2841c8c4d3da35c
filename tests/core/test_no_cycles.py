"""An analysis leaves no reference cycle holding what it built per chunk.

A cycle outlives the analysis until a cyclic collection, and the server freezes its heap
between keystrokes (ddp_lsp/lsp/heap.py): a ``ChunkContext`` kept alive that way holds the
chunk's facts view, its rank model and what the rules memoised. Two such cycles were real:
the context's memo holding a ``ChunkUniformity`` that points back at the context, and the
uniformity's condition resolver, a closure calling itself.
"""

from __future__ import annotations

import gc

from ddp_lsp.core import engine
from ddp_lsp.core.document import Document
from ddp_lsp.core.settings import Settings
from tests.gcprobe import cyclic_garbage_by_type

# Rank conditions through flags and a conditional expression (the resolver follows both),
# collectives under them: every chunk's rules ask the rank uniformity.
TEXT = """import torch
import torch.distributed as dist


class Saver:
    pass


def train(model, loader, optimizer):
    rank = dist.get_rank()
    is_master = rank == 0
    saver = Saver() if is_master else None
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        if is_master:
            dist.barrier()
        if saver:
            dist.all_reduce(loss)


def evaluate(model, loader):
    main = dist.get_rank() == 0
    if main:
        dist.barrier()
    return model
"""


def _garbage_of(types: tuple[str, ...]) -> dict[str, int]:
    """Unreachable objects of these type names that only a cyclic collection frees."""
    return {name: n for name, n in cyclic_garbage_by_type().items() if name in types}


def test_an_analysis_leaves_no_cycle_through_a_chunk_context() -> None:
    gc.collect()  # what earlier tests left
    made: list[str] = []
    original = engine.ChunkContext

    class Counting(original):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append("ctx")

    engine.ChunkContext = Counting  # type: ignore[misc]
    try:
        settings = Settings()
        doc = Document(TEXT, settings.rank_model)
        result = engine.analyze(doc, settings)
    finally:
        engine.ChunkContext = original  # type: ignore[misc]
    assert made  # the rules ran on chunks
    assert any(f.rule_id for f in result.findings)
    # (Closures of `ast.dump`, which some rules call, are cycles of the standard library.)
    assert _garbage_of(("Counting", "ChunkUniformity", "FactsView", "partial")) == {}
