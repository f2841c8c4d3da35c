"""FSDP, FSDP2 (``fully_shard``) and torch.distributed.checkpoint (DCP) in DDP terms."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "fsdp"

_COLL = (Meaning.COLLECTIVE,)

TABLE: tuple[Api, ...] = (
    # An FSDP module's forward all-gathers its parameter shards (a collective).
    Api(Match.CALL, "torch.distributed.fsdp.FullyShardedDataParallel", (Meaning.SHARDS_MODEL,)),
    Api(Match.CALL, "torch.distributed.fsdp.fully_shard", (Meaning.SHARDS_MODEL,)),
    Api(Match.CALL, "torch.distributed._composable.fsdp.fully_shard", (Meaning.SHARDS_MODEL,)),
    # Shards its argument in place; its parameters become DTensors.
    Api(Match.FUNCTION, "fully_shard", (Meaning.SHARDS_MODEL, Meaning.MAKES_DTENSORS)),
    Api(Match.FUNCTION, "parallelize_module", (Meaning.MAKES_DTENSORS,)),
    Api(Match.FUNCTION, "init_device_mesh", (Meaning.MAKES_DTENSORS,)),
    Api(Match.FUNCTION, "distribute_tensor", (Meaning.MAKES_DTENSORS,)),
    # `FullyShardedDataParallel.clip_grad_norm_(max_norm)`: clips the (sharded) gradients as
    # they are; with a ShardedGradScaler, unscale_ first.
    Api(Match.FUNCTION, "clip_grad_norm_", (Meaning.CLIPS_GRADIENTS,)),
    # StateDictType members whose saves are per rank (each rank writes its shard).
    Api(Match.FUNCTION, "LOCAL_STATE_DICT", (Meaning.SAVES_PER_RANK,)),
    Api(Match.FUNCTION, "SHARDED_STATE_DICT", (Meaning.SAVES_PER_RANK,)),
    # Methods that gather sharded state across ranks (FSDP, ZeroRedundancyOptimizer).
    Api(Match.FUNCTION, "get_state_dict", (Meaning.GATHERS_STATE,)),
    Api(Match.FUNCTION, "get_model_state_dict", (Meaning.GATHERS_STATE,)),
    Api(Match.FUNCTION, "get_optimizer_state_dict", (Meaning.GATHERS_STATE,)),
    Api(Match.FUNCTION, "full_optim_state_dict", (Meaning.GATHERS_STATE,)),
    Api(Match.FUNCTION, "sharded_optim_state_dict", (Meaning.GATHERS_STATE,)),
    Api(Match.FUNCTION, "optim_state_dict", (Meaning.GATHERS_STATE,)),
    Api(Match.FUNCTION, "consolidate_state_dict", (Meaning.GATHERS_STATE,)),
    # DCP saves and loads are collectives: every rank writes (or reads) its own shards and the
    # planner all-gathers the metadata. Under a rank-0 guard they hang the other ranks.
    Api(Match.CALL, "torch.distributed.checkpoint.save", _COLL),
    Api(Match.CALL, "torch.distributed.checkpoint.load", _COLL),
    Api(Match.CALL, "torch.distributed.checkpoint.save_state_dict", _COLL),
    Api(Match.CALL, "torch.distributed.checkpoint.load_state_dict", _COLL),
    Api(Match.CALL, "torch.distributed.checkpoint.async_save", _COLL),
    # Full state dicts of a sharded model all-gather the shards on every rank.
    Api(Match.CALL, "torch.distributed.checkpoint.state_dict.get_model_state_dict", _COLL),
    Api(Match.CALL, "torch.distributed.checkpoint.state_dict.get_state_dict", _COLL),
    Api(Match.CALL, "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict", _COLL),
)
