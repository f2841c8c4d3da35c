"""One file discovery: ``ddp-lsp check``'s walk, the server's workspace pull and the project index
list the same files of a tree with excluded, hidden and virtual-environment directories,
symlinks, a nested project and odd files."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from ddp_lsp.cli import collect
from ddp_lsp.cli.settings import SettingsResolver
from ddp_lsp.config import Settings, settings_from_pyproject
from ddp_lsp.lsp import workspace
from ddp_lsp.lsp.state import ServerState
from ddp_lsp.project import ProjectIndex
from ddp_lsp.project.discover import discover, is_discovered, nearest_settings
from ddp_lsp.reporters import FileReport

ROOT_CONFIG = '[tool.ddp-lsp]\nexclude = ["gen", "scripts/skip_*.py"]\n'
NESTED_CONFIG = '[tool.ddp-lsp]\nexclude = ["local_gen"]\n'

# What every walker must list (relative to the root), and nothing else.
EXPECTED = {
    "a.py",
    "a_stub.pyi",
    "dangling.py",  # a broken link: listed; its reader says "broken symlink"
    "dir.py/inner.py",  # a directory named like a module is walked, not read
    "fifo.py",  # listed; its reader refuses it without opening it
    "link.py",  # a symlinked file is listed
    "loop.py",
    "pkg/__init__.py",
    "pkg/mod.py",
    "scripts/keep.py",
    "sub/ok.py",
    "weird name.py",
    "é.py",
}


def _tree(root: Path) -> None:
    def put(rel: str, text: str = "x = 1\n") -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    put("pyproject.toml", ROOT_CONFIG)
    for rel in sorted(EXPECTED - {"dangling.py", "fifo.py", "link.py", "loop.py"}):
        put(rel)
    # Never walked: default names, hidden directories, virtual environments, egg-info.
    for rel in (
        ".git/hooks/pre.py",
        ".hidden/h.py",
        ".ipynb_checkpoints/nb-checkpoint.py",
        ".venv/lib/site.py",
        "venv/lib/v.py",
        "env/e.py",
        "build/lib/b.py",
        "node_modules/n/n.py",
        "__pycache__/c.py",
        "proj.egg-info/e.py",
        "pkg/__pycache__/m.py",
    ):
        put(rel)
    # Excluded by the root's patterns, and by the nested project's own.
    put("gen/g.py")
    put("pkg/gen/g.py")
    put("scripts/skip_me.py")
    put("sub/pyproject.toml", NESTED_CONFIG)
    put("sub/local_gen/x.py")
    # Not Python sources.
    for rel in ("notes.txt", "Makefile", "x.pyc", "tool.pyw", "pkg/data.json"):
        put(rel)
    # Symlinks: a directory link is never followed (it would list pkg twice, or loop).
    (root / "linked").symlink_to(root / "pkg", target_is_directory=True)
    (root / "up").symlink_to(root, target_is_directory=True)
    (root / "link.py").symlink_to(root / "a.py")
    (root / "dangling.py").symlink_to(root / "missing.py")
    (root / "loop.py").symlink_to("loop.py")
    os.mkfifo(root / "fifo.py")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "sock.txt"))  # an odd file that is not a Python name
    finally:
        sock.close()


def _rel(root: Path, paths: object) -> set[str]:
    return {p.relative_to(root).as_posix() for p in paths}  # type: ignore[attr-defined]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = (tmp_path / "proj").resolve()
    root.mkdir()
    _tree(root)
    return root


def test_check_workspace_and_index_list_the_same_files(tree: Path) -> None:
    problems: list[FileReport] = []
    check = _rel(tree, collect._walk(tree, SettingsResolver(None, {}, tree), problems))
    state = ServerState(lambda uri, version, diags: None, lambda message, is_error: None)
    state.config.folders = [(tree.as_uri(), tree)]
    pulled = _rel(tree, (p for p, _ in workspace.python_files(state, tree)))
    settings = settings_from_pyproject(tree / "pyproject.toml")
    indexed = _rel(tree, ProjectIndex(tree, settings, cache_dir=False).files())

    assert check == EXPECTED and not problems
    assert pulled == check
    assert indexed == {p for p in check if p.endswith(".py")}  # stubs are not modules


def test_is_discovered_agrees_with_the_walk(tree: Path) -> None:
    settings = settings_from_pyproject(tree / "pyproject.toml")
    at = nearest_settings(tree, settings)
    walked = _rel(tree, discover(tree, at))
    every = {
        p.relative_to(tree).as_posix() for p in tree.rglob("*") if not p.is_dir() or p.is_symlink()
    }
    named = {rel for rel in every if is_discovered(tree / rel, tree, at)}
    # The same answer for every name the walk can reach (linked/ and up/ are links, not walked).
    reachable = {rel for rel in named if not rel.startswith(("linked/", "up/"))}
    assert reachable == walked == EXPECTED


def test_the_named_root_is_walked_even_when_its_name_is_excluded(tree: Path) -> None:
    # ``ddp-lsp check build/``: what is named explicitly is checked.
    assert _rel(tree, discover(tree / "build", Settings())) == {"build/lib/b.py"}
