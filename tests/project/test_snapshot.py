"""The project facts snapshot: an unchanged project's facts come from disk, for the wanted
files only; any change of a file's bytes, any new or removed file, recomputes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lsp.config import Settings
from ddp_lsp.project import build
from ddp_lsp.project.build import says_something

from .helpers import facts_of, fixture_copy


@pytest.fixture
def deit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fixture_copy("deit", tmp_path, monkeypatch)


def _no_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> object:
        raise AssertionError("the facts were computed again")

    monkeypatch.setattr(build, "fill", fail)
    monkeypatch.setattr("ddp_lsp.project.compute", fail)


def _wanted(root: Path) -> list[str]:
    full = facts_of(root)
    return sorted(m.path for m in full.modules.values() if says_something(m))


def test_an_unchanged_project_reads_the_wanted_facts_from_the_snapshot(
    deit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = facts_of(deit).by_path
    wanted = _wanted(deit)
    assert len(wanted) >= 2
    first = build.project_view(deit, Settings(), workers=1)
    assert first.parsed > 0
    _no_compute(monkeypatch)  # from here on, neither summaries nor compute may run
    view = build.project_view(deit, Settings(), workers=1, wanted=wanted[:1])
    assert view.parsed == 0 and view.files == first.files
    assert list(view.facts) == wanted[:1]  # only what was asked for is decoded
    got = view.facts[wanted[0]]
    assert got == full[wanted[0]] and got.key == full[wanted[0]].key
    every = build.project_view(deit, Settings(), workers=1)
    assert sorted(every.facts) == wanted
    assert all(every.facts[p] == full[p] for p in wanted)


@pytest.mark.parametrize("change", ["edit", "add", "remove"])
def test_any_change_of_a_file_recomputes(deit: Path, change: str) -> None:
    build.project_view(deit, Settings(), workers=1)
    main = deit / "main.py"
    if change == "edit":
        # main.py no longer wraps the model: the engine's parameter loses its kind.
        main.write_text(main.read_text().replace("DistributedDataParallel(", "identity("))
    elif change == "add":
        (deit / "extra.py").write_text("x = 1\n")
    else:
        (deit / "tools_unused.py").unlink()
    view = build.project_view(deit, Settings(), workers=1)
    assert view.parsed >= (0 if change == "remove" else 1)
    expected = {m.path: m for m in facts_of(deit).modules.values() if says_something(m)}
    assert {p: f for p, f in view.facts.items() if says_something(f)} == expected
    again = build.project_view(deit, Settings(), workers=1)
    assert again.parsed == 0 and again.facts == expected


def test_a_stdin_text_is_part_of_the_state(deit: Path) -> None:
    build.project_view(deit, Settings(), workers=1)
    main = deit / "main.py"
    edited = main.read_text().replace("DistributedDataParallel(", "identity(").encode()
    view = build.project_view(deit, Settings(), workers=1, overlays={main.resolve(): edited})
    assert view.facts != build.project_view(deit, Settings(), workers=1).facts


def test_a_tampered_snapshot_is_a_miss(deit: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ddp_lsp.project as P

    build.project_view(deit, Settings(), workers=1)
    files = [f for f in (deit.parent / "cache").rglob("projects/*.json") if ".state." not in f.name]
    assert len(files) == 1
    good = files[0].read_text()
    real = P.compute
    runs: list[int] = []

    def counted(index: P.ProjectIndex) -> P.ProjectFacts:
        runs.append(1)
        return real(index)

    monkeypatch.setattr(P, "compute", counted)
    build.project_view(deit, Settings(), workers=1)
    assert runs == []  # the untouched snapshot answers
    tampered = (
        "{",
        "[]",
        good.replace('"modules":{', '"modules":{"x.py":[1],', 1),
        good.replace('"files":', '"more":1,"files":', 1),
        good.replace('"version":', '"version":"1","was":', 1),
    )
    for n, bad in enumerate(tampered, 1):
        files[0].write_text(bad)
        view = build.project_view(deit, Settings(), workers=1, wanted=["x.py", "engine.py"])
        assert len(runs) == n, bad[:40]
        assert "x.py" not in view.facts and "engine.py" in view.facts


def test_a_tampered_update_state_is_a_miss(deit: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The update state (flowstate.py) lives in a file of its own, read only when other
    files' facts changed: a state that does not decode, or is not the one the snapshot names,
    is a miss, and the facts are computed from scratch."""
    import json

    import ddp_lsp.project as P

    plain = deit / "tools_unused.py"
    text = plain.read_text()
    real = P.compute
    runs: list[int] = []

    def counted(index: P.ProjectIndex) -> P.ProjectFacts:
        runs.append(1)
        return real(index)

    monkeypatch.setattr(P, "compute", counted)
    build.project_view(deit, Settings(), workers=1)
    (state_file,) = (deit.parent / "cache").rglob("projects/*.state.json")
    good = json.loads(state_file.read_text())
    some = next(iter(good["state"]["modules"]))
    tampered = (
        "{",
        json.dumps({**good, "id": "0" * 16}),
        json.dumps({**good, "state": {**good["state"], "head": [1]}}),
        json.dumps({**good, "state": {**good["state"], "modules": {some: 1}}}),
        json.dumps({**good, "version": "1"}),
    )
    for n, bad in enumerate(tampered):
        build.project_view(deit, Settings(), workers=1)  # the state stored again
        assert len(runs) == 1 + n
        state_file.write_text(bad)
        plain.write_text(text.replace("return 1", f"print_{n}()\n    return 1"))
        view = build.project_view(deit, Settings(), workers=1)
        expected = {m.path: m for m in facts_of(deit).modules.values() if says_something(m)}
        assert {p: f for p, f in view.facts.items() if says_something(f)} == expected
        assert len(runs) == 2 + n, bad[:40]
    # The state as stored: updated, nothing computed.
    plain.write_text(text.replace("return 1", "print_9()\n    return 1"))
    build.project_view(deit, Settings(), workers=1)
    assert len(runs) == 1 + len(tampered)
