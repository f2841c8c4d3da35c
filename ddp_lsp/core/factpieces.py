"""A whole module's facts for the project index, from its body fed in pieces
(:class:`ModuleFeed`): :func:`ddp_lsp.core.factextract.extract_module` without the whole
module's tree alive at once.

The project index summarises a large file top-level piece by piece (``project/summary.py``),
each piece's tree dropped before the next is parsed: a 20,000-line module's tree is 49 MB,
one piece's a few hundred KB. The extractor's walk of a module is one pass over its body in
order, so feeding the pieces' bodies in order to one extractor walks the same statements with
the same state. What the whole-body walk carried from one statement to the next, or looked up
across the body, is carried here across pieces:

- the module's guard (``if not is_main_process(): raise SystemExit`` guards the statements
  after it): :meth:`_Extractor.block` returns it, and the next piece starts from it;
- the top level's own calls and properties (the ``<module>`` function): one frame open from
  the first piece to :meth:`ModuleFeed.finish`;
- ``barrier_ifs``, counted over the module's top-level statements: summed over the pieces;
- the extractor's map of the ``def``\\ s of top-level class bodies (``_hclass``), keyed by node
  id: a class's methods are looked up while its body is walked, inside its piece; the map is
  cleared after each piece, as the ids of a freed piece's nodes may be reused by the next.

``tests/project/test_summary_pieces.py`` compares the result with ``extract_module`` of the
whole tree on generated and hand-written modules.
"""

from __future__ import annotations

import ast

from ddp_lsp.core.factextract import ModuleExtract, _barrier_ifs, _Extractor, finish
from ddp_lsp.core.ranks import RankModel


class ModuleFeed:
    """``extract_module`` of a module whose top-level statements come in pieces, in order:
    :meth:`feed` each piece's body, then :meth:`finish` once."""

    def __init__(self, ranks: RankModel) -> None:
        self._x = x = _Extractor(ranks, project=True)
        # As extract(): the top level is summarised like a function named "<module>".
        x._calls.append(set())
        x._props.append(set())
        self._guarded = False
        self._barrier_ifs = 0

    def feed(self, body: list[ast.stmt]) -> None:
        """Walk the next top-level statements of the module."""
        x = self._x
        self._guarded = x.block(body, "", self._guarded)
        self._barrier_ifs += _barrier_ifs(body)
        x._hclass.clear()  # ids of this piece's nodes, which the next piece's may reuse

    def finish(self) -> ModuleExtract:
        """The module's facts, as ``extract_module`` gives them for the whole body."""
        x = self._x
        cf = finish(x, self._barrier_ifs)
        return ModuleExtract(
            cf,
            tuple(x.dotted_sites),
            (*x.site_lines, *x.dotted_lines),
            tuple(sorted(x.handed or ())),
        )
