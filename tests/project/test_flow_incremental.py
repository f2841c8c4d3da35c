"""Incremental ``compute(index, previous)`` equals a computation from scratch.

The server's indexer passes its last computation to the next one (``flow.compute``'s
``previous``): import resolution, each module's resolved parts and call-graph share, and every
stage the changed modules cannot have changed are reused (``flowupdate._update``). These tests apply
random edit sequences to a generated multi-file project (calls added and removed, imports,
rank guards, collectives, process-group starts, DDP wrapping, functions added, removed and
renamed, parameters changed, comments and blank lines) and compare, after every edit, the
incremental facts of every module and the findings of the edited modules with a computation
from scratch of the same texts; they also check that the fast path was taken (a test of
equality that never reused anything would prove nothing).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddp_lsp.core.engine import analyze
from ddp_lsp.project import ProjectFacts, ProjectIndex, compute
from ddp_lsp.project.summary import ModuleSummary

MODULES = ("utils", "engine", "model", "main", "tools", "data")
HEADER = (
    "import torch\n"
    "import torch.distributed as dist\n"
    "import torch.multiprocessing as mp\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
)


@dataclass
class Module:
    imports: list[str] = field(default_factory=list)
    # name -> (parameters, body statements: one line each, or a guarded one)
    functions: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    top: list[str] = field(default_factory=list)  # lines before the header (comments, blanks)

    def render(self) -> str:
        out = [*self.top, HEADER, *(f"{line}\n" for line in self.imports), "\n"]
        for name, (params, body) in self.functions.items():
            out.append(f"\ndef {name}({', '.join(params)}):\n")
            for stmt in body or ["pass"]:
                out.append("".join(f"    {line}\n" for line in stmt.split("\n")))
        return "".join(out)


def _start() -> dict[str, Module]:
    mods = {m: Module() for m in MODULES}
    mods["utils"].functions = {
        "reduce_mean": (["t"], ["dist.all_reduce(t)", "return t"]),
        "is_main": ([], ["return dist.get_rank() == 0"]),
        "save_on_master": (["obj", "path"], ["if is_main():\n    torch.save(obj, path)"]),
        "setup": ([], ['dist.init_process_group("nccl")']),
        # Replaces print on the other ranks: the entry that calls it silences what it imports
        # (ModuleProjectFacts.silenced).
        "quiet": ([], ["builtins.print = print"]),
    }
    mods["engine"].imports = ["import utils", "from utils import reduce_mean"]
    mods["engine"].functions = {
        "train_one_epoch": (["model", "x"], ["loss = model(x).sum()", "loss.backward()"]),
        "evaluate": (["model", "x"], ["t = model(x)", "reduce_mean(t)"]),
    }
    mods["model"].functions = {"build": (["x"], ["return torch.nn.Linear(4, 4)"])}
    mods["main"].imports = ["import engine", "import utils", "import model as model_lib"]
    mods["main"].functions = {
        "run": (
            ["rank"],
            [
                "utils.setup()",
                "utils.quiet()",
                "model = model_lib.build(4)",
                "model = DDP(model)",
                "engine.train_one_epoch(model, 1)",
                "utils.save_on_master(model, 'ckpt.pt')",
            ],
        ),
        "main": ([], ["mp.spawn(run, nprocs=2)"]),
    }
    mods["tools"].imports = ["import engine"]
    mods["tools"].functions = {"export": (["model"], ["engine.evaluate(model, 0)"])}
    mods["data"].functions = {"load": (["path"], ["return torch.load(path)"])}
    return mods


def _calls(mods: dict[str, Module], here: str, rng: random.Random) -> str:
    """A call of a project function, spelled as ``here`` can (or cannot) reach it."""
    target = rng.choice(MODULES)
    fns = list(mods[target].functions) or ["missing"]
    fn = rng.choice(fns)
    args = ", ".join(rng.sample(["model", "x", "t", "path", "1"], rng.randint(0, 2)))
    if target == here:
        return f"{fn}({args})"
    return f"{target}.{fn}({args})"


def _statement(mods: dict[str, Module], here: str, rng: random.Random) -> str:
    choice = rng.randrange(9)
    if choice == 0:
        return "dist.all_reduce(t)"
    if choice == 1:
        return 'dist.init_process_group("nccl")'
    if choice == 2:
        return "model = DDP(model)"
    if choice == 3:
        return "torch.save(model.state_dict(), 'm.pt')"
    if choice == 4:
        return "with model.no_sync():\n    pass"
    if choice == 5:
        fns = [f for f in mods[here].functions] or ["run"]
        return f"mp.spawn({rng.choice(fns)}, nprocs=2)"
    return _calls(mods, here, rng)


MOVED = "# a line that moves the rest\n"


def _edit(mods: dict[str, Module], rng: random.Random) -> tuple[str, str]:
    """One random edit of one module; (module, what was done)."""
    here = rng.choice(MODULES)
    mod = mods[here]
    op = rng.randrange(13)
    fns = list(mod.functions)
    if not fns or op == 0:
        name = f"f{rng.randrange(1000)}"
        mod.functions[name] = (rng.sample(["model", "x", "t", "path"], rng.randint(0, 2)), [])
        return here, f"add function {name}"
    name = rng.choice(fns)
    params, body = mod.functions[name]
    if op in (1, 2, 3):
        body.insert(rng.randint(0, len(body)), _statement(mods, here, rng))
        return here, f"add a statement to {name}"
    if op == 4 and body:
        body.pop(rng.randrange(len(body)))
        return here, f"remove a statement of {name}"
    if op == 5 and body:
        i = rng.randrange(len(body))
        if body[i].startswith("if "):
            body[i] = "\n".join(line[4:] for line in body[i].split("\n")[1:])
            return here, f"unguard a statement of {name}"
        guard = rng.choice(["if dist.get_rank() == 0:", "if utils.is_main():", "if rank == 0:"])
        body[i] = guard + "\n" + "\n".join("    " + line for line in body[i].split("\n"))
        return here, f"guard a statement of {name}"
    if op == 6:
        other = rng.choice([m for m in MODULES if m != here])
        line = rng.choice(
            [
                f"import {other}",
                f"from {other} import {rng.choice(list(mods[other].functions) or ['x'])}",
            ]
        )
        if line in mod.imports:
            mod.imports.remove(line)
            return here, f"remove {line}"
        mod.imports.append(line)
        return here, f"add {line}"
    if op == 7:
        new = f"{name}_{rng.randrange(10)}"
        mod.functions = {(new if k == name else k): v for k, v in mod.functions.items()}
        return here, f"rename {name} to {new}"
    if op == 8 and len(fns) > 1:
        del mod.functions[name]
        return here, f"remove function {name}"
    if op == 9:
        pool = ["model", "x", "t", "path", "rank"]
        mod.functions[name] = (rng.sample(pool, rng.randint(0, 3)), body)
        return here, f"change the parameters of {name}"
    if op == 10:
        mod.top.insert(0, rng.choice(["# a comment\n", "\n"]))
        return here, "lines moved"
    if op == 11 and body:
        # A line inserted or deleted above a statement of a body: the lines the facts cite
        # below it (bindings with kinds, call sites, later functions) move, nothing else.
        moved = [i for i, stmt in enumerate(body) if stmt.startswith(MOVED)]
        if moved and rng.random() < 0.5:
            i = rng.choice(moved)
            body[i] = body[i][len(MOVED) :]
            return here, f"a line deleted in {name}"
        i = rng.randrange(len(body))
        body[i] = MOVED + body[i]
        return here, f"a line inserted in {name}"
    body.append(_calls(mods, here, rng))
    return here, f"add a call to {name}"


def _write(root: Path, mods: dict[str, Module]) -> None:
    for name, mod in mods.items():
        (root / f"{name}.py").write_text(mod.render())


def _fresh(root: Path) -> ProjectFacts:
    index = ProjectIndex(root, cache_dir=False)
    return compute(index.build())


def _same(a: ProjectFacts, b: ProjectFacts) -> None:
    assert a.modules.keys() == b.modules.keys()
    for name in a.modules:
        assert a.modules[name] == b.modules[name], name


def _run(root: Path, rng: random.Random, steps: int) -> tuple[int, int]:
    """Random edits, each compared; (updates that took the fast path, all updates)."""
    (root / "pyproject.toml").write_text("[project]\nname = 'gen'\n")
    mods = _start()
    _write(root, mods)
    index = ProjectIndex(root, cache_dir=False).build()
    facts = compute(index, updatable=True)
    fast = 0
    history: list[str] = []
    for _ in range(steps):
        # One edit, or a few at once (edits that queued up while the indexer computed).
        edited = set()
        for _ in range(1 if rng.random() < 0.8 else rng.randint(2, 3)):
            here, what = _edit(mods, rng)
            history.append(f"{here}: {what}")
            edited.add(here)
        _write(root, mods)
        for name in sorted(edited):
            index.update(root / f"{name}.py", mods[name].render())
        before = facts
        facts = compute(index, facts)
        fast += facts.updated
        full = _fresh(root)
        try:
            _same(facts, full)
            for name in edited:
                rel = f"{name}.py"
                text = mods[name].render()
                got = analyze(text, project=facts.for_path(rel)).findings
                want = analyze(text, project=full.for_path(rel)).findings
                assert got == want
        except AssertionError:
            print("\n".join(history))
            raise
        assert before is not facts
    return fast, steps


def test_random_edit_sequences_equal_a_full_computation(tmp_path: Path) -> None:
    fast = total = 0
    for seed in range(6):
        root = tmp_path / f"p{seed}"
        root.mkdir()
        f, n = _run(root, random.Random(seed), 40)
        fast += f
        total += n
    # The fast path is the point: most edits of a function body reuse every stage.
    assert 0 < fast < total


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 12))
def test_hypothesis_edit_sequences(tmp_path_factory: object, seed: int, steps: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _run(Path(tmp), random.Random(seed), steps)


def test_fast_path_reuses_the_stages(tmp_path: Path) -> None:
    """A call that carries nothing added to a function body: only that module is prepared
    again, and the facts of the modules it does not touch are the previous objects."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'gen'\n")
    mods = _start()
    _write(tmp_path, mods)
    index = ProjectIndex(tmp_path, cache_dir=False).build()
    first = compute(index, updatable=True)
    mods["data"].functions["load"][1].insert(0, "print(path)")
    index.update(tmp_path / "data.py", mods["data"].render())
    second = compute(index, first)
    assert second.updated and second.prepared == 1
    assert all(second.modules[m] is first.modules[m] for m in MODULES if m != "data")
    _write(tmp_path, mods)
    _same(second, _fresh(tmp_path))
    # A DDP model passed on: the kinds change, and everything is computed again.
    mods["tools"].functions["export"][1].append("model = DDP(model)")
    mods["tools"].functions["export"][1].append("utils.reduce_mean(model)")
    mods["tools"].imports.append("import utils")
    index.update(tmp_path / "tools.py", mods["tools"].render())
    third = compute(index, second)
    assert not third.updated
    _write(tmp_path, mods)
    _same(third, _fresh(tmp_path))


# -- the update from a state stored on disk (``ddp-lsp check``: project/flowstate.py) -----------


def _lines_moved(old: ModuleSummary, new: ModuleSummary) -> bool:
    """Whether a function, a binding's kind or a function's property that both summaries
    have is on another line (below an edit that added or removed lines)."""

    def lines(s: ModuleSummary) -> dict[tuple[str, ...], int]:
        out: dict[tuple[str, ...], int] = {
            ("def", fi.qualname): fi.line + 1 for fi in s.facts.functions
        }
        out.update({("bind", sc, p): line for sc, p, line in s.binding_lines})
        out.update({("prop", q, p): line for q, p, line in s.prop_lines})
        return out

    before, after = lines(old), lines(new)
    return any(before[k] != after[k] for k in before.keys() & after.keys())


class _Stored:
    """A project whose facts are updated from the last computation's state as the snapshot
    stores it (JSON text, read lazily; the summaries by digest), never from memory, as each
    ``ddp-lsp check`` does; :meth:`step` compares every update with a computation from
    scratch."""

    def __init__(self, root: Path, mods: dict[str, Module]) -> None:
        (root / "pyproject.toml").write_text("[project]\nname = 'gen'\n")
        self.root = root
        self.mods = mods
        _write(root, mods)
        self.seen: dict[str, ModuleSummary] = {}  # digest -> summary: the summary cache
        self.index = ProjectIndex(root, cache_dir=False).build()
        self.seen.update({s.digest: s for s in self.index.modules.values()})
        self.state, self.texts = self._stored_from(compute(self.index))
        self.derived: frozenset[str] = frozenset()  # what the last update derived again

    def _stored_from(self, facts: ProjectFacts) -> tuple[object, dict[str, str]]:
        import json

        from ddp_lsp.project import flowstate
        from ddp_lsp.project.build import says_something
        from ddp_lsp.project.snapshot import encode

        state = flowstate.state_of(facts, self.index)
        assert state is not None
        texts = {m.path: encode(m) for m in facts.modules.values() if says_something(m)}
        # Through JSON, as the snapshot does.
        return flowstate.from_json(json.loads(json.dumps(flowstate.to_json(state))), {}), texts

    def step(self, edited: set[str]) -> tuple[bool, bool]:
        """The update after ``edited`` changed (their texts are ``self.mods``'s), checked;
        (whether the stored state was updated rather than computed from scratch, whether the
        lines of an edited module moved)."""
        from ddp_lsp.project import flowstate

        root, mods = self.root, self.mods
        before = dict(self.index.modules)
        _write(root, mods)
        self.index = ProjectIndex(root, cache_dir=False).build()  # a new process: nothing kept
        self.seen.update({s.digest: s for s in self.index.modules.values()})
        full = _fresh(root)
        current = {m: s for m, s in self.index.modules.items() if m in edited}
        got = flowstate.update(
            self.index,
            self.state,  # type: ignore[arg-type]
            self.texts,
            current,
            self.seen.get,
        )
        if got is None:
            self.state, self.texts = self._stored_from(compute(self.index))
            self.derived = frozenset()
            return False, False
        self.derived = got.facts.derived
        for m, want in full.modules.items():
            assert got.facts.modules[m] == want, m
        for m in edited:
            rel = f"{m}.py"
            text = mods[m].render()
            findings = analyze(text, project=got.facts.modules[m]).findings
            assert findings == analyze(text, project=full.for_path(rel)).findings
        self.state = got.state
        for rel, stored in got.facts_text.items():
            if stored is None:
                self.texts.pop(rel, None)
            else:
                self.texts[rel] = stored
        return True, any(_lines_moved(before[m], current[m]) for m in current)


def _run_stored(root: Path, rng: random.Random, steps: int) -> tuple[int, int, int]:
    """As _run, through a stored state (_Stored): a state that diverged from the computation
    it stands for fails the comparison, now or at a later edit. (updates from the state, all
    updates, updates from the state where the lines of an edited module moved)."""
    chain = _Stored(root, _start())
    fast = moved = 0
    history: list[str] = []
    for _ in range(steps):
        edited = set()
        for _ in range(1 if rng.random() < 0.8 else rng.randint(2, 3)):
            here, what = _edit(chain.mods, rng)
            history.append(f"{here}: {what}")
            edited.add(here)
        try:
            updated, lines_moved = chain.step(edited)
        except AssertionError:
            print("\n".join(history))
            raise
        fast += updated
        moved += lines_moved
    return fast, steps, moved


def test_random_edit_sequences_through_a_stored_state(tmp_path: Path) -> None:
    fast = total = moved = 0
    for seed in range(6):
        root = tmp_path / f"p{seed}"
        root.mkdir()
        f, n, mv = _run_stored(root, random.Random(1000 + seed), 40)
        fast += f
        total += n
        moved += mv
    assert 0 < fast < total
    # Lines moved in the edited module (a statement inserted above others, a line inserted):
    # the state's lines are moved with them, not computed from scratch (flowlines._shift).
    assert moved > 0


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 12))
def test_hypothesis_edit_sequences_through_a_stored_state(
    tmp_path_factory: object, seed: int, steps: int
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _run_stored(Path(tmp), random.Random(seed), steps)


def test_lines_moved_under_a_stored_state_are_moved_with_it(tmp_path: Path) -> None:
    """Edits that add or remove lines above what the stored computation cites (a kind's
    seed, a collective's line, both cited in other modules' facts), with facts changed in
    the same file or not, in one file many times and in two files at once, in successive
    runs: each updates the stored state (its texts read through the stored maps of lines)
    rather than computing from scratch, and equals a computation from scratch."""
    mods = _start()
    # A collective in a module without a rank-0 predicate (a file that defines one is
    # computed from scratch: every file is summarised knowing it), called from another, and
    # a helper of it that another module calls.
    mods["data"].functions["sync"] = (["t"], ["t = t * 2", "dist.all_reduce(t)"])
    mods["engine"].imports.append("import data")
    mods["engine"].functions["evaluate"][1].append("data.sync(t)")
    mods["tools"].imports.append("import data")
    mods["tools"].functions["export"][1].append("data.load(model)")
    mods["data"].functions["load"] = (
        ["path"],
        ["obj = torch.load(path)", "torch.save(obj, 'copy.pt')", "return obj"],
    )
    chain = _Stored(tmp_path, mods)
    load, sync = mods["data"].functions["load"][1], mods["data"].functions["sync"][1]
    run = mods["main"].functions["run"][1]

    def updated(*edited: str) -> None:
        assert chain.step(set(edited)) == (True, True)

    # A call added at the top of the body above the collective (cited by engine).
    load.insert(0, "print(path)")
    updated("data")
    # The same file again: a line inserted above the collective (lines moved twice).
    sync.insert(0, "# moved\nx = len(t)")
    updated("data")
    # A property on a line the stored maps do not know (it saves to its caller's path:
    # tools cites it), the lines below it moved.
    load.insert(2, "torch.save(obj, path)")
    updated("data")
    # The DDP model's binding (a seed cited by engine's kinds) moves down.
    run.insert(0, "print(rank)")
    updated("main")
    # Both files in one run: lines added on top of both.
    mods["data"].top.insert(0, "\n\n")
    mods["main"].top.insert(0, "# c\n")
    updated("data", "main")
    # A call added directly above the collective.
    sync.insert(0, "print(t)")
    updated("data")
    # Lines removed again (the lines they were on gone, those below moved up).
    load.pop(0)
    sync.pop(0)
    updated("data")
    run.pop(0)
    updated("main")
    # The new property's line moves (tools' facts cite it by the key it was given).
    load.insert(0, "pass")
    updated("data")
    # And goes (its key is gone), above the collective.
    load.remove("torch.save(obj, path)")
    updated("data")
    # Back to where the lines were first stored: the maps read every text as computed.
    load.remove("pass")
    sync.pop(0)
    mods["data"].top.clear()
    mods["main"].top.clear()
    updated("data", "main")
