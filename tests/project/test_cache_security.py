"""The index cache holds plain data in private folders, and a poisoned entry runs nothing.

Whoever can write to the cache (a shared ``XDG_CACHE_HOME`` on a cluster, a CI cache restored from
another branch) must not be able to run code at the next ``ddp-lsp check``, nor to change what
the analysis believes about a file. The attack test plants a payload at the exact path of every
entry a first ``check`` wrote and runs ``check`` again: the payload must not run (it would write
a marker file) and the findings must be those of the first run.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ddp_lsp.project import ProjectIndex
from ddp_lsp.project import index as project_index
from ddp_lsp.project.index import CACHE_VERSION, MAX_ENTRY_BYTES

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "deit"
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX owners and modes")


class _Payload:
    """Unpickling this runs ``code``: what an attacker would leave in a pickle cache."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (self.code,))


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE, root)
    return root


def _check(root: Path, cache_home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "ddp_lsp", "check", ".", "--output-format", "json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _entries(cache_home: Path) -> list[Path]:
    return sorted(p for p in cache_home.rglob("*") if p.is_file() and not p.name.startswith("."))


def test_a_poisoned_cache_entry_runs_nothing_and_changes_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path)
    cache_home = tmp_path / "cache"
    first = _check(root, cache_home)
    assert first.returncode == 1, first.stderr  # the fixture has findings
    assert "DDP101" in first.stdout  # cross-file: the project index was used
    entries = _entries(cache_home)
    assert len(entries) >= 5, entries
    marker = tmp_path / "payload-ran.txt"
    payload = pickle.dumps(
        (CACHE_VERSION, _Payload(f"open({str(marker)!r}, 'w').write('ran')")), protocol=2
    )
    for entry in entries:
        entry.write_bytes(payload)
    second = _check(root, cache_home)
    assert not marker.exists(), "the cache entry was unpickled: its code ran"
    assert second.returncode == first.returncode, second.stderr
    assert json.loads(second.stdout) == json.loads(first.stdout)
    # The bad entries were ignored and rewritten: a third run reads them all from the cache.
    for entry in entries:
        assert json.loads(entry.read_bytes())["version"] == CACHE_VERSION


def _build(root: Path, cache: Path) -> ProjectIndex:
    return ProjectIndex(root, cache_dir=cache).build()


def _rewrite(entry: Path, change: Any) -> None:
    doc = json.loads(entry.read_bytes())
    change(doc)
    entry.write_text(json.dumps(doc))


def _set_first_function_line(doc: dict[str, Any], value: Any) -> None:
    # summary -> facts (field 5) -> functions (field 3) -> first FunctionInfo -> line (field 5)
    doc["summary"][5][3][0][5] = value


def _set_first_function_gates(doc: dict[str, Any], value: Any) -> None:
    # ... first FunctionInfo -> gates (field 6): a GateFacts (defaults, sites)
    doc["summary"][5][3][0][6] = value


BAD_ENTRIES = {
    "not JSON": lambda e: e.write_bytes(b"\x80\x04garbage"),
    "truncated": lambda e: e.write_bytes(e.read_bytes()[:40]),
    "another version": lambda e: _rewrite(e, lambda d: d.update(version=CACHE_VERSION - 1)),
    "another shape": lambda e: _rewrite(e, lambda d: d.update(schema="0" * 16)),
    "another key": lambda e: _rewrite(e, lambda d: d.update(key="0" * 32)),
    "a field of the wrong type": lambda e: _rewrite(e, lambda d: _set_first_function_line(d, "12")),
    "a bool for an int": lambda e: _rewrite(e, lambda d: _set_first_function_line(d, True)),
    # The gate summary as the prefix-coded strings of an older version: never parsed.
    "a gate site as a string": lambda e: _rewrite(
        e, lambda d: _set_first_function_gates(d, [[], ["gate-site:dist.barrier|||"]])
    ),
    "a field missing": lambda e: _rewrite(e, lambda d: d["summary"].pop()),
    "an extra key": lambda e: _rewrite(e, lambda d: d.update(extra=1)),
    "a list for the entry": lambda e: e.write_text("[1, 2, 3]"),
    "over the size cap": lambda e: e.write_bytes(b" " * (MAX_ENTRY_BYTES + 1)),
}


@pytest.mark.parametrize("how", sorted(BAD_ENTRIES))
def test_an_entry_that_fails_verification_is_a_miss_and_is_rewritten(
    how: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = _build(FIXTURE, cache)
    engine = first.summaries["engine.py"]
    assert engine.facts.functions, "the test edits the first function of engine.py"
    [entry] = [p for p in cache.rglob("*.json") if p.stem == engine.digest]
    BAD_ENTRIES[how](entry)
    second = _build(FIXTURE, cache)
    assert second._parsed == {"engine.py"}
    assert second.summaries == first.summaries
    third = _build(FIXTURE, cache)  # rewritten: read back from the disk cache
    assert third.parsed == 0 and third.cache.hits == len(first.summaries)
    assert third.summaries == first.summaries


@posix_only
def test_cache_folders_are_private(tmp_path: Path) -> None:
    home = tmp_path / "xdg"  # does not exist yet: created 0700, as the XDG spec asks
    os.umask(old := os.umask(0o022))  # the usual umask, whatever the test runner's
    try:
        cache = home / "ddp-lsp" / "index" / "v1"
        _build(FIXTURE, cache)
    finally:
        os.umask(old)
    for d in (home, home / "ddp-lsp", home / "ddp-lsp" / "index", cache):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    shards = [p for p in cache.iterdir() if p.is_dir()]
    files = list(cache.rglob("*.json"))
    assert shards and files
    for p in shards:
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


@posix_only
def test_an_existing_cache_folder_of_ours_is_made_private(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    cache.chmod(0o755)  # as versions before 0.1.0 left it
    _build(FIXTURE, cache)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def _refused(
    cache: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index works without the cache, says so once, and neither reads nor writes it."""
    monkeypatch.setattr(project_index, "_warned", set())
    before = sorted(p.name for p in cache.rglob("*"))
    with caplog.at_level(logging.WARNING, logger="ddp_lsp.project"):
        index = _build(FIXTURE, cache)
        again = _build(FIXTURE, cache)
    warnings = [r.getMessage() for r in caplog.records if "index cache" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per process and folder
    assert "\n" not in warnings[0]
    assert str(cache) in warnings[0]
    assert index.cache.directory is None and index.cache.hits == 0
    assert index.parsed == len(index.summaries) == again.parsed
    assert sorted(p.name for p in cache.rglob("*")) == before  # nothing written


@posix_only
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_cache_folder_writable_by_others_is_not_used(
    mode: int,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "cache"
    _build(FIXTURE, cache)  # a cache full of (good) entries
    cache.chmod(mode)
    _refused(cache, caplog, monkeypatch)
    assert "writable by other users" in caplog.text


@posix_only
def test_a_cache_folder_owned_by_another_user_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    _build(FIXTURE, cache)
    if os.getuid() == 0:
        os.chown(cache, 65534, -1)  # really someone else's (nobody)
    else:
        # Not root: this user cannot give a folder away; be someone else instead.
        me = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: me + 1)
    _refused(cache, caplog, monkeypatch)
    assert "owned by uid" in caplog.text


@posix_only
def test_a_cache_under_a_folder_others_can_write_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Others could rename our folder away and put theirs in its place; /tmp-like sticky
    # folders are fine (next test).
    shared = tmp_path / "shared"
    shared.mkdir()
    cache = shared / "ddp-lsp"
    _build(FIXTURE, cache)
    shared.chmod(0o777)
    _refused(cache, caplog, monkeypatch)
    assert f"{shared} is writable by other users" in caplog.text


@posix_only
def test_a_cache_under_a_sticky_shared_folder_is_used(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    cache = shared / "ddp-lsp"
    _build(FIXTURE, cache)
    again = _build(FIXTURE, cache)
    assert again.cache.directory == cache and again.parsed == 0


@posix_only
def test_an_entry_of_another_user_or_writable_by_others_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = _build(FIXTURE, cache)
    [entry] = [p for p in cache.rglob("*.json") if p.stem == first.summaries["main.py"].digest]
    entry.chmod(0o666)
    assert _build(FIXTURE, cache)._parsed == {"main.py"}
    # Rewritten (0600) by that build: now a hit again.
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert _build(FIXTURE, cache).parsed == 0
    # A symbolic link in place of an entry is never followed.
    target = tmp_path / "elsewhere.json"
    target.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(target)
    assert _build(FIXTURE, cache)._parsed == {"main.py"}


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    # The XDG spec: relative paths are invalid. A relative one would put the cache inside
    # whatever folder the editor started the server in: the repository.
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    assert project_index.default_cache_dir().is_absolute()


@posix_only
def test_the_cli_says_once_why_it_does_not_use_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path)
    cache_home = tmp_path / "shared-cache"
    cache_home.mkdir()
    cache_home.chmod(0o777)  # a shared XDG_CACHE_HOME, not sticky
    result = _check(root, cache_home)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    warnings = [line for line in result.stderr.splitlines() if "index cache" in line]
    assert warnings == [
        f"warning: not using the index cache {project_index.default_cache_dir()}: "
        f"{cache_home} is writable by other users (mode 0777)"
    ], result.stderr
    assert "DDP101" in result.stdout  # the project view still works, from memory
    assert not list(cache_home.rglob("*.json"))


def test_an_entry_is_written_through_a_private_temporary_file(tmp_path: Path) -> None:
    from ddp_lsp.project import index as index_mod

    folder = tmp_path / "ab"
    file = folder / "abcd.json"
    index_mod._write_entry(file, {"x": 1}, 1000)  # the folder is made
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert file.read_bytes() == b'{"x":1}'
    # The name this process would take next is taken (a process of this id died after
    # creating it): a random one instead, and the stale file is left alone.
    n = next(index_mod._temps)
    taken = folder / f".tmp-{os.getpid()}-{n + 1}.json"
    taken.write_text("stale")
    index_mod._write_entry(file, {"x": 2}, 1000)
    assert file.read_bytes() == b'{"x":2}' and taken.read_text() == "stale"
    assert sorted(p.name for p in folder.iterdir()) == sorted(["abcd.json", taken.name])
