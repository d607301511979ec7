"""ATC: augmented temporal contrast (Stooke et al., 2021), the contrastive baseline.

Layout expected from the trainer (ATC's own batching, kept in the SGI comparison): sample 32
subsequences of 8 consecutive steps; anchors are the (augmented) observations at t and
positives the (independently augmented) observations at t + delta, flattened to N = 32 x 8
rows in the same order. Row i's positive is row i of ``positives``; every other row's positive
is a negative for it, including other steps of the same subsequence, as in ATC.

The anchor path is online encoder -> projection p (the Q head's first layer, which is what
finetuning reuses) -> ATC contrast head (residual MLP, then W); the positive path is the
momentum (EMA) encoder -> target projection p_m, without the contrast head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def atc_logits(predictions: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """(N, P) anchor predictions W(a + mlp(a)), (N, P) positives -> (N, N) bilinear logits."""
    logits = predictions.float() @ positives.detach().float().T
    return logits - logits.amax(dim=1, keepdim=True).detach()


def atc_loss(
    predictions: torch.Tensor, positives: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """InfoNCE with the other rows' positives as negatives.

    Args:
        predictions: (N, P) anchor predictions from ``model.atc_predict(model.project(z_t))``.
        positives: (N, P) target projections p_m(f_m(s_{t+delta})), no gradient.
        valid: (N,) bool, False where t + delta is past the episode end; those rows get zero
            loss (their positives still serve as negatives, as ATC's ``ignore_index``).

    Returns:
        (N,) cross-entropy of picking the own positive among all N.
    """
    logits = atc_logits(predictions, positives)
    labels = torch.arange(logits.shape[0], device=logits.device)
    loss = F.cross_entropy(logits, labels, reduction="none")
    if valid is not None:
        loss = loss * valid.to(loss.dtype)
    return loss


@torch.no_grad()
def atc_accuracy(predictions: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """(N,) 1.0 where the own positive has the highest logit."""
    logits = atc_logits(predictions, positives)
    return (logits.argmax(1) == torch.arange(logits.shape[0], device=logits.device)).float()
