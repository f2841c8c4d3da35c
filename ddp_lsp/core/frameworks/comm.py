"""detectron2 / mmengine-style ``comm`` helpers and torch_xla, in DDP terms."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "comm"

_C = Match.CALL
_M = Match.METHOD
_F = Match.FUNCTION
_COLL = (Meaning.COLLECTIVE,)
_BARRIER = (Meaning.COLLECTIVE, Meaning.BARRIER)
_CKPT = (Meaning.WRITES_CHECKPOINT,)

TABLE: tuple[Api, ...] = (
    # `from detectron2.utils import comm as d2comm; d2comm.synchronize()`.
    Api(_C, "detectron2.utils.comm.synchronize", _BARRIER),
    Api(_C, "detectron2.utils.comm.all_gather", _COLL),
    Api(_C, "detectron2.utils.comm.gather", _COLL),
    Api(_C, "detectron2.utils.comm.reduce_dict", _COLL),
    Api(_C, "detectron2.utils.comm.shared_random_seed", _COLL),
    Api(_C, "mmengine.dist.barrier", _BARRIER),
    Api(_C, "mmengine.dist.all_reduce", _COLL),
    Api(_C, "mmengine.dist.all_gather", _COLL),
    Api(_C, "mmengine.dist.all_gather_object", _COLL),
    Api(_C, "mmengine.dist.broadcast", _COLL),
    Api(_C, "mmengine.dist.broadcast_object_list", _COLL),
    Api(_C, "mmengine.dist.collect_results", _COLL),
    # A project's own copy of detectron2's comm module (`from utils import comm`).
    Api(_M, "comm.synchronize", _BARRIER),
    Api(_M, "comm.all_gather", _COLL),
    Api(_M, "comm.reduce_dict", _COLL),
    Api(_M, "xm.rendezvous", _COLL),  # torch_xla
    Api(Match.RECEIVER, "xm", (Meaning.SAVES_UNWRAPPED,)),  # torch_xla's `xm.save`
    Api(_F, "get_ordinal", (Meaning.RANK,)),  # torch_xla
    Api(_F, "is_master_ordinal", (Meaning.RANK_ZERO,)),  # torch_xla
    Api(_F, "master_only", (Meaning.RANK_ZERO_ONLY,)),  # mmcv / mmengine
    # Checkpoint writers that do not check the rank themselves.
    Api(_C, "mmcv.runner.save_checkpoint", _CKPT, keyword="filename"),
    Api(_C, "mmcv.runner.checkpoint.save_checkpoint", _CKPT, keyword="filename"),
    Api(_C, "mmengine.runner.save_checkpoint", _CKPT, keyword="filename"),
    Api(_C, "mmengine.runner.checkpoint.save_checkpoint", _CKPT, keyword="filename"),
    # Loggers that log on the main process only.
    Api(_F, "setup_logger", (Meaning.SILENCES_LOGGING,)),  # detectron2
    Api(_F, "get_root_logger", (Meaning.SILENCES_LOGGING,)),  # mmcv
    Api(_F, "MMLogger", (Meaning.SILENCES_LOGGING,)),  # mmengine
    Api(_F, "get_dist_logger", (Meaning.SILENCES_LOGGING,)),  # ColossalAI
    Api(_F, "create_logger", (Meaning.SILENCES_LOGGING,)),  # Swin-style helpers
)
