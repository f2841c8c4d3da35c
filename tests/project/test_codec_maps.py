"""A dataclass's encoder writes a tuple of items out as ``list(map(item, v.f))``, not as a call
of the tuple's own encoder (a gate site's three tuples of pairs: three calls per site)."""

from __future__ import annotations

from ddp_lsp.core.gates import GateFacts, Site
from ddp_lsp.project.codec import Codec
from ddp_lsp.project.summary import ModuleSummary


def test_a_site_encodes_its_tuples_of_pairs_without_a_call_each() -> None:
    codec = Codec(ModuleSummary)
    enc_site = codec._enc[Site]
    assert "map" in enc_site.__code__.co_names
    assert not [n for n in enc_site.__code__.co_names if n.startswith("e")]
    site = Site(
        "dist.barrier", frozenset({("rank", "0")}), False, ((0, "rank"),), ((0, "?"),), False
    )
    assert enc_site(site) == [
        "dist.barrier",
        [["rank", "0"]],
        False,
        [[0, "rank"]],
        [[0, "?"]],
        False,
    ]
    # A tuple of dataclasses: the item's encoder mapped.
    enc_gates = codec._enc[GateFacts]
    assert enc_gates(GateFacts((), (site,))) == [[], [enc_site(site)]]
