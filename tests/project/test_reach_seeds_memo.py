"""The seeds of reach.single_process (functions that do distributed things themselves): a
call spelled the same way in several functions of a module is resolved once for the module,
and a qualified name is looked up in the framework tables once for the computation, with the
same answers as one lookup per call."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lsp.project import ProjectIndex, reach

MODULE = """import torch.distributed as dist
import torch.nn.functional as F


def a(x):
    return F.relu(x) + dist.get_rank()


def b(x):
    return x * dist.get_rank()


def c(x):
    return dist.is_initialized() and x


def d(x):
    return F.relu(x) if dist.is_initialized() else x
"""


def test_a_spelling_is_resolved_once_per_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "one.py").write_text(MODULE)
    index = ProjectIndex(tmp_path, cache_dir=False).build()
    summary = index.modules["one"]
    own = index.own_facts(summary)
    heads = reach._distributed_heads(own.aliases)
    functions = summary.facts.functions

    def each_alone() -> list[bool]:
        return [reach._does_distributed(fi, own, {}, heads, reach.BUILTIN) for fi in functions]

    expected = each_alone()
    assert expected == [True, True, False, False]
    resolved: list[str] = []
    looked_up: list[str] = []
    resolve, is_distributed = reach.known_names.resolve, reach.is_distributed_call

    def counting_resolve(name: str, aliases: dict[str, str]) -> str | None:
        resolved.append(name)
        return resolve(name, aliases)

    def counting_lookup(qual: str, frameworks: reach.FrameworkModel = reach.BUILTIN) -> bool:
        looked_up.append(qual)
        return is_distributed(qual, frameworks)

    monkeypatch.setattr(reach.known_names, "resolve", counting_resolve)
    monkeypatch.setattr(reach, "is_distributed_call", counting_lookup)
    spelled: dict[str, bool] = {}
    quals: dict[str, bool] = {}
    got = [
        reach._does_distributed(fi, own, {}, heads, reach.BUILTIN, spelled, quals)
        for fi in functions
    ]
    assert got == expected
    assert sorted(resolved) == ["dist.get_rank", "dist.is_initialized"]
    assert sorted(looked_up) == ["torch.distributed.get_rank", "torch.distributed.is_initialized"]
    assert spelled == {"dist.get_rank": True, "dist.is_initialized": False}
    # Another module with the same spellings: resolved again (its aliases may differ), the
    # qualified names not looked up again.
    resolved.clear()
    looked_up.clear()
    again: dict[str, bool] = {}
    for fi in functions:
        reach._does_distributed(fi, own, {}, heads, reach.BUILTIN, again, quals)
    assert sorted(resolved) == ["dist.get_rank", "dist.is_initialized"] and looked_up == []
