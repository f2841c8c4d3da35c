"""A cold build frees what it made by reference counts: no reference cycles.

``project_view`` indexes and computes with the cyclic collector off
(:func:`~ddp_lsp.project.index.no_collection`): millions of objects at 2,000 files, none in
a cycle, so the collector need never walk them. An object in a cycle (a closure that calls
itself, an object holding its own bound method) is not freed when the build drops it: it
and everything it reaches (a function's syntax tree, the index and every summary) wait for
the collector, whose first pass then walks them all (2-3 CPU s of a cold check at 2,000
files). The test builds a project with the collector off and asks it what is left over.
"""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

import pytest

from ddp_lsp.config import Settings
from ddp_lsp.project import build
from ddp_lsp.project.resolve import Resolver
from tests.gcprobe import cyclic_garbage

from .helpers import FIXTURES


def _ours(o: object) -> bool:
    """Made by the index or the analysis: our classes, syntax trees, our functions."""
    module = getattr(type(o), "__module__", "") or ""
    if module.startswith("ddp_lsp") or module == "ast":
        return True
    return callable(o) and (getattr(o, "__module__", "") or "").startswith("ddp_lsp")


def _left_over(make: object) -> list[object]:
    gc.collect()
    gc.disable()
    try:
        make()  # type: ignore[operator]
        return [o for o in cyclic_garbage() if _ours(o)]
    finally:
        gc.enable()


def test_a_cold_project_view_leaves_no_cycles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "deit"
    shutil.copytree(FIXTURES / "deit", root)
    views = []
    left = _left_over(lambda: views.append(build.project_view(root, Settings(), workers=1)))
    assert views[0].files == 5 and views[0].facts  # it did build (and found facts)
    assert [type(o).__name__ for o in left[:20]] == []


def test_an_untracked_resolver_is_not_a_cycle(tmp_path: Path) -> None:
    # The `ddp-lsp check` resolver records nothing (track=False): its no-op hooks must not be
    # its own bound methods.
    from ddp_lsp.project import ProjectIndex

    (tmp_path / "a.py").write_text("def f(x):\n    return x\n")
    index = ProjectIndex(tmp_path, cache_dir=False)
    index.build(list(index.files()))
    left = _left_over(lambda: Resolver(index, track=False).function("a", "f"))
    assert [type(o).__name__ for o in left] == []
