"""What ChunkContext shares between the rules of one chunk: the calls by qualified name, each
def's scope, the rank-path and graph-flow tables (each built once per chunk analysis, with
the same answers as asking node by node)."""

from __future__ import annotations

import ast

from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.core.settings import Settings
from ddp_lsp.rules import _graph as graph

HEAD = (
    "import torch\nimport torch.distributed as dist\nfrom torch.distributed import barrier as bar\n"
)


def _ctx(code: str) -> ChunkContext:
    settings = Settings()
    doc = Document(code, settings.rank_model)
    facts = doc.module_facts(True, None)
    ranks = settings.rank_model.with_extra(facts.rank_vars, facts.rank_predicates)
    return ChunkContext(doc.chunks()[-1][1], facts, settings, ranks)


def test_calls_to_is_the_calls_resolving_to_a_name_in_order() -> None:
    ctx = _ctx(
        HEAD
        + "def f(t):\n"
        + "    dist.barrier()\n"
        + "    bar(dist.all_reduce(t))\n"
        + "    torch.distributed.barrier(group=None)\n"
        + "    t.barrier()\n"
    )
    for qual in ("torch.distributed.barrier", "torch.distributed.all_reduce", None):
        expected = [c for c in ctx.calls() if ctx.call_qualname(c) == qual]
        assert ctx.calls_to(qual) == expected  # type: ignore[arg-type]
    got = ctx.calls_to("torch.distributed.barrier")
    assert [c.lineno for c in got] == [2, 3, 4]  # the chunk's own lines (the def is 1)
    got.clear()  # a copy: the table is not changed through it
    assert len(ctx.calls_to("torch.distributed.barrier")) == 3
    assert ctx.calls_to("torch.distributed.gather") == []


def test_scope_is_the_innermost_def_or_class_chain() -> None:
    ctx = _ctx(
        "class C:\n"
        "    def m(self):\n"
        "        def inner():\n"
        "            return x\n"
        "        y = lambda: z\n"
        "        return inner\n"
    )
    names = {n.id: n for n in ctx.nodes(ast.Name)}
    assert ctx.scope(names["x"]) == ("C.m.inner", "C")
    assert ctx.scope(names["z"]) == ("C.m", "C")  # a lambda is no scope of the facts
    assert ctx.scope(names["inner"]) == ("C.m", "C")
    cls = ctx.nodes(ast.ClassDef)[0]
    assert ctx.scope(cls) == ("", None)
    # asked twice (the second answer from the table): the same
    assert ctx.scope(names["x"]) == ctx.scope(names["x"])


def test_ddp301_and_ddp302_build_one_graph_flow_per_function(monkeypatch) -> None:
    built: list[int] = []
    original = graph.GraphFlow.__init__

    def counting(self, ctx, root):  # type: ignore[no-untyped-def]
        built.append(id(root))
        original(self, ctx, root)

    monkeypatch.setattr(graph.GraphFlow, "__init__", counting)
    code = (
        "import torch\n"
        "def train(model, loader, opt):\n"
        "    losses = []\n"
        "    for x in loader:\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        losses.append(loss)\n"
        "        print(loss.item())\n"
        "    return losses\n"
    )
    found = analyze(code, Settings(select=("DDP301", "DDP302"), assume_distributed=True))
    assert {f.rule_id for f in found.findings} == {"DDP301", "DDP302"}
    assert len(built) == len(set(built)) == 1
