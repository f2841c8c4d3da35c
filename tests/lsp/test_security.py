"""Opening a repository never runs its code.

Each test plants code in the workspace that writes a marker file when it is imported, then
starts the server the way an editor does: with the repository as its working directory
(Helix, Neovim and LSP4IJ all start servers in the project root), using the command of a config
we ship. The planted modules are *stealthy*, as an attacker's would be: after writing the marker
they hand over to the real module, so the server keeps working and only the marker tells. The
test waits for the cross-file DDP101 in ``engine.py``, which arrives only once the project
indexer (a child process) has built the index, then asserts that no marker was written.

- a ``struct.py`` (and a ``__future__.py``) in the workspace root: shadows the standard library
  for any interpreter whose ``sys.path`` starts with the working directory (``python -m``);
- a ``ddp_lsp/`` package in the workspace root: shadows ddp-lsp itself (``python -m ddp_lsp``,
  ``python -m ddp_lsp.lsp.indexer``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.editors.handshake import REPO, StdioSession

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10 only
    import tomli as tomllib

FIXTURE = REPO / "tests" / "project" / "fixtures" / "deit"

# A module that records that it ran, then becomes the module it shadows (found on sys.path
# without the planted folder), so that nothing else visibly breaks.
STEALTH_MODULE = """\
import os as _os, sys as _sys
with open({marker!r}, "a") as _f:
    _f.write("{name} imported by pid %d argv %r\\n" % (_os.getpid(), _sys.argv))
_here = _os.path.dirname(_os.path.abspath(__file__))
_saved = list(_sys.path)
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
del _sys.modules[__name__]
import importlib as _importlib
_real = _importlib.import_module(__name__)
_sys.path[:] = _saved
_sys.modules[__name__] = _real
globals().update({{k: v for k, v in vars(_real).items() if k not in ("__file__", "__name__")}})
"""

# A package's __init__: the same, and its submodules then come from the real package.
STEALTH_PACKAGE = """\
import os as _os, sys as _sys
with open({marker!r}, "a") as _f:
    _f.write("{name} imported by pid %d argv %r\\n" % (_os.getpid(), _sys.argv))
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
_saved = list(_sys.path)
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _root]
del _sys.modules[__name__]
import importlib as _importlib
_real = _importlib.import_module(__name__)
_sys.path[:] = _saved
_sys.modules[__name__] = _real
__path__ = _real.__path__
globals().update({{k: v for k, v in vars(_real).items() if k not in ("__file__", "__name__")}})
"""


def plant_module(folder: Path, name: str, marker: Path) -> None:
    (folder / f"{name}.py").write_text(STEALTH_MODULE.format(marker=str(marker), name=name))


def plant_package(folder: Path, name: str, marker: Path) -> None:
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(
        STEALTH_PACKAGE.format(marker=str(marker), name=name)
    )


def helix_command() -> list[str]:
    languages = tomllib.loads((REPO / "editors" / "helix" / "languages.toml").read_text())
    entry = languages["language-server"]["ddp-lsp"]
    return [entry["command"], *entry["args"]]


def console_command() -> list[str]:
    # Neovim's configs (editors/neovim) start the console script.
    script = Path(sys.executable).parent / "ddp-lsp"
    if not script.exists():
        pytest.skip("no ddp-lsp console script next to the test interpreter")
    return [str(script), "serve"]


COMMANDS = {"helix": helix_command, "console-script": console_command}


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(FIXTURE, root)
    return root


def _serve_and_wait_for_index(argv: list[str], root: Path, cache: Path) -> StdioSession:
    """Starts the server in ``root``, opens engine.py and waits for the cross-file DDP101."""
    from tests.editors.handshake import activated_env, initialize

    env = {**activated_env(), "XDG_CACHE_HOME": str(cache)}
    session = StdioSession(argv, cwd=root, env=env)
    initialize(session, root)
    engine = root / "engine.py"
    uri = engine.as_uri()
    session.notify(
        "textDocument/didOpen",
        {
            "textDocument": {
                "uri": uri,
                "languageId": "python",
                "version": 1,
                "text": engine.read_text(),
            }
        },
    )
    session.wait_notification(
        "textDocument/publishDiagnostics",
        lambda p: p["uri"] == uri and any(d.get("code") == "DDP101" for d in p["diagnostics"]),
    )
    return session


def _close(session: StdioSession) -> None:
    code = session.close()
    assert code == 0, session.stderr


def _ran(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""


@pytest.mark.parametrize("how", sorted(COMMANDS))
def test_planted_stdlib_module_in_the_workspace_is_not_imported(how: str, tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    marker = tmp_path / "struct-ran.txt"
    plant_module(root, "struct", marker)  # pickle, the indexer's pipe framing, the cache...
    plant_module(root, "__future__", marker)  # every ddp_lsp module starts with it
    session = _serve_and_wait_for_index(COMMANDS[how](), root, tmp_path / "cache")
    try:
        assert _ran(marker) == "", "workspace code ran in the server or its indexer"
    finally:
        _close(session)
    assert _ran(marker) == ""


@pytest.mark.parametrize("how", sorted(COMMANDS))
def test_planted_ddp_lsp_package_in_the_workspace_is_not_imported(how: str, tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    marker = tmp_path / "package-ran.txt"
    plant_package(root, "ddp_lsp", marker)
    (root / "ddp_lsp" / "lsp").mkdir()
    (root / "ddp_lsp" / "lsp" / "__init__.py").write_text("")
    plant_module(root / "ddp_lsp" / "lsp", "indexer", marker)
    session = _serve_and_wait_for_index(COMMANDS[how](), root, tmp_path / "cache")
    try:
        assert _ran(marker) == "", "workspace code ran in the server or its indexer"
    finally:
        _close(session)
    assert _ran(marker) == ""


def test_planted_modules_do_not_run_under_python_m_in_the_workspace(tmp_path: Path) -> None:
    """``python -m ddp_lsp check`` typed in the repository (the CLI, not isolated by its
    caller): once ddp_lsp/__main__.py runs, nothing more is imported from the working
    directory. Python resolves ``ddp_lsp`` itself before any of our code runs, which is why the
    shipped editor configs use ``-I``; this covers every module the CLI imports after that."""
    import subprocess

    from tests.editors.handshake import activated_env

    root = _workspace(tmp_path)
    marker = tmp_path / "cli-ran.txt"
    for name in ("__future__", "ast", "json", "struct", "tokenize", "dataclasses", "pathlib"):
        plant_module(root, name, marker)
    env: dict[str, Any] = {**activated_env(), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "ddp_lsp", "check", "engine.py", "--select", "DDP101"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert _ran(marker) == "", "workspace code ran in `python -m ddp_lsp check`"
    # The cross-file finding: the project index (and its cache) worked without them.
    assert "DDP101" in proc.stdout, proc.stdout + proc.stderr
