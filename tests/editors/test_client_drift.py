"""The editor clients cannot drift from the server.

Every command, setting and rule id that ``editors/`` and ``vscode-client/`` name (package.json
contributions, READMEs, configs) must exist in the server:

- commands: advertised in the server's initialize result (``executeCommandProvider``), or a
  client-side command that the VS Code extension contributes and documents;
- settings: every contributed ``ddp-lsp.*`` setting is read by the server's config code (a
  non-default value changes what it parses, and no value is reported invalid), except the two
  client-only ones, which the server must accept silently;
- rule ids: in ``ddp_lsp.core.registry.all_meta()``; a prefix such as ``DDP2`` must select at
  least one rule.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from ddp_lsp.core.registry import all_meta
from ddp_lsp.lsp.config import EditorSettings, parse_editor_settings
from tests.editors.handshake import REPO, StdioSession, initialize

VSCODE = REPO / "vscode-client"
EDITORS = REPO / "editors"
PACKAGE = json.loads((VSCODE / "package.json").read_text(encoding="utf-8"))

# Settings only the VS Code client reads (which interpreter starts the server, the protocol
# trace level); the language client convention puts them in the same section.
CLIENT_ONLY_SETTINGS = {"interpreter", "trace.server"}

# Names known to be wrong in a scanned file, by file. Empty: every name in the clients exists.
# A stale entry (a name that now exists or no longer occurs) fails too, so this cannot rot.
KNOWN_DRIFT: dict[str, set[str]] = {}

# `ddp-lsp.<name>` that is a file name in prose, not a command or setting.
FILE_SUFFIXES = {"log", "vsix", "toml", "json", "md", "lua", "py", "txt", "sarif"}

TOKEN = re.compile(r"(?<![\w./-])ddp-lsp\.([A-Za-z][\w]*(?:\.[A-Za-z]\w*)*)")
RULE = re.compile(r"(?<![\w-])DDP(\d{1,3})(?!\w)")


def scanned_files() -> list[Path]:
    files = [VSCODE / "package.json", VSCODE / "README.md", VSCODE / "CHANGELOG.md"]
    for path in sorted(EDITORS.rglob("*")):
        if path.is_file() and path.suffix in {".md", ".toml", ".json", ".lua", ".vim"}:
            files.append(path)
    return [f for f in files if f.exists()]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.fixture(scope="module")
def advertised(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    root = tmp_path_factory.mktemp("drift")
    session = StdioSession([sys.executable, "-m", "ddp_lsp", "serve"], cwd=root)
    try:
        result = initialize(session, root)
    finally:
        session.close()
    commands = result["capabilities"].get("executeCommandProvider", {}).get("commands", [])
    assert commands, "the server advertises no commands"
    return set(commands)


def client_commands() -> set[str]:
    return {c["command"] for c in PACKAGE["contributes"]["commands"]}


def contributed_settings() -> dict[str, dict[str, Any]]:
    props: dict[str, dict[str, Any]] = PACKAGE["contributes"]["configuration"]["properties"]
    return {k.removeprefix("ddp-lsp."): v for k, v in props.items()}


def client_server_commands() -> dict[str, str]:
    """SERVER_COMMANDS from vscode-client/src/commands.ts: what the extension sends."""
    text = (VSCODE / "src" / "commands.ts").read_text(encoding="utf-8")
    block = text[text.index("SERVER_COMMANDS") :]
    block = block[: block.index("}")]
    return dict(re.findall(r"(\w+):\s*\"(ddp-lsp\.[\w.]+)\"", block))


def unknown_names(text: str, label: str, advertised: set[str]) -> list[str]:
    settings = contributed_settings()
    commands = client_commands() | advertised
    rule_ids = {m.id for m in all_meta()}
    found: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in TOKEN.finditer(line):
            name = m.group(1)
            if name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                continue
            if f"ddp-lsp.{name}" in commands or name in settings:
                continue
            found.append(f"{label}:{lineno}: ddp-lsp.{name}")
        for m in RULE.finditer(line):
            digits = m.group(1)
            token = f"DDP{digits}"
            ok = (
                token in rule_ids
                if len(digits) == 3
                else any(r.startswith(token) for r in rule_ids)
            )
            if not ok:
                found.append(f"{label}:{lineno}: {token}")
    return found


@pytest.mark.parametrize("path", scanned_files(), ids=rel)
def test_every_name_exists_in_the_server(path: Path, advertised: set[str]) -> None:
    allowed = KNOWN_DRIFT.get(rel(path), set())
    found = unknown_names(path.read_text(encoding="utf-8"), rel(path), advertised)
    unknown = [u for u in found if u.rsplit(": ", 1)[-1] not in allowed]
    assert unknown == [], "names the server does not know:\n" + "\n".join(unknown)


def test_known_drift_is_not_stale(advertised: set[str]) -> None:
    for name, allowed in KNOWN_DRIFT.items():
        found = unknown_names((REPO / name).read_text(encoding="utf-8"), name, advertised)
        still = {u.rsplit(": ", 1)[-1] for u in found}
        assert allowed <= still, f"{name}: no longer drifting, remove: {sorted(allowed - still)}"


def test_the_scan_finds_drift(advertised: set[str]) -> None:
    # The scanner itself must be able to fail: a made-up command, setting and rule are caught,
    # while real names, prefixes and file names pass.
    text = (
        "Run `ddp-lsp.frobnicate`, set `ddp-lsp.colour`, ignore DDP999 and DDP9.\n"
        "Logs in /tmp/ddp-lsp.log; select DDP2 and DDP201; run ddp-lsp.fixAll; ddp-lsp.enable.\n"
    )
    found = unknown_names(text, "probe.md", advertised)
    assert found == [
        "probe.md:1: ddp-lsp.frobnicate",
        "probe.md:1: ddp-lsp.colour",
        "probe.md:1: DDP999",
        "probe.md:1: DDP9",
    ]


def test_client_commands_do_not_shadow_server_commands(advertised: set[str]) -> None:
    # vscode-languageclient registers each advertised command itself; a contributed command
    # with the same id would fail to register ("command already exists").
    assert client_commands().isdisjoint(advertised)
    readme = (VSCODE / "README.md").read_text(encoding="utf-8")
    for c in PACKAGE["contributes"]["commands"]:
        assert c["command"] in readme, (
            f"{c['command']} is not documented in vscode-client/README.md"
        )
        assert f"{c['category']}: {c['title']}" in readme


def test_the_commands_the_extension_sends_exist(advertised: set[str]) -> None:
    sent = client_server_commands()
    assert set(sent) == {"fixAll", "explainRule", "runPreflight", "showRankPaths"}, sent
    assert sent["fixAll"] in advertised
    assert sent["explainRule"] in advertised
    assert sent["showRankPaths"] in advertised
    # The preflight command may not have landed yet; the extension checks the initialize result
    # before calling it. But if the server has a preflight command, it must be the one the
    # extension calls, or "DDP: Run preflight" would say "no preflight" forever.
    preflight_like = {c for c in advertised if "preflight" in c.lower()}
    assert preflight_like <= {sent["runPreflight"]}, preflight_like


def nested(key: str, value: Any) -> dict[str, Any]:
    head, _, rest = key.partition(".")
    return {head: nested(rest, value) if rest else value}


def sample_value(key: str, schema: dict[str, Any]) -> Any:
    """A valid value different from the default, built from the contributed JSON schema."""
    kind = schema["type"]
    if "enum" in schema:
        return next(v for v in schema["enum"] if v != schema["default"])
    if kind == "boolean":
        return not schema["default"]
    if kind == "string":
        return "/opt/train/bin/python"
    if kind == "array":
        pattern = schema.get("items", {}).get("pattern")
        for candidate in ("DDP2", "is_leader", "legacy/**"):
            if pattern is None or re.match(pattern, candidate):
                return [candidate]
    if kind == "object":
        rule = next(m.id for m in all_meta() if m.id != "DDP000")
        return {rule: "hint"}
    raise AssertionError(f"no sample for {key}: {schema}")


@pytest.mark.parametrize("key", sorted(contributed_settings()))
def test_every_contributed_setting_is_read_by_the_server(key: str) -> None:
    schema = contributed_settings()[key]
    baseline = parse_editor_settings({})
    with_default = parse_editor_settings({"ddp-lsp": nested(key, schema["default"])})
    assert with_default.errors == (), with_default.errors
    changed = parse_editor_settings({"ddp-lsp": nested(key, sample_value(key, schema))})
    assert changed.errors == (), changed.errors
    if key in CLIENT_ONLY_SETTINGS:
        assert changed == baseline, f"{key} is client-only but the server reads it"
    else:
        assert changed != baseline and isinstance(changed, EditorSettings), (
            f"the server ignores ddp-lsp.{key}: a non-default value changes nothing"
        )


def test_editor_configs_use_the_same_setting_names() -> None:
    names = contributed_settings()
    from tests.editors.test_helix import example_config

    sections = [
        ("helix example", example_config()["ddp-lsp"]),
        (
            "jetbrains settings",
            json.loads((EDITORS / "jetbrains" / "settings.json").read_text())["ddp-lsp"],
        ),
        (
            "jetbrains init",
            json.loads((EDITORS / "jetbrains" / "initializationOptions.json").read_text())[
                "ddp-lsp"
            ],
        ),
    ]
    for where, section in sections:
        flat = {
            f"{k}.{kk}"
            for k, v in section.items()
            if isinstance(v, dict) and k != "severity"
            for kk in v
        } | {k for k, v in section.items() if not isinstance(v, dict) or k == "severity"}
        assert flat <= set(names), f"{where}: {sorted(flat - set(names))} are not ddp-lsp settings"
        # ...and the rule ids in their values exist.
        ids = {m.id for m in all_meta()}
        assert set(section.get("severity", {})) <= ids, where
