"""safetensors in DDP terms: file writers that every rank calling them runs."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "safetensors"

_CKPT = (Meaning.WRITES_CHECKPOINT,)

TABLE: tuple[Api, ...] = (
    Api(Match.CALL, "safetensors.torch.save_file", _CKPT, keyword="filename"),
    Api(Match.CALL, "safetensors.torch.save_model", _CKPT, keyword="filename"),
)
