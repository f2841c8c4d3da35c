"""Optimizer libraries: where the optimizer classes live, and the factories that build one."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "optimizers"

_OPT = (Meaning.OPTIMIZER,)

TABLE: tuple[Api, ...] = (
    # `torch.optim.AdamW(...)`; not `torch.optim.lr_scheduler.*` or `torch.optim.swa_utils.*`
    # (names.NOT_OPTIMIZERS_PREFIXES: schedulers and averaged models live there).
    Api(Match.MODULE, "torch.optim", _OPT),
    Api(Match.MODULE, "torch.distributed.optim", _OPT),  # ZeroRedundancyOptimizer
    Api(Match.MODULE, "apex.optimizers", _OPT),  # FusedAdam, FusedLAMB
    Api(Match.MODULE, "bitsandbytes.optim", _OPT),  # 8-bit Adam
    Api(Match.MODULE, "timm.optim", _OPT),
    Api(Match.CALL, "timm.optim.create_optimizer_v2", _OPT),
    Api(Match.CALL, "timm.optim.create_optimizer", _OPT),
    Api(Match.MODULE, "transformers.optimization", _OPT),
    Api(Match.CALL, "transformers.AdamW", _OPT),
)
