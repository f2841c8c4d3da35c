"""torch.distributed and DistributedDataParallel in DDP terms (and PyTorch's own seeding)."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "torch.distributed"

_C = Match.CALL
_COLL = (Meaning.COLLECTIVE,)
_BARRIER = (Meaning.COLLECTIVE, Meaning.BARRIER)

TABLE: tuple[Api, ...] = (
    Api(Match.MODULE, "torch.distributed", (Meaning.DISTRIBUTED,)),
    Api(Match.MODULE, "torch.nn.parallel.DistributedDataParallel", (Meaning.DISTRIBUTED,)),
    Api(Match.MODULE, "torch.nn.parallel.distributed", (Meaning.DISTRIBUTED,)),
    Api(Match.MODULE, "torch.utils.data.DistributedSampler", (Meaning.DISTRIBUTED,)),
    Api(Match.MODULE, "torch.utils.data.distributed", (Meaning.DISTRIBUTED,)),
    Api(Match.MODULE, "torch.multiprocessing.spawn", (Meaning.DISTRIBUTED,)),
    Api(Match.MODULE, "torch.nn.SyncBatchNorm", (Meaning.DISTRIBUTED,)),
    Api(_C, "torch.nn.parallel.DistributedDataParallel", (Meaning.TAKES_DDP_KWARGS,)),
    # Every rank of the group must call these. Not here: destroy_process_group, which tears
    # down this process's communicators without waiting for the other ranks.
    Api(_C, "torch.distributed.barrier", _BARRIER),
    Api(_C, "torch.distributed.monitored_barrier", _BARRIER),
    Api(_C, "torch.distributed.all_reduce", _COLL),
    Api(_C, "torch.distributed.all_reduce_coalesced", _COLL),
    Api(_C, "torch.distributed.all_gather", _COLL),
    Api(_C, "torch.distributed.all_gather_into_tensor", _COLL),
    Api(_C, "torch.distributed.all_gather_object", _COLL),
    Api(_C, "torch.distributed.all_gather_coalesced", _COLL),
    Api(_C, "torch.distributed.broadcast", _COLL),
    Api(_C, "torch.distributed.broadcast_object_list", _COLL),
    Api(_C, "torch.distributed.reduce", _COLL),
    Api(_C, "torch.distributed.reduce_scatter", _COLL),
    Api(_C, "torch.distributed.reduce_scatter_tensor", _COLL),
    Api(_C, "torch.distributed.gather", _COLL),
    Api(_C, "torch.distributed.gather_object", _COLL),
    Api(_C, "torch.distributed.scatter", _COLL),
    Api(_C, "torch.distributed.scatter_object_list", _COLL),
    Api(_C, "torch.distributed.all_to_all", _COLL),
    Api(_C, "torch.distributed.all_to_all_single", _COLL),
    Api(_C, "torch.distributed.new_group", _COLL),
    # Calls that return this process's rank, whatever module defines them.
    Api(Match.FUNCTION, "get_rank", (Meaning.RANK,)),
    Api(Match.FUNCTION, "get_global_rank", (Meaning.RANK,)),
    Api(Match.FUNCTION, "get_local_rank", (Meaning.RANK,)),
    Api(Match.FUNCTION, "get_node_local_rank", (Meaning.RANK,)),
    # Seeds every rank alike (DDP503 asks for an offset by the rank).
    Api(_C, "torch.manual_seed", (Meaning.SEEDS,)),
    Api(_C, "torch.random.manual_seed", (Meaning.SEEDS,)),
    Api(_C, "torch.cuda.manual_seed", (Meaning.SEEDS,)),
    Api(_C, "torch.cuda.manual_seed_all", (Meaning.SEEDS,)),
    Api(_C, "random.seed", (Meaning.SEEDS,)),
    Api(_C, "numpy.random.seed", (Meaning.SEEDS,)),
    # RPC: each rank a named worker with a role; functions run where `rpc_sync` sends them.
    Api(_C, "torch.distributed.rpc.init_rpc", (Meaning.ASSIGNS_ROLES,)),
    # Probes single-process code asks before deciding (`get_rank() if dist.is_initialized()
    # else 0`): calling one does not make a function distributed code.
    Api(_C, "torch.distributed.is_available", (Meaning.SINGLE_PROCESS,)),
    Api(_C, "torch.distributed.is_initialized", (Meaning.SINGLE_PROCESS,)),
    Api(_C, "torch.distributed.is_nccl_available", (Meaning.SINGLE_PROCESS,)),
    Api(_C, "torch.distributed.is_gloo_available", (Meaning.SINGLE_PROCESS,)),
    Api(_C, "torch.distributed.is_mpi_available", (Meaning.SINGLE_PROCESS,)),
    Api(_C, "torch.distributed.is_torchelastic_launched", (Meaning.SINGLE_PROCESS,)),
)
