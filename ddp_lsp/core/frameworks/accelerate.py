"""Hugging Face accelerate in DDP terms: the ``Accelerator`` object and ``accelerate.utils``."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "accelerate"

_C = Match.CALL
_M = Match.METHOD
_COLL = (Meaning.COLLECTIVE,)
_BARRIER = (Meaning.COLLECTIVE, Meaning.BARRIER)
_SINGLE = (Meaning.SINGLE_PROCESS,)

TABLE: tuple[Api, ...] = (
    Api(
        Match.MODULE,
        "accelerate",
        (Meaning.DISTRIBUTED, Meaning.OWNS_PROCESS_GROUP, Meaning.INSTALLS_SAMPLER),
    ),
    Api(Match.FUNCTION, "prepare", (Meaning.INSTALLS_SAMPLER,)),  # accelerator.prepare(loader)
    Api(_C, "accelerate.DistributedDataParallelKwargs", (Meaning.TAKES_DDP_KWARGS,)),
    Api(_C, "accelerate.utils.DistributedDataParallelKwargs", (Meaning.TAKES_DDP_KWARGS,)),
    Api(
        _C,
        "accelerate.utils.dataclasses.DistributedDataParallelKwargs",
        (Meaning.TAKES_DDP_KWARGS,),
    ),
    Api(_M, "accelerator.wait_for_everyone", _BARRIER),
    Api(_M, "accelerator.gather", _COLL),
    Api(_M, "accelerator.gather_for_metrics", _COLL),
    Api(Match.FUNCTION, "gather_for_metrics", (Meaning.GATHERS_STATE,)),
    # An accelerate ParallelismConfig (tensor parallelism) or FSDP plugin shards the model.
    Api(Match.FUNCTION, "ParallelismConfig", (Meaning.MAKES_DTENSORS,)),
    Api(Match.FUNCTION, "FullyShardedDataParallelPlugin", (Meaning.MAKES_DTENSORS,)),
    Api(_M, "accelerator.reduce", _COLL),
    Api(_M, "accelerator.pad_across_processes", _COLL),
    Api(_C, "accelerate.utils.wait_for_everyone", _BARRIER),
    Api(_C, "accelerate.utils.gather", _COLL),
    Api(_C, "accelerate.utils.gather_object", _COLL),
    Api(_C, "accelerate.utils.reduce", _COLL),
    Api(_C, "accelerate.utils.broadcast", _COLL),
    Api(_C, "accelerate.utils.broadcast_object_list", _COLL),
    Api(_C, "accelerate.utils.pad_across_processes", _COLL),
    # `accelerator.backward(loss)` all-reduces a prepared DDP model's gradients unless it runs
    # under `accelerator.accumulate(model)` / `accelerator.no_sync(model)`.
    Api(_M, "accelerator.backward", (Meaning.BACKWARD,)),
    Api(_M, "accelerator.accumulate", (Meaning.SKIPS_GRAD_SYNC,)),
    Api(_M, "accelerator.no_sync", (Meaning.SKIPS_GRAD_SYNC,)),
    # With several processes, `prepare` returns the model wrapped in DDP.
    Api(_M, "accelerator.prepare", (Meaning.WRAPS_MODEL,)),
    Api(_M, "accelerator.prepare_model", (Meaning.WRAPS_MODEL,)),
    Api(_M, "accelerator.is_main_process", (Meaning.RANK_ZERO,)),
    Api(Match.FUNCTION, "is_local_main_process", (Meaning.RANK_ZERO,)),
    Api(Match.FUNCTION, "on_main_process", (Meaning.RANK_ZERO_ONLY,)),
    Api(Match.FUNCTION, "on_local_main_process", (Meaning.RANK_ZERO_ONLY,)),
    # The same seed on every rank unless device_specific=True.
    Api(_C, "accelerate.utils.set_seed", (Meaning.SEEDS,), keyword="device_specific"),
    Api(_C, "accelerate.utils.random.set_seed", (Meaning.SEEDS,), keyword="device_specific"),
    # accelerate.logging.get_logger logs on the main process unless main_process_only=False.
    Api(Match.FUNCTION, "get_logger", (Meaning.SILENCES_LOGGING,)),
    # `accelerator.save(...)`, `accelerator.save_state(dir)` unwrap the prepared model.
    Api(Match.RECEIVER, "accelerator", (Meaning.SAVES_UNWRAPPED,)),
    Api(Match.FUNCTION, "save_state", (Meaning.SAVES_UNWRAPPED,)),
    # Device probes single-process scripts ask (`if is_xpu_available(): ... else: "cuda:0"`).
    Api(_C, "accelerate.utils.imports", _SINGLE),
    Api(_C, "accelerate.utils.is_xpu_available", _SINGLE),
    Api(_C, "accelerate.utils.is_npu_available", _SINGLE),
    Api(_C, "accelerate.utils.is_mlu_available", _SINGLE),
    Api(_C, "accelerate.utils.is_mps_available", _SINGLE),
    # Big-model placement: one process spreading a model over its devices (single-GPU and
    # inference scripts use it); the name and everything under it.
    Api(_C, "accelerate.init_empty_weights", _SINGLE),
    Api(_C, "accelerate.init_on_device", _SINGLE),
    Api(_C, "accelerate.cpu_offload", _SINGLE),
    Api(_C, "accelerate.cpu_offload_with_hook", _SINGLE),
    Api(_C, "accelerate.disk_offload", _SINGLE),
    Api(_C, "accelerate.dispatch_model", _SINGLE),
    Api(_C, "accelerate.infer_auto_device_map", _SINGLE),
    Api(_C, "accelerate.load_checkpoint_and_dispatch", _SINGLE),
    Api(_C, "accelerate.load_checkpoint_in_model", _SINGLE),
    Api(_C, "accelerate.big_modeling", _SINGLE),
    Api(_C, "accelerate.hooks", _SINGLE),
    Api(_C, "accelerate.utils.modeling", _SINGLE),
    Api(_C, "accelerate.utils.get_balanced_memory", _SINGLE),
    Api(_C, "accelerate.utils.get_max_memory", _SINGLE),
    Api(_C, "accelerate.utils.load_checkpoint_in_model", _SINGLE),
)
