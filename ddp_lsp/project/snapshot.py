"""The project's cross-file facts kept on disk: checking one file of an unchanged project reads
the facts of that file, not every summary of the project.

``ddp-lsp check FILE`` needs the facts the whole project gives ``FILE`` (its callers anywhere,
the modules that import it, the helpers it calls). Without this, a warm run still read every
file's summary (about 1-2 ms each) and ran :func:`~ddp_lsp.project.flow.compute` over all of
them: 14 CPU s for a file of torch's own package (2,285 files). A snapshot holds the result
of the last whole computation for one project root, under a key naming every file's summary
key (the file's path, module name, bytes and the rank model) in order: a run whose files all
hash to the same keys reads the snapshot and decodes only the checked files' facts; any
change, addition or removal of a file misses, and the facts are computed again (then stored).

One snapshot per root and rank model (``<cache>/projects/<hash>.json``, replaced atomically
on every miss), pruned with the summaries; the same checks as the summary entries apply
(plain JSON decoded field by field, a regular file of this user writable by nobody else, a
size limit): see :class:`~ddp_lsp.project.index.SummaryCache`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
from ddp_lsp.project.index import CACHE_VERSION, MAX_ENTRY_BYTES, _read_entry, _write_entry

FORMAT = "ddp-lsp-project-facts"
# The facts of the modules the project tells something (most modules receive nothing): a
# 2,285-file project stores a few hundred.
MAX_SNAPSHOT_BYTES = 16 * MAX_ENTRY_BYTES


@dataclass(frozen=True)
class _Kind:
    scope: str
    path: str
    kind: ParamKind


@dataclass(frozen=True)
class _Callee:
    name: str
    module: str
    qualname: str
    props: frozenset[str]
    origins: tuple[tuple[str, Provenance], ...]


@dataclass(frozen=True)
class StoredFacts:
    """A :class:`ModuleProjectFacts` as plain data (the codec takes no mappings)."""

    module: str
    path: str
    kinds: tuple[_Kind, ...]
    callees: tuple[_Callee, ...]
    distributed: tuple[Provenance, ...]  # empty or one
    guarded: frozenset[str]
    single_process: frozenset[str]

    @staticmethod
    def of(f: ModuleProjectFacts) -> StoredFacts:
        return StoredFacts(
            f.module,
            f.path,
            tuple(_Kind(s, p, k) for (s, p), k in sorted(f.extra_kinds.items())),
            tuple(
                _Callee(name, cp.target[0], cp.target[1], cp.props, tuple(cp.origins.items()))
                for name, cp in sorted(f.callee_props.items())
            ),
            () if f.distributed is None else (f.distributed,),
            f.only_called_guarded,
            f.single_process,
        )

    def facts(self, root: str) -> ModuleProjectFacts:
        if len(self.distributed) > 1:
            raise ValueError("more than one origin of `distributed`")
        return ModuleProjectFacts(
            self.module,
            self.path,
            {(k.scope, k.path): k.kind for k in self.kinds},
            {
                c.name: CalleeProps((c.module, c.qualname), c.props, dict(c.origins))
                for c in self.callees
            },
            self.distributed[0] if self.distributed else None,
            self.guarded,
            root,
            self.single_process,
        )


_codec: Any = None


def _stored_codec() -> Any:
    global _codec
    if _codec is None:
        from ddp_lsp.project.codec import Codec

        _codec = Codec(StoredFacts)
    return _codec


def project_key(root: Path, file_keys: Iterable[tuple[str, str]]) -> str:
    """The key of a project's state: its root and each (path, summary key) in path order."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{FORMAT}\0{CACHE_VERSION}\0{root}\0".encode())
    for rel, key in sorted(file_keys):
        h.update(f"{rel}\0{key}\0".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Snapshot:
    files: int
    failed: tuple[str, ...]
    facts: dict[str, ModuleProjectFacts]  # the wanted paths' facts (those with any)


def _file(directory: Path, root: Path, ranks_key: bytes) -> Path:
    h = hashlib.blake2b(digest_size=16)
    h.update(str(root).encode())
    h.update(b"\0")
    h.update(ranks_key)
    return directory / "projects" / f"{h.hexdigest()}.json"


def load(
    directory: Path | None,
    root: Path,
    ranks_key: bytes,
    key: str,
    wanted: Collection[str] | None,
) -> Snapshot | None:
    """The snapshot of ``root`` if it was stored under ``key``, with the facts of the
    ``wanted`` paths (None: all) decoded; None on any miss or anything unexpected."""
    if directory is None:
        return None
    data = _read_entry(_file(directory, root, ranks_key), MAX_SNAPSHOT_BYTES)
    if data is None:
        return None
    codec = _stored_codec()
    try:
        entry = json.loads(data)
        if (
            type(entry) is not dict
            or entry.get("format") != FORMAT
            or entry.get("version") != CACHE_VERSION
            or entry.get("schema") != codec.fingerprint
            or entry.get("key") != key
            or entry.get("root") != str(root)
            or len(entry) != 8
        ):
            return None
        files, failed, modules = entry["files"], entry["failed"], entry["modules"]
        if type(files) is not int or type(failed) is not list or type(modules) is not dict:
            return None
        if not all(type(p) is str for p in failed):
            return None
        names = modules.keys() if wanted is None else [p for p in wanted if p in modules]
        out: dict[str, ModuleProjectFacts] = {}
        for rel in names:
            stored = codec.decode(modules[rel], {})
            if stored.path != rel:
                return None
            out[rel] = stored.facts(str(root))
    except (ValueError, TypeError, RecursionError, KeyError):
        return None
    return Snapshot(files, tuple(failed), out)


def store(
    directory: Path | None,
    root: Path,
    ranks_key: bytes,
    key: str,
    files: int,
    failed: Iterable[str],
    facts: Mapping[str, ModuleProjectFacts],
) -> None:
    """Replace ``root``'s snapshot (atomically; a read-only or full cache costs only speed).
    Only modules the project tells something are stored: a missing path has no facts."""
    if directory is None:
        return
    from ddp_lsp.project.build import says_something

    codec = _stored_codec()
    entry = {
        "format": FORMAT,
        "version": CACHE_VERSION,
        "schema": codec.fingerprint,
        "key": key,
        "root": str(root),
        "files": files,
        "failed": list(failed),
        "modules": {
            rel: codec.encode(StoredFacts.of(f))
            for rel, f in sorted(facts.items())
            if says_something(f)
        },
    }
    _write_entry(_file(directory, root, ranks_key), entry, MAX_SNAPSHOT_BYTES)
