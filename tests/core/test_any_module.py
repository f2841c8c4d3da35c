"""Rules whose bug is a bug in any PyTorch program (``RuleMeta.any_module``) run in modules that
are not distributed code; every other rule stays silent there, also after an edit makes the
module distributed code or stops it being one (docs/accuracy.md M19)."""

from __future__ import annotations

from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Pos

# Every rule, DDP501 (off by default) included.
_ALL = Settings(select=("DDP", "DDP501"))

# A single-GPU benchmark: every step's loss kept with its graph (DDP301, any module), a save
# no rank guard protects (DDP501, distributed code only) and a fixed GPU index (DDP504).
SCRIPT = """\
import torch


def bench(model, loader, optimizer):
    model = model.cuda(0)
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.cuda(0)), y.cuda(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss)
    torch.save(model.state_dict(), "bench.pt")
    return losses
"""


def _rules(findings: object) -> set[str]:
    return {f.rule_id for f in findings}  # type: ignore[attr-defined]


def test_the_flag_matches_the_rule_docs() -> None:
    for rule in all_rules():
        import sys

        doc = sys.modules[type(rule).__module__].__doc__ or ""
        assert ("Any module:" in doc) == rule.meta.any_module, rule.meta.id


def test_any_module_rules_report_in_a_module_that_is_not_distributed_code() -> None:
    found = analyze(SCRIPT).findings
    assert _rules(found) == {"DDP301"}
    assert [f.span.start.line for f in found] == [11]
    # The same code as distributed code gets the rules that need several ranks too.
    dist = analyze("import torch.distributed as dist\n" + SCRIPT, _ALL).findings
    assert {"DDP301", "DDP501"} <= _rules(dist)


def test_an_edit_that_makes_the_module_distributed_runs_every_rule_again() -> None:
    doc = Document(SCRIPT)
    assert _rules(analyze(doc, _ALL).findings) == {"DDP301"}
    doc.apply_edit(Pos(0, 0), Pos(0, 0), "import torch.distributed as dist\n")
    after = _rules(analyze(doc, _ALL).findings)
    assert after == _rules(analyze(doc.text, _ALL).findings)
    assert "DDP501" in after
    doc.apply_edit(Pos(0, 0), Pos(1, 0), "")
    assert _rules(analyze(doc).findings) == {"DDP301"}


def test_messages_of_a_single_process_module_name_no_ranks() -> None:
    # DDP406 in a single-GPU script: the pages are copied into every worker, not "of every rank".
    code = """\
import json

import torch
from torch.utils.data import DataLoader, Dataset


class Captions(Dataset):
    def __init__(self, path):
        with open(path) as f:
            self.rows = [json.loads(line) for line in f]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def main(path):
    loader = DataLoader(Captions(path), batch_size=8, num_workers=4, pin_memory=True)
    for batch in loader:
        print(batch)
"""
    (plain,) = [f for f in analyze(code).findings if f.rule_id == "DDP406"]
    assert "every worker and host memory" in plain.message and "rank" not in plain.message
    dist = [
        f
        for f in analyze("import torch.distributed as dist\n" + code).findings
        if f.rule_id == "DDP406"
    ]
    assert "every worker of every rank" in dist[0].message
