"""Hugging Face transformers / diffusers training helpers in DDP terms."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "huggingface"

_F = Match.FUNCTION
_ZERO = (Meaning.RANK_ZERO,)

TABLE: tuple[Api, ...] = (
    # Trainer and TrainingArguments flags true on the main process only.
    Api(_F, "is_world_process_zero", _ZERO),
    Api(_F, "is_local_process_zero", _ZERO),
    Api(_F, "should_save", _ZERO),  # rank 0 and a save strategy
    Api(_F, "should_log", _ZERO),
    # `model.save_pretrained(dir)`, `trainer.save_model(dir)` write the bare model's weights.
    Api(_F, "save_pretrained", (Meaning.SAVES_UNWRAPPED,)),
    Api(_F, "save_model", (Meaning.SAVES_UNWRAPPED,)),
)
