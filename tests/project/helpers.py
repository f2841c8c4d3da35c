"""Shared helpers of the project-index tests: building an index and flattening its facts."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from ddp_lsp.project import ProjectFacts, ProjectIndex, compute

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_copy(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of ``fixtures/<name>`` under ``tmp_path`` that the tests may edit, with its own
    index cache (``XDG_CACHE_HOME``)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    return root


def build(root: Path, cache_dir: Path | None = None, seed: int | None = None) -> ProjectIndex:
    index = ProjectIndex(root, cache_dir=cache_dir if cache_dir is not None else False)
    paths = list(index.files())
    if seed is not None:
        random.Random(seed).shuffle(paths)
    return index.build(paths)


def plain(pf: ProjectFacts) -> dict[str, object]:
    """Everything the facts say, as comparable plain data (their mappings do not compare)."""
    out: dict[str, object] = {}
    for name, m in pf.modules.items():
        out[name] = (
            m.path,
            sorted(m.extra_kinds.items()),
            sorted(
                (k, v.target, sorted(v.props), sorted(v.origins.items()))
                for k, v in m.callee_props.items()
            ),
            m.distributed,
        )
    return out


def facts_of(root: Path) -> ProjectFacts:
    return compute(build(root))
