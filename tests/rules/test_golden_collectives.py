"""The collectives family (DDP102-DDP105) on a realistic multi-function training script, with
its exact findings in a golden file (regenerate with ``pytest --update-goldens``)."""

from __future__ import annotations

import ast
from pathlib import Path

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.settings import Settings
from tests.casekit import check_golden

FIXTURE = Path(__file__).parent / "golden" / "collectives_train.py"
SETTINGS = Settings(select=("DDP102", "DDP103", "DDP104", "DDP105"))


def test_collectives_train_golden(update_goldens: bool) -> None:
    check_golden(FIXTURE, update_goldens, SETTINGS)


def test_collectives_train_fixes() -> None:
    """Fix-all applies no fix of this family (they are all unsafe or absent); with unsafe fixes
    the DDP104 and DDP102 findings go away, the text parses, and nothing else changes."""
    text = FIXTURE.read_text(encoding="utf-8")
    safe, _ = fix_text(text, SETTINGS)
    assert safe == text
    fixed, _ = fix_text(text, SETTINGS, unsafe=True)
    ast.parse(fixed)
    after = analyze(fixed, SETTINGS).findings
    before = analyze(text, SETTINGS).findings
    assert not [f for f in after if f.rule_id in ("DDP104",)]
    assert [f.rule_id for f in after if f.rule_id == "DDP103"] == [
        f.rule_id for f in before if f.rule_id == "DDP103"
    ]
    assert "self.model.module(images.cuda())" in fixed
    assert "model.module(images.cuda())" in fixed
