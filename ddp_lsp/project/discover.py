"""Which Python files a tree holds: one walk for ``ddp-lsp check``, the server's workspace pull
and the project index, so that the three never disagree on which files exist.

The rules, in order:

- directories named in :data:`~ddp_lsp.config.DEFAULT_EXCLUDE` (``.git``, ``venv``, ``build``,
  ``site-packages``, ...), ``*.egg-info`` and hidden directories (``.mypy_cache``,
  ``.ipynb_checkpoints``, an editor's ``.history``) are not entered; neither is a directory
  that an ``exclude`` pattern matches. The root itself is always walked: ``ddp-lsp check
  build/`` checks what it was explicitly given;
- symlinked directories are not followed (a link to ``/`` or a loop would walk forever, and
  a link inside the tree would list its files twice); a symlinked *file* is listed, and its
  reader says what it is when it is not a regular file (a dangling link, a loop, a FIFO);
- files ending in ``.py`` or ``.pyi`` are listed unless an ``exclude`` pattern matches them.
  The project index keeps only the ``.py`` modules (a stub has no bodies to summarise).

``exclude`` patterns match as :meth:`Settings.is_excluded` matches them (the whole path
relative to the settings' root, a prefix of it, or any component), but only the patterns: the
default names are pruned here by entry name, below the root.

Settings may differ per directory (the CLI and the server honour the nearest pyproject.toml):
``settings`` is then a function from a directory to (its settings, the root its ``exclude``
patterns are relative to); :func:`nearest_settings` makes one from a project's own settings
and the pyproject.toml files of nested projects below it.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from ddp_lsp.config import DEFAULT_EXCLUDE, Settings, settings_from_pyproject

PYTHON_SUFFIXES = (".py", ".pyi")

SettingsAt = Callable[[Path], tuple[Settings, Path]]


def discover(
    root: Path,
    settings: Settings | SettingsAt,
    onerror: Callable[[OSError], None] | None = None,
) -> Iterator[Path]:
    """The Python files under ``root`` in a stable order (sorted per directory, depth first).
    ``onerror`` hears about each directory that cannot be listed (default: skipped)."""
    at: SettingsAt = settings if callable(settings) else _fixed(settings, root)
    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror):
        here = Path(dirpath)
        current, base = at(here)
        dirnames[:] = [
            name
            for name in sorted(dirnames)
            if not pruned_dir(name) and not pattern_excluded(here / name, current, base)
        ]  # os.walk descends only into what is left
        for name in sorted(filenames):
            if name.endswith(PYTHON_SUFFIXES):
                path = here / name
                if not pattern_excluded(path, current, base):
                    yield path


def nearest_settings(root: Path, settings: Settings) -> SettingsAt:
    """Per directory under ``root``: ``settings`` (relative to ``root``), or those of a nested
    project's pyproject.toml with a ``[tool.ddp-lsp]`` table (relative to its directory), as
    ``ddp-lsp check`` and the server resolve them. A nested file that cannot be read or is
    invalid leaves ``settings`` in force (the check reports it; the walk must not stop)."""
    from ddp_lsp.config import ConfigError, find_pyproject

    top = root.resolve()
    loaded: dict[Path, tuple[Settings, Path]] = {}

    def at(directory: Path) -> tuple[Settings, Path]:
        found = find_pyproject(directory)
        if found is None or top not in found.parent.parents:
            return settings, root
        hit = loaded.get(found)
        if hit is None:
            try:
                hit = (settings_from_pyproject(found), found.parent)
            except (ConfigError, OSError):
                hit = (settings, root)
            loaded[found] = hit
        return hit

    return at


def is_discovered(path: Path, root: Path, settings: Settings | SettingsAt) -> bool:
    """Whether :func:`discover` (``root``, ``settings``) lists ``path``, without walking: for
    a file the walk has not met (a file event, an editor's new buffer). Symlinked directories
    on the way are not checked (the answer is about names)."""
    if not path.name.endswith(PYTHON_SUFFIXES):
        return False
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    if any(pruned_dir(part) for part in rel.parts[:-1]):
        return False
    at: SettingsAt = settings if callable(settings) else _fixed(settings, root)
    here = root
    for part in rel.parts:  # each entry judged by its directory's settings, as the walk does
        current, base = at(here)
        here = here / part
        if pattern_excluded(here, current, base):
            return False
    return True


def pruned_dir(name: str) -> bool:
    """A directory never entered below the root, whatever the settings say."""
    return name in DEFAULT_EXCLUDE or name.endswith(".egg-info") or name.startswith(".")


def pattern_excluded(path: Path, settings: Settings, root: Path) -> bool:
    """Whether one of the ``exclude`` patterns matches ``path`` (relative to ``root``; a path
    outside it is matched as written relative to it)."""
    if not settings.exclude:
        return False
    try:
        rel = path.relative_to(root)
    except ValueError:  # reached through a symlink, or a file named outside the root
        full = os.path.realpath(path)
        try:
            rel = Path(full).relative_to(root)
        except ValueError:
            rel = Path(os.path.relpath(full, root))
    text = rel.as_posix()
    for pattern in settings.exclude:
        pat = pattern.rstrip("/")
        if fnmatch.fnmatch(text, pat) or fnmatch.fnmatch(text, f"{pat}/*"):
            return True
        if any(fnmatch.fnmatch(part, pat) for part in rel.parts):
            return True
    return False


def _fixed(settings: Settings, root: Path) -> SettingsAt:
    def at(_directory: Path) -> tuple[Settings, Path]:
        return settings, root

    return at
