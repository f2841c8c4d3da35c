"""Rule triggers (core/triggers.py): a rule runs only on chunks holding one of its words, no
declared word is superfluous, imports and the user's framework entries reach the words, and
the rank paths skip frames that cannot split the ranks."""

from __future__ import annotations

import ast

import pytest

from ddp_lsp.core import rankpaths
from ddp_lsp.core import triggers as rule_triggers
from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.frameworks import BUILTIN, Api, Match, Meaning
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.rule import ChunkContext, Invalid
from ddp_lsp.core.settings import Settings
from tests.casekit import findings, unmark

HEAD = "import torch\nimport torch.distributed as dist\n"


def _ctx(code: str, settings: Settings | None = None) -> ChunkContext:
    settings = settings or Settings()
    doc = Document(code, settings.rank_model)
    facts = doc.module_facts(True, None)
    ranks = settings.rank_model.with_extra(facts.rank_vars, facts.rank_predicates)
    chunk = doc.chunks()[-1][1]
    return ChunkContext(chunk, facts, settings, ranks)


def _rules_with_triggers() -> list[object]:
    probe = _ctx(HEAD + "x = 1\n")
    return [r for r in all_rules() if r.triggers(probe) is not None]


def test_some_rules_declare_triggers() -> None:
    ids = {r.meta.id for r in _rules_with_triggers()}  # type: ignore[attr-defined]
    assert {
        "DDP101",
        "DDP105",
        "DDP201",
        "DDP202",
        "DDP203",
        "DDP204",
        "DDP301",
        "DDP303",
        "DDP503",
    } <= ids


@pytest.mark.parametrize("rule", _rules_with_triggers(), ids=lambda r: r.meta.id)
def test_every_trigger_word_is_needed(rule, monkeypatch) -> None:
    """Dropping any one declared word loses a finding of the rule's own cases: the words are
    the ones the cases exercise, none is there by accident (and the case suite, which runs
    through the engine, fails if a needed word is missing). Words the framework tables give
    (every API of a meaning, most without a case of their own) are derived mechanically
    (:func:`framework_words`) and left out here."""
    invalid = [c for c in rule.cases if isinstance(c, Invalid) and c.env is None]
    baseline = {id(c): len(findings(rule, unmark(c.code).code, c.distributed)) for c in invalid}
    declared = rule.triggers(_ctx(HEAD + "x = 1\n"))
    tables = frozenset().union(*(rule_triggers.framework_words(BUILTIN, m) for m in Meaning))
    for word in sorted(declared - tables):
        monkeypatch.setattr(type(rule), "triggers", lambda self, ctx, w=word: declared - {w})
        lost = [
            c
            for c in invalid
            if len(findings(rule, unmark(c.code).code, c.distributed)) < baseline[id(c)]
        ]
        monkeypatch.undo()
        assert lost, f"{rule.meta.id}: no case needs the trigger word {word!r}"


def test_a_rule_runs_only_where_its_words_are(monkeypatch) -> None:
    rule = next(r for r in all_rules() if r.meta.id == "DDP201")
    seen: list[str] = []
    original = type(rule).check

    def spy(self, ctx):  # type: ignore[no-untyped-def]
        seen.append(ctx.chunk.lines[0])
        return original(self, ctx)

    monkeypatch.setattr(type(rule), "check", spy)
    code = (
        HEAD
        + "def evaluate(model, loader):\n    return sum(model(x).sum() for x in loader)\n\n\n"
        + "def train(model, loss):\n    loss.backward()\n"
        + "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    )
    analyze(code, Settings(select=("DDP201",), assume_distributed=True))
    assert seen == ["def train(model, loss):\n"]


def test_imported_names_count_as_what_they_stand_for() -> None:
    ctx = _ctx(
        HEAD
        + "from torch.nn.utils import clip_grad_norm_ as clip\n\n\n"
        + "def train(model):\n    clip(model.parameters(), 1.0)\n"
    )
    words = rule_triggers.words(ctx)
    assert "clip" in words and "clip_grad_norm_" in words
    rule = next(r for r in all_rules() if r.meta.id == "DDP201")
    assert rule_triggers.may_fire(rule, ctx)


def test_keyword_names_are_words() -> None:
    ctx = _ctx(HEAD + "def f(s, loss, opt, i):\n    s(loss, opt, update_grad=i % 2 == 0)\n")
    assert "update_grad" in rule_triggers.words(ctx)


def test_qual_words_include_canonical_spellings() -> None:
    from ddp_lsp.core.names import CANONICAL

    raw, qual = next(iter(CANONICAL.items()))
    assert raw.rsplit(".", 1)[-1] in rule_triggers.qual_words({qual})


def test_user_framework_entries_extend_the_triggers() -> None:
    mine = Api(Match.FUNCTION, "clip_everything", (Meaning.CLIPS_GRADIENTS,))
    settings = Settings(frameworks=(mine,))
    code = (
        HEAD
        + "from torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
        + "def train(model, loader, opt, scaler):\n"
        + "    for x in loader:\n"
        + "        scaler.scale(model(x).sum()).backward()\n"
        + "        clip_everything(model.parameters(), 1.0)\n"
        + "        scaler.step(opt)\n"
        + "        scaler.update()\n"
    )
    rule = next(r for r in all_rules() if r.meta.id == "DDP201")
    assert "clip_everything" in rule.triggers(_ctx(code, settings))
    assert "clip_everything" not in rule.triggers(_ctx(code))
    found = analyze(code, Settings(select=("DDP201",), assume_distributed=True, frameworks=(mine,)))
    assert [f.rule_id for f in found.findings] == ["DDP201"]


# -- rank paths: frames that cannot split the ranks are not walked -----------------------------


def _walks(code: str, monkeypatch) -> int:
    count = 0
    original = rankpaths.Flow.block

    def counting(self, *args):  # type: ignore[no-untyped-def]
        nonlocal count
        count += 1
        return original(self, *args)

    monkeypatch.setattr(rankpaths.Flow, "block", counting)
    analyze(code, Settings(select=("DDP103",), assume_distributed=True))
    return count


def test_a_frame_without_rank_conditions_is_not_walked(monkeypatch) -> None:
    code = HEAD + (
        "def sync(t, step):\n"
        "    if step % 10 == 0:\n"
        "        dist.all_reduce(t)\n"
        "    dist.barrier()\n"
        "    return t\n"
    )
    assert _walks(code, monkeypatch) == 0


def test_a_frame_without_collectives_is_not_walked(monkeypatch) -> None:
    code = HEAD + "def log(rank, x):\n    if rank == 0:\n        print(x)\n"
    assert _walks(code, monkeypatch) == 0


def test_a_rank_guarded_collective_is_still_walked_and_found(monkeypatch) -> None:
    code = HEAD + "def sync(rank):\n    if rank == 0:\n        dist.barrier()\n"
    assert _walks(code, monkeypatch) > 0
    found = analyze(code, Settings(select=("DDP103",), assume_distributed=True)).findings
    assert [f.rule_id for f in found] == ["DDP103"]


def test_event_roots_are_the_frames_holding_events() -> None:
    code = HEAD + (
        "def outer(t):\n"
        "    def inner():\n"
        "        dist.barrier()\n"
        "    f = lambda: dist.all_reduce(t)\n"
        "    return inner, f\n"
    )
    ctx = _ctx(code)
    found = rankpaths.event_roots(ctx, rankpaths.collective_extractor(ctx))
    assert [getattr(r, "name", None) for r in found] == ["inner"]
    assert isinstance(found[0], ast.FunctionDef)


# -- rank paths: chunks without a condition are not searched for events ------------------------


def _event_searches(code: str, monkeypatch, select: tuple[str, ...]) -> int:
    count = 0
    original = rankpaths.event_roots

    def counting(ctx, extract):  # type: ignore[no-untyped-def]
        nonlocal count
        count += 1
        return original(ctx, extract)

    monkeypatch.setattr(rankpaths, "event_roots", counting)
    analyze(code, Settings(select=select, assume_distributed=True))
    return count


def test_a_chunk_without_conditions_is_not_searched_for_events(monkeypatch) -> None:
    """No ``if``, conditional expression, ``and``/``or`` or rank-zero decorator: every rank
    runs every line, so neither DDP103 nor DDP104 asks about the chunk's calls at all."""
    code = HEAD + (
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))\n"
        "def step(t):\n"
        "    dist.all_reduce(t)\n"
        "    return model(t)\n"
    )
    assert rankpaths.may_split(_ctx(code)) is False
    assert _event_searches(code, monkeypatch, ("DDP103", "DDP104")) == 0


@pytest.mark.parametrize(
    "code",
    [
        "def step(t, rank):\n    if rank == 0:\n        dist.barrier()\n",
        "def step(t, rank):\n    x = dist.barrier() if rank == 0 else None\n",
        "def step(t, rank):\n    rank == 0 and dist.barrier()\n",
        "@rank_zero_only\ndef step(t):\n    dist.barrier()\n",
    ],
    ids=["if", "ifexp", "boolop", "decorator"],
)
def test_a_chunk_that_may_split_the_ranks_is_searched(code, monkeypatch) -> None:
    code = HEAD + "from lightning.pytorch.utilities import rank_zero_only\n" + code
    assert rankpaths.may_split(_ctx(code)) is True
    assert _event_searches(code, monkeypatch, ("DDP103",)) > 0


def test_a_function_only_called_under_a_guard_is_searched_for_forwards(monkeypatch) -> None:
    """DDP104: no condition in the function itself, but every caller guards it."""
    code = HEAD + (
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))\n"
        "def evaluate(t):\n"
        "    return model(t)\n"
        "def main(rank, t):\n"
        "    if rank == 0:\n"
        "        evaluate(t)\n"
    )
    searched = _event_searches(code, monkeypatch, ("DDP104",))
    assert searched >= 2  # both functions' chunks
    found = analyze(code, Settings(select=("DDP104",), assume_distributed=True)).findings
    assert [(f.rule_id, f.span.start.line) for f in found] == [("DDP104", 4)]
