"""Goldens of ``ddp-lsp check --format json`` over each fixture project, with the project view.

``tests/project/goldens/<fixture>.json`` holds every finding of the whole-project run, paths
relative to the fixture, in a stable order. Regenerate with
``pytest tests/project/test_golden.py --update-goldens`` and review the diff: a rule message or
a cross-file fact that changed shows up here. Besides the goldens, for every file of every
fixture: checking it alone gives exactly its part of the whole-project run, and ``--no-project``
gives what the file says on its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddp_lsp import cli

FIXTURES = Path(__file__).parent / "fixtures"
GOLDENS = Path(__file__).parent / "goldens"
NAMES = ("deit", "resume", "shared", "trainer")


@pytest.fixture(autouse=True)
def _cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def run_json(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> list[dict[str, Any]]:
    """``ddp-lsp check --format json ARGS`` in ``root``, normalised: file names relative to
    the fixture, sorted by file, position and code."""
    monkeypatch.chdir(root)
    capsys.readouterr()
    rc = cli.main(["check", "--format", "json", *args])
    out = capsys.readouterr().out
    items = json.loads(out)
    assert rc == (1 if items else 0), out
    base = root.resolve()

    def rel(name: str) -> str:
        return Path(name).relative_to(base).as_posix()

    normal = []
    for f in items:
        f = dict(f, filename=rel(f["filename"]))
        f["related"] = [dict(r, filename=rel(r["filename"])) for r in f["related"]]
        del f["url"]  # the documentation link (version-specific), not behaviour
        normal.append(f)
    return sorted(
        normal,
        key=lambda f: (f["filename"], f["location"]["row"], f["location"]["column"], f["code"]),
    )


def python_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))


@pytest.mark.parametrize("name", NAMES)
def test_golden(
    name: str,
    update_goldens: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got = run_json(FIXTURES / name, capsys, monkeypatch, ".")
    path = GOLDENS / f"{name}.json"
    if update_goldens or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if not update_goldens:
            raise AssertionError(f"{path} did not exist; written now, review and rerun")
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert got == expected, f"findings differ from {path.name}; rerun with --update-goldens"


@pytest.mark.parametrize("name", NAMES)
def test_each_file_alone_equals_its_part_of_the_project(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = FIXTURES / name
    whole = run_json(root, capsys, monkeypatch, ".")
    for rel in python_files(root):
        alone = run_json(root, capsys, monkeypatch, rel)
        assert alone == [f for f in whole if f["filename"] == rel], rel


@pytest.mark.parametrize("name", NAMES)
def test_no_project_is_the_per_file_analysis(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddp_lsp.core.engine import analyze
    from ddp_lsp.core.settings import Settings

    root = FIXTURES / name
    got = run_json(root, capsys, monkeypatch, "--no-project", ".")
    for rel in python_files(root):
        text = (root / rel).read_text(encoding="utf-8")
        expected = [(f.rule_id, f.span.start.line + 1) for f in analyze(text, Settings()).findings]
        mine = [(f["code"], f["location"]["row"]) for f in got if f["filename"] == rel]
        assert sorted(mine) == sorted(expected), rel
        assert all(r["filename"] == rel for f in got for r in f["related"] if f["filename"] == rel)


def codes(findings: list[dict[str, Any]], rel: str) -> list[str]:
    return [f["code"] for f in findings if f["filename"] == rel]


def test_deit_engine_gets_ddp101_only_from_the_project(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = FIXTURES / "deit"
    assert "DDP101" not in codes(
        run_json(root, capsys, monkeypatch, "--no-project", "."), "engine.py"
    )
    with_project = run_json(root, capsys, monkeypatch, "engine.py")
    (ddp101,) = [f for f in with_project if f["code"] == "DDP101"]
    assert "main.py:12" in ddp101["message"]
    assert ("main.py", 12) in [(r["filename"], r["location"]["row"]) for r in ddp101["related"]]


def test_shared_engine_is_reported_and_single_gpu_entry_gains_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hard negative (ddp_lsp/project/flow.py): engine.py runs under DDP when launched by
    main_ddp.py and on one GPU by train_single.py. Its DDP101 is reported, naming the DDP
    caller; train_single.py gets no finding it would not get alone."""
    root = FIXTURES / "shared"
    whole = run_json(root, capsys, monkeypatch, ".")
    alone = run_json(root, capsys, monkeypatch, "--no-project", ".")
    (ddp101,) = [f for f in whole if f["filename"] == "engine.py"]
    assert ddp101["code"] == "DDP101" and "main_ddp.py:9" in ddp101["message"]
    assert {r["filename"] for r in ddp101["related"]} == {"engine.py", "main_ddp.py"}
    assert "train_single.py" not in {r["filename"] for r in ddp101["related"]}
    single = [f for f in whole if f["filename"] == "train_single.py"]
    assert single == [f for f in alone if f["filename"] == "train_single.py"] == []
    # main_ddp.py is not changed by its callee either.
    assert codes(whole, "main_ddp.py") == codes(alone, "main_ddp.py")
