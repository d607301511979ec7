"""Inverse dynamics: predict a_{t+k} from (y_hat_{t+k}, y_tilde_{t+k+1}), k = 0..K-1."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def inverse_dynamics_loss(
    logits: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Cross-entropy of the inverse model, averaged over the K steps (as the reference).

    Args:
        logits: (B, K, A) inverse-model logits for steps k = 0..K-1, from the online
            projection p(z_hat_{t+k}) and the target projection p_m(z_tilde_{t+k+1}).
        actions: (B, K) int64 actions a_{t+k}.
        mask: (B, K) 1 where transition t+k -> t+k+1 is valid, else 0; None counts all.

    Returns:
        (B,) losses, (1/K) sum_k mask_k * CE_k; ln(A) for uniform logits and a full mask.
        Masked steps count as zero but still divide by K, so a sample's weight does not grow
        when part of its sequence falls past the end of an episode.
    """
    b, k, a = logits.shape
    ce = F.cross_entropy(logits.float().reshape(b * k, a), actions.reshape(b * k), reduction="none")
    ce = ce.view(b, k)
    if mask is not None:
        ce = ce * mask.to(ce.dtype)
    return ce.mean(-1)


@torch.no_grad()
def inverse_dynamics_accuracy(
    logits: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Fraction of valid steps whose argmax is the taken action, (B,) (0 with no valid step).

    Args:
        logits: (B, K, A) inverse-model logits.
        actions: (B, K) int64 actions.
        mask: (B, K) validity, None for all valid.
    """
    correct = (logits.argmax(-1) == actions).float()
    if mask is None:
        return correct.mean(-1)
    m = mask.float()
    return (correct * m).sum(-1) / m.sum(-1).clamp_min(1.0)
