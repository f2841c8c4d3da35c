"""Random incremental edits: the server's text must equal the client's after every batch.

Edits are generated as string indices into the client's text and sent as LSP ranges in the
negotiated encoding, computed by the test's own arithmetic (``helpers.position``). The
alphabet is chosen to hurt: emoji (surrogate pairs in UTF-16, four bytes in UTF-8), CJK, tabs,
and all three line breaks, including a lone CR that an inserted LF turns into one CRLF break.
One server per encoding serves every example; each example uses a fresh document. After the
edits, the server's findings (pulled) must equal a fresh full analysis of the client's text.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.lsp.helpers import _LINE_BREAK, TRAIN, position, split_lines
from tests.lsp.rawclient import RawServer

PIECES = [
    "a",
    "x = 1",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "😀",
    "中文",
    "é",
    "(",
    ")",
    "#",
    "scaler.unscale_(optimizer)\n",
    "    ",
    "def f():\n",
    '"""',
    "🧪x",
]
_counter = itertools.count()


@pytest.fixture(scope="module", params=["utf-16", "utf-8", "utf-32"])
def server(request: pytest.FixtureRequest):
    s = RawServer()
    result = s.initialize({"general": {"positionEncodings": [request.param]}})
    assert result["result"]["capabilities"]["positionEncoding"] == request.param
    s.encoding = request.param  # type: ignore[attr-defined]
    yield s
    assert s.close() == 0


def _fix(text: str, i: int) -> int:
    # Between CR and LF is not a position LSP can address: move to after the pair.
    if 0 < i < len(text) and text[i - 1] == "\r" and text[i] == "\n":
        return i + 1
    return i


edit = st.tuples(st.floats(0, 1), st.floats(0, 1), st.lists(st.sampled_from(PIECES), max_size=4))
batches = st.lists(st.lists(edit, min_size=1, max_size=4), min_size=1, max_size=6)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(start=st.lists(st.sampled_from(PIECES), max_size=10), batches=batches)
def test_random_edits_keep_texts_equal(server: RawServer, start: list[str], batches):
    enc = server.encoding  # type: ignore[attr-defined]
    uri = f"file:///tmp/ddp-lsp-fuzz/{next(_counter)}.py"
    text = TRAIN + "".join(start)
    server.open(uri, text)
    version = 1
    for batch in batches:
        changes = []
        for fa, fb, pieces in batch:
            a = _fix(text, int(fa * len(text)))
            b = _fix(text, int(fb * len(text)))
            a, b = min(a, b), max(a, b)
            new = "".join(pieces)
            rng = {"start": _pos(text, a, enc), "end": _pos(text, b, enc)}
            changes.append({"range": rng, "text": new})
            text = text[:a] + new + text[b:]
        version += 1
        server.change(uri, version, changes)
    doc = server.document(uri)
    assert doc["version"] == version
    assert doc["text"] == text
    # Incremental analysis over the edits equals a fresh analysis of the final text, in the
    # client's encoding (the findings' ranges converted by this test's own arithmetic).
    pulled = server.request("textDocument/diagnostic", {"textDocument": {"uri": uri}})
    got = sorted(
        (d["code"], _tuple(d["range"]["start"]), _tuple(d["range"]["end"]))
        for d in pulled["result"]["items"]
    )
    assert got == _fresh(text, enc)
    # And the server is still analysing: a request that needs findings is answered.
    r = server.request(
        "textDocument/codeAction",
        {
            "textDocument": {"uri": uri},
            "range": {
                "start": {"line": 0, "character": 0},
                "end": {"line": len(split_lines(text)) - 1, "character": 0},
            },
            "context": {"diagnostics": []},
        },
    )
    assert "result" in r, r
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def _tuple(p: dict[str, int]) -> tuple[int, int]:
    return p["line"], p["character"]


def _fresh(text: str, enc: str) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
    from ddp_lsp.core.engine import analyze
    from ddp_lsp.core.settings import Settings

    starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
    lines = split_lines(text)

    def lsp(line: int, col: int) -> tuple[int, int]:
        line = min(line, len(lines) - 1)
        p = position(text, starts[line] + min(col, len(lines[line])), enc)
        return p.line, p.character

    return sorted(
        (f.rule_id, lsp(f.span.start.line, f.span.start.col), lsp(f.span.end.line, f.span.end.col))
        for f in analyze(text, Settings()).findings
    )


def _pos(text: str, i: int, enc: str) -> dict[str, int]:
    p = position(text, i, enc)
    return {"line": p.line, "character": p.character}
