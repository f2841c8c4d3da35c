"""DeepSpeed in DDP terms: its engine and ``deepspeed.comm``."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "deepspeed"

_C = Match.CALL
_COLL = (Meaning.COLLECTIVE,)

TABLE: tuple[Api, ...] = (
    Api(Match.MODULE, "deepspeed", (Meaning.DISTRIBUTED,)),
    # `deepspeed.comm` mirrors torch.distributed (`import deepspeed.comm as dist`).
    Api(_C, "deepspeed.comm.barrier", (Meaning.COLLECTIVE, Meaning.BARRIER)),
    Api(_C, "deepspeed.comm.all_reduce", _COLL),
    Api(_C, "deepspeed.comm.all_gather", _COLL),
    Api(_C, "deepspeed.comm.all_gather_into_tensor", _COLL),
    Api(_C, "deepspeed.comm.broadcast", _COLL),
    Api(_C, "deepspeed.comm.reduce", _COLL),
    Api(_C, "deepspeed.comm.reduce_scatter_tensor", _COLL),
    Api(_C, "deepspeed.comm.all_to_all_single", _COLL),
    # The engine's backward/step accumulate gradients over `gradient_accumulation_steps` and
    # skip their all-reduce on the micro-steps themselves: DDP101 is moot for its loops.
    Api(Match.METHOD, "model_engine.backward", (Meaning.BACKWARD, Meaning.ACCUMULATES_ITSELF)),
    Api(Match.METHOD, "engine.backward", (Meaning.BACKWARD, Meaning.ACCUMULATES_ITSELF)),
    Api(Match.METHOD, "deepspeed.backward", (Meaning.BACKWARD, Meaning.ACCUMULATES_ITSELF)),
    # ZeRO-3: consolidating the 16-bit weights gathers the partitions from every rank.
    Api(Match.FUNCTION, "_zero3_consolidated_16bit_state_dict", (Meaning.GATHERS_STATE,)),
    Api(_C, "deepspeed.initialize", (Meaning.WRAPS_MODEL, Meaning.ACCUMULATES_ITSELF)),
    # `model_engine.save_checkpoint(dir)` saves the engine's own module, unwrapped.
    # ... and `engine.backward(loss)` runs the backward of its argument.
    Api(Match.RECEIVER, "engine", (Meaning.SAVES_UNWRAPPED, Meaning.BACKWARD)),
    Api(Match.RECEIVER, "deepspeed", (Meaning.SAVES_UNWRAPPED,)),
    # The device abstraction (`get_accelerator().device_name()`): single-GPU scripts use it too.
    Api(_C, "deepspeed.accelerator", (Meaning.SINGLE_PROCESS,)),
)
