"""The index's garbage: summarising a file leaves no reference cycle, and what a build made
leaves the young generation unscanned (``index.no_collection``).

A cold ``ddp-lsp check`` builds the index with the cyclic collector paused: every cycle made
meanwhile (and everything it holds) lives until a collection walks the whole heap. One did:
``gates._mode_locals``'s recursive closure kept each function's assigned expressions alive,
1.4 million objects for 2,040 generated files, freed by one 3.7 s collection.
"""

from __future__ import annotations

import gc
from pathlib import Path

from ddp_lsp.project import ProjectIndex
from ddp_lsp.project.index import _PROMOTE_AT, no_collection
from tests.gcprobe import cyclic_garbage_by_type

from .helpers import FIXTURES

# Parameters, assignments unpacking into names, a mode test of an argument: every branch of
# the frame walks that once made cycles.
TRAIN = """import torch.distributed as dist


def train(args, model, loader, optimizer, rank=0):
    use_fsdp = getattr(args, "fsdp", False) and args.distributed
    (a, b), *rest = loader
    for step, (x, y) in enumerate(loader):
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        with open(args.out) as fh:
            fh.write(str(step))
        if use_fsdp:
            dist.barrier()
        if rank == 0:
            dist.all_reduce(loss)
    return a, b, rest
"""


def test_summarising_files_leaves_no_cycle(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "train.py").write_text(TRAIN)
    gc.collect()  # what earlier tests left
    was = gc.isenabled()
    gc.disable()
    try:
        index = ProjectIndex(tmp_path, cache_dir=False).build()
        ProjectIndex(FIXTURES / "deit", cache_dir=False).build()
        garbage = cyclic_garbage_by_type()
    finally:
        if was:
            gc.enable()
    assert index.summaries["train.py"].facts.functions  # summarised
    assert garbage == {}


def test_leaving_no_collection_moves_what_was_built_to_the_oldest_generation() -> None:
    assert gc.isenabled()
    was_frozen = gc.get_freeze_count() > 0  # an in-process server test froze the heap
    if was_frozen:
        gc.unfreeze()
    collections: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(note)
    try:
        with no_collection():
            built = [[i] for i in range(2 * _PROMOTE_AT)]
            assert gc.get_count()[0] > _PROMOTE_AT
        young = gc.get_count()[0]
        more = [[i] for i in range(100)]  # allocations that would start a young collection
    finally:
        gc.callbacks.remove(note)
        if was_frozen:
            gc.freeze()
    assert gc.isenabled()
    assert young < 100  # no collection waits to scan them
    assert collections == []
    assert built and more
