"""Loading settings: ``[tool.ddp-lsp]`` in the nearest pyproject.toml, plus editor settings.

This module finds, reads, parses and validates; the result is the core's plain frozen value
:class:`ddp_lsp.core.settings.Settings` (re-exported here), which is all the analysis sees.

Every key is validated; a wrong one raises :class:`ConfigError` with a message that names the
key, the file and what was expected. Front ends decide what to do with it: the CLI exits 2, the
server shows the message and keeps the defaults.

Keys (kebab-case in pyproject.toml; the editor may also send camelCase):

``select``              rule ids or prefixes to enable (default ``["DDP"]``: every rule on by
                        default; a rule off by default runs only where its full id is listed)
``ignore``              rule ids or prefixes to disable (wins over ``select``)
``severity``            table of rule id -> ``error | warning | information | hint``
``rank-guard-names``    extra names that hold the rank (``my_rank``) or test for rank 0
                        (``is_leader``); names starting with ``is_``/``am_`` or mentioning
                        main/master/leader/zero/chief/primary are taken as rank-0 predicates
``assume-distributed``  treat every file as distributed code (default false)
``exclude``             glob patterns of paths the CLI and workspace scans skip
``framework``           your own helpers described like the built-in framework tables
                        (``ddp_lsp/core/frameworks``): an array of tables, each with one of
                        ``call`` (a qualified name), ``method`` (``receiver.method``),
                        or ``function`` (a bare name, wherever defined), and ``means``: a list of meanings (``collective``,
                        ``rank-zero``, ``backward``, ``silences-print``...; ``ddp-lsp`` lists
                        them in the error for an unknown one); ``keyword`` for ``seeds``
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

# The value itself lives in the core (which reads no files); re-exported for the front ends.
from ddp_lsp.core.frameworks import Api, Match, Meaning, check_entry, duplicates
from ddp_lsp.core.settings import DEFAULT_EXCLUDE, Settings
from ddp_lsp.core.types import Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "DEFAULT_EXCLUDE",
    "SECTION",
    "ConfigError",
    "ConfigFileError",
    "Settings",
    "find_pyproject",
    "load_settings",
    "merge_settings",
    "parse_pyproject",
    "read_pyproject",
    "section_of",
    "settings_from_mapping",
    "settings_from_pyproject",
]

SECTION = "ddp-lsp"
_SELECTOR = re.compile(r"^DDP\d{0,3}$")


class ConfigError(ValueError):
    """An invalid setting; the message names the key and where it came from."""


class ConfigFileError(ConfigError):
    """A pyproject.toml that is not valid TOML: nothing in it can be trusted, so front ends
    report it (file, line, column) and carry on with the default settings."""


def settings_from_mapping(data: Mapping[str, Any], source: str = "settings") -> Settings:
    """The defaults overridden by ``data`` (validated; unknown keys are errors)."""
    return merge_settings(Settings(), data, source)


def merge_settings(base: Settings, data: Mapping[str, Any], source: str = "settings") -> Settings:
    """``base`` overridden by ``data`` (validated; unknown keys are errors)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a table of settings, got {_type(data)}")
    values: dict[str, Any] = {
        "select": base.select,
        "ignore": base.ignore,
        "severity": base.severity,
        "rank_guard_names": base.rank_guard_names,
        "assume_distributed": base.assume_distributed,
        "exclude": base.exclude,
        "project": base.project,
        "frameworks": base.frameworks,
    }
    for raw_key, value in data.items():
        key = _normalise_key(str(raw_key))
        where = f"{source}: {raw_key!r}"
        if key in ("select", "ignore"):
            values[key] = _selectors(value, where)
        elif key == "extend_select":
            values["select"] = values["select"] + _selectors(value, where)
        elif key == "severity":
            values["severity"] = _severities(value, where)
        elif key == "rank_guard_names":
            values["rank_guard_names"] = _identifiers(value, where)
        elif key in ("assume_distributed", "project"):
            if not isinstance(value, bool):
                raise ConfigError(f"{where} must be true or false, got {value!r}")
            values[key] = value
        elif key == "exclude":
            values["exclude"] = _strings(value, where)
        elif key in ("framework", "frameworks"):
            values["frameworks"] = _frameworks(value, where, source)
        elif key in _IGNORED_EDITOR_KEYS:
            continue
        else:
            raise ConfigError(
                f"{source}: unknown key {raw_key!r}; expected one of "
                "select, ignore, severity, rank-guard-names, assume-distributed, exclude, "
                "project, framework"
            )
    return Settings(source=source, **values)


def load_settings(start: Path) -> Settings:
    """Settings for a file or directory: the nearest pyproject.toml with [tool.ddp-lsp]."""
    path = find_pyproject(start)
    if path is None:
        return Settings()
    return settings_from_pyproject(path)


def settings_from_pyproject(path: Path) -> Settings:
    """Settings from ``path``; :class:`ConfigFileError` when it cannot be read or parsed,
    :class:`ConfigError` when ``[tool.ddp-lsp]`` holds an invalid value (or is not a
    table: ``[tool] ddp-lsp = 5``)."""
    text = read_pyproject(path)
    table = section_of(path, text, parse_pyproject(path, text))
    if table is None:
        return Settings(source=str(path))
    return settings_from_mapping(table, f"{path} [tool.{SECTION}]")


def section_of(path: Path, text: str, data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``[tool.ddp-lsp]`` table of a parsed pyproject.toml (None: there is none);
    :class:`ConfigFileError` when it is not a table (``[tool] ddp-lsp = 5``): none of it is
    usable, as with a file that is not TOML."""
    tool = data.get("tool")
    if tool is None:
        return None
    if not isinstance(tool, Mapping):
        line = _line_of(text, r"^\s*tool\s*=")
        raise ConfigFileError(f"{path}{line}: `tool` must be a table, got {_type(tool)}")
    table = tool.get(SECTION)
    if table is None or isinstance(table, Mapping):
        return table
    line = _line_of(text, rf"^\s*(\"{SECTION}\"|'{SECTION}'|{SECTION})\s*=")
    raise ConfigFileError(
        f"{path}{line}: [tool.{SECTION}] must be a table of settings, got {_type(table)} "
        f"({table!r}); write the settings under a `[tool.{SECTION}]` header"
    )


def read_pyproject(path: Path) -> str:
    """A pyproject.toml's text (a FIFO or a device is not read: see ddp_lsp.sources)."""
    from ddp_lsp.sources import ReadError, read_source

    try:
        return read_source(path).decode("utf-8")
    except ReadError as exc:
        raise ConfigFileError(f"{path}: cannot read: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path}: cannot read: not UTF-8 ({exc.reason})") from None


def parse_pyproject(path: Path, text: str) -> dict[str, Any]:
    """The TOML of ``path``, or :class:`ConfigFileError` naming the file, line and column."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib writes "Unclosed array (at line 3, column 5)": the position goes up front,
        # where editors and terminals make file:line:col clickable.
        msg = str(exc)
        m = re.search(r" \(at line (\d+), column (\d+)\)$", msg)
        if m is not None:
            where = f"{path}:{m.group(1)}:{m.group(2)}"
            msg = msg[: m.start()]
        else:
            m = re.search(r" \(at end of document\)$", msg)
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            where = f"{path}:{max(lines, 1)}"
            msg = msg[: m.start()] + " at the end of the file" if m is not None else msg
        raise ConfigFileError(f"{where}: invalid TOML: {msg}") from None


def _line_of(text: str, pattern: str) -> str:
    """``":N"`` for the first line matching ``pattern``, else ``""``."""
    m = re.search(pattern, text, re.MULTILINE)
    return f":{text.count(chr(10), 0, m.start()) + 1}" if m is not None else ""


# Editor-only settings the server reads elsewhere (they are not analysis settings).
_IGNORED_EDITOR_KEYS = frozenset({"enable", "interpreter", "preflight", "trace", "server"})


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml that configures ddp-lsp: one whose TOML has a ``tool``
    entry named ``ddp-lsp`` in any spelling (``[tool.ddp-lsp]``, ``[tool] ddp-lsp = ...``,
    dotted keys), or one that is not valid TOML at all (it may hold the settings; reading it
    reports the error instead of silently skipping to a parent's settings). Valid files
    without the section are passed by, as before."""
    here = start if start.is_dir() else start.parent
    here = here.resolve()
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        try:
            st = candidate.stat()
        except OSError:
            continue
        if _configures(str(candidate), st.st_mtime_ns, st.st_size):
            return candidate
    return None


@lru_cache(maxsize=256)
def _configures(name: str, mtime_ns: int, size: int) -> bool:
    """Whether a pyproject.toml configures ddp-lsp (see find_pyproject); parsed once per
    version of the file, however many directories below it look it up."""
    path = Path(name)
    try:
        text = read_pyproject(path)
    except ConfigFileError:
        return path.is_file()  # unreadable: reported when used; a FIFO or a directory: no config
    try:
        data = parse_pyproject(path, text)
    except ConfigFileError:
        return True
    tool = data.get("tool")
    return tool is not None and (
        not isinstance(tool, Mapping)
        and SECTION in text
        or (isinstance(tool, Mapping) and SECTION in tool)
    )


def _normalise_key(key: str) -> str:
    key = re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
    return key.replace("-", "_")


def _type(value: object) -> str:
    return type(value).__name__


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def _known_rule_ids() -> tuple[str, ...]:
    from ddp_lsp.core.registry import all_meta  # lazily: it imports every rule module

    return tuple(m.id for m in all_meta())


def _selectors(value: Any, where: str) -> tuple[str, ...]:
    items = tuple(v.strip().upper() for v in _strings(value, where))
    known = _known_rule_ids()
    for item in items:
        if not _SELECTOR.match(item):
            raise ConfigError(
                f"{where}: {item!r} is not a rule id or prefix (expected e.g. DDP201 or DDP2)"
            )
        if not any(rule_id.startswith(item) for rule_id in known):
            # A typo here would make CI check nothing (or ignore nothing) in silence.
            raise ConfigError(f"{where}: {item!r} matches no rule (see `ddp-lsp rules`)")
    return items


def _identifiers(value: Any, where: str) -> tuple[str, ...]:
    items = _strings(value, where)
    for item in items:
        if not item.isidentifier():
            raise ConfigError(f"{where}: {item!r} is not a Python identifier")
    return items


def _severities(value: Any, where: str) -> tuple[tuple[str, Severity], ...]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table of rule id = severity, got {value!r}")
    out: list[tuple[str, Severity]] = []
    for rid, sev in value.items():
        rule_id = str(rid).upper()
        if not re.match(r"^DDP\d{3}$", rule_id):
            raise ConfigError(f"{where}: {rid!r} is not a rule id (expected e.g. DDP201)")
        if rule_id not in _known_rule_ids():
            raise ConfigError(f"{where}: {rid!r} is not a rule (see `ddp-lsp rules`)")
        if not isinstance(sev, str):
            raise ConfigError(f"{where}.{rid} must be a string, got {sev!r}")
        try:
            out.append((rule_id, Severity.parse(sev)))
        except ValueError as exc:
            raise ConfigError(f"{where}.{rid}: {exc}") from None
    return tuple(out)


# `module` entries (imports that make a file distributed code) are the built-in tables' only:
# `assume-distributed` is the setting for that; so are `receiver` and `argument` entries (read
# by the rules from the built-in tables).
_MATCH_KEYS = {m.value: m for m in Match if m not in (Match.MODULE, Match.RECEIVER, Match.ARGUMENT)}
# Meanings the analysis reads from the built-in tables only (module-level facts and kinds
# computed before the settings are known, and the guard analysis' decorators): a user entry
# with one of them would be silently ignored, so it is an error instead.
_BUILTIN_ONLY = frozenset(
    {
        Meaning.DISTRIBUTED,
        Meaning.OWNS_PROCESS_GROUP,
        Meaning.INSTALLS_SAMPLER,
        Meaning.RANK_ZERO_ONLY,
        Meaning.SCALER_WRAPPER,
        Meaning.SHARDS_MODEL,
        Meaning.BARRIER,
        Meaning.FINDS_UNUSED_PARAMETERS,
        Meaning.SAVES_UNWRAPPED,
        Meaning.OPTIMIZER,  # kinds are computed before the settings are known
    }
)
_MEANINGS = {m.value: m for m in Meaning if m not in _BUILTIN_ONLY}
_ALL_MEANINGS = {m.value: m for m in Meaning}


def _frameworks(value: Any, where: str, source: str) -> tuple[Api, ...]:
    """``[[tool.ddp-lsp.framework]]`` entries: the schema of the built-in tables."""
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"{where} must be an array of tables (`[[tool.{SECTION}.framework]]`), got {value!r}"
        )
    out: list[Api] = []
    for i, entry in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{at} must be a table with `call`/`method`/`function` and `means`")
        unknown = sorted(set(entry) - {*_MATCH_KEYS, "means", "keyword"})
        if unknown:
            raise ConfigError(
                f"{at}: unknown key {unknown[0]!r}; expected one of "
                f"{', '.join(_MATCH_KEYS)}, means, keyword"
            )
        kinds = [k for k in _MATCH_KEYS if k in entry]
        if len(kinds) != 1:
            raise ConfigError(
                f"{at} needs exactly one of {', '.join(_MATCH_KEYS)} (got "
                f"{', '.join(kinds) or 'none'})"
            )
        name = entry[kinds[0]]
        if not isinstance(name, str):
            raise ConfigError(f"{at}.{kinds[0]} must be a string, got {name!r}")
        means_raw = entry.get("means")
        if means_raw is None:
            raise ConfigError(f"{at} ({name!r}) needs `means`: one of {', '.join(_MEANINGS)}")
        means: list[Meaning] = []
        for m in _strings(means_raw, f"{at}.means"):
            if m in _ALL_MEANINGS and m not in _MEANINGS:
                raise ConfigError(
                    f"{at}.means: {m!r} is known to the built-in framework tables only "
                    f"(ddp_lsp/core/frameworks); configurable: {', '.join(_MEANINGS)}"
                )
            if m not in _MEANINGS:
                raise ConfigError(
                    f"{at}.means: {m!r} is not a meaning; expected one of {', '.join(_MEANINGS)}"
                )
            means.append(_MEANINGS[m])
        keyword = entry.get("keyword")
        if keyword is not None and not isinstance(keyword, str):
            raise ConfigError(f"{at}.keyword must be a string, got {keyword!r}")
        api = Api(_MATCH_KEYS[kinds[0]], name, tuple(means), keyword, source)
        problem = check_entry(api)
        if problem is not None:
            raise ConfigError(f"{at}: {problem}")
        out.append(api)
    dup = duplicates(out)
    if dup:
        raise ConfigError(f"{where}: {dup[0][0].value} {dup[0][1]!r} is listed twice")
    return tuple(out)
