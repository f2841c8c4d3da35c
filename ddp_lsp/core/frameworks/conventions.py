"""Conventions of hand-written DDP projects (the torchvision references, DeiT, nanoGPT...)
that no library defines but many projects copy: rank-0 predicates, print silencers and
gradient-clipping helpers."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "conventions"

_F = Match.FUNCTION
_ZERO = (Meaning.RANK_ZERO,)
_ONLY = (Meaning.RANK_ZERO_ONLY,)

TABLE: tuple[Api, ...] = (
    Api(_F, "is_main_process", _ZERO),
    Api(_F, "is_main", _ZERO),
    Api(_F, "is_local_main", _ZERO),  # the local spelling of `is_main` (a node's first rank)
    Api(_F, "is_master", _ZERO),
    Api(_F, "master_process", _ZERO),  # nanoGPT
    Api(_F, "is_master_process", _ZERO),
    Api(_F, "is_rank_zero", _ZERO),
    Api(_F, "is_rank_0", _ZERO),
    Api(_F, "is_primary", _ZERO),
    Api(_F, "is_main_rank", _ZERO),
    Api(_F, "is_chief", _ZERO),
    Api(_F, "main_process_only", _ONLY),
    Api(_F, "rank0_only", _ONLY),
    Api(_F, "on_rank_0", _ONLY),
    Api(_F, "on_rank0", _ONLY),
    Api(_F, "only_rank_zero", _ONLY),
    Api(_F, "run_on_main_process", _ONLY),
    # `setup_for_distributed(is_master)` replaces builtins.print on the other ranks (the
    # torchvision references, DeiT, DETR, MAE); init_distributed_mode calls it.
    Api(_F, "setup_for_distributed", (Meaning.SILENCES_PRINT,)),
    Api(_F, "init_distributed_mode", (Meaning.SILENCES_PRINT,)),
    Api(_F, "setup_print_for_distributed", (Meaning.SILENCES_PRINT,)),
    # guided/improved-diffusion's MixedPrecisionTrainer: `mp_trainer.backward(loss)` scales the
    # loss by hand and runs its backward (all-reducing a DDP model's gradients); the step is
    # `mp_trainer.optimize(opt)`, often in another method.
    Api(Match.METHOD, "mp_trainer.backward", (Meaning.BACKWARD,)),
    # DINO's `utils.clip_gradients(model, clip)` (copied by iBOT, DINOv2's forks...): scales each
    # `p.grad` by `clip / norm` itself, on whatever gradients it finds.
    Api(_F, "clip_gradients", (Meaning.CLIPS_GRADIENTS,)),
    Api(_F, "clip_grads", (Meaning.CLIPS_GRADIENTS,)),
)
