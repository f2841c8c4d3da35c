"""Rules that are off by default (``RuleMeta.default_on``): DDP501 runs only when ``select``
names its full id (docs/accuracy.md: below 0.90 on real code)."""

from __future__ import annotations

from pathlib import Path

from ddp_lsp.config import load_settings
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.settings import Settings

_SAVE = """\
import torch
import torch.distributed as dist


def train(model):
    dist.init_process_group("nccl")
    torch.save(model.state_dict(), "last.pt")
"""


def _ids(settings: Settings) -> set[str]:
    return {f.rule_id for f in analyze(_SAVE, settings).findings}


def test_ddp501_is_off_by_default() -> None:
    off = {r.meta.id for r in all_rules() if not r.meta.default_on}
    assert "DDP501" in off


def test_off_by_default_runs_only_when_named() -> None:
    assert "DDP501" not in _ids(Settings())
    assert not Settings().enabled("DDP501", default_on=False)
    for select in (("DDP", "DDP501"), ("DDP501",)):
        assert "DDP501" in _ids(Settings(select=select)), select
    # a family prefix is not its name
    assert "DDP501" not in _ids(Settings(select=("DDP5",)))
    # ignore still wins over a selector as specific as itself
    assert "DDP501" not in _ids(Settings(select=("DDP", "DDP501"), ignore=("DDP501",)))
    # default-on rules are unchanged by the bare prefix
    assert Settings().enabled("DDP502", default_on=True)


def test_extend_select_in_pyproject_turns_it_on(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lsp]\nextend-select = ["DDP501"]\n')
    settings = load_settings(tmp_path)
    assert "DDP501" in _ids(settings)
