"""timm's AMP loss scalers, and the copies of them that projects keep (MAE, ConvNeXt, DeiT)."""

from __future__ import annotations

from ddp_lsp.core.frameworks.schema import Api, Match, Meaning

NAME = "timm"

_WRAP = (Meaning.SCALER_WRAPPER,)

TABLE: tuple[Api, ...] = (
    # `loss_scaler(loss, optimizer, clip_grad=..., parameters=..., update_grad=...)` scales,
    # runs the backward, unscales before clipping and steps/updates when update_grad holds.
    Api(Match.CALL, "timm.utils.NativeScaler", _WRAP),
    Api(Match.CALL, "timm.utils.cuda.NativeScaler", _WRAP),
    Api(Match.CALL, "timm.utils.ApexScaler", _WRAP),
    # Copied into projects under these names (MAE's NativeScalerWithGradNormCount).
    Api(Match.FUNCTION, "NativeScaler", _WRAP),
    Api(Match.FUNCTION, "NativeScalerWithGradNormCount", _WRAP),
)
