"""Shared pytest options: ``--update-goldens`` rewrites golden files instead of comparing;
``--shard I/N`` runs the I-th of N balanced parts of the selected tests (``.ci/run`` runs two
at once, one per CPU); ``--record-durations`` rewrites the per-file timings the shards are
balanced by (``tests/durations.json``).

The project index caches summaries under ``$XDG_CACHE_HOME``: the whole run (and every
process it starts) gets a cache directory of its own, never the user's."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

_CACHE = tempfile.mkdtemp(prefix="ddp-lsp-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

_SHARD_DESELECTED = pytest.StashKey[bool]()
DURATIONS = Path(__file__).resolve().parent / "durations.json"

# Tests that must not run beside each other go to the same shard, whatever their weights.
# The runtime and preflight tests start torch ranks that meet in gloo collectives and compare
# how soon a run ends with a process-group timeout: two such runs at once on 2 CPUs slow each
# other's ranks (what made pytest-xdist slower than one process, docs/performance.md). The
# preflight tests that inject a hung probe look for leftover /dev/shm files by a glob that
# any concurrent preflight run would match.
TOGETHER: tuple[tuple[str, ...], ...] = (
    (
        "tests/runtime/",
        "tests/preflight/",
        "tests/lsp/test_preflight.py",
        "tests/lsp/test_lifecycle.py",
    ),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite tests' golden files from the current output (review the diff!)",
    )
    parser.addoption(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only the I-th (1-based) of N parts of the selected tests, whole files per "
        "part, balanced by tests/durations.json (same selection, same split in every part)",
    )
    parser.addoption(
        "--record-durations",
        action="store_true",
        default=False,
        help="after the run, write each test file's seconds and test count to "
        "tests/durations.json (the whole suite unsharded; with --shard, that shard's files are "
        "updated and the others' kept: run every shard at once, as .ci/run does)",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``; a usage error for anything that is not 1 <= I <= N."""
    index, sep, total = text.partition("/")
    if sep and index.isdigit() and total.isdigit() and 1 <= int(index) <= int(total):
        return int(index), int(total)
    raise pytest.UsageError(f"--shard wants I/N with 1 <= I <= N, got {text!r}")


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _unit_of(path: str) -> str:
    for group in TOGETHER:
        if any(path == p or (p.endswith("/") and path.startswith(p)) for p in group):
            return group[0]
    return path


def split(counts: dict[str, int], recorded: dict[str, list[float]], n: int) -> list[set[str]]:
    """Test files -> N sets of files, longest first into the least loaded part (LPT).

    A file's weight is its recorded seconds; a file not recorded yet weighs its test count
    times the recorded average per test. Files of one ``TOGETHER`` group are one unit. Ties
    break by name, so every shard process computes the same split."""
    seconds = sum(s for s, _ in recorded.values())
    tests = sum(int(c) for _, c in recorded.values())
    per_test = seconds / tests if tests else 1.0
    units: dict[str, list[str]] = defaultdict(list)
    weight: dict[str, float] = defaultdict(float)
    for path, count in counts.items():
        unit = _unit_of(path)
        units[unit].append(path)
        weight[unit] += recorded[path][0] if path in recorded else count * per_test
    parts: list[set[str]] = [set() for _ in range(n)]
    load = [0.0] * n
    for unit in sorted(units, key=lambda u: (-weight[u], u)):
        i = min(range(n), key=lambda k: (load[k], k))
        parts[i].update(units[unit])
        load[i] += weight[unit]
    return parts


def _recorded() -> dict[str, list[float]]:
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): [float(v[0]), float(v[1])] for k, v in data.get("files", {}).items()}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    text = config.getoption("--shard")
    if not text:
        return
    index, total = parse_shard(text)
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[_file_of(item.nodeid)] += 1
    mine = split(counts, _recorded(), total)[index - 1]
    keep = [item for item in items if _file_of(item.nodeid) in mine]
    drop = [item for item in items if _file_of(item.nodeid) not in mine]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        config.stash[_SHARD_DESELECTED] = True


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A selection small enough to fall wholly into the other shards leaves this one empty:
    # that is not "no tests collected" (exit 5), the tests run there.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and session.config.stash.get(
        _SHARD_DESELECTED, False
    ):
        session.exitstatus = pytest.ExitCode.OK


def merge_recorded(
    previous: dict[str, list[float]], now: dict[str, list[float]], *, sharded: bool
) -> dict[str, list[float]]:
    """The durations to write: a whole run's own (files gone from the suite drop out); a
    shard's over the previous record (the other shards' files keep their seconds)."""
    files = {**previous, **now} if sharded else dict(now)
    return {p: [round(float(files[p][0]), 2), int(files[p][1])] for p in sorted(files)}


class _Recorder:
    def __init__(self, sharded: bool) -> None:
        self.sharded = sharded
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, set[str]] = defaultdict(set)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = _file_of(report.nodeid)
        self.seconds[path] += report.duration
        self.tests[path].add(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        now = {p: [round(self.seconds[p], 2), len(self.tests[p])] for p in self.seconds}
        files = merge_recorded(_recorded(), now, sharded=self.sharded)
        doc = {
            "about": "seconds (setup + call + teardown) and test count per file, from "
            "`pytest --record-durations`; only the ratios matter: they balance --shard",
            "files": files,
        }
        DURATIONS.write_text(dumps(doc), encoding="utf-8")


def dumps(doc: dict[str, object]) -> str:
    """The durations file with one line per test file (small diffs when re-recorded)."""
    files = doc["files"]
    assert isinstance(files, dict)
    lines = [f"  {json.dumps(p)}: {json.dumps(v)}" for p, v in files.items()]
    about = json.dumps(doc["about"])
    return "{\n" + f' "about": {about},\n "files": {{\n' + ",\n".join(lines) + "\n }\n}\n"


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-durations"):
        sharded = bool(config.getoption("--shard"))
        config.pluginmanager.register(_Recorder(sharded), "ddp-lsp-record-durations")
