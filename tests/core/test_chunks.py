"""The splitter after a keystroke that leaves a bracket open: what it re-reads, what it gives."""

from __future__ import annotations

from ddp_lsp.core import chunks
from ddp_lsp.core.document import split_lines

TEXT = """import torch


def first(model):
    model.train()
    return model


class Trainer:
    def __init__(self, model):
        self.model = model

    def step(self, x):
        loss = self.model(x).sum()
        loss.backward()
        return loss

    async def fit(self, loader):
        for x in loader:
            self.step(x)


def last(model):
    return model
"""


def _edit(lines: list[str], line: int, text: str) -> list[str]:
    out = list(lines)
    out[line] = out[line].rstrip("\n") + text + "\n"
    return out


def test_a_bracket_left_open_is_re_read_up_to_the_next_chunk_only() -> None:
    """A keystroke inside a call left open (`foo(` typed at a body's end) re-splits the edited
    chunk alone: the next chunk, started afresh at its `def` (top-level or a method of a class
    split at its methods), is recorded in the state it has when the bracket is closed, so the
    re-split stops there; and the starts equal a fresh split of the new text."""
    lines = split_lines(TEXT)
    old = chunks.split(lines)
    for at in (4, 10, 14, 19):  # model.train() / self.model = / loss.backward() / self.step(x)
        opened = _edit(lines, at, " + foo(")
        r = chunks.resplit(opened, old, at, at, 0)
        assert r.starts == chunks.split(opened), at
        assert r.hi_new - r.lo == 1 and r.hi_old - r.lo == 1, at
        assert [s.line for s in r.starts] == [s.line for s in old], at
        # The next key in the same bracket: again the edited chunk only.
        typed = _edit(opened, at, "x")
        r2 = chunks.resplit(typed, r.starts, at, at, 0)
        assert r2.starts == chunks.split(typed) and r2.hi_new - r2.lo == 1, at


def test_a_keystroke_below_a_chunk_s_first_line_re_reads_that_chunk_only() -> None:
    lines = split_lines(TEXT)
    old = chunks.split(lines)
    at = 14
    r = chunks.resplit(_edit(lines, at, "  # note"), old, at, at, 0)
    assert (r.lo, r.hi_new) == (3, 4)  # Trainer's `step` method, not the chunk above it
    # On a chunk's first line the chunk above is re-read too (the line may stop starting one).
    r = chunks.resplit(_edit(lines, 12, "  # note"), old, 12, 12, 0)
    assert r.lo == 2 and r.starts == old  # from `class Trainer:`
