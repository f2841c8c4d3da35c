"""The index: module names, files found, the content cache on disk, updates."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from ddp_lsp.core.settings import Settings
from ddp_lsp.project import ProjectIndex, find_root, module_name
from ddp_lsp.project.index import CACHE_VERSION, default_cache_dir

from .helpers import FIXTURES, build


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("main.py", ("main", False)),
        ("util/misc.py", ("util.misc", False)),
        ("util/__init__.py", ("util", True)),
        ("src/trainer/core/base.py", ("trainer.core.base", False)),
        ("src/trainer/__init__.py", ("trainer", True)),
        ("tools/train.py", ("tools.train", False)),
    ],
)
def test_module_names(rel: str, expected: tuple[str, bool]) -> None:
    assert module_name(rel) == expected


def test_root_is_the_nearest_marker() -> None:
    deep = FIXTURES / "trainer" / "src" / "trainer" / "core" / "base.py"
    assert find_root([deep]) == (FIXTURES / "trainer").resolve()
    assert find_root([FIXTURES / "deit" / "engine.py"]) == (FIXTURES / "deit").resolve()


def test_files_and_modules_of_a_project() -> None:
    index = build(FIXTURES / "deit")
    assert sorted(index.modules) == ["engine", "main", "tools_unused", "util", "util.misc"]
    s = index.modules["util"]
    assert s.is_package and s.path == "util/__init__.py"
    assert index.lines() > 50
    names = {fi.qualname for fi in index.modules["util.misc"].facts.functions}
    assert {"save_on_master", "all_reduce_mean", "init_distributed_mode"} <= names


def test_excludes(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    for rel in ("a.py", "build/b.py", ".venv/c.py", "gen/d.py", "pkg/e.py"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n")
    index = ProjectIndex(tmp_path, Settings(exclude=("gen",)), cache_dir=False).build()
    assert sorted(index.modules) == ["a", "pkg.e"]


def test_disk_cache_round_trip_and_corrupt_entries(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = build(FIXTURES / "deit", cache_dir=cache)
    assert first.cache.misses == 5 and first.cache.hits == 0
    entries = sorted(cache.rglob("*.json"))
    assert len(entries) == 5
    second = build(FIXTURES / "deit", cache_dir=cache)
    assert second.cache.hits == 5 and second.cache.misses == 0
    assert second.modules["util.misc"] == first.modules["util.misc"]
    # A truncated entry and one of another version are misses, re-written, never errors.
    entries[0].write_bytes(entries[0].read_bytes()[:10])
    import json

    entry = json.loads(entries[1].read_bytes())
    entries[1].write_text(json.dumps({**entry, "version": CACHE_VERSION + 1}))
    third = build(FIXTURES / "deit", cache_dir=cache)
    assert third.cache.misses == 2 and third.cache.hits == 3
    assert sorted(third.modules) == sorted(first.modules)
    assert not [p for p in cache.rglob("*") if p.name.startswith(".tmp-")]


def test_default_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from ddp_lsp import __version__

    expected = tmp_path / "ddp-lsp" / "index" / f"v{CACHE_VERSION}-{__version__}"
    assert default_cache_dir() == expected
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert str(default_cache_dir()).startswith(os.path.expanduser("~"))


def test_update_reparses_only_the_changed_file(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "a.py").write_text("def f():\n    pass\n")
    index = ProjectIndex(tmp_path, cache_dir=False).build()
    old = index.modules["a"]
    same = index.update(tmp_path / "a.py", "def f():\n    pass\n")
    assert same is old  # unchanged content: the cached summary
    new = index.update(tmp_path / "a.py", "def g():\n    pass\n")
    assert new is not None and new is index.modules["a"]
    assert [fi.qualname for fi in new.facts.functions] == ["g"]
    # Half-typed: the last summary that parsed stays; a file broken from the start is empty.
    assert index.update(tmp_path / "a.py", "def g(:\n") is new
    broken = index.update(tmp_path / "b.py", "def g(:\n")
    assert broken is not None and broken.syntax_error and not broken.facts.functions
    index.update(tmp_path / "a.py", None)
    assert "a" not in index.modules


def test_rank_model_is_part_of_the_key(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    src = "def save(x):\n    if am_leader():\n        write(x)\n"
    (tmp_path / "a.py").write_text(src)
    cache = tmp_path / "cache"
    plain = ProjectIndex(tmp_path, cache_dir=cache).build()
    custom = ProjectIndex(tmp_path, Settings(rank_guard_names=("am_leader",)), cache_dir=cache)
    custom.build()
    assert custom.cache.misses == 1
    props = {fi.qualname: fi.props for fi in custom.modules["a"].facts.functions}
    plain_props = {fi.qualname: fi.props for fi in plain.modules["a"].facts.functions}
    assert "guards_itself" in props["save"] and "guards_itself" not in plain_props["save"]


@pytest.mark.parametrize("name", ["deit", "resume", "trainer", "shared"])
def test_summary_facts_are_the_cores(name: str) -> None:
    # The index runs the core's whole-module extraction (which also keeps `module.f(x)` call
    # sites); its ChunkFacts must stay exactly what facts.extract gives for the whole file,
    # knowing the rank-0 predicates the project defines (trainer/dist.py's is_leader).
    import ast

    from ddp_lsp.core import facts as fact_model

    index = build(FIXTURES / name)
    ranks = index.ranks.with_extra(predicates=index.project_predicates)
    for s in index.summaries.values():
        text = (index.root / s.path).read_text()
        assert s.facts == fact_model.extract(ast.parse(text), None, ranks), s.path


def test_dotted_call_sites_are_kept() -> None:
    index = build(FIXTURES / "deit")
    sites = {cs.callee: cs.args for cs in index.modules["main"].dotted_sites}
    assert sites["utils.init_distributed_mode"] == ((0, "args"),)


def test_equal_facts_are_shared_between_files(tmp_path: Path) -> None:
    # Memory: files spelling the same names and calls hold one copy of them.
    (tmp_path / ".git").mkdir()
    src = "import torch.distributed as dist\n\ndef sync(model):\n    dist.barrier()\n"
    (tmp_path / "a.py").write_text(src)
    (tmp_path / "b.py").write_text("# another file\n" + src)
    index = build(tmp_path)
    fa = index.modules["a"].facts.functions[0]
    fb = index.modules["b"].facts.functions[0]
    assert fa.calls is fb.calls and fa.params is fb.params
    assert index.modules["a"].facts.imports is index.modules["b"].facts.imports


def test_sharing_keeps_what_is_already_shared() -> None:
    # A summary's parts that already are the shared ones (identifiers come interned from the
    # parser) are kept, not copied: the copy was built and the original freed, per object.
    from ddp_lsp.project.sharing import Sharer as _Sharer
    from ddp_lsp.project.summary import summarise

    src = "import torch.distributed as dist\n\ndef sync(model):\n    dist.barrier()\n"
    sharer = _Sharer()
    first = summarise("a.py", src, "ka", Settings().rank_model)
    shared = sharer(first)
    assert shared == first
    assert sharer(shared) is shared  # nothing left to share: the same object
    pair = (sys.intern("model"), sys.intern("optimizer"))
    assert sharer(pair) is pair
    second = sharer(summarise("b.py", src, "kb", Settings().rank_model))
    assert second.facts.functions[0] is shared.facts.functions[0]
    assert second.facts.imports is shared.facts.imports


def test_a_files_own_tuples_of_facts_are_not_kept_whole() -> None:
    # A file's bindings, functions and call sites, as a tuple, never equal another file's:
    # looking one up hashed every fact in it (gate sites and all) for nothing. Its items are
    # shared; the tuple is neither looked up nor kept in the memo.
    from ddp_lsp.project.sharing import Sharer as _Sharer
    from ddp_lsp.project.summary import summarise

    src = "import torch.distributed as dist\n\ndef sync(model):\n    m = dist.new_group()\n    sync(m)\n"
    sharer = _Sharer()
    first = sharer(summarise("a.py", src, "ka", Settings().rank_model))
    second = sharer(summarise("b.py", "# b\n" + src, "kb", Settings().rank_model))
    for facts in (first.facts, second.facts):
        for name in ("bindings", "functions", "call_sites"):
            value = getattr(facts, name)
            assert value and all(id(v) != id(value) for v in sharer.memo.values()), name
    assert second.facts.call_sites[0] is first.facts.call_sites[0]
    assert second.facts.bindings[0] is first.facts.bindings[0]
    assert sharer(second) is second


def test_home_directory_is_never_a_project_root(tmp_path: Path, monkeypatch) -> None:
    # A dotfiles repository: $HOME/.git. A loose script under it is not a 100k-file project.
    from ddp_lsp.project.index import find_root, is_project_root

    home = tmp_path / "home"
    (home / ".git").mkdir(parents=True)
    (home / "scratch").mkdir()
    (home / "work" / "proj").mkdir(parents=True)
    (home / "work" / "proj" / "pyproject.toml").write_text("")
    monkeypatch.setenv("HOME", str(home))
    assert not is_project_root(home)
    assert not is_project_root(home / "scratch")
    assert find_root([home / "scratch" / "t.py"]) == home / "scratch"
    assert find_root([home / "work" / "proj" / "t.py"]) == home / "work" / "proj"


def test_half_typed_code_keeps_what_the_file_said(tmp_path: Path) -> None:
    root = tmp_path / "deit"
    shutil.copytree(FIXTURES / "deit", root)
    index = ProjectIndex(root, cache_dir=False).build()
    main = (root / "main.py").read_text()
    before = index.summaries["main.py"]
    # A pause in the middle of a statement: the facts of main.py (and so engine.py's DDP101)
    # must not vanish until the next pause.
    index.update(root / "main.py", main.replace("lr=1e-3)", "lr="))
    assert index.summaries["main.py"] is before
    unwrapped = main.replace("DistributedDataParallel(model, device_ids=[args.gpu])", "model")
    index.update(root / "main.py", unwrapped)
    assert index.summaries["main.py"] is not before


def test_editor_text_is_not_written_to_the_disk_cache(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "a.py").write_text("import torch.distributed as dist\n")
    cache = tmp_path / "cache"
    index = ProjectIndex(tmp_path, cache_dir=cache).build()
    entries = lambda: sorted(p.name for p in cache.rglob("*.json"))  # noqa: E731
    on_disk = entries()
    assert len(on_disk) == 1
    for i in range(5):
        index.update(tmp_path / "a.py", f"import torch.distributed as dist\nx = {i}\n")
    assert entries() == on_disk
    assert index.summaries["a.py"].lines == 3


def test_large_files_are_left_out(tmp_path: Path) -> None:
    from ddp_lsp.project.index import MAX_FILE_BYTES

    (tmp_path / ".git").mkdir()
    (tmp_path / "data.py").write_text("X = [\n" + "0,\n" * (MAX_FILE_BYTES // 3) + "]\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    index = ProjectIndex(tmp_path, cache_dir=False).build()
    assert set(index.summaries) == {"a.py"}


def test_old_cache_entries_are_pruned_once_a_day(tmp_path: Path) -> None:
    import time

    from ddp_lsp.project.index import SummaryCache

    cache = SummaryCache(tmp_path)
    old, new = tmp_path / "ab" / "old.json", tmp_path / "cd" / "new.json"
    for p in (old, new):
        p.parent.mkdir()
        p.write_bytes(b"x")
    long_ago = time.time() - 40 * 86400
    os.utime(old, (long_ago, long_ago))
    assert cache.prune() == 1
    assert not old.exists() and new.exists()
    os.utime(new, (long_ago, long_ago))
    assert cache.prune() == 0  # pruned today already
    assert new.exists()


def test_a_project_nested_in_the_indexed_folder_names_modules_from_its_own_root(
    tmp_path: Path,
) -> None:
    # The server indexes workspace folders; the CLI the nearest project root. A workspace
    # holding the trainer project in tr/ must see the same modules (and facts) as the CLI.
    from ddp_lsp.project import compute

    shutil.copytree(FIXTURES / "trainer", tmp_path / "ws" / "tr")
    (tmp_path / "ws" / ".git").mkdir()
    from_ws = compute(build(tmp_path / "ws"))
    from_tr = compute(build(tmp_path / "ws" / "tr"))
    rel = "src/trainer/core/ddp_trainer.py"
    a, b = from_ws.for_path(f"tr/{rel}"), from_tr.for_path(rel)
    assert a is not None and b is not None and a.module == b.module == "trainer.core.ddp_trainer"
    assert a.callee_props.keys() == b.callee_props.keys() and "is_leader" in a.callee_props
    assert a.extra_kinds.keys() == b.extra_kinds.keys()


def test_a_setup_module_inside_a_package_is_not_a_nested_project(tmp_path: Path) -> None:
    # `pkg/eval/setup.py` beside `pkg/eval/__init__.py` is a module (`from pkg.eval.setup
    # import build`), not the build script of a project rooted at pkg/eval/: the modules there
    # keep their package names and their imports of each other resolve.
    from ddp_lsp.project import compute

    root = tmp_path / "proj"
    (root / "pkg" / "eval").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "eval" / "__init__.py").write_text("")
    (root / "pkg" / "eval" / "setup.py").write_text(
        "import torch.distributed as dist\n\ndef build():\n    dist.init_process_group('nccl')\n"
    )
    (root / "pkg" / "eval" / "run.py").write_text(
        "from pkg.eval.setup import build\n\ndef main():\n    build()\n"
    )
    # A project nested in the root (its own setup.py, no __init__.py) still is one.
    (root / "tools" / "sub").mkdir(parents=True)
    (root / "tools" / "sub" / "setup.py").write_text("")
    (root / "tools" / "sub" / "mod.py").write_text("x = 1\n")
    facts = compute(build(root))
    run = facts.for_path("pkg/eval/run.py")
    assert run is not None and run.module == "pkg.eval.run"
    assert "init_process_group" in run.callee_props["build"].props
    mod = facts.for_path("tools/sub/mod.py")
    assert mod is None or mod.module == "mod"
    index = build(root)
    assert {s.module for s in index.modules.values()} >= {"pkg.eval.setup", "mod"}


@pytest.mark.parametrize(
    ("platform", "env", "expected"),
    [
        ("linux", {}, ".cache"),
        ("darwin", {}, "Library/Caches"),
        ("win32", {"LOCALAPPDATA": "C:/Users/u/AppData/Local"}, "C:/Users/u/AppData/Local"),
    ],
)
def test_cache_dir_without_xdg_is_the_platforms(
    monkeypatch: pytest.MonkeyPatch, platform: str, env: dict[str, str], expected: str
) -> None:
    from ddp_lsp.project import index as project_index

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(project_index.sys, "platform", platform)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert expected in project_index.default_cache_dir().as_posix()
