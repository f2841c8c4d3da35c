"""The server's update re-derives what an edit changes instead of computing every stage again:
the kinds' rounds replayed for the modules the change reaches (``flowstages._replay_kinds``),
the call graph's walks continued where they only grew (``reachupdate.extend_walks``), a module's
imports of project modules changed (``flowupdate._distributed_grown``).

Each test makes an edit that used to compute every stage (``ProjectFacts.updated`` False),
checks that the update took the incremental path (``derived`` names what it re-derived: a
test that always fell back would prove nothing) and that every module's facts, and the
edited modules' findings, equal a computation from scratch of the same texts.
"""

from __future__ import annotations

import collections
import random
from pathlib import Path

from ddp_lsp.core.engine import analyze
from ddp_lsp.project import ProjectFacts, ProjectIndex, compute
from tests.project import test_flow_incremental as gen


def _setup(root: Path, mods: dict[str, gen.Module]) -> tuple[ProjectIndex, ProjectFacts]:
    (root / "pyproject.toml").write_text("[project]\nname = 'gen'\n")
    gen._write(root, mods)
    index = ProjectIndex(root, cache_dir=False).build()
    return index, compute(index, updatable=True)


def _edit(
    root: Path, index: ProjectIndex, facts: ProjectFacts, mods: dict[str, gen.Module], *names: str
) -> ProjectFacts:
    """The update after ``names`` changed in ``mods``, checked against a computation from
    scratch (facts of every module, findings of the edited ones)."""
    gen._write(root, mods)
    for name in names:
        index.update(root / f"{name}.py", mods[name].render())
    got = compute(index, facts)
    full = gen._fresh(root)
    gen._same(got, full)
    for name in names:
        text = mods[name].render()
        rel = f"{name}.py"
        want = analyze(text, project=full.for_path(rel)).findings
        assert analyze(text, project=got.for_path(rel)).findings == want
    return got


def test_a_ddp_model_passed_to_a_new_helper_replays_the_kinds(tmp_path: Path) -> None:
    """The benchmark's edit (bench/bench_index.py --server): a helper that wraps a model in
    DDP and passes it to another new helper; then the edit undone. Both update."""
    mods = gen._start()
    index, facts = _setup(tmp_path, mods)
    lib = mods["model"]
    before = {name: (list(p), list(b)) for name, (p, b) in lib.functions.items()}
    lib.functions["helper"] = (["model"], ["return model"])
    lib.functions["caller"] = (["model"], ["model = DDP(model)", "helper(model)"])
    got = _edit(tmp_path, index, facts, mods, "model")
    assert got.updated and {"kinds", "walks"} <= got.derived
    assert "caller" not in got.modules["model"].single_process  # distributed code now
    lib.functions = before
    back = _edit(tmp_path, index, got, mods, "model")
    assert back.updated and "kinds" in back.derived


def test_kinds_passed_across_modules_and_mixed(tmp_path: Path) -> None:
    """A DDP model passed from a new place into another module's function that a plain value
    also reaches: the callee's kind, its provenance and ``mixed`` as from scratch."""
    mods = {m: gen.Module() for m in ("lib", "main", "tools")}
    mods["lib"].functions = {
        "step": (["model", "x"], ["return model(x)"]),
        "inner": (["net"], ["return net"]),
    }
    mods["main"].imports = ["import lib"]
    mods["main"].functions = {"run": (["model"], ["model = DDP(model)"])}
    mods["tools"].imports = ["import lib"]
    mods["tools"].functions = {"export": (["model"], ["lib.step(model, 0)"])}
    index, facts = _setup(tmp_path, mods)
    assert not facts.modules["lib"].extra_kinds
    # main passes its DDP model to lib.step, which tools reaches with a plain one: mixed.
    mods["main"].functions["run"][1].append("lib.step(model, 1)")
    got = _edit(tmp_path, index, facts, mods, "main")
    assert got.updated and "kinds" in got.derived
    kind = got.modules["lib"].extra_kinds[("step", "model")]
    assert kind.kind == "ddp" and kind.mixed and kind.origin.path == "main.py"
    # One hop further, inside lib (a round later).
    mods["lib"].functions["step"][1].insert(0, "inner(model)")
    got = _edit(tmp_path, index, got, mods, "lib")
    assert got.updated
    assert ("inner", "net") in got.modules["lib"].extra_kinds
    # tools wraps its model too: no longer mixed.
    mods["tools"].functions["export"][1].insert(0, "model = DDP(model)")
    got = _edit(tmp_path, index, got, mods, "tools")
    assert got.updated and "kinds" in got.derived
    assert not got.modules["lib"].extra_kinds[("step", "model")].mixed
    # main's call removed: step's kind now comes from tools alone.
    mods["main"].functions["run"][1].pop()
    got = _edit(tmp_path, index, got, mods, "main")
    assert got.updated and "kinds" in got.derived
    assert got.modules["lib"].extra_kinds[("step", "model")].origin.path == "tools.py"
    # And tools' wrap removed: no kind left in lib.
    mods["tools"].functions["export"][1].pop(0)
    got = _edit(tmp_path, index, got, mods, "tools")
    assert got.updated and not got.modules["lib"].extra_kinds


def test_a_chain_longer_than_the_rounds(tmp_path: Path) -> None:
    """A kind handed down a chain of calls across modules longer than the rounds' bound
    (MAX_ROUNDS): the computation from scratch stops there, and so must the replay, whatever
    the edit moves."""
    n = 40
    mods = {f"c{i}": gen.Module() for i in range(n)}
    for i in range(n):
        nxt = f"c{i + 1}"
        if i + 1 < n:
            mods[f"c{i}"].imports = [f"import {nxt}"]
        mods[f"c{i}"].functions = {"f": (["model"], [f"{nxt}.f(model)"] if i + 1 < n else [])}
    mods["c0"].functions["f"][1].insert(0, "model = DDP(model)")
    index, facts = _setup(tmp_path, mods)
    assert ("f", "model") in facts.modules["c20"].extra_kinds
    assert ("f", "model") not in facts.modules["c39"].extra_kinds  # past the bound
    mods["c20"].functions["f"][1].insert(0, "model = DDP(model)")  # a seed half-way
    got = _edit(tmp_path, index, facts, mods, "c20")
    assert got.updated and "kinds" in got.derived
    assert ("f", "model") in got.modules["c39"].extra_kinds
    mods["c0"].functions["f"][1].pop(0)
    got = _edit(tmp_path, index, got, mods, "c0")
    assert got.updated and "kinds" in got.derived
    assert ("f", "model") not in got.modules["c10"].extra_kinds
    mods["c0"].functions["f"][1].insert(0, "model = DDP(model)")
    mods["c20"].functions["f"][1].pop(0)
    got = _edit(tmp_path, index, got, mods, "c0", "c20")
    assert got.updated
    assert ("f", "model") not in got.modules["c39"].extra_kinds


def test_an_import_of_a_project_module_added(tmp_path: Path) -> None:
    """An import of another project module: which modules are distributed code follows
    imports (``distributed``), and so does the walks' ``touched``."""
    mods = gen._start()
    index, facts = _setup(tmp_path, mods)
    assert facts.modules["data"].distributed is None
    mods["main"].imports.append("import data")
    got = _edit(tmp_path, index, facts, mods, "main")
    assert got.updated and "walks" in got.derived
    assert got.modules["data"].distributed is not None
    mods["main"].imports.remove("import data")
    got = _edit(tmp_path, index, got, mods, "main")
    assert got.updated  # removed: the walks computed again over the kept shares
    assert got.modules["data"].distributed is None


def test_random_edit_sequences_take_the_new_paths(tmp_path: Path) -> None:
    """The random edit sequences of test_flow_incremental (every update compared with a
    computation from scratch there): the replay and both kinds of walks are taken."""
    taken: collections.Counter[str] = collections.Counter()
    original = gen.compute

    def counting(
        index: ProjectIndex, previous: ProjectFacts | None = None, updatable: bool = False
    ) -> ProjectFacts:
        got = original(index, previous, updatable)
        if previous is not None:
            taken["updates"] += 1
            taken["updated"] += got.updated
            taken.update(got.derived)
        return got

    gen.compute = counting  # type: ignore[assignment]
    try:
        for seed in range(3):
            root = tmp_path / f"p{seed}"
            root.mkdir()
            gen._run(root, random.Random(500 + seed), 40)
    finally:
        gen.compute = original
    assert taken["kinds"] and taken["walks"] and taken["walks-computed"], taken
    assert taken["updated"] < taken["updates"], taken
