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
import torch.nn.functional as F

from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec

PAD = 4
"""The largest translation of :func:`random_shift` in pixels (SPR/DrQ's replicate pad)."""
GRID_PAD = 0
"""The shift of a MinAtar grid: none. Measured on 5,000 Random-policy observations per game
(benchmarks/minatar_speed.py's ``--shift`` part): a +-1 cell replicate-padded shift loses or
duplicates an object cell (a paddle, a chicken, Seaquest's oxygen gauge) in 44% (Asterix) to
85% (Seaquest) of all augmented observations, i.e. it shows the encoder states the game never
has; at 84x84 Atari's +-4 pixels move mostly background. ``pad=1`` stays available."""


GRID_SIDE = 16
"""Observations at most this many cells a side are symbolic grids (MinAtar's are 10x10)."""


def shift_pad(spec: ObservationSpec = ATARI_SPEC) -> int:
    """The random shift's pad for observations of ``spec``: `GRID_PAD` (0: no shift) for a grid
    (at most `GRID_SIDE` cells a side: MinAtar's), else `PAD` (4: Atari's 84x84 frames)."""
    return GRID_PAD if max(spec.height, spec.width) <= GRID_SIDE else PAD


def _draw_shape(x: torch.Tensor, same_across_time: bool) -> tuple[int, ...]:
    if x.dim() == 4:
        return (x.shape[0],)
    if x.dim() == 5:
        return (x.shape[0], 1) if same_across_time else (x.shape[0], x.shape[1])
    raise ValueError(f"expected (B, C, H, W) or (B, T, C, H, W), got shape {tuple(x.shape)}")


def random_shift(
    x: torch.Tensor,
    pad: int = PAD,
    generator: torch.Generator | None = None,
    same_across_time: bool = False,
    time_major: bool = False,
) -> torch.Tensor:
    """Random translation by up to ``pad`` pixels with replicate padding (pad + random crop).

    Exactly ``ReplicationPad2d(pad)`` followed by a crop at offset (dy, dx) ~ U{0..2 pad}^2:
    on a CPU the pad then a crop of whole rows (:func:`_crop_rows`), elsewhere one gather with
    clamped indices (:func:`_shift_gather`); both give the same result.

    Args:
        x: (B, C, H, W) or (B, T, C, H, W) images, any dtype.
        pad: maximum shift in pixels (4).
        generator: random source on x's device.
        same_across_time: one shift per sequence instead of one per (b, t).
        time_major: for (B, T, C, H, W) input, return the contiguous (T, B, C, H, W) transpose
            of the result (the same draws), written in that order directly.

    Returns:
        Tensor with the dtype and device of x, shaped like x (or its time-major transpose).
    """
    draw = _draw_shape(x, same_across_time)
    c, h, w = x.shape[-3:]
    lead = x.shape[:-3]
    offsets = torch.randint(
        0, 2 * pad + 1, (*draw, 2), generator=generator, device=x.device
    ).expand(*lead, 2)  # crop corners (dy, dx) in the padded frames
    frames = x.reshape(-1, c, h, w)
    source = None  # which input stack each output stack crops, in output order
    if time_major:
        if x.dim() != 5:
            raise ValueError(f"time_major needs (B, T, C, H, W), got shape {tuple(x.shape)}")
        source = torch.arange(frames.shape[0], device=x.device).view(lead).t().reshape(-1)
        offsets, lead = offsets.transpose(0, 1), (lead[1], lead[0])
    return shift(frames, offsets.reshape(-1, 2), pad, source).view(*lead, c, h, w)


def shift(
    frames: torch.Tensor,
    corners: torch.Tensor,
    pad: int = PAD,
    source: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`random_shift` with its draws given: output i is frame ``source[i]`` (default i)
    replicate-padded by ``pad`` and cropped at ``corners[i]``.

    Args:
        frames: (M, C, H, W) images, any dtype.
        corners: (n, 2) int64 crop corners (dy, dx) in 0..2 pad of the padded frames.
        pad: padding (the largest translation).
        source: (n,) int64 frame of each output; lets a caller reorder (e.g. batch-major to
            time-major) in the same pass.

    Returns:
        (n, C, H, W), the dtype and device of ``frames``.
    """
    _, _, h, w = frames.shape
    if _crops_rows(frames.device):
        padded = F.pad(frames, (pad,) * 4, mode="replicate")
        return _crop_rows(padded, corners, h, w, source)
    return _shift_gather(frames if source is None else frames[source], corners - pad)


def _crops_rows(device: torch.device) -> bool:
    """Whether :func:`random_shift` crops rows (CPU) or gathers (elsewhere) on ``device``."""
    return device.type == "cpu"


def _crop_rows(
    padded: torch.Tensor,
    offsets: torch.Tensor,
    h: int,
    w: int,
    source: torch.Tensor | None = None,
) -> torch.Tensor:
    """Crop (n, C, h, w) at per-sample corners ``offsets`` out of padded (N, C, H', W').

    Every output row is a contiguous run of ``w`` elements of the padded tensor, so the crop is
    one ``index_select`` of row windows (a view of all length-``w`` windows of the flat
    storage) at computed starts. On a CPU this moves whole rows instead of gathering element by
    element, about 3x faster than :func:`_shift_gather` for uint8 frame stacks.

    Args:
        padded: (N, C, H', W') padded frames.
        offsets: (n, 2) int64 corner (dy, dx) of each output's crop.
        h, w: crop size.
        source: (n,) index of the padded stack each output crops (default: output i crops i).
    """
    n, (_, c, hp, wp) = offsets.shape[0], padded.shape
    if source is None:
        source = torch.arange(n, device=padded.device)
    flat = padded.contiguous().view(-1).unfold(0, w, 1)  # (numel - w + 1, w) windows, a view
    channel = torch.arange(c, device=padded.device).view(1, c, 1)
    stack = (source.view(n, 1, 1) * c + channel) * (hp * wp)  # first element of each frame
    row = torch.arange(h, device=padded.device).view(1, 1, h)
    dy, dx = offsets[:, 0].view(n, 1, 1), offsets[:, 1].view(n, 1, 1)
    starts = stack + (row + dy) * wp + dx  # (n, C, h) first element of each output row
    return flat.index_select(0, starts.view(-1)).view(n, c, h, w)


def _shift_gather(frames: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Translate (n, C, H, W) by per-sample ``shifts`` in [-pad, pad], replicating edges: one
    gather with clamped indices (what a GPU does best; same result as :func:`_crop_rows`)."""
    n, _, h, w = frames.shape
    rows = (torch.arange(h, device=frames.device) + shifts[:, :1]).clamp_(0, h - 1)  # (n, H)
    cols = (torch.arange(w, device=frames.device) + shifts[:, 1:]).clamp_(0, w - 1)  # (n, W)
    index = (rows[:, :, None] * w + cols[:, None, :]).view(n, 1, h * w)
    flat = frames.reshape(n, -1, h * w)
    return flat.gather(2, index.expand(-1, flat.shape[1], -1)).view(frames.shape)


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
    factor = jitter_factor(noise, scale)
    return x * factor.view(*draw, 1, 1, 1)  # uint8 * float promotes in the same pass


def jitter_factor(noise: torch.Tensor, scale: float = 0.05) -> torch.Tensor:
    """The multiplier :func:`intensity` applies for standard-normal ``noise``:
    1 + scale * clamp(noise, -2, 2)."""
    return 1.0 + scale * noise.clamp(-2.0, 2.0)


def augment(
    x: torch.Tensor,
    generator: torch.Generator | None = None,
    pad: int = PAD,
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
