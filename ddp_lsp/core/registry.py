"""Rule discovery: every module in :mod:`ddp_lsp.rules` named ``ddpNNN_*`` holds one rule.

Discovery imports the rule modules (cheap: they import only the core); ids must be unique.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from ddp_lsp.core.rule import Rule
from ddp_lsp.core.types import FixAvailability, RuleMeta, Severity

SYNTAX_ERROR = RuleMeta(
    id="DDP000",
    name="syntax-error",
    severity=Severity.ERROR,
    summary="The code does not parse; the rest of the file is still analysed.",
    fix=FixAvailability.NONE,
)


class RegistryError(RuntimeError):
    pass


@lru_cache(maxsize=1)
def all_rules() -> tuple[Rule, ...]:
    """One instance of every rule, ordered by id."""
    import ddp_lsp.rules as package

    rules: dict[str, Rule] = {}
    names: dict[str, str] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("ddp"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found = [
            obj
            for obj in vars(module).values()
            if isinstance(obj, type)
            and issubclass(obj, Rule)
            and obj is not Rule
            and obj.__module__ == module.__name__
        ]
        if len(found) != 1:
            raise RegistryError(
                f"{module.__name__} must define exactly one Rule, found {len(found)}"
            )
        rule = found[0]()
        meta = rule.meta
        if meta.id in rules:
            raise RegistryError(f"duplicate rule id {meta.id} in {module.__name__}")
        if meta.name in names:
            raise RegistryError(f"duplicate rule name {meta.name} ({meta.id}, {names[meta.name]})")
        expected = f"{meta.id.lower()}_{meta.name.replace('-', '_')}"
        if info.name != expected:
            raise RegistryError(f"{module.__name__}: module should be named {expected}")
        rules[meta.id] = rule
        names[meta.name] = meta.id
    return tuple(rules[k] for k in sorted(rules))


def rule_by_id(rule_id: str) -> Rule | None:
    for rule in all_rules():
        if rule.meta.id == rule_id.upper() or rule.meta.name == rule_id.lower():
            return rule
    return None


def all_meta() -> tuple[RuleMeta, ...]:
    return (SYNTAX_ERROR, *(r.meta for r in all_rules()))


def meta_by_id(rule_id: str) -> RuleMeta | None:
    for meta in all_meta():
        if meta.id == rule_id.upper() or meta.name == rule_id.lower():
            return meta
    return None


@lru_cache(maxsize=1)
def off_by_default() -> frozenset[str]:
    """Ids of the rules that run only when `select` names them (``RuleMeta.default_on``)."""
    return frozenset(r.meta.id for r in all_rules() if not r.meta.default_on)


def default_on(rule_id: str) -> bool:
    return rule_id not in off_by_default()
