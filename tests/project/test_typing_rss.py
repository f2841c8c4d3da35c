"""The indexer's memory while someone types in a large open file (docs/performance.md, "Peak
RSS while typing").

Two things made the indexer child's peak grow with a 20,000-line file open and edited: a
half-typed text (most prefixes of a statement do not parse) was parsed whole to learn that it
does not parse, the parser's heaviest case; and each version's summary, own facts and shared
facts stayed in memory until the next retain, 64 edits on. These tests check that neither
happens, and that nothing the index answers changes.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from bench.gen import module
from ddp_lsp.config import Settings
from ddp_lsp.project import wholeparse
from ddp_lsp.project.index import ProjectIndex
from ddp_lsp.project.wholeparse import parse_or_none

from .test_wholeparse import BROKEN, TRICKY, _spy, dump

# What a person types under a statement of a function body, key by key (as the shared
# harness's "type" edits), and prefixes whose failure the text after them can change.
TYPED = [
    "loss = criterion(model(inputs), targets)",
    "running_loss += loss.item()",
    'print(f"step {step} loss {loss.item():.4f}")',
    "if dist.get_rank() == 0:",
    "optimizer.zero_grad(set_to_none=True)",
]
OPEN_ENDED = ["x = (1,", "s = '''", "s = 'abc\\", "else:", "except E:", "@dec", "z = 1 +"]


def _ast_parse(text: str) -> str | None:
    try:
        return dump(ast.parse(text))
    except (SyntaxError, ValueError):
        return None


def _ours(text: str, min_chars: int = 0) -> str | None:
    tree = parse_or_none(text, min_chars=min_chars)
    return None if tree is None else dump(tree)


@pytest.mark.parametrize("text", TRICKY + BROKEN)
def test_parse_or_none_is_ast_parse_s_answer(text: str) -> None:
    assert _ours(text) == _ast_parse(text)


def _typed_texts(text: str, seed: int, count: int) -> list[str]:
    """``text`` with a prefix of a statement typed under a random line, ``count`` times."""
    rng = random.Random(seed)
    lines = text.split("\n")
    out = []
    for _ in range(count):
        i = rng.randrange(len(lines) + 1)
        snippet = rng.choice(TYPED + OPEN_ENDED)
        typed = snippet[: rng.randint(1, len(snippet))]
        indent = rng.choice(["", "    ", "        "])
        out.append("\n".join([*lines[:i], indent + typed, *lines[i:]]))
    return out


def test_half_typed_text_parses_exactly_when_ast_parse_says_so() -> None:
    # Code of every shape the generator writes, and the repository's own modules (classes,
    # decorators, docstrings, continued lines), each with statements half typed in it.
    texts = _typed_texts(module(400), 0, 120)
    for path in sorted((Path(__file__).resolve().parents[2] / "ddp_lsp" / "project").glob("*.py")):
        texts += _typed_texts(path.read_text(encoding="utf-8"), 1, 6)
    failing = 0
    for text in texts:
        expected = _ast_parse(text)
        failing += expected is None
        assert _ours(text) == expected
    assert failing > len(texts) // 3  # the check met both answers


def test_a_large_half_typed_file_is_not_parsed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    text = module(8000)
    assert len(text) >= wholeparse.PIECES_MIN_CHARS
    lines = text.split("\n")
    body = next(i for i in range(len(lines) // 2, len(lines)) if lines[i].startswith("        "))
    for typed in ("        running_loss +=", '        print(f"step {st', "        loss = crit("):
        bad = "\n".join([*lines[: body + 1], typed, *lines[body + 1 :]])
        assert _ast_parse(bad) is None
        sizes = _spy(monkeypatch)
        assert parse_or_none(bad) is None
        # The pieces up to the half-typed one, never the file: its parser's memory is a
        # function's, not the whole text's.
        assert sizes and max(sizes) < len(bad) // 2


def test_an_open_ended_piece_still_parses_the_whole_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # A bracket left open to the end of a piece (the chunker starts a new one at the `def`)
    # might close in a later one: that is ast.parse's to say, on the whole text.
    text = "def f():\n    return (1,\n\ndef g():\n    pass\n"
    sizes = _spy(monkeypatch)
    assert parse_or_none(text, min_chars=0) is None
    assert len(sizes) > 1 and sizes[-1] == len(text)
    # One that fails before its end fails the file, whatever follows.
    text = "def f():\n    return (1 2,\n\ndef g():\n    pass\n"
    sizes = _spy(monkeypatch)
    assert parse_or_none(text, min_chars=0) is None
    assert len(text) not in sizes


def test_a_block_left_open_at_a_piece_s_end_is_not_parsed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `if dist.get_rank() == 0:` typed as a function's last line, above a decorated function:
    # the piece fails as "incomplete input" (a block without its body, the decorator without
    # its function), which only what follows can complete. The text from that piece on is
    # parsed, never the whole text again (the harness's typing, seed 3: 395 MB summed with the
    # whole text parsed, 251 MB with this).
    text = module(8000)
    lines = text.split("\n")
    half = len(lines) // 2
    deco = next(i for i in range(half, len(lines)) if lines[i].startswith("@torch.no_grad"))
    last = max(i for i in range(half, deco) if lines[i].startswith("    "))
    for typed in ("    if dist.get_rank() == 0:", "    with torch.no_grad():", "    @dec"):
        bad = "\n".join([*lines[: last + 1], typed, *lines[last + 1 :]])
        assert _ast_parse(bad) is None
        sizes = _spy(monkeypatch)
        assert parse_or_none(bad) is None
        assert len(bad) not in sizes
        assert half < len(bad) - max(sizes)  # the text from the failing piece on, padded
    # Where a later line completes it, the tail's statements join the pieces'.
    fine = "\n".join([*lines[: last + 1], "    x = (1,", "2)", *lines[last + 1 :]])
    assert _ours(fine) == _ast_parse(fine)


def _indexed(tmp_path: Path) -> tuple[Path, ProjectIndex, list[str]]:
    """A project of one generated training script, indexed; the script's path and lines."""
    path = tmp_path / "train.py"
    text = module(300)
    path.write_text(text)
    return path, ProjectIndex(tmp_path, Settings(), cache_dir=False).build(), text.split("\n")


def test_updates_of_an_open_file_keep_no_old_version(tmp_path: Path) -> None:
    # Each pause while typing sends the file's text: the index keeps the summary it replaced
    # (the last computation reads it once more) and the new one, not every version since.
    path, index, lines = _indexed(tmp_path)
    stmt = next(i for i, line in enumerate(lines) if line.startswith("        ") and "=" in line)
    sizes = []
    for n in range(12):
        # a line added at a new place each time: every function below it moves
        edited = "\n".join([*lines[: stmt + n], "        x = 1", *lines[stmt + n :]])
        got = index.update(path, edited)
        assert got is not None and not got.syntax_error
        sizes.append((len(index.cache._memory), len(index._own), len(index.cache.share.memo)))
    assert max(s[0] for s in sizes) <= 3
    assert max(s[1] for s in sizes) <= 3
    assert len({s[2] for s in sizes}) == 1  # the shared memo does not grow with versions


def test_updates_answer_as_a_fresh_index_does(tmp_path: Path) -> None:
    path, index, lines = _indexed(tmp_path)
    (tmp_path / "fresh").mkdir()
    compared = 0
    for n in range(0, 80, 3):
        edited = "\n".join([*lines[:n], "x = 1", *lines[n:]])
        got = index.update(path, edited)
        (tmp_path / "fresh" / "train.py").write_text(edited)
        fresh = ProjectIndex(tmp_path / "fresh", Settings(), cache_dir=False).build()
        want = fresh.summaries["train.py"]
        if want.syntax_error:
            continue  # the index keeps what the file said while it last parsed
        compared += 1
        assert got == want
        assert index.own_facts(got) == fresh.own_facts(want)
    assert compared >= 5
