"""The one augmentation path of training: draws, then `augmented_frames`.

Pretraining and finetuning augment the same way (SPR/DrQ's random shift by up to 4 pixels with
replicate padding, then SPR's intensity jitter; `sgi_lab.augment.ops`). The shift's pad is the
observation spec's (`sgi_lab.augment.ops.shift_pad`: 4 for Atari, none for MinAtar's grids);
callers pass it as ``pad``. They differ only in where
the random numbers come from:

* pretraining draws them from its generator (`draw_augmentation`: the crop corners, then the
  jitter, in the order `sgi_lab.augment.ops.augment` draws them);
* finetuning takes them from each agent's one draw per update (`sgi_lab.train.population.Population.
  draw`), so that a population of agents augments in one kernel.

Both then call `augmented_frames`, which crops the uint8 frames, applies the jitter, the 1/255
and the cast to the compute dtype in one multiply, and hands the encoders their prepared input
(``encode(..., prepared=True)``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from sgi_lab.augment.ops import PAD, jitter_factor, shift
from sgi_lab.nets.encoders import prepare_pixels

__all__ = ["AugmentationDraws", "augmented_frames", "draw_augmentation", "prepared_frames"]


class AugmentationDraws(NamedTuple):
    """The random numbers of one augmentation, per frame stack.

    Attributes:
        corners: (..., 2) int64 crop corners (dy, dx) in 0..2 PAD of the padded frame, or None
            for no shift.
        jitter: (...) intensity factors (`sgi_lab.augment.ops.jitter_factor`), or None for none.
    """

    corners: torch.Tensor | None = None
    jitter: torch.Tensor | None = None


def draw_augmentation(
    stacks: tuple[int, ...],
    generator: torch.Generator | None,
    device: torch.device,
    pad: int = PAD,
    intensity_scale: float = 0.05,
) -> AugmentationDraws:
    """Draws for ``stacks`` frame stacks (e.g. (B,) or (B, T)) from ``generator``: the crop
    corners first, then the jitter, the order in which `sgi_lab.augment.ops.augment` draws them."""
    corners = None
    if pad > 0:
        corners = torch.randint(0, 2 * pad + 1, (*stacks, 2), generator=generator, device=device)
    jitter = None
    if intensity_scale > 0:
        noise = torch.randn(stacks, generator=generator, device=device)
        jitter = jitter_factor(noise, intensity_scale)
    return AugmentationDraws(corners, jitter)


def augmented_frames(
    obs: torch.Tensor,
    corners: torch.Tensor | None,
    jitter: torch.Tensor | None,
    *,
    channels_last: bool,
    dtype: torch.dtype | None = None,
    time_major: bool = False,
    pad: int = PAD,
) -> torch.Tensor:
    """Frame stacks -> the encoders' prepared input, with the augmentation draws given: each
    stack cropped at its corner of the replicate-padded frame (`sgi_lab.augment.ops.shift`) and
    multiplied by its intensity factor, scaled by 1/255, in ``dtype`` and layout; encode it with
    ``prepared=True``.

    The crop moves uint8 pixels (reordered time-major in the same pass when asked); the jitter,
    the 1/255 and the cast are then one multiply (`sgi_lab.nets.encoders.prepare_pixels`).

    Args:
        obs: (..., C, H, W) uint8 (or float in [0, 255]) observations (the spec's
            ``stacked_shape``: (4, 84, 84) for Atari) on the networks' device: (B[, T], ...)
            for one model, (N, B[, T], ...) for a population.
        corners: (..., 2) int64 crop corners in 0..2 pad over obs's leading dimensions, or None.
        jitter: intensity factors over obs's leading dimensions, or None.
        channels_last: the model's memory format.
        dtype: compute dtype (default: autocast's under autocast, else float32).
        time_major: return (N, T, B, ...) for (N, B, T, ...) input.
        pad: the padding the corners were drawn for (`sgi_lab.augment.ops.shift_pad`).
    """
    lead = obs.shape[:-3]
    frames = obs.reshape(-1, *obs.shape[-3:])
    source = None
    if time_major and len(lead) == 3:
        n, b, t = lead
        source = torch.arange(n * b * t, device=obs.device).view(n, b, t).transpose(1, 2)
        source = source.reshape(-1)
        lead = (n, t, b)
        corners = None if corners is None else corners.transpose(1, 2)
        jitter = None if jitter is None else jitter.transpose(1, 2)
    if corners is not None:
        frames = shift(frames, corners.reshape(-1, 2), pad, source=source)
    elif source is not None:
        frames = frames[source]
    factor = None if jitter is None else jitter.reshape(-1, 1, 1, 1)
    out = prepare_pixels(frames, factor, channels_last=channels_last, dtype=dtype)
    return out.view(*lead, *out.shape[1:])


def prepared_frames(
    obs: torch.Tensor,
    generator: torch.Generator | None,
    augment: bool,
    channels_last: bool,
    pad: int = PAD,
) -> torch.Tensor:
    """One model's observations (B[, T], C, H, W) -> its prepared input: augmented with fresh
    draws from ``generator`` (one per observation; shifts up to ``pad``, see
    `sgi_lab.augment.ops.shift_pad`), or only scaled when ``augment`` is off."""
    draws = draw_augmentation(obs.shape[:-3], generator, obs.device, pad) if augment else None
    draws = draws or AugmentationDraws()
    return augmented_frames(obs, *draws, channels_last=channels_last, pad=pad)
