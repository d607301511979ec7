"""Image augmentation used everywhere in SGI (pretraining and finetuning), as in SPR/DrQ.

* :func:`random_shift`: replicate-pad by 4 then take a random 84x84 crop, i.e. translate the
  image by an integer offset in [-4, 4] on each axis, filling with edge pixels.
* :func:`intensity`: multiply the whole sample by 1 + 0.05 * clamp(N(0, 1), -2, 2).

Both work batched on the input's device without Python loops, accept (B, C, H, W) or
(B, T, C, H, W), and draw from an optional ``torch.Generator`` (which must live on the same
device as the input) for reproducibility. Pixels may be uint8 or float in [0, 255]; the
encoders divide by 255 themselves.

With a time axis every (b, t) frame stack gets its own shift and intensity, as the reference
(it flattens B and T before augmenting); pass ``same_across_time=True`` to share one draw per
sequence.
"""

from __future__ import annotations

import torch


def _draw_shape(x: torch.Tensor, same_across_time: bool) -> tuple[int, ...]:
    if x.dim() == 4:
        return (x.shape[0],)
    if x.dim() == 5:
        return (x.shape[0], 1) if same_across_time else (x.shape[0], x.shape[1])
    raise ValueError(f"expected (B, C, H, W) or (B, T, C, H, W), got shape {tuple(x.shape)}")


def random_shift(
    x: torch.Tensor,
    pad: int = 4,
    generator: torch.Generator | None = None,
    same_across_time: bool = False,
) -> torch.Tensor:
    """Random translation by up to ``pad`` pixels with replicate padding (pad + random crop).

    Implemented as one gather with clamped indices, which equals ``ReplicationPad2d(pad)``
    followed by a crop at offset (dy, dx) ~ U{0..2 pad}^2.

    Args:
        x: (B, C, H, W) or (B, T, C, H, W) images, any dtype.
        pad: maximum shift in pixels (4).
        generator: random source on x's device.
        same_across_time: one shift per sequence instead of one per (b, t).

    Returns:
        Tensor with the shape, dtype and device of x.
    """
    draw = _draw_shape(x, same_across_time)
    h, w = x.shape[-2:]
    n = x[..., 0, 0, 0].numel()  # number of frame stacks
    offsets = torch.randint(
        0, 2 * pad + 1, (*draw, 2), generator=generator, device=x.device
    ).expand(*x.shape[:-3], 2)
    offsets = offsets.reshape(n, 2) - pad
    rows = (torch.arange(h, device=x.device) + offsets[:, :1]).clamp_(0, h - 1)  # (n, H)
    cols = (torch.arange(w, device=x.device) + offsets[:, 1:]).clamp_(0, w - 1)  # (n, W)
    index = (rows[:, :, None] * w + cols[:, None, :]).view(n, 1, h * w)
    flat = x.reshape(n, -1, h * w)
    out = flat.gather(2, index.expand(-1, flat.shape[1], -1))
    return out.view(x.shape)


def intensity(
    x: torch.Tensor,
    scale: float = 0.05,
    generator: torch.Generator | None = None,
    same_across_time: bool = False,
) -> torch.Tensor:
    """SPR's intensity jitter: x * (1 + scale * clamp(N(0, 1), -2, 2)) per sample.

    Args:
        x: (B, C, H, W) or (B, T, C, H, W) images; uint8 is converted to float32.
        scale: jitter strength (0.05).
        generator: random source on x's device.
        same_across_time: one factor per sequence instead of one per (b, t).

    Returns:
        Floating-point tensor shaped like x.
    """
    draw = _draw_shape(x, same_across_time)
    dtype = x.dtype if x.is_floating_point() else torch.float32
    noise = torch.randn(draw, generator=generator, device=x.device, dtype=dtype)
    factor = 1.0 + scale * noise.clamp_(-2.0, 2.0)
    return x * factor.view(*draw, 1, 1, 1)  # uint8 * float promotes in the same pass


def augment(
    x: torch.Tensor,
    generator: torch.Generator | None = None,
    pad: int = 4,
    intensity_scale: float = 0.05,
    same_across_time: bool = False,
) -> torch.Tensor:
    """Random shift then intensity jitter (SGI's augmentation); returns float pixels in ~[0, 280].

    Args:
        x: (B, C, H, W) or (B, T, C, H, W) pixels, uint8 or float in [0, 255].
        generator: random source on x's device.
        pad: shift range (0 disables the shift).
        intensity_scale: jitter strength (0 disables the jitter).
        same_across_time: share draws along T.
    """
    if pad > 0:
        x = random_shift(x, pad, generator, same_across_time)
    if intensity_scale > 0:
        return intensity(x, intensity_scale, generator, same_across_time)
    return x if x.is_floating_point() else x.float()
