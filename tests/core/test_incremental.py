"""Incremental analysis equals a fresh analysis of the same text, whatever the edits.

Random edit sequences (insertions, deletions, replacements, including edits that break the
syntax and later restore it) are applied to realistic training scripts through
``Document.apply_edit``; after every step the findings must equal those of a fresh
``analyze(text)``, and the document's text must equal the text edited as a plain string.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.gen import module
from ddp_lsp.core.document import Document, split_lines
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.rule import Invalid
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.types import Finding, Pos
from tests.casekit import unmark

SETTINGS = Settings()

_TRAINER = '''import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    """A DDP trainer split at its methods."""

    def __init__(self, model, rank):
        self.rank = rank
        self.model = DDP(model.to(rank), device_ids=[rank])
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.scaler = torch.amp.GradScaler("cuda")

    def _step(self, inputs, targets):
        loss = self.model(inputs).sub(targets).pow(2).mean()
        self.scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.item()

    async def fit(self, loader):
        for inputs, targets in loader:
            if self.rank == 0:
                dist.barrier()
            self._step(inputs, targets)
'''

# (_TRAINER: a class split at its methods, where a bracket opened in one method ends at the
# next method's `def`.)
SCRIPTS = [module(120), _TRAINER] + [
    unmark(c.code).code for r in all_rules() for c in r.cases if isinstance(c, Invalid)
][:12]

# Fragments that matter to the splitter and the parser: brackets, quotes, newlines,
# decorators, new top-level defs, indentation, CRLF.
FRAGMENTS = st.sampled_from(
    [
        "",
        "x",
        "\n",
        "\r\n",
        "(",
        ")",
        "[",
        "]",
        "'",
        '"',
        '"""',
        "#",
        "\\\n",
        ":",
        "    ",
        "\t",
        "@decorator\n",
        "def f():\n    pass\n",
        "class C:\n    def m(self):\n        pass\n",
        "import torch.distributed as dist\n",
        "model = DDP(model)\n",
        "losses.append(loss)\n",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
        "é",
        "😀",
        "else:\n",
    ]
)


def _offset(lines: list[str], pos: Pos) -> int:
    line = min(pos.line, len(lines) - 1)
    body = len(lines[line].rstrip("\r\n"))
    return sum(len(x) for x in lines[:line]) + min(pos.col, body)


def _key(text: str | Document) -> list[tuple[object, ...]]:
    return [
        (f.rule_id, f.span, f.message, f.severity, f.fixes)
        for f in analyze(text, SETTINGS).findings
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.integers(min_value=0, max_value=len(SCRIPTS) - 1))
def test_incremental_equals_full(data: st.DataObject, which: int) -> None:
    text = SCRIPTS[which]
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    for _ in range(data.draw(st.integers(min_value=1, max_value=10), label="edits")):
        lines = split_lines(text)
        l0 = data.draw(st.integers(min_value=0, max_value=len(lines) - 1), label="line")
        c0 = data.draw(st.integers(min_value=0, max_value=len(lines[l0]) + 2), label="col")
        l1 = min(len(lines) - 1, l0 + data.draw(st.integers(0, 3), label="span"))
        c1 = data.draw(st.integers(min_value=0, max_value=len(lines[l1]) + 2), label="end col")
        frag = data.draw(FRAGMENTS, label="text")
        start, end = Pos(l0, c0), Pos(l1, c1)
        if end < start:
            start, end = end, start
        a, b = _offset(lines, start), _offset(lines, end)
        text = text[:a] + frag + text[b:]
        doc.apply_edit(start, end, frag)
        assert doc.text == text
        assert _key(doc) == _key(text)


def test_break_and_restore_keeps_other_findings() -> None:
    """A syntax error mid-typing costs only its own chunk's findings."""
    code = unmark(
        next(
            c.code
            for r in all_rules()
            if r.meta.id == "DDP201"
            for c in r.cases
            if isinstance(c, Invalid)
        )
    ).code
    text = code + "\n\ndef later():\n    return 1\n"
    doc = Document(text, SETTINGS.rank_model)
    before = [f for f in analyze(doc, SETTINGS).findings if f.rule_id == "DDP201"]
    assert before
    last = doc.line_count - 2  # "    return 1"
    doc.apply_edit(Pos(last, 4), Pos(last, 4), "(")  # "    (return 1": broken
    during = analyze(doc, SETTINGS).findings
    assert [f.rule_id for f in during].count("DDP000") == 1
    assert [f for f in during if f.rule_id == "DDP201"] == before
    doc.apply_edit(Pos(last, 4), Pos(last, 5), "")
    assert analyze(doc, SETTINGS).findings == analyze(text, SETTINGS).findings


# -- real typing -------------------------------------------------------------------------------

# Statements typed key by key: most of their prefixes do not parse (`wit`, `with`, `dist.all(`),
# and several change what the module knows once complete (a collective, a process group, a
# scaler, a rank variable).
STATEMENTS = [
    "with torch.no_grad():",
    "dist.all_reduce(loss)",
    "if dist.get_rank() == 0:",
    "torch.save(model.state_dict(), f'ckpt_{epoch}.pt')",
    "dist.init_process_group(backend='nccl')",
    "scaler = torch.cuda.amp.GradScaler()",
    "model = DDP(model, device_ids=[local_rank])",
    "local_rank = int(os.environ['LOCAL_RANK'])",
    "for batch in loader: sampler.set_epoch(epoch)",
    "xs = [dist.barrier() for _ in range(2)",
]
# Names that carry facts: an import alias, a wrapper, a kind, a collective, a rank variable.
FACT_NAMES = [
    "dist",
    "DDP",
    "model",
    "scaler",
    "GradScaler",
    "init_process_group",
    "local_rank",
    "sampler",
    "optimizer",
    "all_reduce",
    "barrier",
    "destroy_process_group",
    "rank",
    "torch",
]
_INDENTED = [
    [i for i, line in enumerate(split_lines(t)) if line.startswith((" ", "\t")) and line.strip()]
    for t in SCRIPTS
]


def _check(doc: Document, text: str, fresh: dict[str, list[tuple[object, ...]]]) -> None:
    """The document equals a fresh analysis of ``text``. ``fresh``: the example's fresh
    analyses by text, since these tests come back to texts they checked (a key typed, then
    deleted) and a fresh analysis of a string depends on the string alone: the incremental
    document is checked again at every step, the fresh analysis of a text is not redone."""
    assert doc.text == text
    if text not in fresh:
        fresh[text] = _key(text)
    assert _key(doc) == fresh[text]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.integers(min_value=0, max_value=len(SCRIPTS) - 1))
def test_typing_a_statement_key_by_key_equals_full(data: st.DataObject, which: int) -> None:
    """A new line in a function body, a statement typed into it key by key, then deleted key
    by key: after every key, incremental analysis equals a fresh one."""
    text = SCRIPTS[which]
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    fresh: dict[str, list[tuple[object, ...]]] = {}
    line = data.draw(st.sampled_from(_INDENTED[which]), label="after line")
    lines = split_lines(text)
    indent = lines[line][: len(lines[line]) - len(lines[line].lstrip(" \t"))]
    at = line + 1
    stmt = data.draw(st.sampled_from(STATEMENTS), label="statement")
    offset = sum(len(x) for x in lines[:at])
    doc.apply_edit(Pos(at, 0), Pos(at, 0), indent + "\n")
    text = text[:offset] + indent + "\n" + text[offset:]
    col = len(indent)
    for ch in stmt:
        doc.apply_edit(Pos(at, col), Pos(at, col), ch)
        text = text[: offset + col] + ch + text[offset + col :]
        col += 1
        _check(doc, text, fresh)
    for _ in range(data.draw(st.integers(min_value=1, max_value=len(stmt)), label="backspaces")):
        doc.apply_edit(Pos(at, col - 1), Pos(at, col), "")
        text = text[: offset + col - 1] + text[offset + col :]
        col -= 1
        _check(doc, text, fresh)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.integers(min_value=0, max_value=len(SCRIPTS) - 1))
def test_editing_a_fact_bearing_name_equals_full(data: st.DataObject, which: int) -> None:
    """An import alias, a DDP-wrapped name, a collective's name... shortened key by key and
    retyped (or changed): the module facts change on the way, findings stay exact."""
    import re

    text = SCRIPTS[which]
    spots = [
        (m.start(), m.end())
        for name in FACT_NAMES
        for m in re.finditer(rf"\b{re.escape(name)}\b", text)
    ]
    if not spots:
        return
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    fresh: dict[str, list[tuple[object, ...]]] = {}
    start, end = data.draw(st.sampled_from(sorted(spots)), label="name")
    word = text[start:end]
    cut = data.draw(st.integers(min_value=1, max_value=len(word)), label="deleted")
    retype = data.draw(st.sampled_from([word[len(word) - cut :], "x", "_2", ""]), label="typed")

    def pos(offset: int) -> Pos:
        head = text[:offset]
        line = head.count("\n")
        return Pos(line, offset - (head.rfind("\n") + 1))

    cur = end
    for _ in range(cut):
        p0, p1 = pos(cur - 1), pos(cur)
        doc.apply_edit(p0, p1, "")
        text = text[: cur - 1] + text[cur:]
        cur -= 1
        _check(doc, text, fresh)
    for ch in retype:
        doc.apply_edit(pos(cur), pos(cur), ch)
        text = text[:cur] + ch + text[cur:]
        cur += 1
        _check(doc, text, fresh)


def _outside(findings: tuple[Finding, ...], lo: int, hi: int) -> list[Finding]:
    return [f for f in findings if not lo <= f.span.start.line <= hi]


def test_untouched_chunks_never_flicker_while_a_line_is_half_typed() -> None:
    """While statements are typed into one function of a 400-line module, no other chunk's
    findings change and no other chunk re-runs its rules; the function's own other lines keep
    their findings until the statement is complete."""
    text = module(400)
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    at = next(i for i, line in enumerate(doc.lines) if i > 150 and "running += loss" in line) + 1
    doc.apply_edit(Pos(at, 0), Pos(at, 0), "        \n")
    base = analyze(doc, SETTINGS).findings
    start = max(s for s, _ in doc.chunks() if s <= at)
    end = min((s for s, _ in doc.chunks() if s > at), default=doc.line_count) - 1
    outside = _outside(base, start, end)
    inside = [f for f in base if start <= f.span.start.line <= end]
    assert outside and inside
    typed = ["with torch.no_grad():", "if dist.get_rank() == 0:", "print(f'loss {loss.item()}')"]
    for stmt in typed:
        for k in range(1, len(stmt) + 1):
            doc.apply_edit(Pos(at, 8), Pos(at, len(doc.lines[at].rstrip("\n"))), stmt[:k])
            now = analyze(doc, SETTINGS).findings
            assert _outside(now, start, end) == outside, stmt[:k]
            assert doc.rules_ran <= 1, stmt[:k]
            if k < len(stmt):
                mine = [
                    f for f in now if start <= f.span.start.line <= end and f.span.start.line != at
                ]
                mine = [f for f in mine if f.rule_id != "DDP000"]
                # A finding that groups the reads of one step (DDP302) names the typed read as a
                # related location once it parses: same place, message and related grow.
                assert [(f.rule_id, f.span) for f in mine] == [(f.rule_id, f.span) for f in inside]
                grouped = [any(r.span.start.line == at for r in f.related) for f in mine]
                assert all(
                    f.rule_id == "DDP302" for f, g in zip(mine, grouped, strict=True) if g
                ), stmt[:k]
                assert [f for f, g in zip(mine, grouped, strict=True) if not g] == [
                    f for f, g in zip(inside, grouped, strict=True) if not g
                ], stmt[:k]
        doc.apply_edit(Pos(at, 8), Pos(at, len(doc.lines[at].rstrip("\n"))), "")


_DECORATED_BELOW = """import torch
import torch.distributed as dist


def train(model, loader, criterion):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()


@rank_zero_only
def save(model):
    dist.barrier()
    torch.save(model.state_dict(), "x.pt")
"""


def test_a_decorated_function_keeps_its_findings_while_a_call_is_typed_above_it() -> None:
    """A call typed on the last line of a function leaves a bracket open until it is closed;
    the decorated function below keeps its decorator (`@rank_zero_only`: the barrier under it
    is reached by rank 0 only, DDP103) on every keystroke, incrementally and in a full analysis."""
    doc = Document(_DECORATED_BELOW, SETTINGS.rank_model)
    base = analyze(doc, SETTINGS).findings
    assert [f.rule_id for f in base] == ["DDP103"]
    at = 8
    doc.apply_edit(Pos(at, 0), Pos(at, 0), "        \n")
    moved = [(f.rule_id, f.shifted(1).span) for f in base]
    stmt = "z = criterion(model(x), y)"
    for k in range(1, len(stmt) + 1):
        doc.apply_edit(Pos(at, 8), Pos(at, len(doc.lines[at].rstrip("\n"))), stmt[:k])
        now = analyze(doc, SETTINGS).findings
        assert [(f.rule_id, f.span) for f in now if f.rule_id != "DDP000"] == moved, stmt[:k]
        assert _key(doc) == _key(doc.text), stmt[:k]


# (also bench/flicker.py's case: tests/bench/test_flicker.py)
CALLED_BY_RANK_ZERO = """import torch.distributed as dist


def evaluate(model, loss):
    model.eval()
    return loss


def main(model, loss):
    if dist.get_rank() == 0:
        evaluate(model, loss)
"""


def test_a_half_typed_collective_does_not_reach_other_chunks_until_it_parses() -> None:
    """`dist.all_reduce(loss, op=...)` typed key by key into `evaluate`, which only rank 0
    calls: while the call does not parse, the module keeps the facts of `evaluate` without it
    (the statement set aside), so `main`'s DDP103 ("evaluate reaches a collective on rank 0
    only") does not come with `dist.all_reduce(` closed by the repair and go with
    `dist.all_reduce(loss, op=` that cannot be closed; it comes once, with the whole call."""
    doc = Document(CALLED_BY_RANK_ZERO, SETTINGS.rank_model)
    assert analyze(doc, SETTINGS).findings == ()
    at = 5
    doc.apply_edit(Pos(at, 0), Pos(at, 0), "    \n")
    stmt = "dist.all_reduce(loss, op=dist.ReduceOp.SUM)"
    seen = []
    for k in range(1, len(stmt) + 1):
        doc.apply_edit(Pos(at, 4), Pos(at, len(doc.lines[at].rstrip("\n"))), stmt[:k])
        now = [f.rule_id for f in analyze(doc, SETTINGS).findings if f.rule_id != "DDP000"]
        seen.append("DDP103" in now)
        assert _key(doc) == _key(doc.text), stmt[:k]
    assert seen == [False] * (len(stmt) - 1) + [True]


def test_a_process_group_edit_reruns_only_the_chunks_that_depend_on_it() -> None:
    """Editing `dist.init_process_group(...)` in main, through states that do not parse, re-runs
    a handful of chunks, not every chunk of the module, and stays equal to a full analysis."""
    text = module(1500)
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    line = next(i for i, s in enumerate(doc.lines) if "dist.init_process_group(" in s)
    chunks = len(doc.chunks())
    for new in (
        '    dist.init_process_group("nccl", timeout=None)',
        '    dist.init_process_group("nccl", timeout=',
        '    dist.init_process_grou("nccl")',
        '    dist.init_process_group("gloo")',
    ):
        doc.apply_edit(Pos(line, 0), Pos(line, len(doc.lines[line].rstrip("\n"))), new)
        assert _key(doc) == _key(doc.text)
        assert doc.rules_ran <= 3 < chunks, new


_CASES = [
    unmark(c.code).code if isinstance(c, Invalid) else c.code for r in all_rules() for c in r.cases
]


def test_renaming_each_fact_bearing_name_of_every_rule_case_equals_full() -> None:
    """Every rule case, every occurrence of a name that carries facts, renamed and restored:
    the chunks that read the old entry re-run, the others keep findings that are still exact."""
    import re

    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, FACT_NAMES)) + r")\b")
    checked = 0
    for text in _CASES:
        doc = Document(text, SETTINGS.rank_model)
        if len(doc.chunks()) < 2:
            continue
        base = _key(doc)
        # The first and the last occurrence of each name: the definition and a late use (every
        # occurrence of every name took 27 s and re-checked the same entries).
        seen: dict[str, list[re.Match[str]]] = {}
        for m in pattern.finditer(text):
            seen.setdefault(m.group(), []).append(m)
        ends = {m.start(): m for ms in seen.values() for m in (ms[0], ms[-1])}
        chosen = [ends[start] for start in sorted(ends)]
        for m in chosen:
            head = text[: m.end()]
            at = Pos(head.count("\n"), m.end() - (head.rfind("\n") + 1))
            doc.apply_edit(at, at, "x")
            assert _key(doc) == _key(doc.text), (text, m.group())
            doc.apply_edit(at, Pos(at.line, at.col + 1), "")
            assert _key(doc) == base, (text, m.group())
            checked += 1
    assert checked > 200


def test_an_edit_undone_brings_back_the_chunk_its_parse_and_its_findings() -> None:
    """A character typed into a function and deleted again, a line typed and deleted: the text
    the function had before comes back with its parse, facts and cached findings (the chunk an
    edit replaced is kept for a while), so the undo runs no rules and the findings are those
    of a fresh analysis."""
    text = module(200)
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    at = next(i for i, line in enumerate(doc.lines) if i > 60 and "running += loss" in line)
    start = max(s for s, _ in doc.chunks() if s <= at)
    before = dict(doc.chunks())[start]
    col = doc.lines[at].index("loss")
    doc.apply_edit(Pos(at, col + 2), Pos(at, col + 2), "x")  # losxs: a new name
    analyze(doc, SETTINGS)
    assert doc.rules_ran == 1 and dict(doc.chunks())[start] is not before
    doc.apply_edit(Pos(at, col + 2), Pos(at, col + 3), "")  # and back
    assert dict(doc.chunks())[start] is before
    assert _key(doc) == _key(text)
    assert doc.rules_ran == 0
    # A statement typed key by key on a new line, then the line deleted.
    end = len(doc.lines[at].rstrip("\n"))
    doc.apply_edit(Pos(at, end), Pos(at, end), "\n        ")
    for ch in "dist.barrier()":
        n = len(doc.lines[at + 1].rstrip("\n"))
        doc.apply_edit(Pos(at + 1, n), Pos(at + 1, n), ch)
        analyze(doc, SETTINGS)
    doc.apply_edit(Pos(at, end), Pos(at + 1, len(doc.lines[at + 1].rstrip("\n"))), "")
    assert dict(doc.chunks())[start] is before
    assert _key(doc) == _key(text)
    assert doc.rules_ran == 0


def test_keys_that_leave_a_line_set_aside_the_same_way_run_no_rules() -> None:
    """`if dist.get_rank() == 0` typed key by key before its ':': from `if` on, every key
    leaves a chunk repaired to the same lines (the half-typed line set aside as `pass`), so
    the chunk shares the first such key's tree, facts and findings; the rules run once, and
    the findings equal a fresh analysis of each text. The rules read the repaired lines."""
    text = module(200)
    doc = Document(text, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    at = next(i for i, line in enumerate(doc.lines) if i > 60 and "running += loss" in line)
    end = len(doc.lines[at].rstrip("\n"))
    doc.apply_edit(Pos(at, end), Pos(at, end), "\n        ")
    analyze(doc, SETTINGS)
    start = max(s for s, _ in doc.chunks() if s <= at + 1)
    ran = []
    for ch in "if dist.get_rank() == 0":
        n = len(doc.lines[at + 1].rstrip("\n"))
        doc.apply_edit(Pos(at + 1, n), Pos(at + 1, n), ch)
        analyze(doc, SETTINGS)
        ran.append(doc.rules_ran)
        assert _key(doc) == _key(doc.text)
    chunk = dict(doc.chunks())[start]
    assert chunk.problem is not None and chunk.lines[at + 1 - start] == "        pass\n"
    # `i` parses (a name); `if` and every key after it are set aside as the same `pass`.
    assert ran[:2] == [1, 1] and ran[2:] == [0] * (len(ran) - 2)


def test_an_open_bracket_in_a_method_keeps_the_class_s_later_methods_their_chunks() -> None:
    """A call typed key by key into a class's method: while its bracket is open, the class's
    later methods (`def` and `async def` at the class body's indent, which no open bracket of
    valid code reaches) keep their chunks, parses and cached findings; only the edited
    method's chunk runs its rules, and the findings equal a fresh analysis of every text."""
    doc = Document(_TRAINER, SETTINGS.rank_model)
    analyze(doc, SETTINGS)
    starts = [s for s, _ in doc.chunks()]
    at = next(i for i, line in enumerate(doc.lines) if "GradScaler" in line)
    later = {s: pc for s, pc in doc.chunks() if s > at}
    assert len(later) == 2  # _step and fit
    end = len(doc.lines[at].rstrip("\n"))
    doc.apply_edit(Pos(at, end), Pos(at, end), "\n        ")
    analyze(doc, SETTINGS)
    stmt = "torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)"
    for k, ch in enumerate(stmt):
        n = len(doc.lines[at + 1].rstrip("\n"))
        doc.apply_edit(Pos(at + 1, n), Pos(at + 1, n), ch)
        assert _key(doc) == _key(doc.text), stmt[: k + 1]
        assert doc.rules_ran <= 1
        now = {s - 1: pc for s, pc in doc.chunks() if s > at + 1}
        kept = now.keys() == later.keys() and all(now[s] is pc for s, pc in later.items())
        assert kept, stmt[: k + 1]
    doc.apply_edit(Pos(at, end), Pos(at + 1, len(doc.lines[at + 1].rstrip("\n"))), "")
    assert [s for s, _ in doc.chunks()] == starts
    assert _key(doc) == _key(_TRAINER)


def test_a_def_inside_brackets_is_not_a_method_of_valid_code() -> None:
    """Valid code never has `def` first on a line inside brackets; a name starting with `def`
    there (`default=`) or a `def` deeper than the class body is no method start."""
    text = (
        "class C:\n"
        "    def m(self):\n"
        "        return dict(\n"
        "    default=1,\n"
        "    defer=2)\n"
        "\n"
        "    def n(self):\n"
        "        return 2\n"
    )
    doc = Document(text, SETTINGS.rank_model)
    assert [s for s, _ in doc.chunks()] == [0, 6]
    assert all(pc.problem is None for _, pc in doc.chunks())


def test_an_edit_that_moves_no_line_keeps_the_other_chunks_pairs() -> None:
    """``Document.chunks`` after a keystroke within a line: the other chunks' (start, parse)
    pairs are the very ones of before (not rebuilt per keystroke), and equal a rebuild."""
    doc = Document(module(400))
    before = doc.chunks()
    line = before[len(before) // 2][0] + 1
    doc.apply_edit(Pos(line, 4), Pos(line, 4), "x")
    after = doc.chunks()
    assert sum(a is b for a, b in zip(before, after, strict=True)) == len(before) - 1
    doc._pairs = None
    assert doc.chunks() == after
    doc.apply_edit(Pos(line, 4), Pos(line, 5), "")
    assert doc.chunks() == before
