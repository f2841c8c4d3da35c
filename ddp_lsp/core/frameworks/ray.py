"""Ray Train in DDP terms."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "ray"

TABLE: tuple[Api, ...] = (
    Api(Match.MODULE, "ray.train", (Meaning.INSTALLS_SAMPLER,)),
    # ray.train.torch.prepare_data_loader(loader) adds a DistributedSampler.
    Api(Match.FUNCTION, "prepare_data_loader", (Meaning.INSTALLS_SAMPLER,)),
)
