"""Import resolution across the project: which module and function a spelled name reaches.

``from .utils import dist as du`` in ``trainer/loop.py`` makes ``du.save_on_master`` the
function ``save_on_master`` of ``trainer.utils.dist``; ``import engine`` in ``main.py`` makes
``engine.train_one_epoch`` the one in ``engine.py``. A package's ``__init__`` that re-exports a
name (``from .dist import save_on_master``) is followed, and methods missing from a class are
looked up in its bases, in whatever module those are defined.

A project checked out from inside a larger tree imports itself by a longer dotted path than
its checkout root (a monorepo's ``from vision.fair.slowfast.tools.train_net import train``
where the root holds ``tools/train_net.py``): when no prefix of an absolute name is a module of
the project, the longest project module path inside it (after at least two leading names, the
first of which may name the project: not the standard library, a known framework or a project
module) resolves it, as long as what follows is a member of that module
(:meth:`Resolver._by_suffix`).
"""

from __future__ import annotations

from functools import cached_property

from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import names as known_names
from ddp_lsp.project.index import ProjectIndex
from ddp_lsp.project.summary import ModuleSummary

# Re-exports followed through at most this many modules; bases through this many classes.
MAX_DEPTH = 4


def absolute_import(importer: ModuleSummary, qual: str) -> str:
    """The absolute dotted name of an import target as ``facts.extract`` records it.

    ``names.import_bindings`` spells ``from .m import x`` as ``.m.x`` and ``from . import x``
    as ``..x`` (the empty module adds a dot): one name after the dots means no module, so the
    level is one less than the dots.
    """
    if not qual.startswith("."):
        return qual
    stripped = qual.lstrip(".")
    dots = len(qual) - len(stripped)
    level = dots - 1 if "." not in stripped else dots
    package = importer.module.split(".") if importer.module else []
    if not importer.is_package and package:
        package = package[:-1]
    if level > 1:
        package = package[: max(0, len(package) - (level - 1))]
    return ".".join([*package, stripped]) if package else stripped


def interface(s: ModuleSummary) -> tuple[object, ...]:
    """What resolution reads of a module: its name, imports, functions' names and parameters
    and classes' bases. An edit inside a function body leaves it equal."""
    return (
        s.module,
        s.path,
        s.is_package,
        s.facts.imports,
        tuple((fi.qualname, fi.cls, fi.params) for fi in s.facts.functions),
        s.bases,
    )


_MISSING = object()


def _no_reading() -> None:
    """A resolver without tracking: an answer begins (nothing recorded)."""


def _no_key(key: tuple[str, str, str]) -> None:
    """A resolver without tracking: an answer ends or is found in a memo (nothing recorded)."""


class Resolver:
    """Name resolution over a :class:`ProjectIndex`. After an update, :meth:`reuse` says
    whether its answers can be kept (the same modules) and drops those that read a module
    whose :func:`interface` changed; otherwise build a new one.

    Each memoised answer records the modules whose tables it read (its own module's, those of
    the modules an import led to, a re-exporting package's, a base class's), so an edit that
    adds a function or an import to one module forgets only the answers that looked into it
    (salsa-style dependency tracking), and :attr:`stale` names the modules that asked them."""

    def __init__(self, index: ProjectIndex, track: bool = True) -> None:
        self.index = index
        self.modules = index.modules
        self._aliases: dict[str, dict[str, str]] = {}
        self._functions: dict[str, dict[str, fact_model.FunctionInfo]] = {}
        self._classes: dict[str, dict[str, tuple[str, ...]]] = {}
        # compute() asks for each spelling several times (call sites, calls, callee props);
        # (module, qualname) of the function, looked up in the module's current table.
        self._function_memo: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._resolve_memo: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._imported_memo: dict[str, list[str]] = {}
        # function()'s answers as returned (the FunctionInfo of the module's table when it was
        # asked), for the calls that no answer being computed reads through (every call from
        # outside): forgotten whenever reuse() takes changed summaries (their tables change).
        self._function_got: dict[tuple[str, str], tuple[str, fact_model.FunctionInfo] | None] = {}
        # find_module's answers past the project's own names, by (the importer's package,
        # name): all it reads then, besides the importer itself (recorded on every call).
        self._parents: dict[str, str] = {}
        self._found: dict[tuple[str, str], str | None] = {}
        # _resolve's answers for absolute names by (the importer's package, name), without
        # tracking (see _resolve).
        self._absolute: dict[tuple[str, str, int], tuple[str, str] | None] = {}
        # The summaries resolution read, by module, with their interfaces.
        # (None read yet over modules read on demand, ``deferred``: flowstate.py's restored
        # state; such a resolver is never reused.)
        self._seen: dict[str, tuple[ModuleSummary, tuple[object, ...]]] = {
            m: (s, interface(s))
            for m, s in ({} if getattr(self.modules, "deferred", False) else self.modules).items()
        }
        self.tables_built = 0  # per-module tables built (tests count what an update rebuilt)
        # Dependency tracking: the modules read by the answer being computed (innermost last),
        # what each memoised answer read, and the answers that read each module.
        self._reading: list[set[str]] = []
        self._deps: dict[tuple[str, str, str], frozenset[str]] = {}
        self._readers: dict[str, set[tuple[str, str, str]]] = {}
        # After reuse(): the modules some of whose answers were dropped (their resolved parts
        # must be built again), and the imported_modules lists dropped, as they were.
        self.stale: frozenset[str] = frozenset()
        self.old_imports: dict[str, list[str]] = {}
        # Without tracking (a computation that will not be updated: `ddp-lsp check`), no
        # answer says what it read (a third of a computation's time at 2,000 files), and
        # reuse() keeps the answers only when no interface changed.
        self.track = track
        if not track:
            # Plain functions, not this object's bound methods: a bound method kept on its
            # own object is a reference cycle, and the resolver (with the index and every
            # summary it holds) would then wait for the cyclic collector instead of going
            # when the computation drops it (a full collection of millions of objects).
            self._begin = _no_reading  # type: ignore[method-assign]
            self._end = _no_key  # type: ignore[method-assign]
            self._hit = _no_key  # type: ignore[method-assign]

    def reuse(self, index: ProjectIndex) -> bool:
        """Whether this resolver answers for ``index`` as it is now: the same modules, and
        every changed summary with the same :func:`interface`. If so, what it kept of the
        changed modules is dropped (rebuilt from their new summaries on demand)."""
        if index is not self.index or len(self.modules) != len(self._seen):
            return False
        changed = []
        moved_interface = []
        for m, s in self.modules.items():
            seen = self._seen.get(m)
            if seen is None:
                return False
            if seen[0] is not s:
                face = interface(s)
                if face[:3] != seen[1][:3]:
                    return False  # another file now holds the module: everything may differ
                if face != seen[1]:
                    moved_interface.append(m)
                changed.append((m, s, face))
        if moved_interface and not self.track:
            return False
        if changed:
            self._function_got.clear()
        for m, s, face in changed:
            self._seen[m] = (s, face)
            self._aliases.pop(m, None)
            self._functions.pop(m, None)
            self._classes.pop(m, None)
        stale: set[str] = set()
        old_imports: dict[str, list[str]] = {}
        for m in moved_interface:
            for key in self._readers.pop(m, ()):
                if self._deps.pop(key, None) is None:
                    continue  # dropped already (it read another changed module too)
                kind, module, name = key
                stale.add(module)
                if kind == "r":
                    self._resolve_memo.pop((module, name), None)
                elif kind == "f":
                    self._function_memo.pop((module, name), None)
                else:
                    got = self._imported_memo.pop(module, None)
                    if got is not None:
                        old_imports[module] = got
        self.stale = frozenset(stale)
        self.old_imports = old_imports
        return True

    def _read(self, module: str) -> None:
        if self._reading:
            self._reading[-1].add(module)

    def _begin(self) -> None:
        self._reading.append(set())

    def _end(self, key: tuple[str, str, str]) -> None:
        deps = frozenset(self._reading.pop())
        self._deps[key] = deps
        for d in deps:
            readers = self._readers.get(d)
            if readers is None:
                readers = self._readers[d] = set()
            readers.add(key)
        if self._reading:
            self._reading[-1].update(deps)

    def _hit(self, key: tuple[str, str, str]) -> None:
        if self._reading:
            self._reading[-1].update(self._deps.get(key, ()))

    # -- per-module tables ---------------------------------------------------------------------

    def aliases(self, module: str) -> dict[str, str]:
        """Bound name -> absolute qualified name, first import of a name wins (as in merge)."""
        if self._reading:
            self._reading[-1].add(module)
        table = self._aliases.get(module)
        if table is None:
            self.tables_built += 1
            table = {}
            s = self.modules.get(module)
            if s is not None:
                for name, qual in s.facts.imports:
                    table.setdefault(name, absolute_import(s, qual))
            self._aliases[module] = table
        return table

    def functions(self, module: str) -> dict[str, fact_model.FunctionInfo]:
        if self._reading:
            self._reading[-1].add(module)
        table = self._functions.get(module)
        if table is None:
            self.tables_built += 1
            s = self.modules.get(module)
            table = {} if s is None else {fi.qualname: fi for fi in s.facts.functions}
            self._functions[module] = table
        return table

    def classes(self, module: str) -> dict[str, tuple[str, ...]]:
        if self._reading:
            self._reading[-1].add(module)
        table = self._classes.get(module)
        if table is None:
            s = self.modules.get(module)
            table = {} if s is None else dict(s.bases)
            self._classes[module] = table
        return table

    @cached_property
    def _module_names(self) -> frozenset[str]:
        return frozenset(self.modules)

    @cached_property
    def _top_names(self) -> frozenset[str]:
        """The first component of every project module: where a module path inside a longer
        dotted name may start (the suffix map of :meth:`_by_suffix`, built once)."""
        return frozenset(m.partition(".")[0] for m in self.modules)

    def _suffix_modules(self, parts: list[str]) -> list[tuple[str, int]]:
        """``(module, end)`` for each project module spelled ``parts[k:end]`` with ``k >= 2``
        (a longer dotted path than the checkout root: ``vision.fair.slowfast.tools.train_net``
        holds ``tools.train_net``; a monorepo's path to a project is two folders deep or more,
        and one unknown package in front of ``utils.data`` is more likely a library's own), the ones that consume most of the name first, then the
        longest suffix. Empty when the head is a project module itself, the standard library
        or a known framework (``torch.utils.data`` never names the project's ``utils.data``)."""
        tops = self._top_names
        if len(parts) < 2 or parts[0] in tops or not known_names.may_be_project_module(parts[0]):
            return []  # the project's own path (that does not exist), or not the project
        found: list[tuple[str, int, int]] = []
        for k in range(2, len(parts)):
            if parts[k] not in tops:
                continue
            for end in range(len(parts), k, -1):
                name = ".".join(parts[k:end])
                if name in self._module_names:
                    found.append((name, end, k))
        found.sort(key=lambda f: (-f[1], f[2]))
        return [(name, end) for name, end, _ in found]

    def _by_suffix(self, module: str, parts: list[str], depth: int) -> tuple[str, str] | None:
        """What an absolute name no prefix of which is a project module names through the
        project module path inside it (:meth:`_suffix_modules`): the module itself when it
        ends the name, else its member; at least two names must match (a lone ``utils`` inside
        an unknown package's path is no evidence)."""
        for found, end in self._suffix_modules(parts):
            start = end - found.count(".") - 1
            remainder = ".".join(parts[end:])
            if len(parts) - start < 2:
                continue
            if not remainder:
                return (found, "")
            hit = self._member(found, remainder, depth)
            if hit is not None:
                return hit
        return None

    # -- resolution ----------------------------------------------------------------------------

    def find_module(self, importer: str, name: str) -> str | None:
        """A project module named ``name`` as seen from ``importer``.

        Absolute first; then next to the importer, as Python does for a script run from its
        own directory (``tools/train.py`` doing ``import engine`` for ``tools/engine.py``).
        """
        if name in self._module_names:
            return name
        if name == "src" or name.startswith("src."):
            # Module names drop a leading `src/` (index.module_name: the `src` layout), but a
            # project whose code runs from the root imports the folder as a package named
            # `src` (`from src.utils import init_distributed_mode`): both spellings resolve.
            bare = name[4:]
            self._read(bare)
            s = self.modules.get(bare)
            if s is not None and s.path.startswith("src/"):
                return bare
        if self._reading:
            self._reading[-1].add(importer)
        key = (self._parent(importer), name)
        found = self._found.get(key, _MISSING)
        if found is _MISSING:
            found = self._found[key] = self._find_near(key[0], name)
        return found  # type: ignore[return-value]

    def _parent(self, importer: str) -> str:
        """The package ``importer``'s relative imports start at: itself for a package."""
        # (The importer's package and the module names are the resolver's for its lifetime:
        # reuse() keeps it only for the same modules, each with the same path and kind.)
        parent = self._parents.get(importer)
        if parent is None:
            parent = importer.rpartition(".")[0]
            s = self.modules.get(importer)
            if s is not None and s.is_package:
                parent = importer
            self._parents[importer] = parent
        return parent

    def _find_near(self, parent: str, name: str) -> str | None:
        """:meth:`find_module`'s answer for a name that is no project module by itself: next
        to the importer (in ``parent``), then next to an enclosing folder."""
        if parent:
            local = f"{parent}.{name}"
            if local in self._module_names:
                return local
        if not known_names.may_be_project_module(name):
            return None
        # Then next to an enclosing folder, nearest first: a script that puts its project's
        # folder on `sys.path` (`sys.path.append(os.path.join(os.path.dirname(__file__),
        # os.path.pardir))` in `app/training/main.py`, then `from utils.utils import save`
        # for `app/utils/utils.py`). Never a name of the standard library or a framework.
        ancestors = parent.split(".")[:-1] if parent else []
        while ancestors:
            local = ".".join([*ancestors, name])
            if local in self._module_names:
                return local
            ancestors.pop()
        return None

    def resolve(self, module: str, dotted_name: str, depth: int = 0) -> tuple[str, str] | None:
        """``(module, qualname)`` of what ``dotted_name`` names in ``module``; ``""`` for a module."""
        if depth:
            return self._resolve(module, dotted_name, depth)
        key = (module, dotted_name)
        found = self._resolve_memo.get(key, _MISSING)
        if found is not _MISSING:
            if self._reading:  # (what _hit asks first: no key built for nothing)
                self._hit(("r", module, dotted_name))
            return found  # type: ignore[return-value]
        self._begin()
        try:
            found = self._resolve(module, dotted_name, 0)
        finally:
            self._end(("r", module, dotted_name))
        self._resolve_memo[key] = found
        return found

    def _resolve(self, module: str, dotted_name: str, depth: int) -> tuple[str, str] | None:
        if module not in self.modules or depth > MAX_DEPTH:
            return None
        head, _, rest = dotted_name.partition(".")
        target = self.aliases(module).get(head)
        if target is None:
            if head in self.functions(module) or head in self.classes(module):
                return self._member(module, dotted_name, depth)
            return None
        full = f"{target}.{rest}" if rest else target
        if not self.track:
            # What an absolute name names is the same from every module of one package
            # (find_module reads the importer's package only): `F.cross_entropy` resolved
            # once per package, not once per module; at each depth (MAX_DEPTH cuts the
            # search). (A tracking resolver records the importer as read on each call: it
            # resolves per module.)
            key = (self._parent(module), full, depth)
            found = self._absolute.get(key, _MISSING)
            if found is _MISSING:
                found = self._absolute[key] = self._resolve_full(module, full, depth)
            return found  # type: ignore[return-value]
        return self._resolve_full(module, full, depth)

    def _resolve_full(self, module: str, full: str, depth: int) -> tuple[str, str] | None:
        """What the absolute name ``full`` names, imported in ``module`` (its package)."""
        parts = full.split(".")
        for i in range(len(parts), 0, -1):
            found = self.find_module(module, ".".join(parts[:i]))
            if found is not None:
                remainder = ".".join(parts[i:])
                if not remainder:
                    return (found, "")
                return self._member(found, remainder, depth)
        return self._by_suffix(module, parts, depth)

    def _member(self, module: str, qual: str, depth: int) -> tuple[str, str] | None:
        if qual in self.functions(module) or qual in self.classes(module):
            return (module, qual)
        head, _, rest = qual.partition(".")
        if head in self.classes(module) and rest and "." not in rest:
            return self.method(module, head, rest, depth)
        if head in self.aliases(module):
            # A package re-exporting a name: `from .dist import save_on_master` in __init__.
            return self.resolve(module, qual, depth + 1)
        return None

    def method(self, module: str, cls: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        """Where ``cls.name`` is defined: the class itself or a base, in any module."""
        seen: set[tuple[str, str]] = set()
        todo = [(module, cls)]
        while todo and len(seen) <= MAX_DEPTH * 4:
            mod, c = todo.pop(0)
            if (mod, c) in seen:
                continue
            seen.add((mod, c))
            q = f"{c}.{name}"
            if q in self.functions(mod):
                return (mod, q)
            for base in self.classes(mod).get(c, ()):
                r = self.resolve(mod, base, depth + 1)
                if r is not None and r[1] in self.classes(r[0]):
                    todo.append(r)
        return None

    def function(self, module: str, spelled: str) -> tuple[str, fact_model.FunctionInfo] | None:
        """The function a call spelled ``spelled`` in ``module`` runs (a class: its __init__)."""
        key = (module, spelled)
        if not self._reading:
            got = self._function_got.get(key, _MISSING)
            if got is not _MISSING:
                return got  # type: ignore[return-value]
        if key in self._function_memo:
            if self._reading:
                self._hit(("f", module, spelled))
            hit = self._function_memo[key]
            got = None if hit is None else (hit[0], self.functions(hit[0])[hit[1]])
            if not self._reading:
                self._function_got[key] = got
            return got
        self._begin()
        try:
            found = self._function(module, spelled)
        finally:
            self._end(("f", module, spelled))
        self._function_memo[key] = None if found is None else (found[0], found[1].qualname)
        if not self._reading:
            self._function_got[key] = found
        return found

    def _function(self, module: str, spelled: str) -> tuple[str, fact_model.FunctionInfo] | None:
        r = self.resolve(module, spelled)
        if r is None:
            return None
        mod, q = r
        fi = self.functions(mod).get(q)
        if fi is not None:
            return (mod, fi)
        if q in self.classes(mod):
            m = self.method(mod, q, "__init__")
            if m is not None:
                return (m[0], self.functions(m[0])[m[1]])
        return None

    def imported_modules(self, module: str) -> list[str]:
        """Project modules ``module`` imports (with the packages Python runs on the way)."""
        hit = self._imported_memo.get(module)
        if hit is not None:
            self._hit(("i", module, ""))
            return hit
        self._begin()
        try:
            hit = self._imported_modules(module)
        finally:
            self._end(("i", module, ""))
        self._imported_memo[module] = hit
        return hit

    def _imported_modules(self, module: str) -> list[str]:
        out: set[str] = set()
        for target in self.aliases(module).values():
            parts = target.split(".")
            for i in range(len(parts), 0, -1):
                found = self.find_module(module, ".".join(parts[:i]))
                if found is not None:
                    out.add(found)
                    pkg = found.split(".")
                    for j in range(1, len(pkg)):
                        if ".".join(pkg[:j]) in self._module_names:
                            out.add(".".join(pkg[:j]))
                    break
            else:
                by_suffix = self._by_suffix(module, parts, 0)
                if by_suffix is not None:  # the module the name is in (or is), its packages
                    pkg = by_suffix[0].split(".")
                    for j in range(1, len(pkg) + 1):
                        if ".".join(pkg[:j]) in self._module_names:
                            out.add(".".join(pkg[:j]))
        out.discard(module)
        return sorted(out)
