"""Early cutoff of the module merge: an edit that changes a chunk's facts only in what the
merge ignores keeps the module facts object (every other chunk's findings stay cached), and
the facts kept are always equal to a fresh merge of the edited text (never stale)."""

from __future__ import annotations

import re

import pytest

from bench.gen import module
from ddp_lsp.core import document as document_module
from ddp_lsp.core.document import Document, split_lines
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Pos

SETTINGS = Settings(select=("DDP", "DDP501"))  # DDP501 (off by default) included

CODE = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank):
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(2, 2))
    return model


def report(value):
    total = value * 2
    print(total)
    return total
"""


def _facts_of(text: str):
    return Document(text, SETTINGS.rank_model).module_facts()


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a Document merged its chunks' facts."""
    calls: list[int] = []
    real = document_module.merge

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(document_module, "merge", counting)
    return calls


def test_an_edit_the_merge_ignores_keeps_the_module_facts(merges: list[int]) -> None:
    doc = Document(CODE, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    before = doc.module_facts()
    merged = len(merges)
    # `print(total)` -> `print(totalx)`: only the names the chunk loads change (no import).
    line = split_lines(CODE).index("    print(total)\n")
    doc.apply_edit(Pos(line, 15), Pos(line, 15), "x")
    assert doc.text != CODE
    assert doc.module_facts() is before
    assert len(merges) == merged  # no merge ran
    assert doc.module_facts() == _facts_of(doc.text)
    analyze(doc, SETTINGS)
    assert doc.rules_ran == 1  # the edited chunk alone


def test_an_edit_the_merge_reads_gives_new_module_facts(merges: list[int]) -> None:
    doc = Document(CODE, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    before = doc.module_facts()
    merged = len(merges)
    # `model = DDP(...)` -> `model = DDPx(...)`: the binding no longer has a known kind.
    line = split_lines(CODE).index("    model = DDP(torch.nn.Linear(2, 2))\n")
    doc.apply_edit(Pos(line, 15), Pos(line, 15), "x")
    after = doc.module_facts()
    assert len(merges) == merged + 1
    assert after is not before
    assert after != before
    assert after == _facts_of(doc.text)


def test_every_identifier_edit_keeps_the_facts_equal_to_a_fresh_merge(merges: list[int]) -> None:
    """Whether the cutoff applies or not, the module facts after each edit equal a fresh
    merge's (this fails if the cutoff keeps facts a changed chunk no longer supports)."""
    text = module(160)
    doc = Document(text, SETTINGS.rank_model)
    doc.module_facts()
    lines = split_lines(text)
    kept = 0
    for i, line in enumerate(lines):
        if not line.startswith("    ") or i % 3:
            continue
        m = re.search(r"[A-Za-z_]\w*", line)
        if m is None:
            continue
        doc.module_facts()
        merged = len(merges)
        doc.apply_edit(Pos(i, m.end()), Pos(i, m.end()), "q")
        edited = doc.module_facts()
        kept += len(merges) == merged
        assert edited == _facts_of(doc.text), (i, line)
        doc.apply_edit(Pos(i, m.end()), Pos(i, m.end() + 1), "")
        assert doc.module_facts() == _facts_of(doc.text), (i, line)
    assert doc.text == text
    assert kept > 0  # the cutoff applied to some of these edits


SAVES = """\
import torch
import torch.distributed as dist


def is_main_process():
    return dist.get_rank() == 0


def checkpoint(model, epoch):
    torch.save(model.state_dict(), f"ckpt_{epoch}.pt")


def evaluate(model, loader, flag):
    for x in loader:
        if flag:
            out = model(x)
            print(out.detach())
"""


def test_a_guard_fix_does_not_read_every_functions_properties() -> None:
    """DDP501's fix spells the guard with the module's rank-0 predicate: building it must not
    make the chunk depend on every function's properties, or any edit that changes one (a
    call renamed in another function) would re-run it."""
    doc = Document(SAVES, SETTINGS.rank_model)
    first = analyze(doc, SETTINGS)
    save = [f for f in first.findings if f.rule_id == "DDP501"]
    assert save and "is_main_process()" in save[0].fixes[0].edits[0].text
    line = split_lines(SAVES).index("            print(out.detach())\n")
    col = split_lines(SAVES)[line].index("print")
    before = doc.module_facts()
    doc.apply_edit(Pos(line, col), Pos(line, col), "dist.barrier(); ")  # evaluate's props change
    assert doc.module_facts() != before
    again = analyze(doc, SETTINGS)
    assert doc.rules_ran == 1  # evaluate's chunk alone
    assert [f for f in again.findings if f.rule_id == "DDP501"] == save
