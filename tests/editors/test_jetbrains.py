"""editors/jetbrains: an LSP4IJ user-defined server template, and the command it starts.

LSP4IJ reads ``template.json`` (name, ``programArgs`` per OS, file type and language mappings),
``initializationOptions.json`` (sent in ``initialize``) and ``settings.json`` (answers to
``workspace/configuration`` by section). The test checks that shape, then runs the default
command line split the way LSP4IJ splits it (shell-like words) and completes a handshake.
"""

from __future__ import annotations

import json
import shlex
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

FOLDER = REPO / "editors" / "jetbrains"


def load(name: str) -> Any:
    return json.loads((FOLDER / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load("template.json")


def test_template_shape(template: dict[str, Any]) -> None:
    assert template["id"] == "ddp-lsp"
    assert isinstance(template["name"], str) and template["name"]
    args = template["programArgs"]
    assert set(args) <= {"default", "windows", "mac", "linux"} and "default" in args
    for line in args.values():
        words = shlex.split(line)
        # -I: the IDE starts the server in the project, which must not land on sys.path.
        assert words[1:] == ["-I", "-m", "ddp_lsp", "serve"], line
    # LSP4IJ maps files to the server by IntelliJ language and/or by file type; both must say
    # "python" as the LSP languageId, or the server sees an unknown language.
    langs = template.get("languageMappings", [])
    ftypes = template.get("fileTypeMappings", [])
    assert langs or ftypes
    for m in langs:
        assert m["language"] == "Python" and m["languageId"] == "python"
    for m in ftypes:
        assert m["languageId"] == "python"
        assert m["fileType"].get("name") or m["fileType"].get("patterns")
        assert all(p.endswith(".py") for p in m["fileType"].get("patterns", []))
    assert set(template) <= {
        "id",
        "name",
        "programArgs",
        "languageMappings",
        "fileTypeMappings",
        "expandConfiguration",
    }


@pytest.mark.parametrize("name", ["initializationOptions.json", "settings.json"])
def test_settings_files_are_accepted_by_the_server(name: str) -> None:
    data = load(name)
    # settings.json answers workspace/configuration by section, so "ddp-lsp" must be a key.
    assert set(data) == {"ddp-lsp"}
    parsed = parse_editor_settings(data, name)
    assert parsed.errors == ()
    keys = {k for k, _ in parsed.analysis} | {"enable", "preflight"}
    assert set(data["ddp-lsp"]) <= keys


def test_default_command_serves_lsp(template: dict[str, Any], tmp_path: Path) -> None:
    argv = shlex.split(template["programArgs"]["default"])
    session = StdioSession(argv, cwd=tmp_path)
    settings = load("settings.json")
    session.answer = lambda request: section_lookup(settings, request)
    try:
        result = initialize(
            session, tmp_path, load("initializationOptions.json"), configuration=True
        )
        assert result["serverInfo"]["name"] == "ddp-lsp"
        uri = (tmp_path / "train.py").as_uri()
        session.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": TRAIN}},
        )
        session.wait_notification(
            "textDocument/publishDiagnostics",
            lambda p: p["uri"] == uri and any(d.get("code") == "DDP201" for d in p["diagnostics"]),
        )
    finally:
        code = session.close()
    assert code == 0, session.stderr
    assert show_messages(session) == []
    pulls = [r for r in session.server_requests if r["method"] == "workspace/configuration"]
    assert pulls and all(section_lookup(settings, r)[0] == settings["ddp-lsp"] for r in pulls)
