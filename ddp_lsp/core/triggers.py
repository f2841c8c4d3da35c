"""Rule triggers: the words a chunk must contain for a rule to find anything in it.

Most rules look for one kind of call (``loss.backward()``, ``clip_grad_norm_``,
``scaler.step``, ``torch.load``) and then search the chunk around it, asking the module facts
about every call they see on the way. Most chunks of a large file contain no such call, and the
cheapest search is the one not made: in the manner of ruff selecting its rules by node type, a
rule declares (:meth:`ddp_lsp.core.rule.Rule.triggers`) the words one of which its findings
always need, and the engine runs the rule on a chunk only when :func:`words` of the chunk meet
them. A trigger set is derived from the same data the rule matches with (the qualified names
it compares with, the framework tables' entries of the meaning it asks for, including the
user's), so a call the rule can match is never filtered out.

The words of a chunk (:func:`words`): every name (``Name.id``), attribute
(``Attribute.attr``), keyword argument name and function name, and, through the module's
imports, every part of what an imported name stands for (``from torch.nn.utils import clip_grad_norm_ as clip`` makes ``clip(...)``
count as ``clip_grad_norm_``). Qualified names reach their words through :func:`qual_words`,
which also adds the spellings :data:`ddp_lsp.core.names.CANONICAL` maps onto them.

A rule without triggers (None) runs on every chunk. The rule-case suite runs every case
through the engine, so a trigger set missing a word one of the rule's cases needs fails that
case; ``tests/core/test_triggers.py`` checks that every declared word is needed by a case.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core import names as known_names

if TYPE_CHECKING:
    from ddp_lsp.core.rule import ChunkContext, Rule


def words(ctx: ChunkContext) -> frozenset[str]:
    """The words of ``ctx``'s chunk (see the module docstring), computed once per analysis."""
    return ctx.memo(("trigger words",), lambda: _words(ctx))


def _words(ctx: ChunkContext) -> frozenset[str]:
    out: set[str] = set()
    names = {n.id for n in ctx.nodes(ast.Name)}
    out.update(names)
    out.update(n.attr for n in ctx.nodes(ast.Attribute))
    out.update(k.arg for k in ctx.nodes(ast.keyword) if k.arg is not None)
    out.update(f.name for f in ctx.nodes(ast.FunctionDef))
    out.update(f.name for f in ctx.nodes(ast.AsyncFunctionDef))
    aliases = ctx.facts.aliases
    for name in names:
        target = aliases.get(name)
        if target is not None:
            out.update(target.split("."))
            out.update(known_names.canonical(target).split("."))
    return frozenset(out)


def qual_words(quals: Iterable[str]) -> frozenset[str]:
    """The last parts of qualified names, and of every spelling that canonicalises to one."""
    return _qual_words(frozenset(quals))


@functools.lru_cache(maxsize=256)
def _qual_words(wanted: frozenset[str]) -> frozenset[str]:
    out = {q.rsplit(".", 1)[-1] for q in wanted}
    out.update(k.rsplit(".", 1)[-1] for k, v in known_names.CANONICAL.items() if v in wanted)
    return frozenset(out)


def framework_words(
    model: framework_tables.FrameworkModel, meaning: framework_tables.Meaning
) -> frozenset[str]:
    """The words a call needs for ``model.match_of(meaning, ...)`` to find it: the last parts
    of the CALL entries' qualified names, of the METHOD entries and the FUNCTION names
    (memoised per model object: asked per rule and chunk, hashing a model costs its size)."""
    key = (id(model), meaning)
    known = _FRAMEWORK_WORDS.get(key)
    if known is not None and known[0] is model:
        return known[1]
    found = (
        qual_words(model.calls(meaning))
        | {m.rsplit(".", 1)[-1] for m in model.methods(meaning)}
        | model.functions(meaning)
    )
    if len(_FRAMEWORK_WORDS) > 256:
        _FRAMEWORK_WORDS.clear()
    _FRAMEWORK_WORDS[key] = (model, found)
    return found


# (id(model), meaning) -> (model, words); the model is kept so an id is never reused meanwhile.
_FRAMEWORK_WORDS: dict[
    tuple[int, framework_tables.Meaning], tuple[framework_tables.FrameworkModel, frozenset[str]]
] = {}


def may_fire(rule: Rule, ctx: ChunkContext) -> bool:
    """Whether ``rule`` can find anything in ``ctx``'s chunk (False: skip its check)."""
    wanted = rule.triggers(ctx)
    return wanted is None or not wanted.isdisjoint(words(ctx))
