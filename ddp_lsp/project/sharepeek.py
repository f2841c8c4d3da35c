"""Sharing a summary with what a :class:`~ddp_lsp.project.sharing.Sharer` holds, without adding
to it: for the summaries of an editor's unsaved text.

Each pause while someone types sends the open file's text to the index, and each version's
summary would otherwise leave its new facts (every function below the edited line moved, so
every ``FunctionInfo`` after it is new) in the index's sharing memo until the next
``SummaryCache.retain``, 64 edits on: 1-2 MB a version of a 20,000-line file
(docs/performance.md, "Peak RSS while typing"). Shared this way, a version's new objects
are held by that version only, and go with it.
"""

from __future__ import annotations

from ddp_lsp.project.sharing import Sharer


class _LookupOnlyMemo(dict[object, object]):
    """A sharer's memo that finds what ``base`` holds and keeps nothing new."""

    __slots__ = ("_base",)

    def __init__(self, base: dict[object, object]) -> None:
        super().__init__()
        self._base = base

    def get(self, key: object, default: object = None) -> object:
        return self._base.get(key, default)

    def setdefault(self, key: object, default: object = None) -> object:
        return self._base.get(key, default)


def lookup_only(sharer: Sharer) -> Sharer:
    """A sharer that shares with ``sharer``'s memo without adding to it."""
    peek = Sharer()
    peek.memo = _LookupOnlyMemo(sharer.memo)
    return peek
