"""What a project-facts state restored from disk (:mod:`ddp_lsp.project.flowstate`) is read
through: each stage's table by module or by (module, qualname), decoded when the update first
asks for an entry; the summaries, read from the cache by digest when resolution or the update
asks for a module; the facts' ``distributed`` and ``single_process`` as stage tables; and
what the kinds' replay reads of such a state instead of every module (:class:`ReplayAids`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

from ddp_lsp.core.crossfile import ModuleProjectFacts
from ddp_lsp.project.summary import ModuleSummary

if TYPE_CHECKING:
    from ddp_lsp.project.index import ProjectIndex

Key = tuple[str, str]
_T = TypeVar("_T")


@dataclass(frozen=True)
class ReplayAids:
    """What :func:`~ddp_lsp.project.flowstages._replay_kinds` would otherwise derive from every
    module (a state restored from disk reads modules one by one): the modules that gained a
    kind in each round (>= 1), each module -> the modules with a class whose project base is
    in it, and ``calls_into(tm, s)``: the functions of ``tm`` that ``s``'s call sites reach
    (None: not known, for a changed module)."""

    gains: Mapping[int, Collection[str]]
    inheritors: Mapping[str, Collection[str]]
    calls_into: Callable[[str, str], Collection[str] | None]


class Unavailable(Exception):
    """A summary the state names is no longer cached: compute from scratch."""


class _PerModule(Mapping[str, _T]):
    """A stage's table by module (kinds, seeds), read from the state."""

    def __init__(
        self, names: Collection[str], read: Callable[[str], _T], memo: dict[str, _T] | None = None
    ) -> None:
        self.names = names
        self.read = read
        self.memo: dict[str, _T] = {} if memo is None else memo

    def __getitem__(self, m: str) -> _T:
        got = self.memo.get(m)
        if got is None:
            if m not in self.names:
                raise KeyError(m)
            got = self.memo[m] = self.read(m)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


class _Keyed(Mapping[Key, _T]):
    """A stage's table keyed by (module, qualname) (properties, guard counts, users, gates),
    read from the state one module's group at a time."""

    def __init__(self, names: Collection[str], group: Callable[[str], dict[str, _T]]) -> None:
        self.names = names
        self.read = group
        self.memo: dict[str, dict[str, _T]] = {}

    def group(self, m: str) -> dict[str, _T]:
        got = self.memo.get(m)
        if got is None:
            got = self.memo[m] = self.read(m) if m in self.names else {}
        return got

    def __getitem__(self, key: Key) -> _T:
        return self.group(key[0])[key[1]]

    def __iter__(self) -> Iterator[Key]:  # (every module decoded: not on the update's path)
        for m in self.names:
            for q in self.group(m):
                yield (m, q)

    def __len__(self) -> int:
        return sum(len(self.group(m)) for m in self.names)


class _Summaries(Mapping[str, ModuleSummary]):
    """``index.modules`` as the state names them, read from the cache when asked for; the
    changed modules' summaries as they are now."""

    deferred = True  # resolve.Resolver: do not read every summary up front

    def __init__(
        self,
        digests: Mapping[str, str],
        current: Mapping[str, ModuleSummary],
        summary_of: Callable[[str], ModuleSummary | None],
    ) -> None:
        self.digests = digests
        self.current = current
        self.summary_of = summary_of
        self.memo: dict[str, ModuleSummary] = dict(current)

    def __getitem__(self, m: str) -> ModuleSummary:
        got = self.memo.get(m)
        if got is None:
            digest = self.digests[m]  # KeyError: not a module of the project
            got = self.summary_of(digest)
            if got is None:
                raise Unavailable(m)
            self.memo[m] = got
        return got

    def __contains__(self, m: object) -> bool:
        return m in self.digests

    def __iter__(self) -> Iterator[str]:
        return iter(self.digests)

    def __len__(self) -> int:
        return len(self.digests)


class _Index:
    """What the update and resolution read of a :class:`ProjectIndex`, over :class:`_Summaries`."""

    def __init__(self, index: ProjectIndex, modules: _Summaries) -> None:
        self.root = index.root
        self.ranks = index.ranks
        self.modules = modules
        self.own_facts = index.own_facts


class _FromOut(Mapping[str, _T]):
    """``_Stages.distributed`` / ``local`` from the facts of each module (``_module_out``
    copies them there): present when set."""

    def __init__(self, out: Mapping[str, ModuleProjectFacts], field: str) -> None:
        self.out = out
        self.field = field

    def __getitem__(self, m: str) -> _T:
        got = getattr(self.out[m], self.field)
        if not got:
            raise KeyError(m)
        return cast(_T, got)

    def __iter__(self) -> Iterator[str]:  # (every module decoded: not on the update's path)
        return (m for m in self.out if getattr(self.out[m], self.field))

    def __len__(self) -> int:
        return sum(1 for _ in self)
