"""The rank view's answer (lsp/rankview.py) against the rule findings and itself.

Must hold (issue 17): a hint and a hover agree with the findings. Every collective DDP103
reports is marked as skipped on some path (its hint starts with the warning mark and never
says "all ranks"), every collective marked skipped is one DDP103 reports, and a call DDP104
reports as reached by only some ranks is never hinted as run by all ranks, and a save or a
print DDP501/DDP502 reports as run by every rank is never hinted as rank 0's. Checked over every
rule's own cases and over examples/. And the per-chunk cache: hints after a sequence of edits
are exactly a fresh document's hints.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Pos
from ddp_lsp.lsp import rankview as rank_view
from tests.casekit import unmark

ROOT = Path(__file__).resolve().parents[2]


def _cases() -> list[tuple[str, str, bool]]:
    out: list[tuple[str, str, bool]] = []
    for rule in all_rules():
        for i, case in enumerate(rule.cases):
            out.append((f"{rule.meta.id}-{i}", unmark(case.code).code, case.distributed))
    for path in sorted((ROOT / "examples").rglob("*.py")):
        out.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"), True))
    return out


CASES = _cases()


def view_of(doc: Document, settings: Settings) -> list[tuple[int, rank_view.ChunkView]]:
    an = rank_view.analysis_for(doc, settings, None)
    return [(start, an.view(chunk)) for start, chunk in doc.chunks()]


def hints(doc: Document, settings: Settings) -> list[tuple[int, int, str, bool]]:
    return [
        (start + line, col, label, coll)
        for start, view in view_of(doc, settings)
        for line, col, label, _, coll in view.hints
    ]


@pytest.mark.parametrize(("name", "code", "distributed"), CASES, ids=[c[0] for c in CASES])
def test_hints_agree_with_findings(name: str, code: str, distributed: bool) -> None:
    settings = Settings(
        select=("DDP", "DDP501"), assume_distributed=distributed
    )  # DDP501: off by default
    doc = Document(code, settings.rank_model)
    found = analyze(doc, settings).findings
    views = view_of(doc, settings)
    colls = {Pos(start + c.line, c.col): c for start, view in views for c in view.collectives}
    labels = {(line, col): label for line, col, label, coll in hints(doc, settings) if coll}
    reported: set[Pos] = set()
    for f in found:
        if f.rule_id != "DDP103":
            continue
        # The finding sits on the collective, or on the rank-guarded exit that strands the
        # collectives it names as related locations.
        named = {f.span.start} | {
            r.span.start for r in f.related if r.path is None and r.message in _STRANDED
        }
        hit = {at for at in named if at in colls}
        assert hit, f"{name}: DDP103 at {f.span.start} names no collective of the rank view"
        reported |= hit
    for at in reported:
        c = colls[at]
        assert c.skipped, f"{name}: DDP103 names {at}, but the rank view says no path skips it"
        label = labels[(at.line, at.col)]
        assert label.startswith(rank_view.WARN) and label != "all ranks", label
    skipped = {at for at, c in colls.items() if c.skipped}
    assert skipped <= reported, (
        f"{name}: marked skipped without a DDP103 finding: {skipped - reported}"
    )
    # A save or a print DDP501/DDP502 reports as run by every rank is never hinted rank 0.
    for f in found:
        if f.rule_id in ("DDP501", "DDP502"):
            for start, view in views:
                for st in view.stmts:
                    if start + st.line == f.span.start.line:
                        assert not st.ranks.only_zero, (name, f.message, st.ranks.describe())
    # A DDP forward DDP104 reports as reached by some ranks only is never "all ranks" here.
    for f in found:
        if f.rule_id != "DDP104":
            continue
        for start, view in views:
            for cs in view.calls:
                if Pos(start + cs.line, cs.col) == f.span.start:
                    assert not cs.ranks.everyone or _exit_in_loop(f.message), (name, f.message)


_STRANDED = {"a collective the exiting ranks never reach", "also reached by these ranks only"}


def _exit_in_loop(message: str) -> bool:
    # "rank 0 leaves the loop around ... while the others keep iterating": every rank reaches
    # the call in the first iteration; the finding is about later ones.
    return "the loop" in message


def test_rank_subsets_and_labels() -> None:
    code = """\
import torch.distributed as dist


def train(model, rank, local_rank, loader, step):
    dist.init_process_group("nccl")
    if rank == 0:
        print("saving")
        dist.barrier()
    dist.all_reduce(model)
    if local_rank == 0:
        print("node leader")
    if rank % 2 == 0:
        print("even")
    else:
        print("odd")
    if step > 10:
        print("uniform")
    if rank != 0:
        return
    print("after the exit")
"""
    got = [(line + 1, label) for line, _, label, _ in hints(Document(code), Settings())]
    assert got == [
        (7, "rank 0"),
        (8, f"{rank_view.WARN} rank 0"),
        (9, "all ranks"),
        (11, "local rank 0"),
        (13, "ranks where rank % 2 == 0"),
        (15, "ranks where not (rank % 2 == 0)"),
        (19, "ranks ≠ 0"),
        (20, "rank 0"),
    ]


def test_zero_first_idiom_is_balanced_and_local() -> None:
    code = """\
import torch.distributed as dist


def prepare(local_rank):
    if local_rank != 0:
        dist.barrier()
    download()
    if local_rank == 0:
        dist.barrier()
"""
    got = [
        (line + 1, label)
        for line, _, label, _ in hints(Document(code), Settings(assume_distributed=True))
    ]
    assert got == [(6, "local ranks ≠ 0"), (9, "local rank 0")]


def test_loop_exit_and_decorator() -> None:
    code = """\
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_only


def fit(loader, rank, t):
    for batch in loader:
        if rank != 0:
            continue
        log(batch)
    dist.all_reduce(t)


@rank_zero_only
def report(t):
    print(t)
"""
    got = [
        (line + 1, label)
        for line, _, label, _ in hints(Document(code), Settings(assume_distributed=True))
    ]
    assert got == [(8, "ranks ≠ 0"), (9, "rank 0"), (10, "all ranks"), (15, "rank 0")]


def test_points_name_the_deciding_conditions() -> None:
    code = """\
import torch.distributed as dist


def f(rank, t):
    if rank != 0:
        return
    dist.barrier()
"""
    ((start, view),) = [
        (s, v)
        for s, v in view_of(Document(code), Settings(assume_distributed=True))
        if v.collectives
    ]
    (c,) = view.collectives
    assert c.skipped and "return" in c.why
    texts = [p.text for p in c.ranks.points]
    assert texts == ["`return` under `if rank != 0:` → rank 0 continue"]
    assert c.ranks.points[0].line + start == 5  # the `return` itself


_EDITS = [
    "    if rank == 0:\n",
    "        dist.barrier()\n",
    "    if rank != 0:\n        return\n",
    "import torch.distributed as dist\n",
    "def g(rank):\n    if is_main_process():\n        dist.all_reduce(x)\n",
    "\n",
    "    print(1)\n",
    "def is_main_process():\n    return dist.get_rank() == 0\n",
]


@pytest.mark.parametrize("seed", range(6))
def test_incremental_hints_equal_fresh(seed: int) -> None:
    rng = random.Random(seed)
    base = (ROOT / "examples" / "train_buggy.py").read_text(encoding="utf-8")
    settings = Settings(assume_distributed=True)
    doc = Document(base, settings.rank_model)
    hints(doc, settings)  # fill the cache
    for _ in range(12):
        lines = doc.lines
        line = rng.randrange(len(lines))
        if rng.random() < 0.7:
            doc.apply_edit(Pos(line, 0), Pos(line, 0), rng.choice(_EDITS))
        else:
            end = min(line + rng.randrange(1, 4), len(lines) - 1)
            doc.apply_edit(Pos(line, 0), Pos(end, 0), "")
        # A request racing the analysis uses the last facts (the server's pending path)...
        an = rank_view.analysis_for(doc, settings, None, pending=True)
        for _, chunk in doc.chunks():
            an.view(chunk)
        # ...and the next request, with the facts merged, is exactly a fresh document's.
        assert hints(doc, settings) == hints(Document(doc.text, settings.rank_model), settings)


def test_pending_request_does_not_merge_and_catches_up() -> None:
    code = "import os\n\n\ndef f(rank, t):\n    if rank == 0:\n        dist.barrier()\n"
    settings = Settings()
    doc = Document(code, settings.rank_model)
    assert hints(doc, settings) == []  # not distributed code yet
    doc.apply_edit(Pos(0, 0), Pos(0, 0), "import torch.distributed as dist\n")
    an = rank_view.analysis_for(doc, settings, None, pending=True)
    assert not an.facts.distributed  # the last facts, not merged again
    assert hints(doc, settings) == [(6, 8, f"{rank_view.WARN} rank 0", True)]


def test_only_the_visible_chunks_are_computed_after_an_edit() -> None:
    body = "".join(
        f"def f{i}(rank, t):\n    if rank == 0:\n        dist.barrier()\n    return t\n\n\n"
        for i in range(200)
    )
    code = "import torch.distributed as dist\n\n\n" + body
    settings = Settings(assume_distributed=True)
    doc = Document(code, settings.rank_model)
    an = rank_view.analysis_for(doc, settings, None)
    for _, chunk in doc.chunks():
        an.view(chunk)
    doc.apply_edit(Pos(603, 0), Pos(603, 0), "    print(t)\n")
    an = rank_view.analysis_for(doc, settings, None)
    for _, chunk in rank_view.chunks_in(doc, 590, 640):
        an.view(chunk)
    assert an.computed == 1  # the edited chunk; its neighbours come from the cache


def test_a_rank_predicate_from_another_file_is_a_point_there(tmp_path: Path) -> None:
    from tests.project.helpers import facts_of

    (tmp_path / "utils.py").write_text(
        "import torch.distributed as dist\n\n\ndef is_main_process():\n"
        "    return dist.get_rank() == 0\n",
        encoding="utf-8",
    )
    train = (
        "import torch.distributed as dist\n"
        "from utils import is_main_process\n\n\n"
        "def fit(t):\n"
        "    dist.init_process_group('nccl')\n"
        "    if is_main_process():\n"
        "        dist.barrier()\n"
    )
    (tmp_path / "train.py").write_text(train, encoding="utf-8")
    project = facts_of(tmp_path).modules["train"]
    settings = Settings()
    doc = Document(train, settings.rank_model)
    an = rank_view.analysis_for(doc, settings, None, project)
    colls = [c for _, chunk in doc.chunks() for c in an.view(chunk).collectives]
    (barrier,) = colls
    assert barrier.skipped and barrier.ranks.describe() == "rank 0"
    foreign = [p for p in barrier.ranks.points if p.path is not None]
    assert [(p.shown, p.other_line) for p in foreign] == [("utils.py", 4)], barrier.ranks.points
    assert foreign[0].path == str(tmp_path / "utils.py")


def test_hover_is_quiet_on_calls_every_rank_makes() -> None:
    from types import SimpleNamespace

    code = """\
import torch.distributed as dist


def log(msg):
    print(msg)


def train(rank, t):
    dist.init_process_group("nccl")
    log("start")
    if rank == 0:
        log("rank 0 only")
"""
    doc = Document(code)
    unit = SimpleNamespace(
        enabled=True,
        doc=doc,
        settings=Settings(),
        env=None,
        project=None,
        dirty=False,
        path=Path("/p/train.py"),
    )
    assert rank_view.hover(None, unit, Pos(8, 10)) is None  # init_process_group: every rank
    text = rank_view.hover(
        None, unit, Pos(9, 5)
    )  # log("start"): every rank, but not its other call
    assert text is not None and "called here on all ranks" in text
    assert "- line 12: rank 0" in text
    text = rank_view.hover(None, unit, Pos(11, 9))
    assert text is not None and "called here on rank 0" in text and "train.py:11" in text
