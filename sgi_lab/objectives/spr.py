"""SPR: predict future latent projections with the transition model (Schwarzer et al., 2021)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def spr_loss(
    predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Negative cosine similarity summed over prediction steps (the paper's equation 1).

    Args:
        predictions: (B, K, P) q(p(z_hat_{t+k})) for k = 1..K (online; carries gradient).
        targets: (B, K, P) p_m(z_tilde_{t+k}) from the EMA target (no gradient flows into it).
        mask: (B, K) 1 where step t+k is valid (same episode, no terminal before it), else 0;
            None counts every step.

    Returns:
        (B,) losses, -sum_k mask_k * cos(prediction_k, target_k); -K when all match.

    Note:
        The reference averages ``||q_hat - y_tilde||^2 = 2 - 2 cos`` over k instead; that equals
        ``2 + (2 / K) * spr_loss`` for full masks, so a reference weight w corresponds to
        ``2 w / K`` here (the pretraining scripts use w = 1, finetuning w = 5).
    """
    pred = F.normalize(predictions.float(), dim=-1, eps=1e-3)
    targ = F.normalize(targets.detach().float(), dim=-1, eps=1e-3)
    cos = (pred * targ).sum(-1)
    if mask is not None:
        cos = cos * mask.to(cos.dtype)
    return -cos.sum(-1)
