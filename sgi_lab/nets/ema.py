"""Target networks: frozen copies updated as exponential moving averages of the online ones."""

from __future__ import annotations

import copy

import torch
from torch import nn


def make_target(module: nn.Module) -> nn.Module:
    """A deep copy with ``requires_grad=False`` everywhere, same train/eval mode.

    Run target passes under ``torch.no_grad()`` (not ``inference_mode``: its tensors cannot be
    saved for backward, and the losses use target outputs next to online ones). The reference
    keeps target networks in train mode, so their batch norms use batch statistics; call
    ``.eval()`` on the copy to use its (EMA-averaged) running statistics instead.
    """
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- tau * target + (1 - tau) * online, for parameters and persistent buffers.

    Floating-point tensors (parameters, batch-norm running statistics) are averaged; integer
    buffers (``num_batches_tracked``) are copied. Non-persistent buffers (noise samples) are
    left alone. ``tau = 0`` copies the online module; ``tau = 1`` leaves the target unchanged.

    Args:
        target: the EMA copy (same architecture as ``online``).
        online: the module being trained.
        tau: EMA coefficient (0.99 in SGI for both target networks; SPR finetuning too).
    """
    target_state = target.state_dict(keep_vars=True)
    online_state = online.state_dict(keep_vars=True)
    if target_state.keys() != online_state.keys():
        missing = sorted(set(online_state) ^ set(target_state))
        raise ValueError(f"target and online modules differ in tensors: {missing[:5]}")
    floats_t, floats_o = [], []
    for name, t in target_state.items():
        o = online_state[name]
        if t.is_floating_point():
            floats_t.append(t.data)
            floats_o.append(o.data)
        else:
            t.copy_(o)
    lerp_(floats_t, floats_o, 1.0 - tau)


@torch.no_grad()
def lerp_(targets: list[torch.Tensor], sources: list[torch.Tensor], weight: float) -> None:
    """``t <- t + weight * (s - t)`` for each pair, in place: the one EMA step on tensors.

    ``weight = 1 - tau``. Use this (or `ema_update` for whole modules) for every target
    network, so the arithmetic lives in one place.
    """
    if not targets:
        return
    # torch._foreach_lerp_ is private API, used here and nowhere else: one fused kernel per
    # dtype/device group instead of one lerp_ per tensor (an EMA step touches every parameter
    # every update). It computes exactly Tensor.lerp_, the public fallback if it ever goes.
    foreach = getattr(torch, "_foreach_lerp_", None)
    if foreach is not None:
        foreach(targets, sources, weight)
    else:
        for target, source in zip(targets, sources, strict=True):
            target.lerp_(source, weight)
