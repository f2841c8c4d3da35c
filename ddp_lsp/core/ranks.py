"""Rank guards: conditions whose value depends on which process evaluates them.

RULES.md "Rank guards": comparisons or truth tests of ``rank``, ``local_rank``,
``dist.get_rank()``, ``int(os.environ["RANK"])``, ``is_main_process()``,
``accelerator.is_main_process``, ``trainer.is_global_zero`` and names the user configures.
``dist.is_initialized()`` and ``world_size > 1`` are *not* rank guards: every rank computes the
same value for them.

This module only recognises the names (:class:`RankModel`); which ranks a condition selects,
and which ranks run each statement, is the uniformity analysis of
:mod:`ddp_lsp.core.uniformity`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from ddp_lsp.core.frameworks import BUILTIN, FrameworkModel, Meaning
from ddp_lsp.core.names import RANK_ENV_VARS, dotted
from ddp_lsp.core.walk import walk

DEFAULT_RANK_NAMES = frozenset(
    {
        "rank",
        "global_rank",
        "local_rank",
        "world_rank",
        "RANK",
        "LOCAL_RANK",
        "GLOBAL_RANK",
        "process_index",
        "local_process_index",
        "rank_id",
        "gpu_rank",
        "ddp_rank",
        "ddp_local_rank",
        "dp_rank",
        "gpu_id",  # the PyTorch DDP tutorial's name for the rank
    }
)
# Rank-0 predicates and flags: the framework tables' `rank-zero` names (ddp_lsp.core.frameworks).
DEFAULT_PREDICATES = BUILTIN.functions(Meaning.RANK_ZERO)
# Calls that return this process's rank.
RANK_FUNCTIONS = BUILTIN.functions(Meaning.RANK)


@dataclass(frozen=True)
class RankModel:
    """Recognises rank expressions and guards with the configured and discovered names."""

    names: frozenset[str] = DEFAULT_RANK_NAMES
    predicates: frozenset[str] = DEFAULT_PREDICATES
    # What framework APIs mean (built-in tables + the user's entries): travels with the rank
    # names because both come from the settings and both change the facts.
    frameworks: FrameworkModel = BUILTIN

    def with_extra(self, names: Iterable[str] = (), predicates: Iterable[str] = ()) -> RankModel:
        return RankModel(
            self.names | frozenset(names), self.predicates | frozenset(predicates), self.frameworks
        )

    # -- expressions -------------------------------------------------------------------------

    def is_rank_expr(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.names
        if isinstance(e, ast.Attribute):
            return e.attr in self.names
        if isinstance(e, ast.Call):
            func = e.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else (func.id if isinstance(func, ast.Name) else None)
            )
            if name in RANK_FUNCTIONS:
                return True
            if name and name.startswith("get_") and name.endswith("_rank"):
                return True  # Megatron-style get_data_parallel_rank(), get_tensor_model_parallel_rank()
            if name == "int" and len(e.args) == 1:
                return self.is_rank_expr(e.args[0])
            if name == "getattr" and len(e.args) >= 2:
                # `getattr(record, "global_rank", 0)`: the attribute `record.global_rank`.
                attr = e.args[1]
                return isinstance(attr, ast.Constant) and attr.value in self.names
            if name in ("get", "getenv") and e.args:
                first = e.args[0]
                return isinstance(first, ast.Constant) and first.value in RANK_ENV_VARS
            return False
        if isinstance(e, ast.Subscript):
            key = e.slice
            return (
                isinstance(key, ast.Constant)
                and key.value in RANK_ENV_VARS
                and (dotted(e.value) or "").endswith("environ")
            )
        return False

    def is_predicate(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Call):
            e = e.func
        if isinstance(e, ast.Name):
            return e.id in self.predicates
        if isinstance(e, ast.Attribute):
            return e.attr in self.predicates
        return False

    def mentions_rank(self, e: ast.AST) -> bool:
        """True when any part of ``e`` is a rank expression or predicate."""
        for node in walk(e):
            if self.is_rank_expr(node) or self.is_predicate(node):
                return True
        return False
