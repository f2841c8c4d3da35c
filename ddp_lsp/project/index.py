"""The project index: one cheap summary per Python file, and imports resolved across files.

A summary is the core's raw :class:`~ddp_lsp.core.facts.ChunkFacts` of the whole file (the same
``facts.extract`` the per-file analysis runs on chunks, here on one whole-file ``ast`` parse),
plus what the core does not record but the project needs: the module's dotted name, the bases of
its classes (for ``self.`` methods inherited from another module) and the lines of the
assignments that bind a kind (provenance: "wrapped in DistributedDataParallel at main.py:212").

Summaries are keyed by a hash of the file's bytes and the rank model (``extract`` depends on
it), kept in memory and on disk under the user's cache directory, one small file per hash: a
2,000-file repository is parsed once, an edited file costs one parse, and two checkouts of the
same project share entries. Disk entries are plain JSON, versioned, written atomically in
user-only directories and ignored (then rewritten) when they fail any check: see
:class:`SummaryCache` and SECURITY.md.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ddp_lsp.config import Settings
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.project.sharing import Sharer
from ddp_lsp.project.summary import ModuleSummary, summarise_with_facts
from ddp_lsp.sources import MAX_SOURCE_BYTES, ReadError, read_source

log = logging.getLogger("ddp_lsp.project")

# Bump when what facts.extract records changes: old entries are then never read. (A change of
# the summary dataclasses' fields is also caught by the codec's shape fingerprint.)
CACHE_VERSION = 18  # 18: logging filters that compare a rank (SILENCES_LOGGING), project facts say which output an entry point silences (ModuleProjectFacts.silenced); 17: a uniform choice between two rank tests is a rank test and a rank-0 flag (`x = self.is_local_main if local else self.is_main`, core/rankcond.py), a first-rank test true in a single-process run is a rank predicate (`is_master_proc(num_gpus)`); 16: the project snapshot holds the facts' update state (flowstate.py), summary keys are SHA-256; 15: gate summaries are typed records (FunctionInfo.gates, CalleeProps.gating) instead of "gate-*" properties; 14: gate sites record the arguments a call binds (core/gates.py); 13: MAKES_DIST_SAMPLER, scaler-named update receivers (issue 14); 12: the raw facts types moved to core/factkinds.py (issue 13)
_T = TypeVar("_T")
# Files larger than this are data, not training code: left out (as the analysis leaves them).
MAX_FILE_BYTES = MAX_SOURCE_BYTES
PRUNE_AGE_DAYS = 30
PROJECT_MARKERS = ("pyproject.toml", ".git")


def find_root(paths: Iterable[Path]) -> Path:
    """The project root of ``paths``: the nearest directory above them with a marker."""
    resolved = [p.resolve() for p in paths]
    if not resolved:
        resolved = [Path.cwd().resolve()]
    start = resolved[0] if resolved[0].is_dir() else resolved[0].parent
    if len(resolved) > 1:
        start = Path(os.path.commonpath([str(p) for p in resolved]))
        if not start.is_dir():
            start = start.parent
    for directory in (start, *start.parents):
        if _too_wide(directory):
            break
        if is_project_root(directory):
            return directory
    return start


def is_project_root(directory: Path) -> bool:
    """A directory with a project marker, never the home directory or the file system's root:
    a dotfiles repository (a .git in $HOME) would make a loose script's project everything
    the user owns."""
    return not _too_wide(directory) and any((directory / m).exists() for m in PROJECT_MARKERS)


def is_too_wide(directory: Path) -> bool:
    """The home directory or the file system's root: never a project (see is_project_root)."""
    return _too_wide(directory)


def _too_wide(directory: Path) -> bool:
    try:
        home = Path.home().resolve()
    except RuntimeError:  # no home directory
        home = None
    return directory == home or directory == Path(directory.anchor)


def default_cache_dir() -> Path:
    from ddp_lsp import __version__

    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, or relative: the XDG spec says to ignore it
        base = _platform_cache()
    # The package version too: an upgrade whose summaries changed shape without a
    # CACHE_VERSION bump still never reads the old ones.
    return Path(base) / "ddp-lsp" / "index" / f"v{CACHE_VERSION}-{__version__}"


def _platform_cache() -> str:
    """The user's cache directory where ``XDG_CACHE_HOME`` is not set."""
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        if local:
            return local
    elif sys.platform == "darwin":
        return str(Path.home() / "Library" / "Caches")
    return str(Path.home() / ".cache")


def _ranks_key(ranks: RankModel) -> bytes:
    return repr((sorted(ranks.names), sorted(ranks.predicates), ranks.frameworks.apis)).encode()


# An entry is the summary of one file of at most MAX_FILE_BYTES; anything far larger is not
# one of ours (and is not read into memory to find out).
MAX_ENTRY_BYTES = 4 * MAX_FILE_BYTES
_ENTRY_FORMAT = "ddp-lsp-index-entry"
_codec: Any = None
_warned: set[str] = set()  # untrusted cache directories already reported by this process


@contextlib.contextmanager
def no_collection(*, promote: bool = True) -> Iterator[None]:
    """Builds the index's objects without the cyclic garbage collector running meanwhile.

    Reading a project's summaries and computing its facts creates millions of objects that
    live on (frozen dataclasses, tuples, strings: no reference cycles); each time the
    collector's counters fill up it walks the whole growing heap again, which was 2.5 of the
    7 CPU s of reading torch's 2,285 summaries from the cache, and the largest part of a
    ``compute`` in the server. Collection resumes afterwards (whatever cycles were made
    meanwhile are found by the next full collection).

    On the way out, what was built meanwhile is moved to the oldest generation unscanned (as
    ``core.document.gc_paused`` does after a large parse): left in the young generation, the
    first allocation after ``gc.enable`` started a collection that walked every one of them
    (a cold check of 2,040 generated files: 1.15 s), and the next one of the middle
    generation walked them again (1.1 s), to find nothing to free.

    ``promote=False`` leaves them young: the move unfreezes whatever was frozen before (the
    server's indexer keeps its index frozen), so a caller that collects the young objects
    and freezes the survivors itself asks for it (see lsp/indexer.py)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if promote and gc.get_count()[0] > _PROMOTE_AT:
            gc.freeze()
            gc.unfreeze()
        gc.enable()


# Young objects past which leaving no_collection moves them to the oldest generation (a
# collection of fewer costs little: see core.document._PROMOTE_AT).
_PROMOTE_AT = 50_000


def _summary_codec() -> Any:
    global _codec
    if _codec is None:
        from ddp_lsp.project.codec import Codec

        _codec = Codec(ModuleSummary)
    return _codec


def _untrusted(st: os.stat_result, uid: int, leaf: bool) -> str | None:
    """Why a directory with this status cannot hold our cache (None: it can). The cache
    directory itself must be the user's and writable by nobody else; a directory above it may
    also be root's, or writable by others when sticky (``/tmp``): nobody else can then rename
    or replace what is in it."""
    import stat

    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != uid and (leaf or st.st_uid != 0):
        return f"owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & 0o022 and (leaf or not st.st_mode & stat.S_ISVTX):
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _private_dir(directory: Path) -> str | None:
    """Create ``directory`` (each missing level 0700, as the XDG spec asks of the cache home)
    and say why it cannot be trusted with the cache, or None."""
    missing: list[Path] = []
    p = directory
    while not p.exists() and p.parent != p:
        missing.append(p)
        p = p.parent
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o700)
        except FileExistsError:
            pass
    if os.name != "posix":
        return None  # ownership and modes as checked here are POSIX's
    uid = os.getuid()
    st = directory.stat()
    why = _untrusted(st, uid, leaf=True)
    if why is not None:
        return why
    # The directories above, as given and as resolved (a symbolic link on the way).
    seen: set[Path] = set()
    for start in (directory.absolute(), directory.resolve()):
        for parent in start.parents:
            if parent in seen:
                continue
            seen.add(parent)
            why = _untrusted(parent.stat(), uid, leaf=False)
            if why is not None:
                return f"{parent} is {why}"
    if st.st_mode & 0o077:
        directory.chmod(0o700)  # ours, from before entries were private: make it so
    return None


class SummaryCache:
    """Summaries by content hash: in memory, and on disk when a directory is given.

    Disk entries are plain data: ``<key[:2]>/<key>.json`` holds the format name, the version,
    the shape's fingerprint, the key and the summary (:mod:`ddp_lsp.project.codec`), written
    atomically, 0600 in 0700 directories. An entry is read only if it is a regular file of this
    user, writable by nobody else, at most ``MAX_ENTRY_BYTES``, and every field checks out;
    anything else is a miss, and the entry is rewritten. A directory owned by another user or
    writable by others (a shared ``XDG_CACHE_HOME``, a CI cache restored from elsewhere) is
    not used at all, with one warning: whoever can write there could otherwise choose what
    the analysis believes about a file."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._memory: dict[str, ModuleSummary] = {}
        self.share = Sharer()
        self.hits = 0
        self.misses = 0
        # Why the directory is not used, the first time this process meets it (the CLI prints
        # it as a warning; the server's indexer logs it); None when it is used or was reported.
        self.warning: str | None = None
        if directory is not None:
            try:
                why = _private_dir(directory)
            except OSError as exc:
                why = f"cannot be created or read ({exc.strerror or exc})"
            if why is not None:
                self.directory = None
                if str(directory) not in _warned:
                    _warned.add(str(directory))
                    self.warning = f"not using the index cache {directory}: {why}"
                    log.warning("ddp-lsp: %s", self.warning)

    def _file(self, key: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> ModuleSummary | None:
        s = self._memory.get(key)
        if s is not None:
            return s
        file = self._file(key)
        if file is None:
            return None
        data = _read_entry(file)
        if data is None:
            return None
        summary = _decode_entry(data, key, self.share.memo)  # built shared (see sharing.Sharer)
        if summary is None:
            return None
        self._memory[key] = summary
        return summary

    def put(self, key: str, summary: ModuleSummary, persist: bool = True) -> ModuleSummary:
        """Keep ``summary``; on disk too unless ``persist`` is false (an editor's unsaved text:
        every pause while typing would leave a file behind)."""
        # An editor's unsaved text is shared with what the memo holds, never added to it: each
        # pause while typing gives a new version whose facts (every function after the edited
        # line moved) would otherwise stay in the memo until the next retain, 1-2 MB a version
        # of a 20,000-line file (docs/performance.md, "Peak RSS while typing").
        share = self.share if persist else self.share.peek()
        summary = share(summary)
        self._memory[key] = summary
        file = self._file(key) if persist else None
        if file is None:
            return summary
        codec = _summary_codec()
        entry = {
            "format": _ENTRY_FORMAT,
            "version": CACHE_VERSION,
            "schema": codec.fingerprint,
            "key": key,
            "summary": codec.encode(summary),
        }
        _write_entry(file, entry, MAX_ENTRY_BYTES)
        return summary

    def forget(self, key: str) -> None:
        """Drop the summary kept under ``key`` in memory (a version of an edited file that no
        file has any more)."""
        self._memory.pop(key, None)

    def retain(self, live: Iterable[ModuleSummary]) -> None:
        """Forget, in memory, every summary not in ``live`` (edits replace summaries; a server
        running for days would otherwise keep each version of each edited file)."""
        keep = {s.digest: s for s in live}
        if len(self._memory) > len(keep):
            self._memory = {k: v for k, v in self._memory.items() if k in keep}
            self.share = Sharer()

    def prune(self, max_age_days: float = PRUNE_AGE_DAYS) -> int:
        """Delete disk entries not written for ``max_age_days`` (at most once a day, marked
        by a stamp file); the number deleted. Entries are rewritten when their file is
        indexed again, so a live project's entries stay."""
        if self.directory is None:
            return 0
        stamp = self.directory / ".pruned"
        now = time.time()
        try:
            if now - stamp.stat().st_mtime < 86400:
                return 0
        except OSError:
            pass
        removed = 0
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            stamp.touch(mode=0o600)
            for sub in self.directory.iterdir():
                if not sub.is_dir():
                    continue
                for entry in sub.iterdir():
                    try:
                        if now - entry.stat().st_mtime > max_age_days * 86400:
                            entry.unlink()
                            removed += 1
                    except OSError:
                        continue
        except OSError:
            pass
        return removed


def _write_entry(file: Path, entry: dict[str, Any], limit: int) -> None:
    """Store ``entry`` as JSON at ``file``, 0600 in a 0700 folder, unless it is over ``limit``
    (it would never be read back). A read-only or full cache directory only costs speed."""
    data = json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode()
    if len(data) > limit:
        return
    try:
        fd, tmp = _temp_beside(file)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            # Atomic: a reader sees the old entry, the new one, or none, never half of one.
            os.replace(tmp, file)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass


_temps = itertools.count()
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def _temp_beside(file: Path) -> tuple[int, str]:
    """A new file beside ``file`` (its folder made 0700 when missing), open for writing: 0600,
    created as ``mkstemp`` creates its files (``O_EXCL``, never through a link), named by
    this process and a counter rather than ``mkstemp``'s random names (drawn in Python, a
    cold index writes one per file); ``mkstemp`` itself when that name is taken."""
    folder = file.parent
    tmp = f"{folder}{os.sep}.tmp-{os.getpid()}-{next(_temps)}.json"
    try:
        return os.open(tmp, _TEMP_FLAGS, 0o600), tmp
    except FileNotFoundError:
        folder.mkdir(mode=0o700, exist_ok=True)
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o600), tmp
        except FileExistsError:
            pass
    except FileExistsError:  # left by a process of the same id that died
        pass
    import tempfile  # (with shutil, random, bz2 and lzma: not on every run's path)

    return tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")


def _read_entry(file: Path, limit: int = MAX_ENTRY_BYTES) -> bytes | None:
    """The bytes of a cache entry that may be read: a regular file (never a link, a FIFO or a
    device), this user's and writable by nobody else, not larger than ``limit``."""
    import stat

    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(file, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        if os.name == "posix" and (st.st_uid != os.getuid() or st.st_mode & 0o022):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _decode_entry(data: bytes, key: str, memo: dict[object, object]) -> ModuleSummary | None:
    """The summary in an entry, if the entry is in every respect one we would have written for
    ``key``; None otherwise (never an exception)."""
    codec = _summary_codec()
    try:
        entry = json.loads(data)
        if (
            type(entry) is not dict
            or entry.get("format") != _ENTRY_FORMAT
            or entry.get("version") != CACHE_VERSION
            or entry.get("schema") != codec.fingerprint
            or entry.get("key") != key
            or len(entry) != 5
        ):
            return None
        summary = codec.decode(entry["summary"], memo)
    except (ValueError, TypeError, RecursionError):
        return None  # not JSON, or not our shape (codec.SchemaError is a ValueError)
    return summary if summary.digest == key else None


def _calls_named(summary: ModuleSummary, names: frozenset[str]) -> frozenset[str]:
    """Which of ``names`` the file calls (``is_leader()``, ``utils.is_leader()``)."""
    if not names:
        return frozenset()
    found = set()
    for fi in summary.facts.functions:
        for callee in fi.calls:
            last = callee.rpartition(".")[2]
            if last in names:
                found.add(last)
    return frozenset(found)


class ProjectIndex:
    """Summaries of every Python file of a project root, kept up to date by :meth:`update`."""

    def __init__(
        self,
        root: Path,
        settings: Settings | None = None,
        cache_dir: Path | None | bool = True,
    ) -> None:
        self.root = root.resolve()
        self.settings = settings if settings is not None else Settings()
        self.ranks = self.settings.rank_model
        directory: Path | None
        if cache_dir is True:
            directory = default_cache_dir()
        elif cache_dir is False or cache_dir is None:
            directory = None
        else:
            directory = Path(cache_dir)
        self.cache = SummaryCache(directory)
        self._by_path: dict[str, ModuleSummary] = {}
        self._by_module: dict[str, ModuleSummary] = {}
        # Rank-0 predicates the project defines (`def is_leader(): return get_rank() == 0` in
        # utils.py): a file calling one is summarised knowing it, so `if utils.is_leader():`
        # guards its body there too. Files given as text (open in an editor) keep that text.
        self.project_predicates: frozenset[str] = frozenset()
        self._texts: dict[str, bytes] = {}
        self._own: dict[str, fact_model.ModuleFacts] = {}
        self.failed: list[Path] = []  # files whose summary raised (see build)
        # Files not read (see sources.read_source), by path: the latest reason, dropped once the
        # file reads again (a long-lived server index must not grow with every retry).
        self.unread: dict[Path, ReadError] = {}
        self._edits = 0
        self._parsed: set[str] = set()  # files parsed (not found in the cache), by path
        self._nested: dict[str, bool] = {}  # directory (relative) -> holds a nested project
        # The predicates each file defines, with the summary they were read from.
        self._defines: dict[str, tuple[ModuleSummary, frozenset[str]]] = {}
        self._models: dict[frozenset[str], tuple[RankModel, bytes]] = {
            frozenset(): (self.ranks, _ranks_key(self.ranks))
        }
        self._root_text = str(self.root)
        self._hashes: dict[bytes, Any] = {}  # rank model key -> a SHA-256 that has read it
        # The keys of the summaries made of an editor's unsaved text, by path: each update
        # drops those of its file older than the summary it replaces (see update).
        self._unsaved: dict[str, set[str]] = {}

    # -- building ------------------------------------------------------------------------------

    def files(self) -> Iterator[Path]:
        """The project's modules: the ``.py`` files :func:`~ddp_lsp.project.discover.discover`
        lists under the root (the ``ddp-lsp check`` walk, a nested project's excludes
        included; stubs have no bodies to summarise)."""
        from ddp_lsp.project.discover import discover, nearest_settings

        at = nearest_settings(self.root, self.settings)
        return (p for p in discover(self.root, at) if p.suffix == ".py")

    def build(
        self, paths: Iterable[Path] | None = None, contents: dict[Path, bytes] | None = None
    ) -> ProjectIndex:
        """Add ``paths`` (default: every file of the project). A file that cannot be read is
        skipped; one whose summary raises (absurd nesting) is listed in ``failed``: either way
        the rest of the project is indexed. ``contents``: the bytes of files already read
        (taken out of it as they are summarised)."""
        if paths is None:
            self.cache.prune()
        for p in self.files() if paths is None else paths:
            data = None if contents is None else contents.pop(p, None)
            try:
                if data is None:
                    data = read_source(p)
            except ReadError as exc:  # a FIFO, a device, a loop, too large: left out
                self.unread[p] = exc
                continue
            self.unread.pop(p, None)
            try:
                self._add(p, data)
            except Exception:
                log.debug("project index: cannot summarise %s", p, exc_info=True)
                self.failed.append(p)
        self._refresh_predicates()
        return self

    def _rel(self, path: Path, dirs: dict[str, str] | None = None) -> str:
        """``path`` relative to the root, resolved. ``dirs``: resolved directories kept
        between calls (a walk over the project resolves each directory once, then each file
        with one ``lstat``, rather than every component of every path), by their text: on a
        POSIX system the file's path is then joined and cut as text, not as ``Path`` objects
        (70 ms of a 2,000-file warm check)."""
        p = path if path.is_absolute() else self.root / path
        try:
            if dirs is None or p.name in ("", ".", "..") or os.path.islink(p):
                resolved = p.resolve()
            elif os.sep == "/" and os.altsep is None:
                head, _, name = str(p).rpartition("/")
                parent = dirs.get(head)
                if parent is None:
                    parent = dirs[head] = str(p.parent.resolve())
                full = f"{parent}/{name}" if parent != "/" else f"/{name}"
                root = self._root_text
                if full == root:
                    return "."
                if full.startswith(root) and (root == "/" or full[len(root)] == "/"):
                    return full[len(root) :].lstrip("/")
                raise ValueError(full)  # not under the root: as relative_to says
            else:
                text = str(p.parent)
                parent = dirs.get(text)
                if parent is None:
                    parent = dirs[text] = str(p.parent.resolve())
                resolved = Path(parent) / p.name
            return resolved.relative_to(self.root).as_posix()
        except ValueError:
            return p.name

    def rel_path(self, path: Path, dirs: dict[str, str] | None = None) -> str:
        """``path`` relative to the root, resolved (see :meth:`_rel`)."""
        return self._rel(path, dirs)

    def module_rel(self, rel: str) -> str:
        """The path the module name of ``rel`` is made from (see :meth:`_module_rel`)."""
        return self._module_rel(rel)

    def key_of(self, rel: str, data: bytes) -> str:
        """The key of the summary of ``data`` as the file ``rel`` (see :meth:`content_key`)."""
        return self._key(rel, data, self._model(frozenset())[1])

    def _module_rel(self, rel: str) -> str:
        """``rel`` from the innermost project nested in the root that holds it: a workspace
        folder with the project in ``tr/`` (``tr/pyproject.toml``, ``tr/src/trainer/...``)
        names modules as the CLI does from ``tr/`` (``trainer.dist``, not ``tr.src...``)."""
        parts = rel.split("/")
        for i in range(len(parts) - 1, 0, -1):
            directory = "/".join(parts[:i])
            nested = self._nested.get(directory)
            if nested is None:
                here = self.root / directory
                # A `setup.py` beside an `__init__.py` is a module of the package
                # (dinov2's `eval/setup.py`) or an extension's build script inside it, not
                # the root of a project nested in this one.
                nested = self._nested[directory] = any(
                    (here / m).is_file() for m in ("pyproject.toml", "setup.cfg")
                ) or ((here / "setup.py").is_file() and not (here / "__init__.py").is_file())
            if nested:
                return "/".join(parts[i:])
        return rel

    def _model(self, predicates: frozenset[str]) -> tuple[RankModel, bytes]:
        model = self._models.get(predicates)
        if model is None:
            ranks = self.ranks.with_extra(predicates=predicates)
            model = self._models[predicates] = (ranks, _ranks_key(ranks))
        return model

    @property
    def ranks_key(self) -> bytes:
        return self._model(frozenset())[1]

    def content_key(
        self, path: Path, data: bytes, dirs: dict[str, str] | None = None
    ) -> tuple[str, str]:
        """(path relative to the root, the key of the summary of ``data`` as that file with
        the settings' rank model): what names the file's part of the project's state.
        ``dirs``: see :meth:`_rel`."""
        rel = self._rel(path, dirs)
        return rel, self._key(rel, data, self._model(frozenset())[1])

    def _key(self, rel: str, data: bytes, ranks_key: bytes) -> str:
        module_rel = self._module_rel(rel)
        # The names are part of the key: the summary holds its path and its module's name.
        # SHA-256 (hardware-accelerated where the CPU has SHA extensions, through OpenSSL):
        # hashing a 2,285-file project's 46 MB took 0.19 CPU s with BLAKE2b, 0.09 with it,
        # and a warm `ddp-lsp check` of one file hashes every file of the project.
        # (Each hash a copy of one that has read the rank model's key: making a new hash
        # object costs ten times a copy through OpenSSL 3.)
        base = self._hashes.get(ranks_key)
        if base is None:
            base = self._hashes[ranks_key] = hashlib.sha256(ranks_key)
        h = base.copy()
        h.update(rel.encode())
        h.update(b"\0")
        h.update(module_rel.encode())
        h.update(b"\0")
        h.update(data)
        return h.hexdigest()[:32]

    def _summary(
        self, rel: str, data: bytes, used: frozenset[str], persist: bool, previous: bytes | None
    ) -> ModuleSummary:
        model = self._model(used)
        module_rel = self._module_rel(rel)
        key = self._key(rel, data, model[1])
        summary = self.cache.get(key)
        if summary is None:
            self.cache.misses += 1
            self._parsed.add(rel)
            text = data.decode("utf-8", errors="replace")
            # (previous: the text before an edit, a hint for a large file half typed)
            fresh, own = summarise_with_facts(rel, text, key, model[0], module_rel, previous)
            summary = self.cache.put(key, fresh, persist)
            if not persist:
                self._unsaved.setdefault(rel, set()).add(key)
            if own is not None and summary.digest not in self._own:
                # Merged once: the computation asks for them (own_facts) for every module.
                self._own[summary.digest] = own
        else:
            self.cache.hits += 1
        return summary

    def add(self, path: Path, data: bytes, persist: bool = True) -> ModuleSummary:
        """Summarise ``data`` as ``path`` into the index, with the project's rank predicates
        as they stand (no refresh of the others: see build._still_holds); raises what the
        summariser raises."""
        return self._add(path, data, persist)

    def _add(
        self, path: Path, data: bytes, persist: bool = True, previous: bytes | None = None
    ) -> ModuleSummary:
        rel = self._rel(path)
        summary = self._summary(rel, data, frozenset(), persist, previous)
        used = _calls_named(summary, self.project_predicates)
        if used:
            summary = self._summary(rel, data, used, persist, previous)
        old = self._by_path.get(rel)
        if summary.syntax_error and old is not None and not old.syntax_error:
            # Half-typed code: what the file said while it last parsed still holds (dropping
            # it would make other files' findings flicker while the user types).
            return old
        if old is not None and self._by_module.get(old.module) is old:
            del self._by_module[old.module]
        self._by_path[rel] = summary
        # Two files with one module name (a.py and a/__init__.py): the package wins, as Python's
        # import system would pick it; ties between paths are broken by path, not read order.
        seen = self._by_module.get(summary.module)
        if seen is None or (summary.is_package, seen.path) > (seen.is_package, summary.path):
            self._by_module[summary.module] = summary
        return summary

    def update(self, path: Path, text: str | None) -> ModuleSummary | None:
        """An edited file (``text``), or a deleted one (``None``)."""
        rel = self._rel(path)
        if text is None:
            self._texts.pop(rel, None)
            self._defines.pop(rel, None)
            self._unsaved.pop(rel, None)
            old = self._by_path.pop(rel, None)
            if old is not None and self._by_module.get(old.module) is old:
                del self._by_module[old.module]
                for s in sorted(self._by_path.values(), key=lambda s: s.path):
                    if s.module == old.module:
                        self._by_module[s.module] = s
            self._refresh_predicates()
            return None
        data = text.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            return self.update(path, None)
        previous = self._texts.get(rel)
        self._texts[rel] = data
        before = self._by_path.get(rel)
        self._add(path, data, persist=False, previous=previous)
        self._refresh_predicates()
        # Versions of this file's unsaved text older than the one just replaced: no file has
        # them and no computation reads them (the last one computed from holds the replaced
        # summary and reads its own facts once more), so they go now rather than at the next
        # retain, 64 edits on (an edit of a 20,000-line file each time kept 1-2 MB).
        keys = self._unsaved.get(rel)
        if keys:
            after = self._by_path.get(rel)
            keep = {s.digest for s in (before, after) if s is not None}
            for key in keys - keep:
                self.cache.forget(key)
                self._own.pop(key, None)
            keys &= keep
        self._edits += 1
        if self._edits % 64 == 0:
            self.cache.retain(self._by_path.values())
            # And the own facts of summaries no file has any more (each edit of a file
            # merged its own; a long session kept one per version until 2N + 64).
            live = {s.digest for s in self._by_path.values()}
            self._own = {d: f for d, f in self._own.items() if d in live}
        return self._by_path.get(rel)

    def forget_text(self, path: Path) -> None:
        """The editor closed ``path``: its text on disk counts again (call update after)."""
        self._texts.pop(self._rel(path), None)

    def _refresh_predicates(self) -> None:
        """Re-summarise the files whose calls name a predicate that appeared or went away."""
        defined: set[str] = set()
        for rel, s in self._by_path.items():
            names = self._defines.get(rel)
            if names is None or names[0] is not s:
                found = frozenset(
                    fi.qualname.rpartition(".")[2]
                    for fi in s.facts.functions
                    if fact_model.RANK_PREDICATE in fi.props
                )
                names = self._defines[rel] = (s, found)
            defined |= names[1]
        new = frozenset(defined - self.ranks.predicates)
        if new == self.project_predicates:
            return
        changed = new ^ self.project_predicates
        self.project_predicates = new
        for rel, s in sorted(self._by_path.items()):
            if not _calls_named(s, changed):
                continue
            data = self._texts.get(rel)
            if data is None:
                try:
                    data = read_source(self.root / rel)
                except ReadError:
                    continue
            self._add(self.root / rel, data, persist=rel not in self._texts)

    # -- queries -------------------------------------------------------------------------------

    @property
    def parsed(self) -> int:
        """How many files this index had to parse (the others came from the cache)."""
        return len(self._parsed)

    def own_facts(self, summary: ModuleSummary) -> fact_model.ModuleFacts:
        """The core's module facts of one file alone (kept per content: an edit to one file
        recomputes the project's facts without merging every other file again)."""
        facts = self._own.get(summary.digest)
        if facts is None:
            if len(self._own) > 2 * len(self._by_path) + 64:
                self._own.clear()
            facts = self._own[summary.digest] = fact_model.merge([summary.facts])
        return facts

    @property
    def modules(self) -> Mapping[str, ModuleSummary]:
        return self._by_module

    @property
    def summaries(self) -> Mapping[str, ModuleSummary]:
        return self._by_path

    def module_of(self, path: Path) -> str | None:
        s = self._by_path.get(self._rel(path))
        return None if s is None else s.module

    def lines(self) -> int:
        return sum(s.lines for s in self._by_path.values())
