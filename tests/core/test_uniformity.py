"""The rank-uniformity analysis (core/uniformity.py): its API contract and each pattern."""

from __future__ import annotations

import ast

import pytest

from ddp_lsp.core import chunktext
from ddp_lsp.core.document import Document
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.uniformity import (
    ChunkUniformity,
    RankSet,
    Subset,
    condition_ranks,
    document_uniformity,
)

HEAD = "import os\nimport sys\nimport torch\nimport torch.distributed as dist\n\n"


def chunks(code: str) -> list[tuple[int, ChunkUniformity]]:
    return list(document_uniformity(Document(HEAD + code), Settings()))


def by_line(code: str) -> dict[int, tuple[str, list[tuple[str, str, bool]]]]:
    """1-based line in ``code`` (without HEAD) -> (ranks, [(kind, condition, fatal)])."""
    base = HEAD.count("\n")
    out = {}
    for start, u in chunks(code):
        for sr in u.statements():
            line = start + chunktext.span(u.ctx.chunk, sr.stmt).start.line - base + 1
            out[line] = (
                sr.ranks.describe(),
                [(d.kind, d.condition, d.fatal) for d in sr.divergences],
            )
    return out


@pytest.mark.parametrize(
    ("test", "expected"),
    [
        ("rank == 0", "rank 0"),
        ("args.local_rank == 0", "local rank 0"),
        ("rank != 0", "ranks ≠ 0"),
        ("local_rank > 0", "local ranks ≠ 0"),
        ("not is_main_process()", "ranks ≠ 0"),
        ("args.local_rank in [-1, 0]", "local rank 0"),
        ("rank % 2 == 0", "ranks where rank % 2 == 0"),
        ("rank == 0 and args.save", "rank 0 (when args.save)"),
        ("not dist.is_initialized() or rank == 0", "rank 0"),
        ("args.load_on_all_ranks or rank == 0", "rank 0 (all ranks when args.load_on_all_ranks)"),
        ("is_main_process() or is_local_main_process()", "local rank 0"),
        ("rank == 0 and local_rank == 0", "rank 0"),
    ],
)
def test_conditions(test: str, expected: str) -> None:
    found = condition_ranks(RankModel(), ast.parse(test, mode="eval").body)
    assert found is not None and found.describe() == expected


@pytest.mark.parametrize(
    "test",
    [
        "dist.is_initialized()",
        "world_size > 1",
        "args.local_rank != -1",
        'int(os.environ.get("RANK", -1)) != -1',
        "local_rank >= 0",
        "epoch % 10 == 0",
    ],
)
def test_uniform_conditions(test: str) -> None:
    assert condition_ranks(RankModel(), ast.parse(test, mode="eval").body) is None


def test_rank_set_algebra() -> None:
    zero, local = RankSet(Subset.RANK0), RankSet(Subset.LOCAL0)
    assert zero.negated() == RankSet(Subset.NONZERO)
    assert zero.intersect(local) == zero  # global rank 0 is node 0's local rank 0
    assert RankSet.ALL.intersect(local) == local
    assert RankSet(Subset.NONZERO).intersect(RankSet(Subset.NONLOCAL0)).subset is Subset.NONLOCAL0
    escaped = RankSet(Subset.RANK0, unless="u")
    assert escaped.negated() == RankSet(Subset.NONZERO, when="not u")


def test_statements_branches_exits_and_flags() -> None:
    code = """\
def train(args, rank, t):
    ddp = int(os.environ.get("RANK", -1)) != -1
    is_master = rank == 0
    if ddp:
        dist.all_reduce(t)
    if is_master:
        print("master")
    if rank == 0 and os.path.exists(args.out):
        raise FileExistsError(args.out)
    if not is_master:
        return -1
    dist.barrier()
"""
    lines = by_line(code)
    assert lines[5][0] == "all ranks"  # `ddp` is "is distributed": uniform
    assert lines[7] == ("rank 0", [("branch", "is_master", False)])
    # The fatal raise is a divergence point but does not narrow the ranks (the job ends);
    # the return does.
    ranks, divs = lines[12]
    assert ranks == "rank 0"
    assert ("raise", "rank == 0 and os.path.exists(args.out)", True) in divs
    assert ("return", "not is_master", False) in divs


def test_attributes_objects_and_nested_exits() -> None:
    code = """\
class Trainer:
    def __init__(self, rank):
        self.is_master = rank == 0
        self.saver = Saver() if self.is_master else None

    def step(self, t):
        if self.is_master:
            print(t)
        if self.saver is not None:
            self.saver.save(t)

    def evaluate(self, preds):
        if self.distributed:
            dist.barrier()
            if not dist.get_rank() == 0:
                return {}
        torch.save(preds, "preds.pt")
"""
    lines = by_line(code)
    assert lines[8][0] == "rank 0"
    assert lines[10][0] == "rank 0"
    assert lines[17] == ("rank 0", [("return", "not dist.get_rank() == 0", False)])


def test_loops_decorators_and_local_rank() -> None:
    code = """\
@rank_zero_only
def log(x):
    print(x)

def train(args, loader):
    for x in loader:
        if args.local_rank != 0:
            continue
        print(x)
    for rank in range(dist.get_world_size()):
        if rank == 0:
            print("first")
"""
    lines = by_line(code)
    assert lines[3] == ("rank 0", [("decorator", "rank_zero_only", False)])
    assert lines[9] == ("local rank 0", [("continue", "args.local_rank != 0", False)])
    assert lines[12][0] == "all ranks"  # a loop variable named like a rank is uniform


def test_collectives_and_their_divergence_points() -> None:
    code = """\
def main(rank, t):
    if rank == 0:
        dist.barrier()
    dist.all_reduce(t)
    if rank != 0:
        return
    dist.broadcast(t, 0)
"""
    ((start, u),) = [c for c in chunks(code) if c[1].collectives()]
    reach = {c.label: c for c in u.collectives()}
    assert reach["barrier"].skipped and reach["barrier"].divergence is not None
    assert reach["barrier"].divergence.kind == "branch"
    assert reach["barrier"].divergence.condition == "rank == 0"
    assert reach["all_reduce"].skipped is False and reach["all_reduce"].divergence is None
    d = reach["broadcast"].divergence
    assert d is not None and d.kind == "return" and d.condition == "rank != 0"
    assert d.span.start.line + start == HEAD.count("\n") + 5  # 0-based line of the return
    assert d.path is None


def test_nothing_for_a_module_that_is_not_distributed() -> None:
    assert (
        list(document_uniformity(Document("def f(rank):\n    if rank == 0:\n        print(1)\n")))
        == []
    )


def test_comprehension_variable_elsewhere_does_not_hide_the_rank() -> None:
    code = """\
def step(rank, losses, n):
    total = sum(losses[rank] for rank in range(n))
    if rank == 0:
        print(total)
"""
    assert by_line(code)[4][0] == "rank 0"


def test_closure_defined_after_an_early_exit_runs_where_it_is_defined() -> None:
    code = """\
def install(rank, model):
    if rank != 0:
        return []

    def hook(module, args, output):
        torch.save(output, "trace.pt")

    return [model.register_forward_hook(hook)]
"""
    ranks, divs = by_line(code)[6]
    assert ranks == "rank 0"
    assert divs[0][:2] == ("return", "rank != 0")
