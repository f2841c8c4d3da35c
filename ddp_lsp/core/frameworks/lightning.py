"""Lightning (the Trainer and Fabric) in DDP terms."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "lightning"

_M = Match.METHOD
_COLL = (Meaning.COLLECTIVE,)
_BARRIER = (Meaning.COLLECTIVE, Meaning.BARRIER)

# Lightning starts and destroys the process group, and shards the loaders it is given or that
# its hooks return (which modules are distributed code is left to its other markers).
_OWNS = (Meaning.OWNS_PROCESS_GROUP, Meaning.INSTALLS_SAMPLER)

TABLE: tuple[Api, ...] = (
    Api(Match.MODULE, "lightning", _OWNS),
    Api(Match.MODULE, "pytorch_lightning", _OWNS),
    Api(Match.MODULE, "lightning_fabric", (Meaning.INSTALLS_SAMPLER,)),
    Api(Match.FUNCTION, "setup_dataloaders", (Meaning.INSTALLS_SAMPLER,)),  # Fabric
    Api(Match.FUNCTION, "fit", (Meaning.INSTALLS_SAMPLER,)),  # trainer.fit(model, loader)
    Api(Match.FUNCTION, "validate", (Meaning.INSTALLS_SAMPLER,)),
    Api(Match.FUNCTION, "test", (Meaning.INSTALLS_SAMPLER,)),
    Api(Match.FUNCTION, "predict", (Meaning.INSTALLS_SAMPLER,)),
    # DataModule / LightningModule hooks: Lightning shards the loaders they return.
    Api(Match.FUNCTION, "train_dataloader", (Meaning.INSTALLS_SAMPLER,)),
    Api(Match.FUNCTION, "val_dataloader", (Meaning.INSTALLS_SAMPLER,)),
    Api(Match.FUNCTION, "test_dataloader", (Meaning.INSTALLS_SAMPLER,)),
    Api(Match.FUNCTION, "predict_dataloader", (Meaning.INSTALLS_SAMPLER,)),
    *(
        Api(Match.CALL, f"{pkg}.strategies{sub}.DDPStrategy", (Meaning.TAKES_DDP_KWARGS,))
        for pkg in ("lightning.pytorch", "lightning.fabric", "pytorch_lightning")
        for sub in ("", ".ddp")
    ),
    Api(_M, "fabric.barrier", _BARRIER),
    Api(_M, "fabric.all_reduce", _COLL),
    Api(_M, "fabric.all_gather", _COLL),
    Api(_M, "fabric.broadcast", _COLL),
    Api(_M, "fabric.backward", (Meaning.BACKWARD,)),
    Api(_M, "fabric.no_backward_sync", (Meaning.SKIPS_GRAD_SYNC,)),
    Api(_M, "fabric.setup", (Meaning.WRAPS_MODEL,)),
    Api(_M, "fabric.setup_module", (Meaning.WRAPS_MODEL,)),
    Api(_M, "fabric.is_global_zero", (Meaning.RANK_ZERO,)),
    Api(Match.FUNCTION, "is_global_zero", (Meaning.RANK_ZERO,)),
    Api(Match.FUNCTION, "is_local_zero", (Meaning.RANK_ZERO,)),
    Api(Match.FUNCTION, "rank_zero_only", (Meaning.RANK_ZERO_ONLY,)),
    Api(
        Match.ARGUMENT,
        "ddp_find_unused_parameters_true",
        (Meaning.FINDS_UNUSED_PARAMETERS,),
        keyword="strategy",
    ),
    # `fabric.save(path, state)`, `trainer.save_checkpoint(path)`, a strategy's save: Lightning
    # saves the unwrapped module; a trainer's or strategy's `backward(loss)` runs the backward.
    Api(Match.RECEIVER, "fabric", (Meaning.SAVES_UNWRAPPED,)),
    Api(Match.RECEIVER, "trainer", (Meaning.SAVES_UNWRAPPED, Meaning.BACKWARD)),
    Api(Match.RECEIVER, "strategy", (Meaning.SAVES_UNWRAPPED, Meaning.BACKWARD)),
)
