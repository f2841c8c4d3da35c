"""What a published diagnostic carries: what the client shows, nothing it does not.

Every keystroke re-sends the whole list, and a client pays for every JSON object in it, so a
diagnostic has no ``data`` (code actions find their finding among the server's current
findings), ``tags`` only of the kinds the client declared in ``tagSupport`` and
``relatedInformation`` only when it declared it. Code actions still find their finding from
the diagnostic as the client holds it, also after edits move or re-version it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.lsp.helpers import CLIP_LINE, TRAIN
from tests.lsp.rawclient import RawServer

TEXT = TRAIN + "scaler = torch.cuda.amp.GradScaler()\n"
PUBLISH = "textDocument/publishDiagnostics"

SHOWS_ALL = {
    "textDocument": {
        "publishDiagnostics": {
            "relatedInformation": True,
            "tagSupport": {"valueSet": [1, 2]},
            "versionSupport": True,
        }
    }
}
UNNECESSARY_ONLY = {"textDocument": {"publishDiagnostics": {"tagSupport": {"valueSet": [1]}}}}


@pytest.fixture
def server() -> Any:
    s = RawServer(env={"XDG_CACHE_HOME": tempfile.mkdtemp(prefix="ddp-lsp-shape-")})
    yield s
    s.close()


def _published(s: RawServer, uri: str, version: int) -> list[dict[str, Any]]:
    msg = s.wait_notification(
        PUBLISH, lambda p: p["uri"] == uri and p.get("version") == version and p["diagnostics"]
    )
    return list(msg["params"]["diagnostics"])


def _one(diags: list[dict[str, Any]], code: str) -> dict[str, Any]:
    (d,) = [d for d in diags if d["code"] == code]
    return d


@pytest.mark.parametrize(
    ("caps", "tags", "related"),
    [(SHOWS_ALL, [2], True), ({}, None, False), (UNNECESSARY_ONLY, None, False)],
    ids=["declared", "nothing-declared", "other-tags-only"],
)
def test_a_diagnostic_carries_what_the_client_declared_and_no_data(
    server: RawServer, tmp_path: Path, caps: dict[str, Any], tags: Any, related: bool
) -> None:
    server.initialize(caps, rootUri=tmp_path.as_uri())
    uri = (tmp_path / "train.py").as_uri()
    server.open(uri, TEXT)
    diags = _published(server, uri, 1)
    assert all("data" not in d for d in diags)
    deprecated = _one(diags, "DDP205")
    assert deprecated.get("tags") == tags
    clip = _one(diags, "DDP201")
    assert ("relatedInformation" in clip) is related
    if related:
        (rel,) = clip["relatedInformation"]
        assert rel["location"]["range"]["start"]["line"] == CLIP_LINE - 1
    # What every client shows stays: the rule's page, the source, the message.
    assert clip["codeDescription"]["href"].endswith("DDP201.md")
    assert clip["source"] == "ddp-lsp" and "unscale_" in clip["message"]


def _actions(s: RawServer, uri: str, diag: dict[str, Any]) -> list[dict[str, Any]]:
    reply = s.request(
        "textDocument/codeAction",
        {
            "textDocument": {"uri": uri},
            "range": diag["range"],
            "context": {"diagnostics": [diag]},
        },
    )
    assert "result" in reply, reply
    return list(reply["result"] or [])


def _fix_of(actions: list[dict[str, Any]]) -> dict[str, Any]:
    (fix,) = [a for a in actions if a.get("isPreferred")]
    return fix


def test_code_actions_find_their_finding_from_the_diagnostic_as_published(
    server: RawServer, tmp_path: Path
) -> None:
    server.initialize(SHOWS_ALL, rootUri=tmp_path.as_uri())
    uri = (tmp_path / "train.py").as_uri()
    server.open(uri, TEXT)
    clip = _one(_published(server, uri, 1), "DDP201")
    fix = _fix_of(_actions(server, uri, clip))
    assert fix["diagnostics"] == [clip]
    (edit,) = fix["edit"]["changes"][uri]
    assert edit["range"]["start"]["line"] == CLIP_LINE and "unscale_" in edit["newText"]

    # An edit elsewhere (a new version; the finding and its diagnostic are reused as they are).
    end = {"line": 1, "character": len("import torch.distributed as dist")}
    server.change(uri, 2, [{"range": {"start": end, "end": end}, "text": "  # c"}])
    again = _one(_published(server, uri, 2), "DDP201")
    assert again == clip
    assert _fix_of(_actions(server, uri, again))["diagnostics"] == [again]

    # Two lines inserted above: the finding moves, and its action follows it.
    top = {"line": 0, "character": 0}
    server.change(uri, 3, [{"range": {"start": top, "end": top}, "text": "# a\n# b\n"}])
    moved = _one(_published(server, uri, 3), "DDP201")
    assert moved["range"]["start"]["line"] == CLIP_LINE + 2
    fix = _fix_of(_actions(server, uri, moved))
    assert fix["diagnostics"] == [moved]
    (edit,) = fix["edit"]["changes"][uri]
    assert edit["range"]["start"]["line"] == CLIP_LINE + 2

    # The diagnostic of an older version no longer matches a finding's range: the actions
    # are those of the current findings there (none), not of what the client remembers.
    assert [a for a in _actions(server, uri, clip) if a.get("isPreferred")] == []
