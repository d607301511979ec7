"""Behavioural cloning baseline: cross-entropy on the dataset's actions."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bc_loss(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the dataset action.

    Args:
        logits: (B, A) policy logits; with :class:`sgi_lab.nets.SGIModel` these are
            ``model.bc_logits(z)``, the Q head's expected values (reference default).
        actions: (B,) int64 actions taken in the dataset.

    Returns:
        (B,) losses.
    """
    return F.cross_entropy(logits.float(), actions, reduction="none")


@torch.no_grad()
def bc_accuracy(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """(B,) 1.0 where the argmax is the dataset action."""
    return (logits.argmax(-1) == actions).float()
