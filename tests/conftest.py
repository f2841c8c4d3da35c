"""Shared pytest options: ``--update-goldens`` rewrites golden files instead of comparing.

The project index caches summaries under ``$XDG_CACHE_HOME``: the whole run (and every
process it starts) gets a cache directory of its own, never the user's."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

_CACHE = tempfile.mkdtemp(prefix="ddp-lsp-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite tests' golden files from the current output (review the diff!)",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))
