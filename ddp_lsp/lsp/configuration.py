"""The configuration service: where the server's documents get their settings from.

One object knows the workspace folders, the editor's ``ddp-lsp`` settings (global, and per
folder when the client answers ``workspace/configuration`` with a scope) and the project files
(``[tool.ddp-lsp]`` of the nearest pyproject.toml, through :class:`~ddp_lsp.lsp.config.
ProjectConfigs`). It answers "which settings, and is ddp-lsp on, for this file?" and "which
folder does this file belong to?"; it never talks to the client and never analyses anything.
The server's handlers feed it (``initialize``, ``didChangeConfiguration``, the folders'
changes, the configuration pull); :class:`~ddp_lsp.lsp.state.ServerState`, the preflight and
the project view read it. Parsing and precedence of the settings themselves are in
:mod:`ddp_lsp.lsp.config`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ddp_lsp.lsp import config as settings_config

if TYPE_CHECKING:
    from ddp_lsp.config import Settings

SECTION = "ddp-lsp"  # the settings section, in workspace/configuration and didChangeConfiguration


def uri_to_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    return Path(path) if path else None


class ConfigurationService:
    def __init__(self) -> None:
        self.folders: list[tuple[str, Path | None]] = []  # (URI, path) of workspace folders
        self.editor_global = settings_config.EditorSettings()
        self.editor_scoped: dict[
            str, settings_config.EditorSettings
        ] = {}  # by workspace folder URI
        self.projects = settings_config.ProjectConfigs()

    # -- what the client tells -----------------------------------------------------------------

    def set_folders(self, uris: Iterable[str]) -> None:
        self.folders = [(uri, uri_to_path(uri)) for uri in uris]

    def change_folders(self, added: Iterable[str], removed: Iterable[str]) -> None:
        gone = set(removed)
        self.folders = [f for f in self.folders if f[0] not in gone]
        self.folders += [(uri, uri_to_path(uri)) for uri in added]
        for uri in gone:
            self.editor_scoped.pop(uri, None)

    def set_editor_settings(self, raw: Any, source: str) -> bool:
        """The global ``ddp-lsp`` section (initializationOptions, didChangeConfiguration);
        True if it differs from what was known."""
        new = settings_config.parse_editor_settings(raw, source)
        changed = new != self.editor_global
        self.editor_global = new
        return changed

    def scopes(self) -> list[str]:
        """The folder URIs a configuration pull asks about, after the global section."""
        return [uri for uri, _ in self.folders]

    def apply_pulled(self, scopes: Sequence[str], result: Sequence[Any]) -> bool:
        """The answer to a ``workspace/configuration`` pull of the global section followed by
        ``scopes``; True if any setting changed. A folder whose section equals the global one
        has no scoped settings of its own."""
        if not result:
            return False
        changed = False
        if result[0] is not None:
            changed |= self.set_editor_settings(result[0], "workspace/configuration")
        scoped: dict[str, settings_config.EditorSettings] = {}
        for uri, value in zip(scopes, result[1:], strict=False):
            if value is not None and value != result[0]:
                scoped[uri] = settings_config.parse_editor_settings(
                    value, f"workspace/configuration ({uri})"
                )
        changed |= scoped != self.editor_scoped
        self.editor_scoped = scoped
        return changed

    # -- what documents get --------------------------------------------------------------------

    def editor_for(self, uri: str) -> settings_config.EditorSettings:
        best: tuple[int, settings_config.EditorSettings] | None = None
        for folder, settings in self.editor_scoped.items():
            if uri.startswith(folder.rstrip("/") + "/") and (best is None or len(folder) > best[0]):
                best = (len(folder), settings)
        return best[1] if best else self.editor_global

    def folder_of(self, path: Path | None) -> Path | None:
        if path is None:
            return None
        best: Path | None = None
        for _, root in self.folders:
            if root is not None and (path == root or root in path.parents):
                if best is None or len(root.parts) > len(best.parts):
                    best = root
        return best

    def machine_folder(self, path: Path | None) -> Path:
        """The folder whose preflight report describes the machine a file's code runs on:
        its workspace folder; without one (a file opened with no root), its own directory;
        without a path (an untitled buffer), the first workspace folder or the working
        directory. ``ddp-lsp.runPreflight`` stores its report under the same folder, so the
        analysis sees the facts of the run it asked for."""
        folder = self.folder_of(path)
        if folder is not None:
            return folder
        if path is not None:
            return path if path.is_dir() else path.parent
        roots = [p for _, p in self.folders if p is not None]
        return roots[0] if roots else Path.cwd()

    def resolve(self, uri: str, path: Path | None) -> tuple[Settings, bool, tuple[str, ...]]:
        """(analysis settings, enabled, messages for every invalid key met) for a document."""
        editor = self.editor_for(uri)
        settings, errors = settings_config.effective_settings(editor, self.projects, path)
        enabled = editor.options.enable
        if enabled and path is not None:
            # Relative to where the patterns are written (as ddp-lsp check matches them): an
            # absolute path would exclude a whole workspace that lives under ~/build/.
            base = self.exclude_root(path)
            rel = path.relative_to(base) if base is not None and base in path.parents else path
            if settings.is_excluded(rel):
                enabled = False
        return settings, enabled, errors

    def exclude_root(self, path: Path) -> Path | None:
        """The directory a file's ``exclude`` patterns are relative to: its pyproject.toml's,
        else its workspace folder."""
        pyproject = self.projects.pyproject_for(path)
        return pyproject.parent if pyproject is not None else self.folder_of(path)
