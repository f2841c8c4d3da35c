"""Crossing the size limit costs nothing: the oversized text is never chunked nor parsed.

An edit that takes an analysed document over ``MAX_ANALYSED_CHARS`` (a paste) turns it into
plain text *before* the edit is applied; applied to the analysed document, the edit made the
core split and parse the whole oversized text first (a 2 MB paste froze the server 9.5 s). The
test watches the core's ``Document``: nothing it is given may exceed the limit. Coming back
under the limit analyses the document again.
"""

from __future__ import annotations

from typing import Any

import pytest
from lsprotocol import types as lsp

from ddp_lsp.core import document as documents
from ddp_lsp.lsp import state as server_state
from tests.lsp.helpers import CLIP_LINE, TRAIN

URI = "file:///tmp/ddp-lsp-size/train.py"


class Watch:
    def __init__(self) -> None:
        self.largest = 0  # the most characters the core's Document was handed at once

    def see(self, n: int) -> None:
        self.largest = max(self.largest, n)


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Watch:
    w = Watch()
    init, set_text, apply_edit = (
        documents.Document.__init__,
        documents.Document.set_text,
        documents.Document.apply_edit,
    )

    def watched_init(self: Any, text: str, *args: Any, **kwargs: Any) -> None:
        w.see(len(text))
        init(self, text, *args, **kwargs)

    def watched_set_text(self: Any, text: str) -> Any:
        w.see(len(text))
        return set_text(self, text)

    def watched_apply_edit(self: Any, start: Any, end: Any, text: str) -> Any:
        w.see(sum(map(len, self.lines)) + len(text))
        return apply_edit(self, start, end, text)

    monkeypatch.setattr(documents.Document, "__init__", watched_init)
    monkeypatch.setattr(documents.Document, "set_text", watched_set_text)
    monkeypatch.setattr(documents.Document, "apply_edit", watched_apply_edit)
    return w


class Client:
    def __init__(self) -> None:
        self.published: list[tuple[str, int | None, list[dict[str, Any]]]] = []
        self.messages: list[str] = []
        self.state = server_state.ServerState(
            self.publish, self.show
        )  # no event loop: analyses at once

    def publish(self, uri: str, version: int | None, diags: list[dict[str, Any]]) -> None:
        self.published.append((uri, version, diags))

    def show(self, message: str, is_error: bool) -> None:
        self.messages.append(message)

    def codes(self) -> list[str]:
        return [d["code"] for d in self.published[-1][2]]


def _insert(line: int, text: str) -> lsp.TextDocumentContentChangePartial:
    pos = lsp.Position(line, 0)
    return lsp.TextDocumentContentChangePartial(range=lsp.Range(pos, pos), text=text)


def _delete(first: int, last: int) -> lsp.TextDocumentContentChangePartial:
    return lsp.TextDocumentContentChangePartial(
        range=lsp.Range(lsp.Position(first, 0), lsp.Position(last, 0)), text=""
    )


PASTE_LINES = server_state.MAX_ANALYSED_CHARS // len(TRAIN) + 1
PASTE = TRAIN * PASTE_LINES  # just over the limit on its own
PASTE_N = PASTE.count("\n")


def test_a_paste_over_the_limit_is_not_analysed_and_undo_analyses_again(watch: Watch) -> None:
    c = Client()
    c.state.open(URI, TRAIN, 1, "python")
    assert "DDP201" in c.codes()
    c.state.change(URI, 2, [_insert(0, PASTE)])
    assert watch.largest <= server_state.MAX_ANALYSED_CHARS, watch.largest
    unit = c.state.units[URI]
    assert isinstance(unit.doc, server_state.PlainText) and unit.doc.text == PASTE + TRAIN
    assert c.published[-1] == (URI, 2, [])
    (msg,) = c.messages
    assert "not analysed" in msg
    c.state.change(URI, 3, [_insert(PASTE_N + CLIP_LINE, "# still too large\n")])
    assert len(c.messages) == 1  # one message, not one per keystroke
    c.state.change(URI, 4, [_delete(0, PASTE_N)])  # undo the paste: back under the limit
    assert watch.largest <= server_state.MAX_ANALYSED_CHARS
    assert c.published[-1][1] == 4 and "DDP201" in c.codes()
    assert unit.doc.text == TRAIN.replace(
        TRAIN.splitlines(True)[CLIP_LINE], "# still too large\n" + TRAIN.splitlines(True)[CLIP_LINE]
    )


def test_over_and_back_in_one_notification(watch: Watch) -> None:
    c = Client()
    c.state.open(URI, TRAIN, 1, "python")
    c.state.change(URI, 2, [_insert(0, PASTE), _delete(0, PASTE_N)])
    assert watch.largest <= server_state.MAX_ANALYSED_CHARS
    assert c.state.units[URI].doc.text == TRAIN
    assert "DDP201" in c.codes()


def test_growing_up_to_the_limit_stays_analysed(watch: Watch) -> None:
    """Near the limit the lines are counted, and an edit that stays under is analysed."""
    c = Client()
    filler = "#" * 99 + "\n"
    below = TRAIN + filler * ((server_state.MAX_ANALYSED_CHARS - len(TRAIN)) // len(filler) - 1)
    c.state.open(URI, below, 1, "python")
    n = below.count("\n")
    c.state.change(URI, 2, [_insert(n, "x = 1\n")])
    assert not isinstance(c.state.units[URI].doc, server_state.PlainText)
    assert "DDP201" in c.codes()
    # A replacement that keeps the size: the removed text counts, the doc stays analysed.
    c.state.change(URI, 3, [_delete(n - 1, n), _insert(n - 1, filler)])
    assert not isinstance(c.state.units[URI].doc, server_state.PlainText) and "DDP201" in c.codes()


def test_full_text_replacement_over_the_limit(watch: Watch) -> None:
    c = Client()
    c.state.open(URI, TRAIN, 1, "python")
    c.state.change(URI, 2, [lsp.TextDocumentContentChangeWholeDocument(text=PASTE)])
    assert watch.largest <= server_state.MAX_ANALYSED_CHARS
    assert isinstance(c.state.units[URI].doc, server_state.PlainText)
    c.state.change(URI, 3, [lsp.TextDocumentContentChangeWholeDocument(text=TRAIN)])
    assert "DDP201" in c.codes()
