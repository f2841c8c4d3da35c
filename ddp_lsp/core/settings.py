"""Settings as the analysis sees them: a plain frozen value, built by the front ends.

The core never reads a file to learn its settings. :mod:`ddp_lsp.config` finds and parses
``[tool.ddp-lsp]`` in pyproject.toml, validates the editor's settings, and hands the result
over as this value; tests and embedders can build one directly (``Settings(select=("DDP2",))``).
Everything here is a pure function of the fields.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import PurePath

from ddp_lsp.core.frameworks import BUILTIN, Api, Meaning
from ddp_lsp.core.ranks import DEFAULT_PREDICATES, DEFAULT_RANK_NAMES, RankModel
from ddp_lsp.core.types import Severity

# Directory names every scan skips, whatever the configured ``exclude`` says.
DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".venv",
    "venv",
    "env",
    ".tox",
    ".nox",
    "__pycache__",
    "node_modules",
    "build",
    "dist",
    "site-packages",
    ".mypy_cache",
    ".ruff_cache",
)
# A configured rank-guard name that looks like a test for rank 0 (``is_leader``), not a rank.
_PREDICATE_HINT = re.compile(r"^(is|am)_|main|master|leader|zero|chief|primary", re.IGNORECASE)


@dataclass(frozen=True)
class Settings:
    """Validated analysis settings (see :mod:`ddp_lsp.config` for the keys and their checks)."""

    select: tuple[str, ...] = ("DDP",)
    ignore: tuple[str, ...] = ()
    severity: tuple[tuple[str, Severity], ...] = ()
    rank_guard_names: tuple[str, ...] = ()
    assume_distributed: bool = False
    exclude: tuple[str, ...] = ()
    # Analyse each file with what the rest of its project says (ddp_lsp.project); off: alone.
    project: bool = True
    # The user's framework entries (`[[tool.ddp-lsp.framework]]`), added to the built-in tables.
    frameworks: tuple[Api, ...] = ()
    # Where the values came from (a pyproject.toml, "editor settings"...), for messages.
    source: str = field(default="defaults", compare=False)

    def enabled(self, rule_id: str, default_on: bool = True) -> bool:
        """Whether ``rule_id`` runs; a rule off by default (``RuleMeta.default_on``) only when
        ``select`` names it by its full id."""
        if rule_id == "DDP000":
            return not _matches(rule_id, self.ignore)
        if not default_on and rule_id not in self.select:
            return False
        return _matches(rule_id, self.select) and not _best_ignore(rule_id, self)

    def severity_for(self, rule_id: str, default: Severity) -> Severity:
        for rid, sev in self.severity:
            if rid == rule_id:
                return sev
        return default

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("rank_model", None)  # derived (below): rebuilt where it is unpickled
        return state

    @cached_property
    def rank_model(self) -> RankModel:
        """Built once per settings object: every analysis asks for it, and its framework
        tables memoise what they match (a new model per keystroke rebuilt them all)."""
        names = {n for n in self.rank_guard_names if not _PREDICATE_HINT.search(n)}
        predicates = {n for n in self.rank_guard_names if _PREDICATE_HINT.search(n)}
        model = BUILTIN.extended(self.frameworks)
        # User functions that are rank-0 predicates or return the rank join the rank names.
        for api in self.frameworks:
            last = api.name.rsplit(".", 1)[-1]
            if Meaning.RANK_ZERO in api.means:
                predicates.add(last)
            if Meaning.RANK in api.means:
                names.add(last)
        return RankModel(DEFAULT_RANK_NAMES | names, DEFAULT_PREDICATES | predicates, model)

    def is_excluded(self, path: PurePath, root: PurePath | None = None) -> bool:
        """Whether scans skip ``path``: a default directory name among its parents, or an
        ``exclude`` pattern matching it relative to ``root``, its name or one of its parts.
        Pure path arithmetic: nothing is read from the disk."""
        parts = path.parts
        if any(p in DEFAULT_EXCLUDE for p in parts[:-1]):
            return True
        rel = path
        if root is not None:
            try:
                rel = path.relative_to(root)
            except ValueError:
                rel = path
        text = rel.as_posix()
        for pattern in self.exclude:
            pat = pattern.rstrip("/")
            if fnmatch.fnmatch(text, pat) or fnmatch.fnmatch(text, f"{pat}/*"):
                return True
            if fnmatch.fnmatch(path.name, pat) or any(fnmatch.fnmatch(p, pat) for p in rel.parts):
                return True
        return False


def _matches(rule_id: str, selectors: tuple[str, ...]) -> bool:
    return any(rule_id.startswith(s) for s in selectors)


def _best_ignore(rule_id: str, settings: Settings) -> bool:
    """``ignore`` wins unless ``select`` names the rule more specifically (ruff's habit)."""
    ign = [s for s in settings.ignore if rule_id.startswith(s)]
    if not ign:
        return False
    sel = [s for s in settings.select if rule_id.startswith(s)]
    return max(map(len, ign)) >= max(map(len, sel), default=0)
