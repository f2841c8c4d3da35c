"""The project index gathers on the core's extraction walk what its own walks defined.

``summary.handed_names`` is the definition of a summary's ``handed`` pairs (one walk over
every node of the file); the index gathers them on ``factextract.extract_module``'s walk
instead, for speed. These cases hold every scope rule of the definition: methods of
top-level and nested classes, a method under an ``if`` of its class (named as a function
of the module there), a class in a function, decorators and lambdas, and what that walk
never visits (a class's bases and decorators, parameter defaults).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench.gen import module
from ddp_lsp.core import facts
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.project import summary

CASES = [
    "mp.spawn(run, args=(cfg, train))\nlaunch(main_worker, *rest, fn=[a.b, c])\n",
    "def main():\n    mp.spawn(worker, nprocs=2)\n    def inner():\n        go(helper)\n"
    "    return lambda x=pick(d): run(x, cb)\n",
    "class T(Base, metaclass=M(hook)):\n    x = reg(a)\n    def fit(self):\n"
    "        self.loop(self.step)\n    class Inner:\n        def m(self):\n            f(g)\n"
    "    if flag:\n        def odd(self):\n            f(h)\n",
    "@deco(wrap)\nclass C(make(base)):\n    @dec(k)\n    async def m(self, d=get(v)):\n"
    "        await run(self.cb, *xs, **kw)\n",
    "def outer():\n    class Local:\n        def m(self):\n            call(z)\n"
    "    with ctx(a) as b, other(c):\n        [f(y) for y in g(q)]\n",
    "if cond(u):\n    class K:\n        def m(self):\n            call(w)\n"
    "try:\n    f(t)\nexcept E(e):\n    h(i)\nelse:\n    j(k)\nfinally:\n    l(m)\n",
    "match p(a):\n    case [x, *_] if ok(x):\n        run(x)\n",
    "@app(route)\ndef handler(req: T = dflt(z)) -> R(y):\n    return respond(req.body)\n",
]


@pytest.mark.parametrize("code", CASES)
def test_handed_gathered_on_the_extraction_walk_equals_its_definition(code: str) -> None:
    tree = ast.parse(code)
    got = facts.extract_module(tree, RankModel()).handed
    assert got == summary.handed_names(tree)
    assert got  # every case hands something


def test_handed_on_a_generated_module_and_this_package() -> None:
    texts = [module(300)]
    root = Path(__file__).resolve().parents[2] / "ddp_lsp"
    texts += [p.read_text() for p in sorted(root.rglob("*.py"))[:60]]
    for text in texts:
        tree = ast.parse(text)
        assert facts.extract_module(tree, RankModel()).handed == summary.handed_names(tree)
