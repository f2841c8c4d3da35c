"""The module merge after an edit (core/factderive.py's ``_merge_edit``) equals a fresh merge.

The incremental merge keeps each function's derived properties and re-derives only the
functions an edit can change: the edited ones, their callers (transitively), and what the
gate resolution reads for them. Naive reuse breaks exactly where one function's properties
depend on another's: ``middle`` performs a collective only through ``helper`` and ``sync``;
``sync``'s collective is switched off by its ``flag`` parameter, which makes calls binding
``flag=False`` no collective; ``save`` is only called under a rank-0 guard. Random edit
sequences change those links (a collective renamed to ``print``, a call redirected to another
helper, a guard dropped, a new call line typed, an import edited), and after every edit the
document's module facts and findings must equal a fresh analysis of the same text.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddp_lsp.core import factderive
from ddp_lsp.core.document import Document, split_lines
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.facts import ModuleFacts
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Pos

SETTINGS = Settings()

CODE = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def sync(t, flag=True):
    if flag:
        dist.all_reduce(t)
    return t


def helper(t):
    return sync(t)


def middle(t):
    return helper(t)


def quiet(t):
    return sync(t, flag=False)


def save(model):
    torch.save(model.state_dict(), "m.pt")


def is_main():
    return dist.get_rank() == 0


class Trainer:
    def __init__(self, model, scaler):
        self.model = DDP(model)
        self.scaler = scaler

    def step(self, loss):
        self.scaler.update()
        middle(loss)
        self.helper_call(loss)

    def helper_call(self, loss):
        quiet(loss)


def train(model, loader):
    for batch in loader:
        loss = model(batch).sum()
        loss.backward()
        middle(loss)


def main():
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(2, 2))
    net = model
    if is_main():
        save(model)
        quiet(torch.ones(1))
        middle(torch.ones(1))
    train(net, [])
    trainer = Trainer(model, None)
    trainer.step(torch.ones(1))
"""

# (text, replacement): edits of what the facts carry from one function to another.
SWAPS = [
    ("dist.all_reduce", "print"),
    ("print", "dist.all_reduce"),
    ("dist.all_reduce", "dist.barrier"),
    ("return sync(t)", "return t"),
    ("return t\n", "return sync(t)\n"),
    ("return helper(t)", "return quiet(t)"),
    ("return quiet(t)", "return helper(t)"),
    ("flag=False", "flag=True"),
    ("flag=True", "flag=False"),
    ("if flag:", "if True:"),
    ("if is_main():", "if True:"),
    ("if True:", "if is_main():"),
    ("dist.get_rank() == 0", "0 == 0"),
    ("DDP(", "list("),
    ("list(", "DDP("),
    ("middle(loss)", "save(loss)"),
    ("save(model)", "middle(model)"),
    ("net = model", "net = torch.nn.Linear(1, 1)"),
    ("self.scaler.update()", "self.scaler.step()"),
    ("quiet(loss)", "sync(loss)"),
    ("import torch.distributed as dist", "import torch.distributed as dst"),
    ("def quiet(t):", "def quieter(t):"),
]


def _pos(text: str, offset: int) -> Pos:
    head = text[:offset]
    return Pos(head.count("\n"), offset - (head.rfind("\n") + 1))


def _facts_key(facts: ModuleFacts) -> tuple[object, ...]:
    return (facts.key, facts.kind_set, facts.prop_set)


def _findings(source: str | Document) -> list[tuple[object, ...]]:
    return [(f.rule_id, f.span, f.message) for f in analyze(source, SETTINGS).findings]


@st.composite
def _edit(draw: st.DrawFn, text: str) -> tuple[int, int, str]:
    """(start offset, end offset, new text) of one edit of ``text``."""
    lines = split_lines(text)
    kind = draw(st.sampled_from(["swap", "swap", "call", "delete", "char"]))
    if kind == "swap":
        found = [(old, new) for old, new in SWAPS if old in text]
        if found:
            old, new = draw(st.sampled_from(found))
            hits = [i for i in range(len(text)) if text.startswith(old, i)]
            at = draw(st.sampled_from(hits))
            return at, at + len(old), new
    body = [i for i, line in enumerate(lines) if line.startswith("    ") and line.strip()]
    line = draw(st.sampled_from(body))
    start = sum(len(x) for x in lines[:line])
    if kind == "call":
        # A call of another function typed on a new line of a body (the facts link them).
        callee = draw(
            st.sampled_from(["sync(t)", "helper(t)", "middle(t)", "save(t)", "dist.barrier()"])
        )
        indent = lines[line][: len(lines[line]) - len(lines[line].lstrip())]
        return start, start, f"{indent}{callee}\n"
    if kind == "delete":
        return start, start + len(lines[line]), ""
    # A character typed into an identifier of a body (often the name of a helper called).
    words = [i for i, c in enumerate(lines[line]) if c.isalpha() and lines[line][i - 1] != "."]
    col = draw(st.sampled_from(words)) if words else len(lines[line].rstrip("\n"))
    return start + col, start + col, draw(st.sampled_from(["x", "_", "2"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_incremental_merge_equals_a_fresh_merge(data: st.DataObject) -> None:
    text = CODE
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    for _ in range(data.draw(st.integers(min_value=1, max_value=12), label="edits")):
        a, b, new = data.draw(_edit(text), label="edit")
        doc.apply_edit(_pos(text, a), _pos(text, b), new)
        text = text[:a] + new + text[b:]
        assert doc.text == text
        assert _facts_key(doc.module_facts()) == _facts_key(
            Document(text, SETTINGS.rank_model).module_facts()
        )
        assert _findings(doc) == _findings(text)


def test_a_callee_change_reaches_its_callers_through_the_incremental_merge() -> None:
    """``middle`` performs a collective only through ``helper``: when ``helper`` stops calling
    ``sync``, the merge after the edit (not a fresh one) drops it from ``middle`` too."""
    doc = Document(CODE, SETTINGS.rank_model)
    before = doc.module_facts()
    assert "collective" in before.props("middle")
    assert doc._merge_cache.state is not None  # the derivation is kept for the next merge
    lines = split_lines(CODE)
    line = lines.index("    return sync(t)\n")
    full = []
    real = factderive._merge_all

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        full.append(1)
        return real(*args, **kwargs)

    factderive._merge_all = counting  # type: ignore[assignment]
    try:
        doc.apply_edit(Pos(line, 11), Pos(line, 18), "t")
        after = doc.module_facts()
    finally:
        factderive._merge_all = real  # type: ignore[assignment]
    assert not full  # merged incrementally
    assert "collective" not in after.props("helper")
    assert "collective" not in after.props("middle")
    assert "collective" in after.props("sync")
    assert after == Document(doc.text, SETTINGS.rank_model).module_facts()


DUPLICATES = """\
import torch.distributed as dist

x = 1


def dup(t):
    return t


def dup(t):
    return t


x = 1


def user(t):
    dup(t)
"""


def test_chunks_of_equal_text_share_facts_and_still_merge_exactly() -> None:
    """Equal chunks share one parse (and one facts object), so an edit can replace the same
    facts object at two places at once; the merge after it still equals a fresh one."""
    doc = Document(DUPLICATES, SETTINGS.rank_model)
    doc.module_facts()
    steps = [
        # Set again with `user` changed: the copies of `dup` (and of `x = 1`) now share one
        # parse, and the module facts are merged with them.
        DUPLICATES.replace("    dup(t)\n", "    dup(t)\n    dist.barrier()\n"),
        DUPLICATES.replace("    return t\n", "    dist.barrier()\n"),  # both copies at once
        DUPLICATES.replace("x = 1\n", "x = dist.get_rank()\n"),
        DUPLICATES.replace("    return t\n", "    dist.barrier()\n", 1),  # the first copy only
        DUPLICATES,
    ]
    for text in steps:
        doc.set_text(text)
        assert doc.text == text
        assert _facts_key(doc.module_facts()) == _facts_key(
            Document(text, SETTINGS.rank_model).module_facts()
        )
        assert _findings(doc) == _findings(text)


DECORATED = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")


def setup(rank):
    torch.cuda.set_device(rank)
    print(rank)


@torch.no_grad()
def evaluate(model):
    dist.barrier()
    return model
"""


def test_a_bracket_left_open_while_typing_merges_incrementally() -> None:
    """Typing ``dist.barrier(`` on the last line of ``setup``: until the ``)`` the open
    bracket takes the decorator below into ``setup``'s chunk, so the top-level code of
    ``evaluate``'s chunk (the decorator's call) comes and goes with the keystrokes. The
    functions keep their order, so the merge stays incremental, and equals a fresh one."""
    doc = Document(DECORATED, SETTINGS.rank_model)
    doc.module_facts()
    line = split_lines(DECORATED).index("    print(rank)\n")
    full = []
    real = factderive._merge_all

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        full.append(1)
        return real(*args, **kwargs)

    for start, end, typed in ((4, 15, "dist.barrier("), (17, 17, ")")):
        doc.apply_edit(Pos(line, start), Pos(line, end), typed)
        factderive._merge_all = counting  # type: ignore[assignment]
        try:
            facts = doc.module_facts()
        finally:
            factderive._merge_all = real  # type: ignore[assignment]
        assert facts == Document(doc.text, SETTINGS.rank_model).module_facts()
        assert _findings(doc) == _findings(doc.text)
    assert doc.lines[line] == "    dist.barrier()\n"
    assert "collective" in facts.props("setup")
    assert not full  # both merges incremental
