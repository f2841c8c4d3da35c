"""Editor settings merged with ``[tool.ddp-lsp]`` from the nearest pyproject.toml.

Precedence: defaults < editor settings < the project's pyproject.toml. The project file is
what the whole team (and the CI running ``ddp-lsp check``) agrees on, so an editor that sends
every setting with its default value (VS Code does) cannot silently override it; editor
settings fill in what the project leaves unset.

Every key is validated on its own: one invalid value is reported (``window/showMessage``
naming the key) and dropped, so it falls back to its default while every other key still
applies. Editor-only keys (``enable``, ``preflight.python``, ``trace.server``) are read here
and never reach :class:`~ddp_lsp.core.settings.Settings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddp_lsp.config import Settings

# ``ddp_lsp.config`` (and tomllib) load on first use: nothing here runs before ``initialize``
# unless the client sends initializationOptions, and startup must stay as fast as bare pygls.
SECTION = "ddp-lsp"


def _validate(key: str, value: Any, source: str) -> str | None:
    """None if ``key = value`` is a valid analysis setting, else the message naming it."""
    from ddp_lsp.config import ConfigError, settings_from_mapping

    try:
        settings_from_mapping({key: value}, source)
    except ConfigError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class EditorOptions:
    """The editor settings that are not analysis settings."""

    enable: bool = True
    preflight_python: str | None = None
    rank_hints: str = "all"  # rank view inlay hints: "all", "collectives" or "off"
    rank_tokens: bool = False  # rank view semantic tokens (see lsp/rankview.py)


@dataclass(frozen=True)
class EditorSettings:
    """One scope's ``ddp-lsp`` section, validated: analysis keys plus editor-only options."""

    analysis: tuple[tuple[str, Any], ...] = ()  # (key, value) pairs merge_settings accepts
    options: EditorOptions = EditorOptions()
    errors: tuple[str, ...] = ()


def section_of(raw: Any) -> Mapping[str, Any]:
    """The ``ddp-lsp`` section from what a client sent: the section itself or a wrapper."""
    if not isinstance(raw, Mapping):
        return {}
    inner = raw.get(SECTION)
    if isinstance(inner, Mapping):
        return inner
    return raw


def parse_editor_settings(raw: Any, source: str = "editor settings") -> EditorSettings:
    if raw is None:
        return EditorSettings()
    if not isinstance(raw, Mapping):
        return EditorSettings(
            errors=(f"{source}: expected an object of ddp-lsp settings, got {type(raw).__name__}",)
        )
    data = section_of(raw)
    analysis: list[tuple[str, Any]] = []
    errors: list[str] = []
    enable = True
    python: str | None = None
    rank_view: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(key, str) and (key == "rankView" or key.startswith("rankView.")):
            err = _rank_view(key, value, source, rank_view)
            if err:
                errors.append(err)
            continue
        if key == "enable":
            if isinstance(value, bool):
                enable = value
            else:
                errors.append(f"{source}: 'enable' must be true or false, got {value!r}")
            continue
        if key == "preflight":
            python, err = _preflight_python(value, source)
            if err:
                errors.append(err)
            continue
        if key in ("trace", "server", "interpreter", "preflight.python", "trace.server"):
            if key == "preflight.python":
                python, err = _preflight_python({"python": value}, source)
                if err:
                    errors.append(err)
            continue
        err = _validate(str(key), value, source)  # each key alone: one bad key costs one key
        if err is not None:
            errors.append(err)
            continue
        analysis.append((str(key), value))
    options = EditorOptions(enable, python, **rank_view)
    return EditorSettings(tuple(analysis), options, tuple(errors))


def _rank_view(key: str, value: Any, source: str, out: dict[str, Any]) -> str | None:
    """``rankView: {hints, semanticTokens}`` (or the dotted keys) into ``out``."""
    if key == "rankView":
        if not isinstance(value, Mapping):
            return f'{source}: \'rankView\' must be an object like {{"hints": "all"}}'
        items = [(f"rankView.{k}", v) for k, v in value.items()]
    else:
        items = [(key, value)]
    for name, v in items:
        if name == "rankView.hints":
            if v not in ("all", "collectives", "off"):
                return (
                    f'{source}: \'rankView.hints\' must be "all", "collectives" or "off", got {v!r}'
                )
            out["rank_hints"] = v
        elif name == "rankView.semanticTokens":
            if not isinstance(v, bool):
                return f"{source}: 'rankView.semanticTokens' must be true or false, got {v!r}"
            out["rank_tokens"] = v
        else:
            return f"{source}: unknown setting {name!r} (rankView has hints and semanticTokens)"
    return None


def _preflight_python(value: Any, source: str) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    if not isinstance(value, Mapping):
        return None, f'{source}: \'preflight\' must be an object like {{"python": "..."}}'
    python = value.get("python")
    if python is None or python == "":
        return None, None
    if not isinstance(python, str):
        return (
            None,
            f"{source}: 'preflight.python' must be a path to an interpreter, got {python!r}",
        )
    return python, None


@dataclass
class _ProjectFile:
    mtime_ns: int
    table: tuple[tuple[str, Any], ...]
    errors: tuple[str, ...]


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


@dataclass
class ProjectConfigs:
    """``[tool.ddp-lsp]`` tables by pyproject.toml path, re-read when the file changes.

    Which pyproject.toml applies to a directory is cached; so that a client without a file
    watcher still sees a pyproject.toml created (or given a ``[tool.ddp-lsp]`` table) between
    a file and the one that applied so far, every candidate path on the way up is remembered
    with its mtime (-1: absent), and :meth:`changed` stats them all again.
    """

    _by_dir: dict[Path, Path | None] = field(default_factory=dict)
    _files: dict[Path, _ProjectFile] = field(default_factory=dict)
    _candidates: dict[Path, int] = field(default_factory=dict)

    def pyproject_for(self, path: Path) -> Path | None:
        directory = path.parent
        if directory not in self._by_dir:
            from ddp_lsp.config import find_pyproject

            found = find_pyproject(path)
            self._by_dir[directory] = found
            self._remember_candidates(directory, found)
        return self._by_dir[directory]

    def _remember_candidates(self, directory: Path, found: Path | None) -> None:
        try:
            here = directory.resolve()
        except OSError:
            return
        for d in (here, *here.parents):
            candidate = d / "pyproject.toml"
            if candidate in self._candidates:
                break  # the rest of the way up was remembered for another directory
            self._candidates[candidate] = _mtime(candidate)
            if candidate == found:
                break

    def table(self, pyproject: Path) -> _ProjectFile:
        mtime = _mtime(pyproject)
        cached = self._files.get(pyproject)
        if cached is not None and cached.mtime_ns == mtime:
            return cached
        self._files[pyproject] = loaded = _load_table(pyproject, mtime)
        return loaded

    def changed(self) -> bool:
        """True when a known pyproject.toml changed on disk, or one appeared (or changed)
        where a file's search passed by (for clients that cannot watch files)."""
        for path, cached in self._files.items():
            if _mtime(path) != cached.mtime_ns:
                return True
        return any(_mtime(path) != mtime for path, mtime in self._candidates.items())

    def forget(self) -> None:
        """Forget everything: a pyproject.toml was created, changed or deleted."""
        self._by_dir.clear()
        self._files.clear()
        self._candidates.clear()


def _load_table(path: Path, mtime: int) -> _ProjectFile:
    from ddp_lsp.config import ConfigFileError, parse_pyproject, read_pyproject, section_of

    where = f"{path} [tool.{SECTION}]"
    try:  # file:line:col messages, shown with showMessage; the defaults apply
        text = read_pyproject(path)
        table = section_of(path, text, parse_pyproject(path, text))
    except ConfigFileError as exc:
        return _ProjectFile(mtime, (), (str(exc),))
    if table is None:
        return _ProjectFile(mtime, (), ())
    items: list[tuple[str, Any]] = []
    errors: list[str] = []
    for key, value in table.items():
        err = _validate(str(key), value, where)
        if err is not None:
            errors.append(err)
            continue
        items.append((str(key), value))
    return _ProjectFile(mtime, tuple(items), tuple(errors))


def effective_settings(
    editor: EditorSettings, projects: ProjectConfigs, path: Path | None
) -> tuple[Settings, tuple[str, ...]]:
    """Settings for one file and the messages for every invalid key met on the way."""
    from ddp_lsp.config import merge_settings, settings_from_mapping

    settings = settings_from_mapping(dict(editor.analysis), "editor settings")
    errors = list(editor.errors)
    if path is not None:
        pyproject = projects.pyproject_for(path)
        if pyproject is not None:
            loaded = projects.table(pyproject)
            errors.extend(loaded.errors)
            settings = merge_settings(settings, dict(loaded.table), str(pyproject))
    return settings, tuple(errors)


def is_pyproject(path: str) -> bool:
    return os.path.basename(path) == "pyproject.toml"
