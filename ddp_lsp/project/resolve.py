"""Import resolution across the project: which module and function a spelled name reaches.

``from .utils import dist as du`` in ``trainer/loop.py`` makes ``du.save_on_master`` the
function ``save_on_master`` of ``trainer.utils.dist``; ``import engine`` in ``main.py`` makes
``engine.train_one_epoch`` the one in ``engine.py``. A package's ``__init__`` that re-exports a
name (``from .dist import save_on_master``) is followed, and methods missing from a class are
looked up in its bases, in whatever module those are defined.
"""

from __future__ import annotations

from functools import cached_property

from ddp_lsp.core import facts as fact_model
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


class Resolver:
    """Name resolution over a :class:`ProjectIndex`. After an update, :meth:`reuse` says
    whether its answers still hold (only function bodies changed) and refreshes what it keeps
    of the changed modules; otherwise build a new one."""

    def __init__(self, index: ProjectIndex) -> None:
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
        # The summaries resolution read, by module, with their interfaces.
        self._seen: dict[str, tuple[ModuleSummary, tuple[object, ...]]] = {
            m: (s, interface(s)) for m, s in self.modules.items()
        }
        self.tables_built = 0  # per-module tables built (tests count what an update rebuilt)

    def reuse(self, index: ProjectIndex) -> bool:
        """Whether this resolver answers for ``index`` as it is now: the same modules, and
        every changed summary with the same :func:`interface`. If so, what it kept of the
        changed modules is dropped (rebuilt from their new summaries on demand)."""
        if index is not self.index or len(self.modules) != len(self._seen):
            return False
        changed = []
        for m, s in self.modules.items():
            seen = self._seen.get(m)
            if seen is None:
                return False
            if seen[0] is not s:
                if interface(s) != seen[1]:
                    return False
                changed.append((m, s))
        for m, s in changed:
            self._seen[m] = (s, self._seen[m][1])
            self._aliases.pop(m, None)
            self._functions.pop(m, None)
            self._classes.pop(m, None)
        return True

    # -- per-module tables ---------------------------------------------------------------------

    def aliases(self, module: str) -> dict[str, str]:
        """Bound name -> absolute qualified name, first import of a name wins (as in merge)."""
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
        table = self._functions.get(module)
        if table is None:
            self.tables_built += 1
            s = self.modules.get(module)
            table = {} if s is None else {fi.qualname: fi for fi in s.facts.functions}
            self._functions[module] = table
        return table

    def classes(self, module: str) -> dict[str, tuple[str, ...]]:
        table = self._classes.get(module)
        if table is None:
            s = self.modules.get(module)
            table = {} if s is None else dict(s.bases)
            self._classes[module] = table
        return table

    @cached_property
    def _module_names(self) -> frozenset[str]:
        return frozenset(self.modules)

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
            s = self.modules.get(bare)
            if s is not None and s.path.startswith("src/"):
                return bare
        parent = importer.rpartition(".")[0]
        s = self.modules.get(importer)
        if s is not None and s.is_package:
            parent = importer
        if parent:
            local = f"{parent}.{name}"
            if local in self._module_names:
                return local
        return None

    def resolve(self, module: str, dotted_name: str, depth: int = 0) -> tuple[str, str] | None:
        """``(module, qualname)`` of what ``dotted_name`` names in ``module``; ``""`` for a module."""
        if depth:
            return self._resolve(module, dotted_name, depth)
        key = (module, dotted_name)
        if key in self._resolve_memo:
            return self._resolve_memo[key]
        found = self._resolve_memo[key] = self._resolve(module, dotted_name, 0)
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
        parts = full.split(".")
        for i in range(len(parts), 0, -1):
            found = self.find_module(module, ".".join(parts[:i]))
            if found is not None:
                remainder = ".".join(parts[i:])
                if not remainder:
                    return (found, "")
                return self._member(found, remainder, depth)
        return None

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
        if key in self._function_memo:
            hit = self._function_memo[key]
            return None if hit is None else (hit[0], self.functions(hit[0])[hit[1]])
        found = self._function(module, spelled)
        self._function_memo[key] = None if found is None else (found[0], found[1].qualname)
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
        if hit is None:
            hit = self._imported_memo[module] = self._imported_modules(module)
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
        out.discard(module)
        return sorted(out)
