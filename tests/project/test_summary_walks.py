"""The project index gathers on the core's extraction walk what its own walks defined.

``handed_names`` (below) is the definition of a summary's ``handed`` pairs (one walk over
every node of the file); the index gathers them on ``factextract.extract_module``'s walk
instead, for speed. These cases hold every scope rule of the definition: methods of
top-level and nested classes, a method under an ``if`` of its class (named as a function
of the module there), a class in a function, decorators and lambdas, and what that walk
never visits (a class's bases and decorators, parameter defaults).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import cast

import pytest

from bench.gen import module
from ddp_lsp.core import facts
from ddp_lsp.core import names as known_names
from ddp_lsp.core.ranks import RankModel
from ddp_lsp.core.walk import children


def handed_names(tree: ast.Module) -> tuple[tuple[str, str], ...]:
    """(scope, spelling) of the names and attributes passed as arguments (also inside a tuple
    or list argument: ``args=(cfg, train)``), scopes named as the core names functions
    (``Trainer.fit``, ``main.worker``, ``<module>``). Most are data, not functions: the
    project keeps those that resolve to a function of its own.

    One walk over every node of the file: the definition the index's pairs, gathered on the
    core's own walk (``factextract.extract_module``), are checked against."""
    out: set[tuple[str, str]] = set()
    module = facts.MODULE
    dotted = known_names.dotted
    # (node, its scope, the class whose body holds it directly when that class is top-level)
    stack: list[tuple[ast.AST, str, str | None]] = [(s, module, None) for s in tree.body]
    pop, push = stack.pop, stack.append
    while stack:
        node, scope, cls = pop()
        t = type(node)
        if t is ast.FunctionDef or t is ast.AsyncFunctionDef:
            fn = cast(ast.FunctionDef, node)
            if cls is not None:
                qual = f"{cls}.{fn.name}"
            elif scope != module:
                qual = f"{scope}.{fn.name}"
            else:
                qual = fn.name
            for d in fn.decorator_list:
                push((d, scope, None))
            for stmt in fn.body:
                push((stmt, qual, None))
            continue
        if t is ast.ClassDef:
            c = cast(ast.ClassDef, node)
            inner = c.name if scope == module else None
            for stmt in c.body:
                push((stmt, scope, inner))
            continue
        if t is ast.Call:
            call = cast(ast.Call, node)
            for v in (*call.args, *(kw.value for kw in call.keywords)):
                items = v.elts if isinstance(v, (ast.Tuple, ast.List)) else [v]
                for e in items:
                    spelled = dotted(e.value if isinstance(e, ast.Starred) else e)
                    if spelled:
                        out.add((scope, spelled))
        for child in children(node):
            push((child, scope, None))
    return tuple(sorted(out))


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
    assert got == handed_names(tree)
    assert got  # every case hands something


def test_handed_on_a_generated_module_and_this_package() -> None:
    texts = [module(300)]
    root = Path(__file__).resolve().parents[2] / "ddp_lsp"
    texts += [p.read_text() for p in sorted(root.rglob("*.py"))[:60]]
    for text in texts:
        tree = ast.parse(text)
        assert facts.extract_module(tree, RankModel()).handed == handed_names(tree)
