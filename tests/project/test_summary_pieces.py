"""The project's summary of a large file, made top-level piece by piece with each piece's tree
dropped before the next is parsed (docs/performance.md, "Peak RSS while typing"), is the
summary of the whole tree: the same facts, lines, bases and names handed, and the same
verdict for a text that does not parse.

``min_chars=0`` sends any text down the piecewise path; ``min_chars`` above its length, down
the whole-tree one.
"""

from __future__ import annotations

import ast
import weakref
from pathlib import Path

import pytest

from bench.gen import module
from ddp_lsp.config import Settings
from ddp_lsp.project import summary, wholeparse
from ddp_lsp.project.index import ProjectIndex

from .test_typing_rss import _typed_texts
from .test_wholeparse import BROKEN, TRICKY

REPO = Path(__file__).resolve().parents[2]
RANKS = Settings().rank_model

RESTARTS = (
    "import torch.distributed as dist\n\ndef a():\n    dist.barrier()\n\na()\n"
    "def f():\n  x = dist.get_rank()\n\x0c  return x\n\ndef g():\n    a()\n"
)

# What the extractor carries from one top-level statement to the next, or looks up across the
# module's body, each across a cut of the chunk splitter (a top-level `def`, `class`, `if`).
ACROSS = [
    # a guard at the top level (`if rank != 0: raise SystemExit`) guards what follows
    "import torch\nimport torch.distributed as dist\n\ndef setup():\n"
    "    dist.init_process_group('nccl')\n\nsetup()\nif dist.get_rank() != 0:\n"
    "    raise SystemExit(0)\n\ndef save(model, path):\n    torch.save(model.state_dict(), path)\n\n"
    "save(net, 'out.pt')\ntrain(net)\n",
    # barrier ifs at the top level, apart; `if __name__ == "__main__":` at the end
    "import torch.distributed as dist\nif dist.get_rank() == 0:\n    prepare()\n    dist.barrier()\n"
    "\ndef f():\n    pass\n\nif dist.get_rank() != 0:\n    dist.barrier()\n\n"
    "def main():\n    f()\n\nif __name__ == '__main__':\n    main()\n    dist.destroy_process_group()\n",
    # methods of top-level classes hand names under `Class.method`; decorators; a method
    # named as a top-level function elsewhere (the summary's walk yields it bare too)
    "import torch.multiprocessing as mp\nimport torch.distributed as dist\n\n"
    "class Trainer(Base, mixins.Saver):\n    @staticmethod\n    def run(rank, cfg):\n"
    "        dist.all_reduce(cfg)\n\n    def launch(self):\n        mp.spawn(self.run, args=(self.cfg,))\n"
    "        helper(self.model, run)\n\n@register(name='x')\n@torch.no_grad()\ndef run(x):\n"
    "    dist.barrier()\n    return launch(x, run)\n\ndef outer():\n    def inner():\n"
    "        dist.all_reduce(t)\n    inner()\n    return inner\n\nlaunch(run, outer)\n",
    # a helper defined below its caller gives the caller its property (the merged facts)
    "def a():\n    b()\n\ndef b():\n    c()\n\ndef c():\n    import torch.distributed as d\n"
    "    d.all_reduce(x)\n\nimport torch.distributed as dist\nfrom torch.nn.parallel import "
    "DistributedDataParallel as DDP\nmodel = Net()\n\ndef wrap():\n    global model\n"
    "    model = DDP(model.to(dev))\n\nmodel = DDP(model)\nm2: DDP = DDP(model)\n",
    # a class split at its methods stays one piece; a class in a function; a lambda
    "class A:\n    x = 1\n\n    def m(self):\n        return self.n()\n\n    def n(self):\n"
    "        dist.broadcast(t, 0)\n\ndef f():\n    class B:\n        def m(self):\n"
    "            dist.barrier()\n    g = lambda: dist.barrier()\n    return B, g\n",
    # a piece that only the whole text's parse decides (a form feed before an indented line:
    # the splitter cuts there), after pieces already walked: they are walked again, once
    RESTARTS,
]


def _both(text: str) -> tuple[object, object]:
    whole = summary.summarise_with_facts("pkg/m.py", text, "k", RANKS, min_chars=len(text) + 1)
    pieces = summary.summarise_with_facts("pkg/m.py", text, "k", RANKS, min_chars=0)
    return whole, pieces


@pytest.mark.parametrize("text", ACROSS + TRICKY + BROKEN)
def test_pieces_give_the_whole_tree_s_summary(text: str) -> None:
    whole, pieces = _both(text)
    assert pieces == whole


def test_the_cases_say_something() -> None:
    # (So that the equality above is not between two empty summaries.)
    s, own = _both(ACROSS[0])[1]  # type: ignore[misc]
    assert own is not None and any(site.guarded for site in s.facts.call_sites)
    assert _both(ACROSS[1])[1][0].facts.barrier_ifs == 2  # type: ignore[index]
    s = _both(ACROSS[2])[1][0]  # type: ignore[index]
    assert ("Trainer.launch", "self.run") in s.handed and s.prop_lines
    assert dict(s.bases)["Trainer"] == ("Base", "mixins.Saver")
    assert _both(ACROSS[3])[1][0].binding_lines  # type: ignore[index]


def test_a_restart_forgets_the_pieces_walked_before_it() -> None:
    parts = list(wholeparse.bodies(RESTARTS, 0))
    assert parts[-2] is wholeparse.RESTART and len(parts) > 2
    assert _both(RESTARTS)[1][0].facts.call_sites  # type: ignore[index]


def test_generated_and_repository_modules() -> None:
    texts = [module(600)]
    texts += [p.read_text(encoding="utf-8") for p in sorted((REPO / "ddp_lsp").rglob("*.py"))]
    for text in texts:
        whole, pieces = _both(text)
        assert pieces == whole


def test_half_typed_texts() -> None:
    # Statements half typed anywhere (most do not parse; some open a bracket or a block that
    # only the text after them decides): the same verdict, and the same summary where it parses.
    texts = _typed_texts(module(300), 3, 60) + _typed_texts(ACROSS[2] * 3, 4, 30)
    for text in texts:
        whole, pieces = _both(text)
        assert pieces == whole


# Nodes the parser shares between trees (one `Load`, one `Add`...), and the module itself.
_SHARED = (ast.Module, ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)


def test_each_piece_s_tree_is_freed_before_the_next_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Weak references to every node of each piece's tree: when the next piece is parsed,
    # none of the earlier ones may be alive (the whole tree was, and with it 49 MB at
    # 20,000 lines).
    parse = ast.parse
    alive: list[weakref.ref[ast.AST]] = []
    worst = []

    def spy(text: str, *args: object, **kwargs: object) -> ast.Module:
        worst.append(sum(r() is not None for r in alive))
        tree = parse(text, *args, **kwargs)  # type: ignore[arg-type]
        alive.extend(weakref.ref(n) for n in ast.walk(tree) if not isinstance(n, _SHARED))
        return tree

    monkeypatch.setattr(wholeparse.ast, "parse", spy)
    text = module(600)
    s, own = summary.summarise_with_facts("m.py", text, "k", RANKS, min_chars=0)
    assert len(worst) > 10 and own is not None and s.prop_lines
    assert max(worst) == 0
    # Nor while a half-typed edit is found not to parse (the pieces above it parsed first).
    worst.clear()
    head, mark, tail = text.rpartition("    model.train()\n")  # in the last function
    typed = head + "    model.train(\n" + tail
    hint = text.encode()
    s, own = summary.summarise_with_facts("m.py", typed, "k", RANKS, previous=hint, min_chars=0)
    assert s.syntax_error and len(worst) > 10 and max(worst) == 0


def test_the_text_before_an_edit_changes_no_summary() -> None:
    # `previous` only says where to look first: half typed or not, the same summary.
    base = module(300)
    for text in _typed_texts(base, 6, 40) + [base, ACROSS[2], RESTARTS, ""]:
        whole, _ = _both(text)
        for before in (base, "", ACROSS[0], text):
            hinted = summary.summarise_with_facts(
                "pkg/m.py", text, "k", RANKS, previous=before.encode(), min_chars=0
            )
            assert hinted == whole


@pytest.mark.parametrize(
    ("old", "new", "lines"),
    [
        ("a\nb\nc\n", "a\nb\nc\n", (3, 4)),  # unchanged: the end
        ("a\nb\nc\n", "a\nbX\nc\n", (1, 2)),
        ("a\nb\nc\n", "a\nb\nnew\nc\n", (2, 4)),  # (a line more than needed: a hint)
        ("a\nb\nc\n", "a\nc\n", (1, 2)),  # a line removed: where it was
        ("a\nb\n", "x\ny\nz\n", (0, 3)),
        ("aa\n", "aaa\n", (0, 1)),
    ],
)
def test_changed_lines(old: str, new: str, lines: tuple[int, int]) -> None:
    assert wholeparse.changed_lines(old, new) == lines


def _feeds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    fed: list[int] = []
    feed = summary.ModuleFeed.feed

    def spy(self: summary.ModuleFeed, body: list[ast.stmt]) -> None:
        fed.append(len(body))
        feed(self, body)

    monkeypatch.setattr(summary.ModuleFeed, "feed", spy)
    return fed


def test_a_half_typed_edit_walks_no_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    # Typing in the middle of a large file: without the text before the edit, the pieces
    # above the half-typed line were walked before it was found not to parse.
    text = module(600)
    lines = text.split("\n")
    at = next(i for i in range(len(lines) // 2, len(lines)) if lines[i].startswith("        "))
    typed = "\n".join([*lines[:at], "        loss = crit(model(x", *lines[at:]])
    fed = _feeds(monkeypatch)
    s, own = summary.summarise_with_facts("m.py", typed, "k", RANKS, min_chars=0)
    assert s.syntax_error and own is None and len(fed) > 10  # walked, for nothing
    fed.clear()
    s, own = summary.summarise_with_facts(
        "m.py", typed, "k", RANKS, previous=text.encode(), min_chars=0
    )
    assert s.syntax_error and own is None and fed == []
    # A clean edit is walked piece by piece as before.
    clean = "\n".join([*lines[:at], "        x = 1", *lines[at:]])
    s, own = summary.summarise_with_facts(
        "m.py", clean, "k", RANKS, previous=text.encode(), min_chars=0
    )
    assert not s.syntax_error and len(fed) > 10


def test_the_index_hands_the_text_before_an_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "train.py"
    text = module(9000)  # over wholeparse.PIECES_MIN_CHARS: summarised in pieces
    assert len(text) >= wholeparse.PIECES_MIN_CHARS
    path.write_text(text)
    index = ProjectIndex(tmp_path, Settings(), cache_dir=False).build()
    lines = text.split("\n")
    at = next(i for i in range(len(lines) // 2, len(lines)) if lines[i].startswith("        "))
    index.update(path, "\n".join([*lines[:at], "        x = 1", *lines[at:]]))
    fed = _feeds(monkeypatch)
    index.update(path, "\n".join([*lines[:at], "        x = 1", "        y = f(", *lines[at:]]))
    assert fed == []
    clean = "\n".join([*lines[:at], "        x = 1", "        y = f()", *lines[at:]])
    assert not index.update(path, clean).syntax_error  # type: ignore[union-attr]
    assert len(fed) > 100
