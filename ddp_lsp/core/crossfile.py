"""What other files of the project tell one module, with where each fact came from.

The project layer (:mod:`ddp_lsp.project`) computes a :class:`ModuleProjectFacts` per module;
the core only consumes it (``facts.merge(..., project=...)``), so a file analysed alone and a
file analysed inside its project run the same rules over the same kind of facts. Everything here
is hashable and compares by value: it is part of the key under which each chunk's findings are
cached, so a project change that does not touch a module's facts re-runs none of its rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath

from ddp_lsp.core.gates import Gating

# Test code (docs/accuracy.md F16): a module in a test folder or named as a test or a test helper.
_TEST_DIRS = frozenset({"test", "tests", "testing", "unittests", "unit_tests", "gpu_tests"})
_TEST_FILE = re.compile(r"^(?:test_.*|.*_tests?|conftest|.*test_utils?|.*testing_utils?)\.py$")


def is_test_path(path: str) -> bool:
    """``path`` (relative to the project root, ``/``-separated) is test code: under a
    ``tests``/``test``/``gpu_tests``/``*_tests`` folder, or ``test_*.py``, ``*_test.py``,
    ``conftest.py``, ``*test_utils.py``. bench/seed_bugs.py seeds no site here for the rules that
    ask (keep the two in step)."""
    parts = path.split("/")
    if any(d in _TEST_DIRS or d.endswith("_tests") for d in parts[:-1]):
        return True
    return _TEST_FILE.match(parts[-1]) is not None


#: The statements under a top-level ``if __name__ == "__main__":``, as a scope of
#: ``ModuleProjectFacts.single_process``: they run when the file is the script, not when
#: another module imports it.
MAIN_BLOCK = "<__main__>"


@dataclass(frozen=True, order=True)
class Provenance:
    path: str  # relative to the project root, POSIX separators
    line: int  # 1-based
    message: str  # "model is wrapped in DistributedDataParallel"

    def __str__(self) -> str:
        return f"{self.message} at {self.path}:{self.line}"


@dataclass(frozen=True, order=True)
class ParamKind:
    kind: str
    origin: Provenance  # where the value got its kind
    via: tuple[Provenance, ...] = ()  # the calls that carried it here, outermost first
    mixed: bool = False  # another caller passes a value of no known kind


@dataclass(frozen=True)
class CalleeProps:
    target: tuple[str, str]  # (module, qualname) of the function
    props: frozenset[str]
    origins: Mapping[str, Provenance] = field(default_factory=dict, compare=False, hash=False)
    # The parameter values that switch its collectives off (core/gates.py), None when none do.
    gating: Gating | None = None


@dataclass(frozen=True, eq=False)
class ModuleProjectFacts:
    module: str
    path: str  # relative to the project root
    # (scope, path) -> kind the module does not know from its own code.
    extra_kinds: Mapping[tuple[str, str], ParamKind] = field(default_factory=dict)
    # Callee spelling in this module ("du.save_on_master") -> the other module's function.
    callee_props: Mapping[str, CalleeProps] = field(default_factory=dict)
    distributed: Provenance | None = None  # where the process group this module runs in starts
    # Functions of this module that every caller in the project calls under a rank-0 guard
    # (callers in other modules included: `if is_main_process(): engine.save(model)`).
    only_called_guarded: frozenset[str] = frozenset()
    root: str = ""  # the project root, absolute (related locations point into other files)
    # Functions of this module (qualnames, ``<module>`` for its top level) that are not
    # distributed code: no distributed entry point reaches them on every rank and they do
    # nothing distributed themselves (an export tool, a tokenizer, a plotting helper). Rules
    # that only apply to distributed code stay silent in them (project/reach.py).
    single_process: frozenset[str] = frozenset()
    # Output this module's code prints or logs that a distributed entry point running it
    # already silences on the other ranks (``facts.SILENCES_PRINT`` / ``SILENCES_LOGGING``):
    # the entry calls a set-up helper that replaces ``builtins.print`` or filters INFO
    # records by rank, and imports this module (project/flowstages.py ``_silenced``).
    silenced: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        key = (
            self.module,
            self.path,
            tuple(sorted(self.extra_kinds.items())),
            tuple(
                sorted(
                    (
                        name,
                        cp.target,
                        tuple(sorted(cp.props)),
                        tuple(sorted(cp.origins.items())),
                        cp.gating,
                    )
                    for name, cp in self.callee_props.items()
                )
            ),
            self.distributed,
            tuple(sorted(self.only_called_guarded)),
            self.root,
            tuple(sorted(self.single_process)),
            tuple(sorted(self.silenced)),
        )
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuilt from its fields where it is unpickled: the stored hash is of strings, and a
        # process started with another hash seed (a spawned worker) hashes them differently.
        return (
            type(self),
            (
                self.module,
                self.path,
                dict(self.extra_kinds),
                dict(self.callee_props),
                self.distributed,
                self.only_called_guarded,
                self.root,
                self.single_process,
                self.silenced,
            ),
        )

    @property
    def key(self) -> tuple[object, ...]:
        return self._key  # type: ignore[attr-defined,no-any-return]

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, ModuleProjectFacts)
            and hash(self) == hash(other)
            and self.key == other.key
        )

    def absolute(self, path: str) -> str:
        """A project-relative path as an absolute one (for related locations)."""
        if not self.root:
            return path
        return str(PurePath(self.root, path))
