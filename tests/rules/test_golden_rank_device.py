"""The rank/device family (DDP302-DDP304, DDP503-DDP506) on a realistic multi-function torchrun
script, with its exact findings in a golden file (regenerate with ``pytest --update-goldens``
and review the diff)."""

from __future__ import annotations

import ast
from pathlib import Path

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.env import Environment, LaunchInfo
from ddp_lsp.core.settings import Settings
from tests.casekit import check_golden

FIXTURE = Path(__file__).parent / "golden" / "rank_device_train.py"
RULES = ("DDP302", "DDP303", "DDP304", "DDP503", "DDP504", "DDP505", "DDP506")
SETTINGS = Settings(select=RULES)
# Two nodes of 8 GPUs, as the run script would say; fixed so the golden does not depend on it.
ENV = Environment(
    launch=LaunchInfo(nproc_per_node=8, num_nodes=2, launcher="torchrun", sources=("run.sh",))
)


def test_rank_device_train_golden(update_goldens: bool) -> None:
    check_golden(FIXTURE, update_goldens, SETTINGS, ENV)


def test_every_rule_of_the_family_fires_once() -> None:
    found = analyze(FIXTURE.read_text(encoding="utf-8"), SETTINGS, ENV).findings
    assert sorted(f.rule_id for f in found) == sorted(RULES)


def test_fix_all_removes_every_fixable_finding_once() -> None:
    """Safe fixes: all but DDP302 (no fix) go away, the text parses, a second run is a no-op,
    and only the lines the fixes own change."""
    text = FIXTURE.read_text(encoding="utf-8")
    fixed, applied = fix_text(text, SETTINGS, env=ENV)
    assert applied == 6
    ast.parse(fixed)
    left = analyze(fixed, SETTINGS, ENV).findings
    assert [f.rule_id for f in left] == ["DDP302"]
    again, more = fix_text(fixed, SETTINGS, env=ENV)
    assert again == fixed and more == 0
    assert "    torch.cuda.set_device(local_rank)\n    dist.init_process_group(" in fixed
    assert "model = model.cuda(local_rank)" in fixed
    assert 'torch.load(path, map_location="cpu")' in fixed
    assert "torch.save(model.module.state_dict(), " in fixed
    assert "set_seed(args.seed + rank)" in fixed
    assert fixed.rstrip().endswith(
        "        save(model, optimizer, epoch, args)\n"
        "    if dist.is_initialized():\n"
        "        dist.destroy_process_group()\n"
        "\n\n"
        'if __name__ == "__main__":\n'
        "    main()"
    )
    # Everything else is untouched: six edited or inserted places, nothing removed.
    before, after = text.splitlines(), fixed.splitlines()
    assert len(after) == len(before) + 3


def test_one_process_launch_silences_the_device_rules() -> None:
    """A launch configured with one process: GPU 0 is right, one seed is one rank."""
    single = Environment(launch=LaunchInfo(nproc_per_node=1, num_nodes=1, sources=("run.sh",)))
    found = analyze(FIXTURE.read_text(encoding="utf-8"), SETTINGS, single).findings
    assert sorted(f.rule_id for f in found) == ["DDP302", "DDP304", "DDP506"]
