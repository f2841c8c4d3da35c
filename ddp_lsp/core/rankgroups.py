"""Whether a rank test names the global rank or a rank within a process group.

``if dist.get_rank() == 0:`` selects one process of the whole job; ``if
mpu.get_data_parallel_rank() == 0:`` selects every member of the tensor-parallel group of
data-parallel rank 0, and ``if dist.get_rank(pg) == 0:`` one member of ``pg``. The rank-path
analysis (:mod:`ddp_lsp.core.rankpaths`) reports a collective on an explicit process group
only under the first kind: the group's other members never call it (docs/accuracy.md M20).
"""

from __future__ import annotations

import ast
import re

from ddp_lsp.core import walk as tree_walk
from ddp_lsp.core.names import last_name
from ddp_lsp.core.ranks import RankModel

# Ranks of a process group other than the world: Megatron/nanotron-style getters
# (`get_data_parallel_rank()`, not `get_global_rank()`), names with a group prefix (`dp_rank`,
# `tp_rank`, `node_rank`) and anything naming a group or a parallel dimension.
_GROUP_RANK = re.compile(
    r"^get_(?!global_|world_)\w+_rank$|^(dp|tp|pp|ep|cp|sp|mp|data|tensor|pipeline|model|"
    r"expert|context|sequence|node|group)_|parallel|group|node",
    re.IGNORECASE,
)


def world_rank_test(model: RankModel, test: ast.AST) -> bool:
    """``test`` visibly asks for the global rank (``dist.get_rank() == 0``, ``rank == 0``,
    ``is_main_process()``) and nowhere for a rank within a group (``dist.get_rank(pg)``,
    ``get_data_parallel_rank()``, ``dp_rank``). A flag whose rank test is computed elsewhere
    (``if first:``) shows no rank at all: False."""
    seen = False
    for n in tree_walk.bfs(test):
        if isinstance(n, ast.Call) and (model.is_rank_expr(n) or model.is_predicate(n)):
            name = last_name(n.func) or ""
            if _GROUP_RANK.search(name) or (
                model.is_rank_expr(n) and name in ("get_rank", "rank") and (n.args or n.keywords)
            ):
                return False  # the rank within a process group
            seen = True
        elif isinstance(n, (ast.Name, ast.Attribute)) and (
            model.is_rank_expr(n) or model.is_predicate(n)
        ):
            if _GROUP_RANK.search(last_name(n) or ""):
                return False
            seen = True
    return seen
