"""Settings per file for ``ddp-lsp check``: the nearest pyproject.toml, or ``--config``, with
the command line's overrides on top."""

from __future__ import annotations

from pathlib import Path

from ddp_lsp.config import (
    ConfigError,
    ConfigFileError,
    Settings,
    find_pyproject,
    merge_settings,
    settings_from_pyproject,
)


class SettingsResolver:
    """Settings per file: the nearest pyproject.toml with [tool.ddp-lsp] (cached per
    directory), or the one ``--config`` names, with the command line's overrides on top."""

    def __init__(self, config: Path | None, overrides: dict[str, object], cwd: Path) -> None:
        self.cwd = cwd
        self.overrides = overrides
        self._fixed: tuple[Settings, Path] | None = None
        self._by_dir: dict[Path, tuple[Settings, Path]] = {}
        self._by_file: dict[Path | None, tuple[Settings, Path]] = {}
        self.problems: list[str] = []  # configuration files that could not be used
        if config is not None:
            if not config.is_file():
                raise ConfigError(f"{config}: no such configuration file")
            self._fixed = (self._override(settings_from_pyproject(config)), config.resolve().parent)

    def _override(self, settings: Settings) -> Settings:
        if self.overrides:
            settings = merge_settings(settings, self.overrides, "command line")
        return settings

    def for_dir(self, directory: Path) -> tuple[Settings, Path]:
        """(settings, the root that exclude patterns are relative to)."""
        if self._fixed is not None:
            return self._fixed
        directory = directory.resolve()
        hit = self._by_dir.get(directory)
        if hit is None:
            pyproject = find_pyproject(directory)
            hit = self._by_file.get(pyproject)
            if hit is None:
                if pyproject is None:
                    hit = (self._override(Settings()), self.cwd)
                else:
                    try:
                        settings = settings_from_pyproject(pyproject)
                    except ConfigFileError as exc:
                        # Not TOML at all: say so (file:line:col) and check with the defaults,
                        # rather than stop every check until the file is repaired.
                        self.problems.append(f"{exc}; checking with the default settings")
                        settings = Settings(source=str(pyproject))
                    hit = (self._override(settings), pyproject.parent)
                self._by_file[pyproject] = hit
            self._by_dir[directory] = hit
        return hit
