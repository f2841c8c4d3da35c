"""Building a project's index: the one build the CLI and the server's indexer share.

:func:`fill` summarises files into a :class:`~ddp_lsp.project.ProjectIndex` batch by batch,
laying an editor's (or stdin's) text over the files it meets; the server's indexer process
(:mod:`ddp_lsp.lsp.indexer`) drives it with progress reports, and :func:`project_view` (``ddp-lsp
check``) with a process pool that fills the disk cache first on a cold cache. The files are
the ones :func:`~ddp_lsp.project.discover.discover` lists (``ProjectIndex.files``).

:func:`project_root` finds the project a file belongs to (the nearest pyproject.toml or .git).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ddp_lsp.config import Settings
from ddp_lsp.pools import (
    PARALLEL_MIN_BYTES,
    PARALLEL_MIN_FILES,
    cpu_count,
    idle_cpus,
    pool_context,
    pool_worker_init,
)

if TYPE_CHECKING:
    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.project import snapshot
    from ddp_lsp.project.filekeys import Files
    from ddp_lsp.project.index import ProjectIndex
    from ddp_lsp.project.summary import ModuleSummary

log = logging.getLogger("ddp_lsp.project")

BATCH = 16  # files per ProjectIndex.build call: project-wide predicates refresh once per batch


def fill(
    index: ProjectIndex,
    paths: Sequence[Path],
    overlays: dict[Path, str] | None = None,
    before: Callable[[Sequence[Path]], None] | None = None,
    after: Callable[[int], None] | None = None,
    contents: dict[Path, bytes] | None = None,
) -> list[Path]:
    """Summarise ``paths`` into ``index`` in batches of :data:`BATCH`; a path in ``overlays``
    gets that text instead of the disk's (and leaves ``overlays``: what is left there, the
    caller lays over as it sees fit). ``before(batch)`` runs before each batch, ``after(done)``
    after it; ``contents``: files already read (taken out as they are summarised). Returns the files whose summary raised (see
    ProjectIndex.build)."""
    overlays = {} if overlays is None else overlays
    failed_before = len(index.failed)
    for start in range(0, len(paths), BATCH):
        batch = paths[start : start + BATCH]
        if before is not None:
            before(batch)
        # (The index skips large files itself.)
        index.build([p for p in batch if p not in overlays], contents)
        for path in batch:
            if path in overlays:
                lay_over(index, path, overlays.pop(path))
        if after is not None:
            after(start + len(batch))
    return index.failed[failed_before:]


def lay_over(index: ProjectIndex, path: Path, text: str | None) -> None:
    """``text`` in place of ``path``'s (None: deleted). One file that breaks the summariser (a
    recursion limit on absurd nesting) costs that file only: it leaves the index."""
    try:
        index.update(path, text)
    except Exception:
        log.warning("indexing %s failed", path, exc_info=True)
        index.update(path, None)


@dataclass(frozen=True)
class ProjectView:
    """One project root's index and cross-file facts, by path relative to the root."""

    root: Path
    facts: dict[str, ModuleProjectFacts]
    files: int = 0  # files indexed
    parsed: int = 0  # of which not found in the cache
    failed: tuple[str, ...] = ()  # files the index could not summarise (they are still checked)
    seconds: float = 0.0
    # Files the index did not read (path, reason kind, message): see sources.py.
    unread: tuple[tuple[str, str, str], ...] = ()
    cache_warning: str | None = None  # the disk cache is not trusted (SummaryCache.warning)


# Files summarised in this process before deciding whether the rest are worth a pool: on a
# warm cache they all come from it, and a pool would only add its start-up.
INDEX_SAMPLE = 16


def project_view(
    root: Path,
    settings: Settings,
    workers: int | None = None,
    overlays: Mapping[Path, bytes] | None = None,
    wanted: Collection[str] | None = None,
) -> ProjectView:
    """Index every Python file under ``root`` (the settings' excludes apply; summaries are
    cached under the user's cache directory) and compute the project's cross-file facts.

    ``wanted``: the paths (relative to the root) whose facts the caller needs (None: all).
    When no file changed since the last computation for this root, its snapshot on disk
    answers (:mod:`ddp_lsp.project.snapshot`): the files are read and hashed, and only the
    wanted files' facts are decoded; ``facts`` then holds those with any.

    On a cold cache (CI, a first run) and a large project, worker processes summarise the
    files into the disk cache first, and this process then reads them from it: the index
    costs about one parse per file, as much as the analysis, and on a machine with many CPUs
    a serial index would take longer than the pooled analysis. ``workers``: as ``--jobs``.

    A file the index cannot summarise costs only its own contribution: unreadable files are
    skipped by the index, undecodable bytes are replaced, syntax errors give an empty summary,
    and anything else (a recursion limit on absurd nesting) is caught here per file."""
    import time

    from ddp_lsp.project import ProjectIndex, snapshot
    from ddp_lsp.project.filekeys import file_keys
    from ddp_lsp.project.index import no_collection

    started = time.perf_counter()
    index = ProjectIndex(root, settings)
    paths = list(index.files())
    # Code read from stdin with --stdin-filename (an editor's buffer): its text, not the disk's.
    texts = {p: data.decode("utf-8", errors="replace") for p, data in (overlays or {}).items()}
    # The project's state: each file's summary key (read and hashed, or stored with the file's
    # stat when it did not change since: filekeys.py); the bytes of the files read, for the
    # index to summarise; each key's file and bytes (those not read, read when asked for).
    pairs, at, contents = file_keys(index, paths, texts)
    state = snapshot.project_key(index.root, pairs)
    keys = dict(pairs)
    cache_dir = index.cache.directory
    stored = snapshot.read(cache_dir, index.root, index.ranks_key)
    unread = tuple(dict.fromkeys((str(p), e.kind, str(e)) for p, e in index.unread.items()))
    if stored is not None:
        facts_read = None
        if stored.key == state:
            facts_read = stored.facts(index.root, wanted)
        # (Two files with one relative path, links to files outside the root: only a full
        # build says which one the index keeps.)
        elif len(keys) == len(pairs) and (
            (held := _holds(index, stored, keys, at, texts)) is not None
        ):
            # Early cutoff: the changed files say what they said; the facts stand (their
            # provenance in files whose lines moved, moved with them; the single-process
            # functions of a file that gained or lost a function nothing calls, updated).
            moves, patched = held
            modules = dict(stored.modules)
            originals = dict(stored.originals)
            if stored.state_id is not None:
                # The state's own facts of a patched module, kept for its next update.
                for rel in patched:
                    originals.setdefault(rel, stored.modules.get(rel))
            for rel, text in patched.items():
                if text is None:
                    modules.pop(rel, None)
                else:
                    modules[rel] = text
            stored = dataclasses.replace(stored, moved=moves, modules=modules, originals=originals)
            facts_read = stored.facts(index.root, wanted)
            if facts_read is not None:
                sources = dict(stored.sources)
                for rel, s in index.summaries.items():
                    sources[rel] = (keys[rel], s.digest)
                snapshot.store(
                    cache_dir,
                    index.root,
                    index.ranks_key,
                    state,
                    len(paths),
                    stored.failed,
                    stored,
                    sources,
                    stored.predicates,
                    moves,
                    stored.reached,
                    state_id=stored.state_id,
                    originals=stored.originals,
                )
        elif len(keys) == len(pairs) and stored.state_id is not None:
            # Other files' facts changed: the stored computation updated (flowstate.py),
            # lines moved with them or not.
            try:
                view = _updated(index, stored, keys, at, texts, wanted, state, len(paths))
            except Exception:  # a defect of the update costs its speed only: computed below
                log.warning("project index: the stored state's update failed", exc_info=True)
                view = None
            if view is not None:
                contents.clear()
                return dataclasses.replace(
                    view,
                    seconds=time.perf_counter() - started,
                    unread=unread,
                    cache_warning=index.cache.warning,
                )
        if facts_read is not None:
            contents.clear()
            return ProjectView(
                index.root,
                facts_read,
                len(paths),
                index.parsed,
                stored.failed,
                time.perf_counter() - started,
                unread=unread,
                cache_warning=index.cache.warning,
            )
        # A fresh index, as a full build starts (what _still_holds summarised is cached).
        tried, index = index.parsed, ProjectIndex(root, settings)
    else:
        tried = 0
    index.unread.clear()  # read again below
    # Every file is summarised: those whose key came from their stat are read now, and the
    # state is named by the keys of the bytes summarised (a file saved since its stat was
    # taken is summarised as it is now, under its new key).
    changed = at.read_rest(contents)
    if changed:
        pairs = [
            (rel, now)
            for rel, key in pairs
            if (now := changed[rel] if rel in changed else key) is not None
        ]
        keys = dict(pairs)
        state = snapshot.project_key(index.root, pairs)
    # Indexing and computing make millions of objects that live until the snapshot is
    # stored, none in a reference cycle: the cyclic collector is off meanwhile (see
    # no_collection), and the index goes (by reference counts) before it is back, or its
    # first pass would walk every one of them for nothing (3 CPU s at 2,000 files).
    with no_collection():
        view = _build(index, settings, paths, texts, contents, workers, tried, state, keys)
        del index
    return dataclasses.replace(view, seconds=time.perf_counter() - started)


def _build(
    index: ProjectIndex,
    settings: Settings,
    paths: list[Path],
    texts: dict[Path, str],
    contents: dict[Path, bytes],
    workers: int | None,
    tried: int,
    state: str,
    keys: Mapping[str, str],
) -> ProjectView:
    """:func:`project_view`'s build from scratch: every file summarised (in worker processes
    first when most are not cached), the facts computed, the snapshot and the update state
    stored."""
    from ddp_lsp.project import compute, flowstate, snapshot

    failed = fill(index, paths[:INDEX_SAMPLE], texts, contents=contents)
    rest = paths[INDEX_SAMPLE:]
    parsed_elsewhere = 0
    if rest and index.cache.misses * 2 > min(len(paths), INDEX_SAMPLE):
        n = _index_workers(rest, index.cache.directory, workers)
        if n > 1:
            parsed_elsewhere = _prefill(index.root, settings, rest, n)
    failed += fill(index, rest, texts, contents=contents)
    for path, text in texts.items():  # a new file, not on disk yet: still in the project
        lay_over(index, path, text)
    facts = compute(index)
    failed_rel = tuple(p.relative_to(index.root).as_posix() for p in failed)
    summaries = index.summaries
    snapshot.store(
        index.cache.directory,
        index.root,
        index.ranks_key,
        state,
        len(paths),
        failed_rel,
        facts.by_path,
        {
            rel: (key, got.digest if (got := summaries.get(rel)) else "")
            for rel, key in keys.items()
        },
        index.project_predicates,
        reached=None
        if facts.stages is None or not facts.stages.reach
        else {m for m in facts.stages.reach["reached_modules"]},
        state=flowstate.state_of(facts, index),
    )
    return ProjectView(
        index.root,
        dict(facts.by_path),
        len(paths),
        min(len(paths), index.parsed + parsed_elsewhere + tried),
        failed_rel,
        unread=tuple(dict.fromkeys((str(p), e.kind, str(e)) for p, e in index.unread.items())),
        cache_warning=index.cache.warning,
    )


def _updated(
    index: ProjectIndex,
    stored: snapshot.Stored,
    keys: Mapping[str, str],
    at: Mapping[str, tuple[Path, bytes]],
    texts: Mapping[Path, str],
    wanted: Collection[str] | None,
    key: str,
    files: int,
) -> ProjectView | None:
    """The project's facts from ``stored``'s update state (:mod:`~ddp_lsp.project.flowstate`)
    when the same files are there and at most ``flowstate.MAX_CHANGED`` of them differ from
    the summaries the state was computed from (each summarised, or read from the cache by
    the digest the snapshot names); the snapshot is stored again, updated. None when the
    update cannot be shown to equal a computation from scratch (then compute)."""
    from ddp_lsp.project import flowstate, snapshot

    if keys.keys() != stored.sources.keys():
        return None  # a file added or removed: names resolve differently
    state = snapshot.read_state(index.cache.directory, index.root, index.ranks_key, stored)
    if state is None:
        return None
    index.project_predicates = stored.predicates
    sources = {s.path: s for s in state.head.sources}
    current: dict[str, ModuleSummary] = {}
    for rel, now in keys.items():
        src = sources.get(rel)
        base, used = stored.sources[rel]
        if now == base:  # as the snapshot saw it
            if src is None or used == src.digest:
                continue
            summary = index.cache.get(used)
            if summary is None:
                return None
        else:
            if src is None:
                return None  # a file the computation did not read (two of one module name)
            path, data = at[rel]
            try:
                summary = index.add(path, data, persist=path not in texts)
            except Exception:
                log.debug("project index: cannot summarise %s", path, exc_info=True)
                return None
        if summary.digest != src.digest:
            current[src.module] = summary
            if len(current) > flowstate.MAX_CHANGED:
                return None
    result = flowstate.update(index, state, stored.modules, current, index.cache.get)
    if result is None:
        return None
    modules = dict(stored.modules)
    for rel, text in result.facts_text.items():
        if text is None:
            modules.pop(rel, None)
        else:
            modules[rel] = text
    module_of = {s.path: s.module for s in state.head.sources}
    facts: dict[str, ModuleProjectFacts] = {}
    for rel in module_of if wanted is None else wanted:
        m = module_of.get(rel)
        if m is not None:
            got = result.facts.modules[m]
            if says_something(got):
                facts[rel] = got
    new_sources = dict(stored.sources)
    for rel, s in index.summaries.items():
        new_sources[rel] = (keys[rel], s.digest)
    snapshot.store(
        index.cache.directory,
        index.root,
        index.ranks_key,
        key,
        files,
        stored.failed,
        dataclasses.replace(stored, modules=modules),
        new_sources,
        stored.predicates,
        result.moved,
        stored.reached,
        result.state,
    )
    return ProjectView(index.root, facts, files, index.parsed, stored.failed)


# At most this many changed files are compared with their old summaries before computing
# the facts again (each costs a parse and a cache read; the computation, ~2 ms a file).
MAX_CUTOFF_FILES = 32


def _holds(
    index: ProjectIndex,
    stored: snapshot.Stored,
    keys: Mapping[str, str],
    at: Files,
    texts: Mapping[Path, str],
) -> tuple[dict[str, dict[int, int]], dict[str, str | None]] | None:
    """:func:`_still_holds`, None when a file it reads (one whose key came from its stat) has
    changed or gone since its stat was taken: a full build then says what it holds."""
    from ddp_lsp.project.filekeys import Stale
    from ddp_lsp.sources import ReadError

    try:
        return _still_holds(index, stored, keys, at, texts)
    except (ReadError, Stale):
        return None


def _still_holds(
    index: ProjectIndex,
    stored: snapshot.Stored,
    keys: Mapping[str, str],
    at: Mapping[str, tuple[Path, bytes]],
    texts: Mapping[Path, str],
) -> tuple[dict[str, dict[int, int]], dict[str, str | None]] | None:
    """Whether ``stored``'s facts are the facts of the project as it is now although some
    files changed: the same files, and each changed one summarised (into ``index``) to what
    the project reads of its old summary (:func:`~ddp_lsp.project.summary.same_for_project`)
    or to that with its cited lines moved in order (:func:`~ddp_lsp.project.summary.line_map`),
    a file that neither defines nor calls a rank-0 predicate of the project (such files
    change how others are summarised). If so, the lines moved since the facts were computed
    (``Stored.moved`` with this run's moves composed in); anything else, or an old summary
    no longer cached: None, and the facts are computed again.

    A changed file may also have gained or lost functions that nothing in the project calls
    and that call nothing of it (:func:`_isolated_change`): its other facts stand, and its
    stored facts are patched (the second item: path -> its facts as stored, None for none)."""
    from ddp_lsp.core import facts as fact_model
    from ddp_lsp.project.summary import line_map, same_for_project

    if keys.keys() != stored.sources.keys():
        return None  # a file added or removed: names resolve differently
    changed = [rel for rel, key in keys.items() if stored.sources[rel][0] != key]
    if not changed or len(changed) > MAX_CUTOFF_FILES:
        return None
    moves = {rel: dict(lines) for rel, lines in stored.moved.items()}
    patched: dict[str, str | None] = {}
    index.project_predicates = stored.predicates
    for rel in changed:
        old_key = stored.sources[rel][1]
        if old_key != stored.sources[rel][0]:
            return None  # summarised with the project's predicates, or not summarised
        old = index.cache.get(old_key)
        if old is None:
            return None
        path, data = at[rel]
        try:
            new = index.add(path, data, persist=path not in texts)
        except Exception:
            log.debug("project index: cannot summarise %s", path, exc_info=True)
            return None
        if new.digest != keys[rel]:
            return None
        if any(fact_model.RANK_PREDICATE in fi.props for fi in new.facts.functions):
            return None
        if same_for_project(old, new):
            continue
        lines = line_map(old, new)
        if lines is None:
            iso = _isolated_change(old, new, rel, at)
            if iso is None:
                return None
            rest_old, rest_new, added, removed = iso
            if same_for_project(rest_old, rest_new):
                lines = {}
            else:
                lines = line_map(rest_old, rest_new)
                if lines is None:
                    return None
            patch = _patch_local(stored, index.root, rel, new, added, removed)
            if patch is False:
                return None
            if patch is not True:
                patched[rel] = patch
        if any(old_line != new_line for old_line, new_line in lines.items()):
            earlier = moves.get(rel)
            if earlier is not None:  # cited key -> its line before this run -> now
                # (0: a line gone in an earlier update, see flowstate._Moved; it stays gone.)
                if any(line and line not in lines for line in earlier.values()):
                    return None
                lines = {key: lines[line] if line else 0 for key, line in earlier.items()}
            moves[rel] = lines
    return moves, patched


def _isolated_change(
    old: ModuleSummary, new: ModuleSummary, rel: str, at: Mapping[str, tuple[Path, bytes]]
) -> tuple[ModuleSummary, ModuleSummary, set[str], set[str]] | None:
    """Whether ``new`` is ``old`` with top-level functions added or removed that no file of
    the project names (their name occurs in no other file, and in this one only at its
    ``def``) and that do nothing the project reads: no property, no binding, no call site,
    no function handed, and calls of nothing but names the module neither defines nor
    imports (a helper being written: ``def _bench_edited(): return 0``). Every cross-file
    fact is then what it was, except the module's single-process functions (such a function
    is an orphan of its module in reach.single_process: unknown where distributed code runs
    in the module, single-process elsewhere). Returns both summaries without those functions
    (to compare as any changed file is) and the names added and removed; None otherwise."""
    import re

    from ddp_lsp.core import facts as fact_model

    old_names = [fi.qualname for fi in old.facts.functions]
    new_names = [fi.qualname for fi in new.facts.functions]
    added, removed = set(new_names) - set(old_names), set(old_names) - set(new_names)
    if not added and not removed:
        return None
    if any(old_names.count(n) > 1 for n in removed) or any(new_names.count(n) > 1 for n in added):
        return None  # two functions of one name: which one a call reaches is the last's
    for name, s in [*((n, new) for n in added), *((n, old) for n in removed)]:
        if "." in name or name == fact_model.MODULE:
            return None
        fi = next(f for f in s.facts.functions if f.qualname == name)
        if fi.cls is not None or fi.props:
            return None
        if any(cs.caller == name for cs in (*s.facts.call_sites, *s.dotted_sites)):
            return None
        if any(b.scope == name or b.scope.startswith(name + ".") for b in s.facts.bindings):
            return None
        if any(scope == name for scope, _ in s.handed) or any(
            q == name for q, _, _ in s.prop_lines
        ):
            return None
        known = {f.qualname.partition(".")[0] for f in s.facts.functions}
        known |= {c for c, _ in s.bases} | {n for n, _ in s.facts.imports}
        if any("." in callee or callee in known for callee in fi.calls):
            return None
    # Named nowhere else: no call, import, base or handed function of another file spells it.
    word = re.compile(
        rb"\b(" + b"|".join(re.escape(n.encode()) for n in sorted(added | removed)) + rb")\b"
    )
    here = at[rel][1]
    if len(word.findall(here)) != len(added):
        return None
    # (A substring test, in C: any occurrence, in a word or not, counts.)
    spelled = [n.encode() for n in sorted(added | removed)]
    for other, (_, data) in at.items():
        if other != rel and any(n in data for n in spelled):
            return None

    def without(s: ModuleSummary, names: set[str]) -> ModuleSummary:
        kept = tuple(fi for fi in s.facts.functions if fi.qualname not in names)
        return dataclasses.replace(s, facts=dataclasses.replace(s.facts, functions=kept))

    return without(old, removed), without(new, added), added, removed


def _patch_local(
    stored: snapshot.Stored,
    root: Path,
    rel: str,
    new: ModuleSummary,
    added: set[str],
    removed: set[str],
) -> str | None | bool:
    """The stored facts of ``rel`` after :func:`_isolated_change`'s functions came and went:
    True when they stay, the new text (None: no facts), False when the old ones do not
    decode."""
    from ddp_lsp.core.crossfile import ModuleProjectFacts
    from ddp_lsp.project import snapshot

    if stored.reached is None or new.module in stored.reached:
        return True  # nothing is distributed code, or each is an orphan of reached code
    text = stored.modules.get(rel)
    try:
        facts = (
            ModuleProjectFacts(new.module, rel, root=str(root))
            if text is None
            else snapshot.decode(text, root)
        )
    except (ValueError, TypeError, RecursionError, KeyError):
        return False
    local = (facts.single_process - removed) | added
    if local == facts.single_process:
        return True
    facts = dataclasses.replace(facts, single_process=local)
    return snapshot.encode(facts) if says_something(facts) else None


def _index_workers(paths: Sequence[Path], cache: Path | None, workers: int | None) -> int:
    """How many processes should summarise ``paths`` (1: this one). Workers hand their
    summaries over through the disk cache, so without a writable one they would be wasted."""
    if workers is None:
        size = 0
        for p in paths:
            with contextlib.suppress(OSError):
                size += p.stat().st_size
        if len(paths) < PARALLEL_MIN_FILES or size < PARALLEL_MIN_BYTES:
            return 1
        workers = idle_cpus(cpu_count())
    workers = min(workers, len(paths) // PARALLEL_MIN_FILES)
    if workers <= 1 or cache is None:
        return 1
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return 1
    return workers if os.access(cache, os.W_OK) else 1


def _prefill(root: Path, settings: Settings, paths: Sequence[Path], workers: int) -> int:
    """Summarise ``paths`` into the disk cache in a pool; the number of files parsed. A pool
    that fails (a worker dies) costs nothing but time: this process summarises whatever is
    not cached."""
    import concurrent.futures as cf

    step = max(1, len(paths) // (workers * 4))
    batches = [[str(p) for p in paths[i : i + step]] for i in range(0, len(paths), step)]
    pool = cf.ProcessPoolExecutor(workers, mp_context=pool_context(), initializer=pool_worker_init)
    parsed = 0
    try:
        for n in pool.map(_summarise_batch, [(str(root), settings, b) for b in batches]):
            parsed += n
    except Exception:  # a worker died, or the pool could not start: only time is lost
        log.debug("project index: the pool failed; indexing the rest here", exc_info=True)
    except BaseException:  # Ctrl-C
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return parsed


def _summarise_batch(task: tuple[str, Settings, list[str]]) -> int:
    from ddp_lsp.project import ProjectIndex

    root, settings, paths = task
    index = ProjectIndex(Path(root), settings)
    fill(index, [Path(p) for p in paths])
    return index.parsed


def says_something(facts: ModuleProjectFacts) -> bool:
    """Whether the project tells a module anything. Most modules of a project receive nothing
    from the others (no DDP model passed in, no helper of another file called); their
    analysis with empty facts equals the analysis alone, so they are sent to workers without."""
    return bool(
        facts.extra_kinds
        or facts.callee_props
        or facts.distributed is not None
        or facts.only_called_guarded
        or facts.single_process
        or facts.silenced
    )


# -- which project a file belongs to --------------------------------------------------------


def fallback_root(path: Path, anchor: Path) -> Path | None:
    """``anchor`` as the project of ``path`` when it holds the file and is not the home
    directory or the file system's root (a loose script there would index everything)."""
    from ddp_lsp.project.index import is_too_wide

    if is_too_wide(anchor):
        return None
    try:
        path.relative_to(anchor)
    except ValueError:
        return None
    return anchor


def project_root(directory: Path, memo: dict[Path, Path | None] | None = None) -> Path | None:
    """The project root of a file in ``directory`` (the nearest directory with a
    pyproject.toml or a .git), or None when there is none: such files are analysed alone."""
    from ddp_lsp.project.index import find_root, is_project_root

    if memo is not None and directory in memo:
        return memo[directory]
    root: Path | None = find_root([directory])
    assert root is not None
    if not is_project_root(root):
        root = None
    if memo is not None:
        memo[directory] = root
    return root
