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


def _scan_line_definition(line: str, depth: int, quote: str | None) -> tuple[int, str | None, bool]:
    """``chunks.scan_line`` as written before its brackets-only shortcut (a line without a
    quote, a comment or a backslash, outside a string: its brackets in one regex call)."""
    i = 0
    if quote is not None:
        i = chunks._find_close(line, 0, quote)
        if i < 0:
            return depth, quote, False
    while True:
        m = chunks._INTEREST.search(line, i)
        if m is None:
            return depth, None, False
        c = m.group()
        j = m.start()
        if c == "#":
            return depth, None, False
        if c == "\\":
            if line[j + 1 :].strip() == "":
                return depth, None, True
            i = j + 2
            continue
        if c in "([{":
            depth += 1
            i = j + 1
            continue
        if c in ")]}":
            depth = depth - 1 if depth > 0 else 0
            i = j + 1
            continue
        delim = line[j : j + 3] if line[j : j + 3] == c * 3 else c
        k = chunks._find_close(line, j + len(delim), delim)
        if k < 0:
            if len(delim) == 3 or line.rstrip("\r\n").endswith("\\"):
                return depth, delim, False
            return depth, None, False
        i = k


def test_scan_line_as_defined() -> None:
    import random

    rng = random.Random(15)
    alphabet = "()[]{}x #'\"\\\n"
    lines = ["", "\n", ")(", "f(a)[0]{}\n", "x = (1,\n", "])}\n", "a)b(c\n", "s = '(' + \")\"\n"]
    lines += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(4000)]
    for line in lines:
        for depth in (0, 1, 3):
            for quote in (None, "'", '"""'):
                assert chunks.scan_line(line, depth, quote) == _scan_line_definition(
                    line, depth, quote
                ), (line, depth, quote)


def test_split_lines_as_defined() -> None:
    """``split_lines``' text-without-a-CR shortcut gives what its regular expression does."""
    import random

    from ddp_lsp.core.document import _LINE_SPLIT

    rng = random.Random(15)
    texts = ["", "\n", "a", "a\n", "a\nb", "\n\n", "x\r\ny\rz\n", "\x0c\n\x0b\u2028\x85\n"]
    texts += [
        "".join(rng.choice("ab\n\r\x0c\u2028") for _ in range(rng.randrange(10)))
        for _ in range(2000)
    ]
    for text in texts:
        assert split_lines(text) == (_LINE_SPLIT.split(text) or [""]), repr(text)
