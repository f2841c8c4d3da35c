"""editors/helix/languages.toml: valid TOML in Helix's shape, and its command serves LSP.

Helix cannot be installed here, so the test does what Helix does with the snippet: runs
``command`` + ``args`` with stdin/stdout pipes, sends ``config`` as initializationOptions, and
expects an initialize result and *pushed* diagnostics (Helix shows pushed ones everywhere).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from ddp_lsp.lsp.config import parse_editor_settings
from tests.editors.handshake import (
    REPO,
    TRAIN,
    StdioSession,
    initialize,
    section_lookup,
    show_messages,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10 only
    import tomli as tomllib

LANGUAGES = REPO / "editors" / "helix" / "languages.toml"


@pytest.fixture(scope="module")
def languages() -> dict[str, Any]:
    return tomllib.loads(LANGUAGES.read_text(encoding="utf-8"))


def server_entry(languages: dict[str, Any]) -> dict[str, Any]:
    servers = languages.get("language-server")
    assert isinstance(servers, dict) and "ddp-lsp" in servers, "no [language-server.ddp-lsp]"
    entry = servers["ddp-lsp"]
    assert isinstance(entry, dict)
    return entry


def example_config() -> dict[str, Any]:
    """The commented-out settings example, uncommented: it must stay valid when a user does."""
    lines = LANGUAGES.read_text(encoding="utf-8").splitlines()
    start = lines.index("# [language-server.ddp-lsp.config.ddp-lsp]")
    block = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        block.append(line[2:])
    parsed = tomllib.loads("\n".join(block))
    config = parsed["language-server"]["ddp-lsp"]["config"]
    assert isinstance(config, dict)
    return config


def test_server_table_has_helix_shape(languages: dict[str, Any]) -> None:
    entry = server_entry(languages)
    assert isinstance(entry["command"], str) and entry["command"]
    assert isinstance(entry["args"], list) and all(isinstance(a, str) for a in entry["args"])
    assert entry["args"][-1] == "serve"
    # Helix starts servers in the project root: the interpreter must not put it on sys.path.
    assert entry["command"] != "python3" or entry["args"][:3] == ["-I", "-m", "ddp_lsp"]
    # The defaults apply: nothing is set that would only repeat them.
    assert "config" not in entry
    # Helix sends ``config`` as initializationOptions and answers workspace/configuration for
    # section "ddp-lsp" from config["ddp-lsp"]: the example's settings sit one level down.
    assert set(example_config()) == {"ddp-lsp"}


def test_python_uses_ddp_lsp_beside_other_servers(languages: dict[str, Any]) -> None:
    (python,) = [lang for lang in languages["language"] if lang["name"] == "python"]
    names = [s if isinstance(s, str) else s["name"] for s in python["language-servers"]]
    assert "ddp-lsp" in names
    assert len(names) >= 2, "ddp-lsp should run beside the user's other Python servers"
    # Last, so that hover and completion keep coming from the general-purpose servers first.
    assert names[-1] == "ddp-lsp"


def test_config_example_is_accepted_by_the_server() -> None:
    config = example_config()
    parsed = parse_editor_settings(config, "helix config")
    assert parsed.errors == ()
    # Every key was understood (analysis or editor option), none silently dropped.
    keys = {k for k, _ in parsed.analysis} | {"enable", "preflight", "rankView"}
    assert set(config["ddp-lsp"]) <= keys
    if "rankView" in config["ddp-lsp"]:  # an editor option: read into the options
        assert parsed.options.rank_hints == config["ddp-lsp"]["rankView"]["hints"]


def test_command_serves_lsp_and_pushes_diagnostics(
    languages: dict[str, Any], tmp_path: Path
) -> None:
    entry = server_entry(languages)
    config = entry.get("config", {})  # none: Helix sends no initializationOptions
    session = StdioSession([entry["command"], *entry["args"]], cwd=tmp_path)
    session.answer = lambda request: section_lookup(config, request)
    try:
        result = initialize(session, tmp_path, config or None, configuration=True)
        assert result["serverInfo"]["name"] == "ddp-lsp"
        caps = result["capabilities"]
        assert caps["codeActionProvider"]
        uri = (tmp_path / "train.py").as_uri()
        session.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": TRAIN}},
        )
        pushed = session.wait_notification(
            "textDocument/publishDiagnostics",
            lambda p: p["uri"] == uri and any(d.get("code") == "DDP201" for d in p["diagnostics"]),
        )
        assert pushed["version"] == 1
    finally:
        code = session.close()
    assert code == 0, session.stderr
    assert show_messages(session) == [], "the config produced settings errors"
    # The server pulled its section; Helix answers null without a config table, and the
    # server then keeps its defaults (the DDP201 above), without a settings error.
    pulls = [r for r in session.server_requests if r["method"] == "workspace/configuration"]
    assert pulls, "the server never asked for its configuration"
    answers = [section_lookup(config, r) for r in pulls]
    assert all(a and a[0] == config.get("ddp-lsp") for a in answers), answers
