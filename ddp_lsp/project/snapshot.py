"""The project's cross-file facts kept on disk: checking one file of an unchanged project reads
the facts of that file, not every summary of the project.

``ddp-lsp check FILE`` needs the facts the whole project gives ``FILE`` (its callers anywhere,
the modules that import it, the helpers it calls). Without this, a warm run still read every
file's summary (about 1-2 ms each) and ran :func:`~ddp_lsp.project.flow.compute` over all of
them: 14 CPU s for a file of torch's own package (2,285 files). A snapshot holds the result
of the last whole computation for one project root, under a key naming every file's summary
key (the file's path, module name, bytes and the rank model) in order: a run whose files all
hash to the same keys reads the snapshot and decodes only the checked files' facts (each
module's facts are stored as one JSON string, parsed only when asked for).

When some files changed (at most ``build.MAX_CUTOFF_FILES``, none added or removed), the
snapshot also names each file's old summary: a changed file is summarised again and compared
with it (:func:`~ddp_lsp.project.summary.same_for_project`); when every changed file says
what it said (a comment, a constant, an edit the facts do not see, no line moved), the facts
stand and are stored again under the new key (salsa's early cutoff). So do they when a
changed file only gained or lost functions that no file names and that call nothing of the
project (a helper being written), with that file's single-process functions patched
(``build._isolated_change``; :attr:`Stored.reached` says where such a function is unknown
rather than single-process). An added or removed file computes the facts again (then
stored).

Any other change updates the last computation from its update state, stored next to the
snapshot (``<hash>.state.json``, read only then; :mod:`~ddp_lsp.project.flowstate`), when the
update can be shown to equal a computation from scratch. The facts' texts and the state's
cite each moved file's lines by key (:attr:`Stored.moved`, ``flowstate._Moved``): neither is
rewritten when lines move, only read through the map.

One snapshot per root and rank model (``<cache>/projects/<hash>.json``, replaced atomically
on every miss), pruned with the summaries; the same checks as the summary entries apply
(plain JSON decoded field by field, a regular file of this user writable by nobody else, a
size limit): see :class:`~ddp_lsp.project.index.SummaryCache`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddp_lsp.core.crossfile import CalleeProps, ModuleProjectFacts, ParamKind, Provenance
from ddp_lsp.core.gates import Gating
from ddp_lsp.project.index import CACHE_VERSION, MAX_ENTRY_BYTES, _read_entry, _write_entry

if TYPE_CHECKING:
    from ddp_lsp.project import flowstate

# (A snapshot of another shape, such as one without "reached", is never read: see read.)
# "/2": the maps of moved lines may hold keys an update gave (negative) and lines gone (0),
# which an older version would read as lines; the update state's texts cite those keys.
FORMAT = "ddp-lsp-project-facts/2"
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
    gating: tuple[Gating, ...]  # empty or one (CalleeProps.gating)


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
    silenced: frozenset[str]

    @staticmethod
    def of(f: ModuleProjectFacts) -> StoredFacts:
        return StoredFacts(
            f.module,
            f.path,
            tuple(_Kind(s, p, k) for (s, p), k in sorted(f.extra_kinds.items())),
            tuple(
                _Callee(
                    name,
                    cp.target[0],
                    cp.target[1],
                    cp.props,
                    tuple(cp.origins.items()),
                    () if cp.gating is None else (cp.gating,),
                )
                for name, cp in sorted(f.callee_props.items())
            ),
            () if f.distributed is None else (f.distributed,),
            f.only_called_guarded,
            f.single_process,
            f.silenced,
        )

    def facts(self, root: str) -> ModuleProjectFacts:
        if len(self.distributed) > 1:
            raise ValueError("more than one origin of `distributed`")
        return ModuleProjectFacts(
            self.module,
            self.path,
            {(k.scope, k.path): k.kind for k in self.kinds},
            {
                c.name: CalleeProps(
                    (c.module, c.qualname), c.props, dict(c.origins), _one(c.gating)
                )
                for c in self.callees
            },
            self.distributed[0] if self.distributed else None,
            self.guarded,
            root,
            self.single_process,
            self.silenced,
        )


def _one(gating: tuple[Gating, ...]) -> Gating | None:
    if len(gating) > 1:
        raise ValueError("more than one gating of a callee")
    return gating[0] if gating else None


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


@dataclass(frozen=True)
class Stored:
    """A root's snapshot as read (checked, its facts still encoded): what the last computation
    saw (each file's summary keys, the rank predicates the project defined) and its result."""

    key: str  # the project's state (project_key) the facts were computed for
    files: int
    failed: tuple[str, ...]
    # path -> encoded StoredFacts, as JSON text: read as one string each, decoded only when
    # asked for (a project of 2,000 files stores megabytes of facts; a run needs a few).
    modules: dict[str, str]
    # path -> (its key as project_key names it, the key of the summary the facts read; "" for
    # a file the index could not summarise): which files changed since, and their old summary.
    sources: dict[str, tuple[str, str]]
    predicates: frozenset[str]  # ProjectIndex.project_predicates
    # path -> {key its facts cite -> its line now}: files whose cited lines moved since the
    # facts were computed (summary.line_map, composed over runs; and the maps of the update
    # state, flowstate._Moved: negative keys for lines an update added, 0 for a line gone),
    # applied as facts decode. The update state's texts cite the same keys.
    moved: dict[str, dict[int, int]]
    # The modules some distributed code reaches (reach.single_process's ``reached_modules``);
    # None when nothing in the project is distributed code. Decides whether a function added
    # that nothing calls is single-process code (see build._isolated_change).
    reached: frozenset[str] | None = None
    # The last computation's update state (flowstate.py), in a file of its own (read only
    # when other files' facts changed: a run then updates it rather than computing the
    # project again): its id (None: none stored), and the state's own facts of the modules
    # whose facts here were patched since (flowstate.StoredState.originals).
    state_id: str | None = None
    originals: dict[str, str | None] = field(default_factory=dict)

    def facts(
        self, root: Path, wanted: Collection[str] | None
    ) -> dict[str, ModuleProjectFacts] | None:
        """The facts of the ``wanted`` paths (None: all) that have any; None when an entry
        does not decode."""
        codec = _stored_codec()
        names = self.modules.keys() if wanted is None else [p for p in wanted if p in self.modules]
        out: dict[str, ModuleProjectFacts] = {}
        # (A key whose line is gone, 0, is not a key: a text citing it does not decode.)
        live = {path: {k: v for k, v in lines.items() if v} for path, lines in self.moved.items()}
        if live:
            from ddp_lsp.project.flowlines import moved  # (not flow.py: the computation)
        try:
            for rel in names:
                stored = codec.decode(json.loads(self.modules[rel]), {})
                if stored.path != rel:
                    return None
                facts = stored.facts(str(root))
                for path, lines in live.items():
                    facts = moved(facts, path, lines)
                out[rel] = facts
        except (ValueError, TypeError, RecursionError, KeyError):
            return None
        return out


def encode(f: ModuleProjectFacts) -> str:
    """One module's facts as a snapshot stores them (:attr:`Stored.modules`)."""
    return json.dumps(
        _stored_codec().encode(StoredFacts.of(f)), separators=(",", ":"), ensure_ascii=False
    )


def decode(text: str, root: Path) -> ModuleProjectFacts:
    """One module's stored facts, as stored (no line moved); raises ValueError, TypeError or
    KeyError on anything unexpected."""
    return _stored_codec().decode(json.loads(text), {}).facts(str(root))  # type: ignore[no-any-return]


def _file(directory: Path, root: Path, ranks_key: bytes, kind: str = "") -> Path:
    h = hashlib.blake2b(digest_size=16)
    h.update(str(root).encode())
    h.update(b"\0")
    h.update(ranks_key)
    return directory / "projects" / f"{h.hexdigest()}{kind}.json"


def read_state(
    directory: Path | None, root: Path, ranks_key: bytes, stored: Stored
) -> flowstate.StoredState | None:
    """The update state ``stored`` names (read only by a run that updates it); None when
    there is none, it was replaced since, or anything about it is unexpected."""
    if directory is None or stored.state_id is None:
        return None
    from ddp_lsp.project import flowstate

    data = _read_entry(_file(directory, root, ranks_key, ".state"), MAX_SNAPSHOT_BYTES)
    if data is None:
        return None
    try:
        entry = json.loads(data)
        if (
            type(entry) is not dict
            or len(entry) != 6
            or entry.get("format") != FORMAT + "-state"
            or entry.get("version") != CACHE_VERSION
            or entry.get("schema") != flowstate.fingerprint()
            or entry.get("root") != str(root)
            or entry.get("id") != stored.state_id
        ):
            return None
        return flowstate.from_json(entry["state"], stored.originals)
    except (ValueError, TypeError, RecursionError, KeyError):
        return None


def read(directory: Path | None, root: Path, ranks_key: bytes) -> Stored | None:
    """``root``'s snapshot, whatever state it was computed for; None when there is none or
    anything about it is unexpected."""
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
            or entry.get("root") != str(root)
            or len(entry) != 14
        ):
            return None
        key, files, failed = entry["key"], entry["files"], entry["failed"]
        modules, sources, predicates = entry["modules"], entry["sources"], entry["predicates"]
        if type(key) is not str or type(files) is not int or type(modules) is not dict:
            return None
        if not all(type(text) is str for text in modules.values()):
            return None
        if type(failed) is not list or not all(type(p) is str for p in failed):
            return None
        if type(predicates) is not list or not all(type(p) is str for p in predicates):
            return None
        if type(sources) is not dict or type(entry["moved"]) is not dict:
            return None
        moved: dict[str, dict[int, int]] = {}
        for rel, cited in entry["moved"].items():
            if type(cited) is not list:
                return None
            lines = moved[rel] = {}
            for pair in cited:
                if type(pair) is not list or len(pair) != 2:
                    return None
                if type(pair[0]) is not int or type(pair[1]) is not int:
                    return None
                lines[pair[0]] = pair[1]
        pairs: dict[str, tuple[str, str]] = {}
        for rel, pair in sources.items():
            if type(pair) is not list or len(pair) != 2:
                return None
            base, used = pair
            if type(base) is not str or type(used) is not str:
                return None
            pairs[rel] = (base, used)
        reached = entry["reached"]
        if reached is not None and (
            type(reached) is not list or not all(type(m) is str for m in reached)
        ):
            return None
        state_id, originals = entry["state"], entry["originals"]
        if state_id is not None and type(state_id) is not str:
            return None
        if type(originals) is not dict or not all(
            t is None or type(t) is str for t in originals.values()
        ):
            return None
    except (ValueError, TypeError, RecursionError, KeyError):
        return None
    return Stored(
        key,
        files,
        tuple(failed),
        modules,
        pairs,
        frozenset(predicates),
        moved,
        None if reached is None else frozenset(reached),
        state_id,
        originals,
    )


def load(
    directory: Path | None,
    root: Path,
    ranks_key: bytes,
    key: str,
    wanted: Collection[str] | None,
) -> Snapshot | None:
    """The snapshot of ``root`` if it was stored under ``key``, with the facts of the
    ``wanted`` paths (None: all) decoded; None on any miss or anything unexpected."""
    stored = read(directory, root, ranks_key)
    if stored is None or stored.key != key:
        return None
    facts = stored.facts(root, wanted)
    return None if facts is None else Snapshot(stored.files, stored.failed, facts)


def store(
    directory: Path | None,
    root: Path,
    ranks_key: bytes,
    key: str,
    files: int,
    failed: Iterable[str],
    facts: Mapping[str, ModuleProjectFacts] | Stored,
    sources: Mapping[str, tuple[str, str]],
    predicates: Iterable[str],
    moved: Mapping[str, Mapping[int, int]] | None = None,
    reached: Iterable[str] | None = None,
    state: flowstate.StoredState | None = None,
    state_id: str | None = None,
    originals: Mapping[str, str | None] | None = None,
) -> None:
    """Replace ``root``'s snapshot (atomically; a read-only or full cache costs only speed).
    Only modules the project tells something are stored: a missing path has no facts.
    ``facts``: a computation's, or a snapshot whose facts still hold (kept as they were
    read); ``sources``, ``predicates``, ``moved`` and ``reached``: see :class:`Stored`.
    ``state``: the computation's update state, stored (in its own file) under a new id; or
    ``state_id`` and ``originals``: the one stored before, still the state of these facts
    but for the ``originals``."""
    if directory is None:
        return
    from ddp_lsp.project import flowstate
    from ddp_lsp.project.build import says_something

    codec = _stored_codec()
    if isinstance(facts, Stored):
        modules = facts.modules
    else:
        modules = {rel: encode(f) for rel, f in sorted(facts.items()) if says_something(f)}
    entry = {
        "format": FORMAT,
        "version": CACHE_VERSION,
        "schema": codec.fingerprint,
        "key": key,
        "root": str(root),
        "files": files,
        "failed": list(failed),
        "modules": modules,
        "sources": {rel: list(pair) for rel, pair in sorted(sources.items())},
        "predicates": sorted(predicates),
        "moved": {rel: sorted(lines.items()) for rel, lines in sorted((moved or {}).items())},
        "reached": None if reached is None else sorted(reached),
    }
    if state is not None:
        import secrets

        state_id, originals = secrets.token_hex(8), state.originals
        _write_entry(
            _file(directory, root, ranks_key, ".state"),
            {
                "format": FORMAT + "-state",
                "version": CACHE_VERSION,
                "schema": flowstate.fingerprint(),
                "root": str(root),
                "id": state_id,
                "state": flowstate.to_json(state),
            },
            MAX_SNAPSHOT_BYTES,
        )
    entry["state"] = state_id
    entry["originals"] = dict(originals or {})
    _write_entry(_file(directory, root, ranks_key), entry, MAX_SNAPSHOT_BYTES)
