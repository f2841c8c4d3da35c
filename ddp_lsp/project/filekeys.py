"""Each file's summary key without reading the files that did not change since the last run.

The project's state (:func:`~ddp_lsp.project.snapshot.project_key`) names every file's summary
key, a hash of its bytes (:meth:`~ddp_lsp.project.index.ProjectIndex.content_key`): a warm
``ddp-lsp check FILE`` of a 2,000-file project read and hashed 20 MB to learn that nothing
changed. The keys are kept on disk beside the snapshot (``<hash>.keys.json``), each with the
``stat`` of the file it was computed from (device, inode, size, modification and change times
in nanoseconds) and the module path the key names; a file whose ``stat`` and module path are
those stored gets its stored key without being read, as git's index, make and mypy decide.

A file changed within :data:`RACY_NS` before the run stats it is not stored ("racily clean"
in git's words): a write in the same tick of the file system's clock as the ``stat`` would
leave the times as they were. The change time cannot be set back (``touch -d`` and ``git
checkout`` set it to now), so a file written after it was stored always differs (on Windows
it is the creation time: a same-size rewrite with its modification time set back is not seen,
git's limit too). Any doubt
about the stored keys (unreadable, another format, another root) reads every file, as before.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ddp_lsp.project.index import CACHE_VERSION, MAX_ENTRY_BYTES, _read_entry, _write_entry
from ddp_lsp.sources import ReadError, check_source, read_source

if TYPE_CHECKING:
    from ddp_lsp.project.index import ProjectIndex

FORMAT = "ddp-lsp-file-keys/1"
# Files changed this recently (before the run's first stat) are read again next time.
RACY_NS = 2_000_000_000
# 2,000 files take about 200 KB.
MAX_KEYS_BYTES = 16 * MAX_ENTRY_BYTES


class Stale(Exception):
    """A file whose key came from its stat was changed before its bytes were read."""


class Files(Mapping[str, tuple[Path, bytes]]):
    """Each file's path and bytes by its path relative to the root: the bytes of a file whose
    key was stored are read when first asked for (an early cutoff that looks for a name in
    every file), and must be those of its key: :class:`Stale` when the file changed since its
    stat was taken (the caller computes from scratch), :class:`ReadError` when it went."""

    def __init__(self, key_of: Callable[[str, bytes], str]) -> None:
        self._key_of = key_of
        self._path: dict[str, Path] = {}
        self._data: dict[str, bytes] = {}
        self._key: dict[str, str] = {}  # the key a file not read yet was stored with

    def put(self, rel: str, path: Path, data: bytes) -> None:
        self._path[rel] = path
        self._data[rel] = data

    def put_unread(self, rel: str, path: Path, key: str) -> None:
        """A file not read: its bytes are read when asked for, and must have ``key``."""
        self._path[rel] = path
        self._key[rel] = key

    def __getitem__(self, rel: str) -> tuple[Path, bytes]:
        path = self._path[rel]
        data = self._data.get(rel)
        if data is None:
            data = read_source(path)
            if self._key_of(rel, data) != self._key[rel]:
                raise Stale(rel)
            self._data[rel] = data
            del self._key[rel]
        return path, data

    def read_rest(self, contents: dict[Path, bytes]) -> dict[str, str | None]:
        """Read every file not read yet into ``contents`` (a full build summarises them all,
        and must summarise the bytes its state names): the new key of each that changed since
        its stat was taken, None for each that can no longer be read."""
        changed: dict[str, str | None] = {}
        for rel, stored in list(self._key.items()):
            path = self._path[rel]
            try:
                data = contents[path] = read_source(path)
            except ReadError:
                changed[rel] = None  # the build reads it again, and says why it cannot
                continue
            key = self._key_of(rel, data)
            if key != stored:
                changed[rel] = key
            self._data[rel] = data
            del self._key[rel]
        return changed

    def __iter__(self) -> Iterator[str]:
        return iter(self._path)

    def __len__(self) -> int:
        return len(self._path)

    def __contains__(self, rel: object) -> bool:
        return rel in self._path


def _file(directory: Path, root: Path, ranks_key: bytes) -> Path:
    from ddp_lsp.project.snapshot import _file as snapshot_file

    return snapshot_file(directory, root, ranks_key, ".keys")


def _seen(st: os.stat_result) -> str:
    """What a file's stat says of its bytes, as stored: device, inode, size, times (ns)."""
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


# A file's row: path relative to the root -> "<_seen> <key>", and its module path where it is
# not that path (a file of a nested project: ProjectIndex.module_rel).
Rows = tuple[dict[str, str], dict[str, str]]


def read(directory: Path | None, root: Path, ranks_key: bytes) -> Rows:
    """The keys stored for ``root``; empty when there are none or anything is unexpected."""
    none: Rows = ({}, {})
    if directory is None:
        return none
    data = _read_entry(_file(directory, root, ranks_key), MAX_KEYS_BYTES)
    if data is None:
        return none
    try:
        entry = json.loads(data)
        if (
            type(entry) is not dict
            or len(entry) != 5
            or entry.get("format") != FORMAT
            or entry.get("version") != CACHE_VERSION
            or entry.get("root") != str(root)
        ):
            return none
        rows, modules = entry["files"], entry["modules"]
        if type(rows) is not dict or type(modules) is not dict:
            return none
        for table in (rows, modules):
            if not all(type(v) is str for v in table.values()):
                return none
        return rows, modules
    except (ValueError, TypeError, RecursionError, KeyError):
        return none


def _store(directory: Path | None, root: Path, ranks_key: bytes, rows: Rows) -> None:
    if directory is None:
        return
    entry = {
        "format": FORMAT,
        "version": CACHE_VERSION,
        "root": str(root),
        "files": dict(sorted(rows[0].items())),
        "modules": dict(sorted(rows[1].items())),
    }
    _write_entry(_file(directory, root, ranks_key), entry, MAX_KEYS_BYTES)


def file_keys(
    index: ProjectIndex, paths: list[Path], texts: Mapping[Path, str]
) -> tuple[list[tuple[str, str]], Files, dict[Path, bytes]]:
    """Each file's (path relative to the root, summary key) in ``paths`` order, then the
    texts' files not on disk; the files by relative path; the bytes of the files read (for
    the index to summarise without reading them again). Files that cannot be read are put in
    ``index.unread``. ``texts``: an editor's buffers, laid over the files (always hashed)."""
    directory = index.cache.directory
    ranks_key = index.ranks_key
    stored, stored_modules = read(directory, index.root, ranks_key)
    rows: dict[str, str] = {}
    modules: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    files = Files(index.key_of)
    contents: dict[Path, bytes] = {}
    dirs: dict[str, str] = {}  # resolved directories
    old_enough = time.time_ns() - RACY_NS
    on_disk = set(paths) if texts else set()
    laid_over = [p for p in texts if p not in on_disk]
    for p in (*paths, *laid_over):
        if texts and p in texts:
            data = texts[p].encode("utf-8")
            rel, key = index.content_key(p, data, dirs)
            pairs.append((rel, key))
            files.put(rel, p, data)
            continue
        try:
            st = check_source(p)
        except ReadError as exc:
            index.unread[p] = exc
            continue
        rel = index.rel_path(p, dirs)
        module_rel = index.module_rel(rel)
        seen = _seen(st)
        row = stored.get(rel)
        if (
            row is not None
            and row.startswith(seen)
            and row[len(seen) : len(seen) + 1] == " "
            and stored_modules.get(rel, rel) == module_rel
        ):
            key = row[len(seen) + 1 :]
            files.put_unread(rel, p, key)
        else:
            try:
                data = contents[p] = read_source(p)
            except ReadError as exc:
                index.unread[p] = exc
                continue
            key = index.key_of(rel, data)
            files.put(rel, p, data)
            if max(st.st_mtime_ns, st.st_ctime_ns) >= old_enough:
                pairs.append((rel, key))
                continue
            row = f"{seen} {key}"
        rows[rel] = row
        if module_rel != rel:
            modules[rel] = module_rel
        pairs.append((rel, key))
    if rows != stored or modules != stored_modules:
        _store(directory, index.root, ranks_key, (rows, modules))
    return pairs, files, contents
