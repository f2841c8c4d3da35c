"""``ddp-lsp check`` after an edit of another file that changes the kinds: the state stored
with the snapshot (:mod:`ddp_lsp.project.flowstate`) keeps the kinds' rounds, each module's
callers by call site and inheritors, and the modules that gained a kind in each round, so the
update replays the rounds for what the edit reaches (``flowstages._replay_kinds``) instead of
computing the project from scratch.

Each update goes through the state as the snapshot stores it (JSON text, read lazily, a fresh
index per run: nothing kept in memory), must take the replay (``derived`` names it: a test that
always computed from scratch would prove nothing) and must equal a computation from scratch
(every module's facts, the edited modules' findings: ``test_flow_incremental._Stored``). A
state that stored a wrong round, caller or gain diverges at that update or a later one of the
chain, so the chains below go on after each edit (and undo it).
"""

from __future__ import annotations

import random
from pathlib import Path

from tests.project import test_flow_incremental as gen

# Distributed code already (it reads its rank): wrapping a model in it changes the kinds and
# not which functions are distributed code (the call graph's walks stand). Not a collective:
# a call added to a function with a carried property computes the properties from scratch
# (flowupdate._update), which is not what these tests are about.
BARRIER = "rank = dist.get_rank()"


def _replayed(chain: gen._Stored, *edited: str) -> None:
    updated, _ = chain.step(set(edited))
    assert updated, "computed from scratch"
    assert "kinds" in chain.derived


def test_a_parameter_rebound_to_ddp_and_back(tmp_path: Path) -> None:
    """The benchmark's edit (bench/bench_project.py): a training function's model, a DDP model
    from its caller in another module, rebound to DDP at the top of its body (a seed of its
    own module now, with another provenance); undone; again in two modules at once."""
    mods = gen._start()
    train = mods["engine"].functions["train_one_epoch"][1]
    train.insert(0, BARRIER)
    run = mods["main"].functions["run"][1]
    run.insert(0, BARRIER)
    chain = gen._Stored(tmp_path, mods)
    train.insert(1, "model = DDP(model)")
    _replayed(chain, "engine")
    train.pop(1)
    _replayed(chain, "engine")
    # The wrap in main removed and engine's added in one run: the kind's source moves.
    run.remove("model = DDP(model)")
    train.insert(1, "model = DDP(model)")
    _replayed(chain, "engine", "main")
    run.insert(4, "model = DDP(model)")
    train.pop(1)
    _replayed(chain, "engine", "main")


def test_kinds_passed_across_modules_and_mixed(tmp_path: Path) -> None:
    """A DDP model passed from a new place into another module's function that a plain value
    also reaches (``mixed``), one hop further, the other caller wrapping too, a plain value
    passed again and the wrap removed: each run an update of the stored state
    (test_flow_replay's edits, here through the state on disk)."""
    mods = {m: gen.Module() for m in ("lib", "main", "tools")}
    mods["lib"].functions = {
        "step": (["model", "x"], [BARRIER, "return model(x)"]),
        "inner": (["net"], [BARRIER, "return net"]),
    }
    mods["main"].imports = ["import lib"]
    mods["main"].functions = {"run": (["model"], [BARRIER, "model = DDP(model)"])}
    mods["tools"].imports = ["import lib"]
    # (inner is called from another module already: a first reference to a function
    # changes the walks' `referenced`, which a restored state does not update.)
    mods["tools"].functions = {
        "export": (["model"], [BARRIER, "lib.step(model, 0)", "lib.inner(0)"])
    }
    chain = gen._Stored(tmp_path, mods)
    mods["main"].functions["run"][1].append("lib.step(model, 1)")
    _replayed(chain, "main")
    mods["lib"].functions["step"][1].insert(1, "inner(model)")
    _replayed(chain, "lib")
    mods["tools"].functions["export"][1].insert(1, "model = DDP(model)")
    _replayed(chain, "tools")
    # main passes a plain value now (the call stays: a call removed from distributed code
    # may shrink the walks, which a restored state computes from scratch).
    mods["main"].functions["run"][1][-1] = "lib.step(0, 1)"
    _replayed(chain, "main")
    mods["tools"].functions["export"][1].pop(1)
    _replayed(chain, "tools")
    # And back: the first edit again, from the state these updates left.
    mods["main"].functions["run"][1][-1] = "lib.step(model, 1)"
    _replayed(chain, "main")


def test_a_chain_longer_than_the_rounds(tmp_path: Path) -> None:
    """A kind handed down a chain of 40 modules, past the rounds' bound (MAX_ROUNDS): the
    replay over the stored rounds stops where the computation from scratch stops (the
    rounds' gains are read from the state's head), with seeds added and removed half-way."""
    n = 40
    mods = {f"c{i}": gen.Module() for i in range(n)}
    for i in range(n):
        nxt = f"c{i + 1}"
        if i + 1 < n:
            mods[f"c{i}"].imports = [f"import {nxt}"]
        body = [BARRIER, f"{nxt}.f(model)"] if i + 1 < n else [BARRIER]
        mods[f"c{i}"].functions = {"f": (["model"], body)}
    mods["c0"].functions["f"][1].insert(1, "model = DDP(model)")
    chain = gen._Stored(tmp_path, mods)
    mods["c20"].functions["f"][1].insert(1, "model = DDP(model)")  # a seed half-way
    _replayed(chain, "c20")
    mods["c0"].functions["f"][1].pop(1)
    _replayed(chain, "c0")
    mods["c0"].functions["f"][1].insert(1, "model = DDP(model)")
    mods["c20"].functions["f"][1].pop(1)
    _replayed(chain, "c0", "c20")
    mods["c35"].functions["f"][1].insert(1, "model = DDP(model)")
    _replayed(chain, "c35")
    mods["c35"].functions["f"][1].pop(1)
    _replayed(chain, "c35")


def test_random_kind_edits_through_the_stored_state(tmp_path: Path) -> None:
    """Random sequences of wraps added and removed, DDP models passed to other modules'
    functions and those calls removed, in functions that are distributed code already (and
    now and then other edits of test_flow_incremental, which may compute from scratch): every
    run compared with a computation from scratch, and the replay taken."""
    replayed = 0
    for seed in range(3):
        rng = random.Random(700 + seed)
        root = tmp_path / f"p{seed}"
        root.mkdir()
        mods = gen._start()
        for mod in mods.values():
            for _, body in mod.functions.values():
                body.insert(0, BARRIER)
        chain = gen._Stored(root, mods)
        for _ in range(25):
            here = rng.choice(gen.MODULES)
            if rng.random() < 0.2:
                here, _what = gen._edit(mods, rng)
            else:
                name = rng.choice(list(mods[here].functions))
                params, body = mods[here].functions[name]
                wrap = f"{params[0]} = DDP({params[0]})" if params else None
                if wrap is not None and wrap in body and rng.random() < 0.5:
                    body.remove(wrap)
                elif wrap is not None and rng.random() < 0.5:
                    body.insert(rng.randint(1, len(body)), wrap)
                else:
                    body.insert(rng.randint(1, len(body)), gen._calls(mods, here, rng))
            chain.step({here})
            replayed += "kinds" in chain.derived
    assert replayed >= 5
