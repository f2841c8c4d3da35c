"""Shared helpers of the project-index tests: building an index and flattening its facts."""

from __future__ import annotations

import random
from pathlib import Path

from ddp_lsp.project import ProjectFacts, ProjectIndex, compute

FIXTURES = Path(__file__).parent / "fixtures"


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
