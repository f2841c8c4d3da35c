"""Lightning (the Trainer and Fabric) in DDP terms."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "lightning"

_M = Match.METHOD
_COLL = (Meaning.COLLECTIVE,)

TABLE: tuple[Api, ...] = (
    Api(_M, "fabric.barrier", _COLL),
    Api(_M, "fabric.all_reduce", _COLL),
    Api(_M, "fabric.all_gather", _COLL),
    Api(_M, "fabric.broadcast", _COLL),
    Api(_M, "fabric.backward", (Meaning.BACKWARD,)),
    Api(_M, "fabric.no_sync", (Meaning.SKIPS_GRAD_SYNC,)),
    Api(_M, "fabric.setup", (Meaning.WRAPS_MODEL,)),
    Api(_M, "fabric.setup_module", (Meaning.WRAPS_MODEL,)),
    Api(_M, "fabric.is_global_zero", (Meaning.RANK_ZERO,)),
    Api(Match.FUNCTION, "is_global_zero", (Meaning.RANK_ZERO,)),
    Api(Match.FUNCTION, "is_local_zero", (Meaning.RANK_ZERO,)),
    Api(Match.FUNCTION, "rank_zero_only", (Meaning.RANK_ZERO_ONLY,)),
)
