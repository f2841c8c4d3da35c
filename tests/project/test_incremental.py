"""Incremental project facts equal a full computation.

A changed file whose summary says what the project read before (``same_for_project``: a
comment, a constant on a line, nothing moved) keeps the stored facts (``ddp-lsp check``) or
the facts in memory (the server's indexer); one whose cited lines only moved in order
(``line_map``) keeps them with their provenance in it moved; any other change computes
them again. Each test
compares against a computation from scratch of the edited project, and each would fail if the
old facts were reused where they no longer hold."""

from __future__ import annotations

import io
import random
import shutil
from pathlib import Path

import pytest

import ddp_lsp.project as P
from ddp_lsp.config import Settings
from ddp_lsp.lsp import indexer as indexer_mod
from ddp_lsp.project import build
from ddp_lsp.project import index as index_mod
from ddp_lsp.project.build import says_something
from ddp_lsp.project.summary import same_for_project, summarise

from .helpers import FIXTURES, facts_of, fixture_copy


@pytest.fixture
def deit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fixture_copy("deit", tmp_path, monkeypatch)


@pytest.fixture
def computes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the computations of the project's facts that project_view runs."""
    runs: list[int] = []
    real = P.compute

    def counted(index: P.ProjectIndex, previous: P.ProjectFacts | None = None) -> P.ProjectFacts:
        runs.append(1)
        return real(index, previous)

    monkeypatch.setattr(P, "compute", counted)
    return runs


@pytest.fixture
def updates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the updates of the stored computation (flowstate.py) that project_view applies."""
    from ddp_lsp.project import flowstate

    runs: list[int] = []
    real = flowstate.update

    def counted(*args: object) -> flowstate.Updated | None:
        got = real(*args)  # type: ignore[arg-type]
        if got is not None:
            runs.append(1)
        return got

    monkeypatch.setattr(flowstate, "update", counted)
    return runs


def _expected(root: Path) -> dict[str, P.ModuleProjectFacts]:
    return {m.path: m for m in facts_of(root).modules.values() if says_something(m)}


def _view(root: Path) -> dict[str, P.ModuleProjectFacts]:
    facts = build.project_view(root, Settings(), workers=1).facts
    return {p: f for p, f in facts.items() if says_something(f)}


def test_same_for_project_ignores_only_the_key_and_the_line_count() -> None:
    ranks = Settings().rank_model
    text = (FIXTURES / "deit" / "main.py").read_text()
    old = summarise("main.py", text, "k1", ranks)
    assert same_for_project(old, summarise("main.py", text + "# note\n", "k2", ranks))
    assert same_for_project(
        old, summarise("main.py", text.replace("range(10)", "range(11)"), "k2", ranks)
    )
    # A wrapper gone (the kind the engine receives), a line moved (provenance), another path.
    assert not same_for_project(
        old,
        summarise("main.py", text.replace("DistributedDataParallel(", "identity("), "k2", ranks),
    )
    assert not same_for_project(old, summarise("main.py", "\n" + text, "k2", ranks))
    assert not same_for_project(old, summarise("main2.py", text, "k1", ranks))


@pytest.mark.parametrize(
    ("rel", "old", "new"),
    [
        ("main.py", "range(10)", "range(11)"),
        ("main.py", "loader = None\n", "loader = None  # no data yet\n"),
        ("tools_unused.py", "return 1", "return 2"),
        # Lines moved: the engine's kinds cite main.py one line further down.
        ("main.py", "import argparse\n", "import argparse\n\n"),
        ("main.py", "    loader = None\n", "    # none yet\n\n    loader = None\n"),
    ],
)
def test_an_edit_the_project_cannot_see_keeps_the_stored_facts(
    deit: Path, computes: list[int], rel: str, old: str, new: str
) -> None:
    before = _view(deit)
    assert computes == [1]
    path = deit / rel
    path.write_text(path.read_text().replace(old, new))
    view = build.project_view(deit, Settings(), workers=1)
    assert computes == [1], "the facts were computed again"
    assert view.parsed == 1  # the changed file, to compare its summary with the old one
    got = {p: f for p, f in view.facts.items() if says_something(f)}
    expected = _expected(deit)
    assert got == expected
    assert (got == before) == ("\n\n" not in new)  # a stale reuse would keep the old lines
    # Stored again under the project's new state: the next run reads it as it is.
    again = build.project_view(deit, Settings(), workers=1, wanted=["engine.py"])
    assert computes == [1] and again.parsed == 0
    assert again.facts["engine.py"] == expected["engine.py"]


def test_lines_moved_again_and_back_compose(deit: Path, computes: list[int]) -> None:
    before = _view(deit)
    main = deit / "main.py"
    text = main.read_text()
    steps = (
        "\n" + text,  # everything one line down
        "\n" + text.replace("    loader = None\n", "\n\n    loader = None\n"),
        text.replace("    loader = None\n", "\n\n    loader = None\n"),
        text.replace("    loader = None\n", "\n\n    loader = None\n") + "\n\n",
        text,  # back where they were
    )
    for step in steps:
        main.write_text(step)
        got = _view(deit)
        assert got == _expected(deit)
    assert computes == [1]
    assert got == before


@pytest.mark.parametrize(
    ("rel", "old", "new"),
    [
        # Same lines, other facts: the engine's model is no longer DDP-wrapped.
        ("main.py", "DistributedDataParallel(", "identity("),
        # Lines moved, and a call added with them.
        ("main.py", "    loader = None\n", "\n    loader = print()\n"),
        # A new import: names resolve differently.
        ("main.py", "import argparse\n", "import argparse, engine\n"),
        # The file that defines the project's rank-0 predicate (others are summarised with it).
        ("util/misc.py", "return get_rank() == 0", "return get_rank() == 1"),
        # A file summarised with that predicate: it is compared only by a full computation, or
        # updated from the stored state (flowstate.py: summarised with the stored predicates).
        ("engine.py", "print(loss_value)", "print(loss_value, 1)"),
    ],
)
def test_an_edit_the_project_sees_computes_the_facts_again(
    deit: Path, computes: list[int], updates: list[int], rel: str, old: str, new: str
) -> None:
    _view(deit)
    path = deit / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    got = _view(deit)
    # Computed again, or the stored computation updated: never the stored facts kept.
    assert (computes, updates) in (([1, 1], []), ([1], [1]))
    assert got == _expected(deit)


def test_the_lines_of_a_moved_definition_reach_the_other_files(deit: Path) -> None:
    # A stale reuse would keep `all_reduce_mean`'s old line in the engine's callee facts.
    before = _view(deit)["engine.py"].callee_props["arm"].origins
    misc = deit / "util" / "misc.py"
    misc.write_text("\n\n" + misc.read_text())
    after = _view(deit)["engine.py"].callee_props["arm"].origins
    assert {p: o.line + 2 for p, o in before.items()} == {p: o.line for p, o in after.items()}


_EDITS = (
    ("main.py", "range(10)", "range(12)"),  # unseen
    ("main.py", "range(12)", "range(10)"),
    ("main.py", "lr=1e-3", "lr=2e-3"),  # unseen
    ("tools_unused.py", "return 1", "return 3"),  # unseen
    ("main.py", "DistributedDataParallel(", "identity("),
    ("main.py", "identity(", "DistributedDataParallel("),
    ("main.py", "import argparse\n", "import argparse\n\n"),
    ("engine.py", "def evaluate(net, data_loader):", "def evaluate(model, data_loader):"),
    ("util/misc.py", "def all_reduce_mean(x):", "def all_reduce_mean(x, y=None):"),
    ("util/misc.py", "    dist.all_reduce(t)\n", "    pass\n"),
    (
        "util/misc.py",
        "    t = torch.tensor(x).cuda()\n",
        "    t = torch.tensor(x).cuda()\n    dist.all_reduce(t)\n",
    ),
)


_HELPERS = (
    "\n\ndef _helper_a():\n    return 0\n",  # nothing the project reads: kept
    "\n\ndef _helper_b(x):\n    print(x)\n    return x\n",  # a builtin called: kept
    "\n\ndef _helper_c():\n    dist.barrier()\n",  # distributed itself: computed
    "\n\ndef go():\n    return 1\n",  # a name another file spells: computed
    "\n\ndef _helper_d():\n    evaluate(None, None)\n",  # calls the project: computed
)


def _toggle_helper(root: Path, rng: random.Random) -> None:
    """A top-level function added to (or removed from) some file, at its end or before its
    first `def`."""
    path = rng.choice(sorted(root.rglob("*.py")))
    text = path.read_text()
    helper = rng.choice(_HELPERS)
    if helper in text:
        path.write_text(text.replace(helper, "", 1))
    elif rng.random() < 0.5 or "\ndef " not in text:
        path.write_text(text + helper)
    else:
        at = text.index("\ndef ")
        path.write_text(text[:at] + helper + text[at:])


def _apply(root: Path, rng: random.Random) -> None:
    kind = rng.randrange(7)
    if kind >= 5:  # a helper function comes or goes
        _toggle_helper(root, rng)
    elif kind == 0:  # a comment at the end of some file: unseen
        path = rng.choice(sorted(root.rglob("*.py")))
        path.write_text(path.read_text() + f"# {rng.random()}\n")
    elif kind == 4:  # a blank line added somewhere: lines move
        path = rng.choice(sorted(root.rglob("*.py")))
        lines = path.read_text().splitlines(keepends=True)
        at = rng.randrange(len(lines) + 1)
        path.write_text("".join([*lines[:at], "\n", *lines[at:]]))
    elif kind == 1:  # a file appears or goes away
        extra = root / "extra.py"
        if extra.exists():
            extra.unlink()
        else:
            extra.write_text(
                "from engine import train_one_epoch\n\ndef go(m):\n    train_one_epoch(m, 0, 0, 0, 0)\n"
            )
    else:
        rel, old, new = rng.choice(_EDITS)
        path = root / rel
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("rel", ["main.py", "tools_unused.py", "engine.py"])
def test_a_function_nothing_calls_keeps_the_stored_facts(
    deit: Path, computes: list[int], rel: str
) -> None:
    """A helper being written (nothing calls it yet, it calls nothing of the project): the
    stored facts stand, but for the file's single-process functions, where the helper is
    single-process code unless distributed code runs in the file (then it is unknown)."""
    _view(deit)
    path = deit / rel
    text = path.read_text()
    path.write_text(text + _HELPERS[0])
    got = _view(deit)
    assert computes == [1]
    assert got == _expected(deit)
    path.write_text(text)  # and away again
    assert _view(deit) == _expected(deit)
    assert computes == [1]
    # Called from another file: computed.
    path.write_text(text + _HELPERS[0])
    _view(deit)
    (deit / "extra.py").write_text(f"import {rel[:-3].replace('/', '.')} as h\n\nh._helper_a()\n")
    assert _view(deit) == _expected(deit)
    assert computes == [1, 1]


def test_a_helper_in_a_file_with_two_functions_of_one_name(deit: Path, computes: list[int]) -> None:
    # (An `if`/`else` pair of `def`s, `@overload`s: the helper is still alone with its name.)
    path = deit / "tools_unused.py"
    path.write_text(
        path.read_text() + "\n\ndef twice():\n    return 1\n\n\ndef twice():\n    return 2\n"
    )
    _view(deit)
    path.write_text(path.read_text() + _HELPERS[0])
    assert _view(deit) == _expected(deit)
    assert computes == [1]
    path.write_text(path.read_text() + "\n\ndef twice():\n    return 3\n")  # a third: computed
    assert _view(deit) == _expected(deit)
    assert computes == [1, 1]


def test_a_helper_is_single_process_where_nothing_distributed_runs(
    deit: Path, computes: list[int]
) -> None:
    _view(deit)
    path = deit / "tools_unused.py"
    path.write_text(path.read_text() + _HELPERS[0])
    got = _view(deit)
    assert computes == [1]
    assert "_helper_a" in got["tools_unused.py"].single_process


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_edits_equal_a_full_computation(deit: Path, computes: list[int], seed: int) -> None:
    rng = random.Random(seed)
    _view(deit)
    runs = len(computes)
    cutoffs = 0
    for _ in range(16):
        _apply(deit, rng)
        assert _view(deit) == _expected(deit)
        cutoffs += len(computes) == runs
        runs = len(computes)
    # Both ways were taken: the stored facts kept, and computed again.
    assert 0 < cutoffs < 16


def test_the_server_computes_nothing_for_an_edit_the_project_cannot_see(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "deit"
    shutil.copytree(FIXTURES / "deit", root)
    out = io.BytesIO()
    ix = indexer_mod.Indexer(out)
    ix.open(1, root, Settings(), False, {})
    real = indexer_mod.Indexer._compute
    runs: list[int] = []

    def counted(folder: object) -> dict[str, P.ModuleProjectFacts]:
        runs.append(1)
        return real(folder)  # type: ignore[arg-type]

    monkeypatch.setattr(indexer_mod.Indexer, "_compute", staticmethod(counted))
    main = (root / "main.py").resolve()
    text = main.read_text()
    sent = len(out.getvalue())
    ix.update(1, [(main, text.replace("range(10)", "range(11)") + "# typing\n")])
    assert runs == [] and len(out.getvalue()) == sent  # nothing computed, nothing sent
    folder = ix.folders[1]
    # As a computation from scratch of the index as it is now (the edited text laid over).
    assert folder.facts == dict(P.compute(folder.index).by_path)
    # A line added above everything: the facts stand, their lines in main.py move.
    ix.update(1, [(main, "\n" + text)])
    assert runs == [] and len(out.getvalue()) > sent
    assert folder.facts == dict(P.compute(folder.index).by_path)
    assert folder.facts["engine.py"] != facts_of(root).by_path["engine.py"]  # cites main.py:13
    sent = len(out.getvalue())
    ix.update(1, [(main, text.replace("DistributedDataParallel(", "identity("))])
    assert runs == [1] and len(out.getvalue()) > sent
    fresh = dict(P.compute(folder.index).by_path)
    assert folder.facts == fresh
    assert fresh["engine.py"].extra_kinds != facts_of(root).by_path["engine.py"].extra_kinds


def test_the_index_is_read_and_computed_without_the_cycle_collector(
    deit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Millions of long-lived objects at 2,000 files: the collector walking the growing heap
    # was a third of reading the summaries (see index.no_collection). It runs again after.
    import gc

    seen: list[bool] = []
    real = P.compute

    def recorded(index: P.ProjectIndex, previous: P.ProjectFacts | None = None) -> P.ProjectFacts:
        seen.append(gc.isenabled())
        return real(index, previous)

    monkeypatch.setattr(P, "compute", recorded)
    assert gc.isenabled()
    _view(deit)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(RuntimeError), index_mod.no_collection():
        assert not gc.isenabled()
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with index_mod.no_collection():
            pass
        assert not gc.isenabled()  # left as it was
    finally:
        gc.enable()


def _add_call(path: Path, function: str, call: str) -> None:
    """``call`` as the first statement of ``function``'s body (a top-level ``def`` on one
    line)."""
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith(f"def {function}("))
    indent = "    "
    path.write_text("".join([*lines[: at + 1], f"{indent}{call}\n", *lines[at + 1 :]]))


def test_a_call_added_elsewhere_updates_the_stored_state(deit: Path, computes: list[int]) -> None:
    """Another file's facts changed (a call added to a function body): the stored update
    state is updated (flowstate.py), nothing is computed from scratch, and the facts equal a
    computation from scratch; again after a second such edit (the state stored by the
    update is the one read)."""
    _view(deit)
    _add_call(deit / "tools_unused.py", "standalone", "print(1)")
    assert _view(deit) == _expected(deit)
    _add_call(deit / "tools_unused.py", "standalone", "len([])")
    assert _view(deit) == _expected(deit)
    assert computes == [1]
    # A call added at the top of a function that performs a collective (every line below
    # it moved): updated too, the lines moved with it.
    _add_call(deit / "engine.py", "evaluate", "print(net)")
    assert _view(deit) == _expected(deit)
    assert computes == [1]
    # A call of a helper that performs a collective (a carried property reaches a function
    # that had none): computed from scratch.
    _add_call(deit / "engine.py", "log_stats", "arm(1)")
    assert _view(deit) == _expected(deit)
    assert computes == [1, 1]


def test_a_patched_file_reverted_under_a_state_update(deit: Path, computes: list[int]) -> None:
    """A helper added (the stored facts patched, the state not updated), removed again, and a
    call added to another file in the same run: the update must start from the state's own
    facts of the patched file, not the patched ones."""
    plain = deit / "plain.py"
    plain.write_text("def helper():\n    return 1\n")
    _view(deit)
    path = deit / "tools_unused.py"
    text = path.read_text()
    path.write_text(text + _HELPERS[0])
    assert "_helper_a" in _view(deit)["tools_unused.py"].single_process
    path.write_text(text)
    _add_call(plain, "helper", "print(1)")
    got = _view(deit)
    assert got == _expected(deit)
    assert "_helper_a" not in got["tools_unused.py"].single_process
    assert computes == [1]


def test_a_call_added_above_cited_lines_updates_the_stored_state(
    deit: Path, computes: list[int], updates: list[int]
) -> None:
    """A call added at the top of a function body moves every line below it, among them the
    DDP model's binding that engine.py's kinds cite: the stored state is updated with its
    lines moved (flowlines._shift), not computed from scratch; so are the runs after it,
    whether they move lines only (the snapshot's maps composed with the state's), change
    nothing (the snapshot read through the maps) or add calls again, and a file reverted."""
    facts_of_main_before = _view(deit)
    main = deit / "main.py"
    text = main.read_text()
    _add_call(main, "main", "print(args)")
    got = _view(deit)
    assert got == _expected(deit)
    assert (computes, updates) == ([1], [1])
    # (A stale reuse would keep main.py's old lines in engine.py's kinds.)
    assert got["engine.py"].extra_kinds != facts_of_main_before["engine.py"].extra_kinds
    main.write_text("\n" + main.read_text())  # lines moved only: the stored facts stand
    assert _view(deit) == _expected(deit)
    assert (computes, updates) == ([1], [1])
    assert _view(deit) == _expected(deit)  # nothing changed: the snapshot, moved
    _add_call(main, "main", "len([])")
    _add_call(deit / "tools_unused.py", "standalone", "print(2)")
    assert _view(deit) == _expected(deit)
    assert (computes, updates) == ([1], [1, 1])
    main.write_text(text)
    got = _view(deit)
    assert got == _expected(deit)
    assert (computes, updates) == ([1], [1, 1, 1])
