"""The splitter after a keystroke that leaves a bracket open: what it re-reads, what it gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


DECORATED = """import torch


def train(model):
    loss = model(1)
    loss.backward()


@rank_zero_only
@torch.no_grad()

# saved by rank 0
def save(model):
    torch.save(model, "m.pt")


class Trainer:
    def fit(self, x):
        return x

    @torch.no_grad()
    def evaluate(self, x):
        return x


y = (a
@ b)
def after():
    pass
"""


def _starts(lines: list[str]) -> list[int]:
    return [s.line for s in chunks.split(lines)]


def _resplit_matches_split(old_lines: list[str], new_lines: list[str]) -> chunks.Resplit:
    """Resplit ``new_lines`` from ``old_lines``' starts over the lines that differ; it must give
    exactly a fresh split's starts (states included)."""
    first = 0
    while first < min(len(old_lines), len(new_lines)) and old_lines[first] == new_lines[first]:
        first += 1
    tail = 0
    while (
        tail < min(len(old_lines), len(new_lines)) - first
        and old_lines[-1 - tail] == new_lines[-1 - tail]
    ):
        tail += 1
    last = max(len(new_lines) - tail - 1, first)
    r = chunks.resplit(
        new_lines, chunks.split(old_lines), first, last, len(new_lines) - len(old_lines)
    )
    assert r.starts == chunks.split(new_lines)
    return r


def test_decorators_start_afresh_with_the_def_that_gives_an_open_bracket_up() -> None:
    """A call typed open on a function's last line gives the bracket up at the next `def`; the
    decorators above that `def` (blank and comment lines between them) start afresh with it, so
    `@rank_zero_only` stays with `def save` (its chunk, facts and findings) while the call is
    being typed; the same for a method's decorators in a class split at its methods."""
    lines = split_lines(DECORATED)
    clean = _starts(lines)
    assert {8, 20} <= set(clean)  # `@rank_zero_only`, `    @torch.no_grad()`
    assert _starts(_edit(lines, 5, " + criterion(")) == clean
    assert _starts(_edit(lines, 18, " + criterion(")) == clean
    # A `@` line that closes the bracket is a matrix product, not a decorator; valid code
    # splits as without the look-ahead.
    assert 26 not in clean and 27 in clean
    original = chunks._DECORATOR_LOOKAHEAD
    try:
        chunks._DECORATOR_LOOKAHEAD = 0
        assert _starts(lines) == clean
        assert 8 not in _starts(_edit(lines, 5, " + criterion("))  # what the look-ahead mends
    finally:
        chunks._DECORATOR_LOOKAHEAD = original


def test_an_edit_among_the_decorators_or_at_their_def_re_decides_the_start() -> None:
    """Whether the decorators start afresh depends on the lines below them down to the `def`:
    an edit there (the `def` renamed away, a decorator typed or removed, a blank line) re-splits
    from the chunk above, and every re-split equals a fresh split."""
    broken = _edit(split_lines(DECORATED), 5, " + criterion(")
    for at in range(8, 15):
        for new in ("x" + broken[at], broken[at].replace("def", "de"), "@more\n" + broken[at]):
            edited = [*broken[:at], *split_lines(new)[:-1], *broken[at + 1 :]]
            edited = split_lines("".join(edited))
            _resplit_matches_split(broken, edited)
            _resplit_matches_split(edited, broken)
        _resplit_matches_split(broken, [*broken[:at], *broken[at + 1 :]])
    # Typing in `save`'s body, below its `def`: that chunk alone is re-read.
    r = _resplit_matches_split(broken, _edit(broken, 13, "  # note"))
    assert r.hi_new - r.lo == 1


@settings(max_examples=300, deadline=None)
@given(
    edits=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=10**6),
            st.sampled_from(["(", ")", "@", "\n", "d", "def ", " ", "#", '"""', "", "@x\n"]),
            st.integers(min_value=0, max_value=3),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_resplit_equals_split_under_random_edits_near_decorators(
    edits: list[tuple[int, str, int]],
) -> None:
    """Random inserts and deletions (brackets, `@`, newlines, `def`) anywhere in a text with
    decorators, a class split at its methods and a matrix product: every re-split equals a
    fresh split."""
    text = DECORATED
    for offset, insert, cut in edits:
        at = offset % (len(text) + 1)
        new = text[:at] + insert + text[at + cut :]
        _resplit_matches_split(split_lines(text), split_lines(new))
        text = new
